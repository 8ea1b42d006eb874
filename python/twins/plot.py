"""twins.plot: the drift of every pair against the step (the paper's Figure 2,
docs/protocol.md §6), from the records of twins.run or twins.verdict."""

from typing import Iterable, Optional

# One line style per twin kind, so that a rule's gauge, identity and noise
# twins share a colour and differ by their dash.
_STYLE = {"gauge": "-", "noise": ":", "identity": "--"}


def _label(record: dict) -> str:
    twin = record.get("twin", "?")
    if twin == "noise":
        twin = f"noise {record.get('noise_scale', 0):g}"
    return f"{record.get('opt', '?')} {twin}"


def plot(records: Iterable[dict], *, metric: str = "logit_drift",
         ax=None, title: Optional[str] = None):
    """Draws `metric` (logit_drift, qk_drift_mean or qk_drift_max of each
    curve point) against the step, one line per record, on a log axis, and
    returns the matplotlib Figure. A drift of exactly 0 (the identity twin)
    cannot be drawn on a log axis: it is marked at the axis' floor and named
    in the legend. `ax` draws into an existing Axes."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("twins.plot needs matplotlib: pip install matplotlib") from e
    records = list(records)
    if not records:
        raise ValueError("twins.plot: no records")
    if metric not in ("logit_drift", "qk_drift_mean", "qk_drift_max"):
        raise ValueError(f"twins.plot: unknown metric '{metric}' "
                         "(logit_drift, qk_drift_mean, qk_drift_max)")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    else:
        fig = ax.figure
    colours = {}
    positive = [p[metric] for r in records for p in r.get("curve", [])
                if p.get(metric, 0) > 0]
    floor = min(positive) / 10 if positive else 1e-20
    for r in records:
        curve = r.get("curve", [])
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
