"""twins.run and twins.verdict: the keyword settings, the wait for the C++
engine (twins._core.start) with progress and a clean stop on
KeyboardInterrupt."""

import importlib.util
import sys
import warnings
from typing import Any, Dict, List, Optional, Sequence

from . import _core

# How often the wait wakes up to redraw the bar and let Python see Ctrl-C.
_POLL_SECONDS = 0.1


def _settings(**given) -> Dict[str, Any]:
    """The settings every entry point shares, None meaning the task's default
    (twin-run's flags of the same names: docs/usage.md)."""
    return {k: v for k, v in given.items() if v is not None}


def _listed(name: str, value) -> list:
    """A list setting as a list: a string would be the list of its letters
    (twins="gauge" ran the twin kind 'g')."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"twins: {name}={value!r} is a string: give a list, "
                        f"e.g. {name}=[{value!r}]")
    return list(value)


def _warn_identity(records: List[dict]) -> None:
    """A RuntimeWarning per identity twin that is not exactly 0, as twin-run
    prints one: its copies did not compute the same, so its other twins do
    not measure the gauge alone (docs/protocol.md §2)."""
    for r in records:
        if r.get("twin") != "identity":
            continue
        for p in r.get("curve", []):
            if (p.get("logit_drift") or 0) > 0 or (p.get("qk_drift_max") or 0) > 0:
                warnings.warn(
                    f"twins: the identity twin of {r.get('opt')} (init "
                    f"{r.get('init_seed')}) is {p.get('logit_drift')} at step "
                    f"{p.get('step')}, not exactly 0: its two copies did not "
                    "compute the same (state kept outside its optimizer, or a "
                    "draw outside its random stream)", RuntimeWarning,
                    stacklevel=3)
                break


def _in_notebook() -> bool:
    return "ipykernel" in sys.modules


def _bar(progress: Optional[bool], label: str):
    """A tqdm bar, or None: progress None shows one where tqdm is installed,
    True asks for one (the engine's own lines on stderr without tqdm), False
    shows nothing."""
    if progress is False or importlib.util.find_spec("tqdm") is None:
        return None
    if _in_notebook() and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm
    else:
        from tqdm import tqdm
    return tqdm(total=0, desc=label, unit="step", file=sys.stderr,
                dynamic_ncols=True, leave=True)


def _drive(job, bar) -> dict:
    """Waits for `job`, redrawing `bar`; on KeyboardInterrupt asks every
    running group to write its state and stop, waits for that, and raises
    KeyboardInterrupt naming the file that keeps the records."""
    try:
        while not job.wait(_POLL_SECONDS):
            if bar is not None:
                _redraw(bar, job.counts())
    except KeyboardInterrupt:
        job.stop()
        while True:
            try:
                if job.wait(1.0):
                    break
            except KeyboardInterrupt:
                pass  # already stopping: each group ends at its next step
        raise KeyboardInterrupt(job.stopped_message()) from None
    finally:
        if bar is not None:
            _redraw(bar, job.counts())
            bar.close()
    return job.result()


def _redraw(bar, counts) -> None:
    pairs, pairs_done, steps, steps_done = counts
    if bar.total != steps:
        bar.total = steps
    bar.n = steps_done
    bar.set_postfix_str(f"{pairs_done}/{pairs} pairs", refresh=False)
    bar.refresh()


def _start(kind: str, opt, args, settings, progress):
    import torch
    bar = _bar(progress, kind)
    # Without a bar, progress=True asks for the engine's lines on stderr.
    settings["progress"] = bool(progress) and bar is None
    # The engine trains each model on one thread (torch.set_num_threads(1)
    # for the process) and seeds torch's generators for its models: the
    # caller's thread count and random streams come back afterwards.
    threads = torch.get_num_threads()
    cpu = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        job = _core.start(kind, opt, args, settings)
        return _drive(job, bar)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def run(opt, *, twins: Sequence[str] = ("gauge",),
        args: Optional[dict] = None, task: str = "mod47",
        steps: Optional[int] = None, lr: Optional[float] = None,
        dtype: Optional[str] = None, init_seed: int = 42,
        twin_seeds: Sequence[int] = (), noise_scales: Sequence[float] = (),
        device: str = "cpu", depth: Optional[int] = None,
        d_model: Optional[int] = None, heads: Optional[int] = None,
        mlp: Optional[int] = None, data_seed: int = 42,
        out: Optional[str] = None, jobs: int = 1,
        threads: Optional[int] = None,
        progress: Optional[bool] = None) -> List[dict]:
    """Trains the pairs of `opt` (one per twin kind, seed and noise scale) as
    `twin-run --opt` does and returns their records as dicts, the JSONL schema
    of docs/output-format.md.

    opt: a rule (see the module's help); args: its keyword arguments, one
    JSON-able dict. out=PATH writes the records there and a rerun resumes
    (also after a KeyboardInterrupt, from each group's checkpoint); without
    it a temporary file is used. progress: None shows a bar where tqdm is
    installed, False none. The other arguments are twin-run's flags of the
    same names (docs/usage.md); None takes the task's default."""
    settings = _settings(
        twins=_listed("twins", twins), twin_seeds=_listed("twin_seeds", twin_seeds),
        noise_scales=_listed("noise_scales", noise_scales), task=task,
        steps=steps, lr=lr,
        dtype=dtype, init_seed=init_seed, device=device, depth=depth,
        d_model=d_model, heads=heads, mlp=mlp, data_seed=data_seed, out=out,
        jobs=jobs, threads=threads)
    records = _start("run", opt, args, settings, progress)["records"]
    _warn_identity(records)
    return records


def verdict(opt, *, args: Optional[dict] = None, task: str = "mod47",
            steps: Optional[int] = None, lr: Optional[float] = None,
            dtype: Optional[str] = None, init_seed: int = 42,
            device: str = "cpu", depth: Optional[int] = None,
            d_model: Optional[int] = None, heads: Optional[int] = None,
            mlp: Optional[int] = None, data_seed: int = 42,
            out: Optional[str] = None, jobs: int = 1,
            threads: Optional[int] = None,
            progress: Optional[bool] = None) -> dict:
    """The equivariance verdict of `opt` (docs/protocol.md §10), as
    `twin-run verdict` gives it: its gauge, identity, round-trip, noise
    1e-7 and noise 1e-5 twins, judged. Returns a dict: verdict (the label), class,
    predicted, as_predicted, the figures it rests on, line (twin-run
    verdict's line) and records. The arguments are run()'s."""
    settings = _settings(
        task=task, steps=steps, lr=lr, dtype=dtype, init_seed=init_seed,
        device=device, depth=depth, d_model=d_model, heads=heads, mlp=mlp,
        data_seed=data_seed, out=out, jobs=jobs, threads=threads)
    result = _start("verdict", opt, args, settings, progress)
    out = dict(result["verdict"])
    out["records"] = result["records"]
    return out

