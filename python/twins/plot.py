"""twins.plot: the drift of every pair against the step (the paper's Figure 2,
docs/protocol.md §6), from the records of twins.run or twins.verdict."""

import json
import os
from typing import Iterable, Optional, Union

# What a curve point carries: every twin its logit and QK drift; the
# value-output gauge's twins (gauge-vo, gauge-all) their VO drift too.
_METRICS = ("logit_drift", "qk_drift_mean", "qk_drift_max", "vo_drift_mean",
            "vo_drift_max")

# One line style per twin kind, so that a rule's gauge, identity and noise
# twins share a colour and differ by their dash.
_STYLE = {"gauge": "-", "noise": ":", "identity": "--"}


def _label(record: dict) -> str:
    twin = record.get("twin", "?")
    if twin == "noise":
        twin = f"noise {record.get('noise_scale', 0):g}"
    return f"{record.get('opt', '?')} {twin}"


def _read(path) -> list:
    """The records of a results file (JSON lines; comment lines skipped)."""
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f
                    if line.strip() and not line.lstrip().startswith("#")]
    except (OSError, ValueError) as e:
        raise ValueError(f"twins.plot: cannot read records from '{os.fspath(path)}': "
                         f"{e}") from None


def _value(point: dict, metric: str):
    """The point's metric, None where it has none (a null: not finite)."""
    v = point.get(metric)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def plot(records: Union[Iterable[dict], str, os.PathLike], *,
         metric: str = "logit_drift", ax=None, title: Optional[str] = None):
    """Draws `metric` (logit_drift, qk_drift_mean, qk_drift_max, and for the
    value-output gauge's twins vo_drift_mean, vo_drift_max, of each curve
    point) against the step, one line per record, on a log axis, and
    returns the matplotlib Figure. `records` are twins.run's or
    twins.verdict's, or a results file's path. A drift of exactly 0 (the
    identity twin) cannot be drawn on a log axis: it is marked at the axis'
    floor and named in the legend; a point without the metric (null: not
    finite) is left out. `ax` draws into an existing Axes."""
    if isinstance(records, (str, os.PathLike)):
        records = _read(records)
    records = list(records)
    if not records:
        raise ValueError("twins.plot: no records")
    if not all(isinstance(r, dict) for r in records):
        raise TypeError("twins.plot: records are dicts (twins.run's) or a "
                        "results file's path")
    if metric not in _METRICS:
        raise ValueError(f"twins.plot: unknown metric '{metric}' "
                         f"({', '.join(_METRICS)})")
    if not any(_value(p, metric) is not None
               for r in records for p in r.get("curve", [])):
        raise ValueError(f"twins.plot: no record carries '{metric}'"
                         + (" (the gauge-vo and gauge-all twins do)"
                            if metric.startswith("vo_") else ""))
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("twins.plot needs matplotlib: pip install matplotlib") from e
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    else:
        fig = ax.figure
    colours = {}
    positive = [_value(p, metric) for r in records for p in r.get("curve", [])
                if (_value(p, metric) or 0) > 0]
    floor = min(positive) / 10 if positive else 1e-20
    for r in records:
        curve = [p for p in r.get("curve", []) if _value(p, metric) is not None]
        if not curve:
            continue
        opt = r.get("opt", "?")
        colour = colours.setdefault(opt, f"C{len(colours) % 10}")
        steps = [p["step"] for p in curve]
        values = [p[metric] for p in curve]
        zero = all(v == 0 for v in values)
        label = _label(r) + (" (exactly 0)" if zero else "")
        ax.plot(steps, [max(v, floor) for v in values],
                _STYLE.get(r.get("twin"), "-"), color=colour, label=label,
                marker="." if zero else None)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title or f"{metric.replace('_', ' ')} between the copies")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
