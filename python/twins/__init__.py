"""The attention-twin protocol from Python (docs/protocol.md, docs/extending.md).

    import twins
    v = twins.verdict("torch:Adam", steps=300)        # or a class, a factory,
    print(v["verdict"], v["line"])                     # "py:pytorch_optimizer:AdaBelief"
    records = twins.run(MyRule, twins=["gauge", "identity"], steps=100)
    twins.plot(records)                                # a matplotlib Figure

A rule is a built-in name ("adam"), a torch.optim name ("torch:Adam"), an
optimizer of an importable module ("py:MODULE:NAME"), of a file
("py:FILE.py:NAME"), or a torch.optim.Optimizer subclass or factory defined in
the calling code; it is built as rule(param_groups, lr=lr, **args) on the named
parameter groups of docs/extending.md.

The work is the C++ engine's (twins._core): the same pairs, records and
verdicts as `twin-run`. This module adds what a notebook needs: progress shown
in the notebook (a tqdm bar where tqdm is installed), a clean stop on
KeyboardInterrupt (the records written so far are kept and a rerun resumes),
and a figure.
"""

import torch  # noqa: F401  (first: the extension uses its libraries)

from . import _core
from ._core import resolve
from ._engine import run, verdict
from .plot import plot

__version__ = _core.__version__
#: The torch this build of twins was compiled against; it must be the one
#: imported (checked on import).
torch_version = _core.torch_version

__all__ = ["run", "verdict", "resolve", "plot", "__version__", "torch_version"]
