"""What a rule's exception says about a need the protocol cannot meet
(docs/extending.md, "Rules that cannot run here"): needs CUDA, second-order
gradients, torch.distributed, sparse gradients or another torch. The
adapter (bridge/adapter.py) turns such an exception into one line, and the
census (census/census.py) reports the reason for a rule that cannot run.

Compiled into the bridge as the module _twins_errors.
"""

import contextlib

import torch


def first_line(e):
    text = str(e)
    return text.splitlines()[0] if text else ""


# What a rule's exception says about a need the protocol cannot meet
# (docs/extending.md, "Rules that cannot run here"): the words of torch's
# own messages, and the reason reported for them.
_CANNOT_RUN = [
    (("does not require grad and does not have a grad_fn",
      "create_graph"),
     "needs second-order gradients (backward(create_graph=True) for "
     "Hessian-vector products), which twins' C++ backward does not keep"),
    (("CUDA required", "Torch not compiled with CUDA", "no CUDA GPUs",
      "Found no NVIDIA driver", "CUDA is not available"),
     "needs CUDA"),
    (("Default process group has not been initialized",
      "process group has not been initialized", "all-gathers across ranks"),
     "needs torch.distributed initialised (a multi-process rule)"),
    (("does not support dense gradients",),
     "needs sparse gradients"),
]


@contextlib.contextmanager
def cannot_run_here():
    """An exception that says the rule cannot run here (cannot_run) becomes
    one line saying why; any other passes unchanged."""
    try:
        yield
    except Exception as e:
        reason = cannot_run(e)
        if reason is None:
            raise
        raise RuntimeError(f"cannot run here: {reason} "
                           f"({type(e).__name__}: {first_line(e)})") from None


def cannot_run(e):
    """The reason a rule cannot run under the protocol, from its exception,
    or None for any other error."""
    missing = _missing_torch_method(e)
    if missing:
        return (f"needs another torch: calls torch.optim.Optimizer.{missing}, "
                f"which torch {torch.__version__} does not have")
    text = str(e)
    for words, reason in _CANNOT_RUN:
        if any(w in text for w in words):
            return reason
    return None


def _missing_torch_method(e):
    """The private torch.optim.Optimizer method a rule calls on itself and
    this torch lacks (torch-adopt 0.1.0's _cuda_graph_capture_health_check,
    renamed in torch 2.x), else None."""
    name = getattr(e, "name", None)
    if not isinstance(e, AttributeError) or not name or not name.startswith("_"):
        return None
    if not isinstance(getattr(e, "obj", None), torch.optim.Optimizer):
        return None
    return None if hasattr(torch.optim.Optimizer, name) else name
