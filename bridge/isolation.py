"""Isolation of a Python rule from the process it runs in (docs/extending.md).

Isolation. Every construction and step runs under one process-wide lock,
with the process's global torch state saved before and restored after:
the default dtype, the number of intra-op threads, and the random
generators (torch's CPU generator, CUDA's where CUDA is initialised,
Python's `random`, numpy's global one). While the rule runs, the random
generators hold the copy's own stream: both copies of a pair start from the
same seed, so a rule that draws random numbers in step() (PSGD-Kron's
probes) draws the same numbers in both, the identity twin stays exactly 0,
and the stream goes into the checkpoint with the rule's state_dict(), so a
resumed run draws what a straight run draws, under any --jobs / --threads.
After each step every parameter is checked against what it was built
with: its shape, dtype, device and requires_grad.

This file is compiled into the bridge (bridge/CMakeLists.txt embeds it) as
the module _twins_isolation; the adapter (bridge/adapter.py) enters
Isolated(stream) around every call into a rule.
"""

import os
import random
import sys
import threading

import torch

# The seed of every copy's random stream (docs/extending.md).
STREAM_SEED = 20260812

_lock = threading.RLock()


# ---------------------------------------------------------------------------
# Global state: saved, swapped and restored around every call into a rule.

def _numpy_random():
    np = sys.modules.get("numpy")
    return getattr(np, "random", None) if np is not None else None


class Stream:
    """A copy's random generators' states, in the order they are swapped."""

    def __init__(self, seed):
        g = torch.Generator()
        g.manual_seed(seed)
        self.torch_cpu = g.get_state()
        self.torch_cuda = None  # per device, made when CUDA is in use
        self.python = random.Random(seed).getstate()
        nr = _numpy_random()
        self.numpy = nr.RandomState(seed % 2**32).get_state() if nr else None
        self.seed = seed

    def state(self):
        return {"torch_cpu": self.torch_cpu, "torch_cuda": self.torch_cuda,
                "python": self.python, "numpy": self.numpy}

    def load(self, state):
        self.torch_cpu = state["torch_cpu"]
        self.torch_cuda = state["torch_cuda"]
        self.python = state["python"]
        self.numpy = state["numpy"]


def _compile_config():
    """torch.compile's switch (torch._dynamo.config), None before torch 2.
    A rule's compiled functions run eagerly under twins: the eager
    operations are the rule's definition, compiling them on a CPU costs
    minutes per shape, and inductor's workers would start from inside
    twin-run (docs/extending.md)."""
    try:
        import torch._dynamo
    except ImportError:
        return None
    return torch._dynamo.config


def _cuda_in_use():
    return torch.cuda.is_available() and torch.cuda.is_initialized()


try:
    import posix as _posix
except ImportError:  # not a POSIX system
    _posix = None


def _refuse_exit(status):
    raise RuntimeError(
        f"the rule called os._exit({status}), which would end the process "
        "without its records")


class _RulePrecision:
    """torch's float32 matmul precision as the rule's own while it steps:
    torch.set_float32_matmul_precision inside step() (emerging-optimizers
    sets "medium" around its Newton-Schulz, which then casts to bfloat16)
    is what the rule's torch.get_float32_matmul_precision() returns, but
    the process-wide flag stays as it was, for the other copy's forward
    and backward that run meanwhile (its batched matmuls on a CPU follow
    the flag: the identity twin was not 0)."""

    @staticmethod
    def enter():
        saved = (torch.set_float32_matmul_precision, torch.get_float32_matmul_precision)
        own = [saved[1]()]

        def set_(precision):
            if precision not in ("highest", "high", "medium"):
                saved[0](precision)  # torch's own error for a bad value
            own[0] = precision

        torch.set_float32_matmul_precision = set_
        torch.get_float32_matmul_precision = lambda: own[0]
        return saved

    @staticmethod
    def exit(saved):
        torch.set_float32_matmul_precision, torch.get_float32_matmul_precision = saved


class Isolated:
    """The global torch state outside a rule, put back when the rule
    returns; the process's working directory too (a rule's os.chdir would
    move the relative paths of the results, checkpoints and saved models);
    the rule's own stream in the generators while it runs; and os._exit
    (os's and posix's, one function under two names) refused while it runs
    (it would end twin-run, or the notebook, at once: no record, no error,
    exit status 0). A reference to _exit the rule took before it was
    built is not reached."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        _lock.acquire()
        self.cwd = os.getcwd()
        self.exit = os._exit
        os._exit = _refuse_exit
        if _posix is not None:
            _posix._exit = _refuse_exit
        self.compile = _compile_config()
        if self.compile is not None:
            self.compiling = self.compile.disable
            self.compile.disable = True
        self.dtype = torch.get_default_dtype()
        self.threads = torch.get_num_threads()
        self.precision = _RulePrecision.enter()
        self.cpu = torch.get_rng_state()
        torch.set_rng_state(self.stream.torch_cpu)
        self.cuda = None
        if _cuda_in_use():
            self.cuda = torch.cuda.get_rng_state_all()
            if self.stream.torch_cuda is None:
                self.stream.torch_cuda = _fresh_cuda_states(self.stream.seed)
            torch.cuda.set_rng_state_all(self.stream.torch_cuda)
        self.python = random.getstate()
        random.setstate(self.stream.python)
        nr = _numpy_random()
        self.numpy = nr.get_state() if nr else None
        if nr is not None:
            if self.stream.numpy is None:
                self.stream.numpy = nr.RandomState(self.stream.seed % 2**32).get_state()
            nr.set_state(self.stream.numpy)
        return self

    def __exit__(self, *exc):
        try:
            self.stream.torch_cpu = torch.get_rng_state()
            torch.set_rng_state(self.cpu)
            if self.cuda is not None or _cuda_in_use():
                self.stream.torch_cuda = torch.cuda.get_rng_state_all()
                if self.cuda is not None:
                    torch.cuda.set_rng_state_all(self.cuda)
            self.stream.python = random.getstate()
            random.setstate(self.python)
            nr = _numpy_random()
            if nr is not None and self.numpy is not None:
                self.stream.numpy = nr.get_state()
                nr.set_state(self.numpy)
            torch.set_default_dtype(self.dtype)
            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
            if self.compile is not None:
                self.compile.disable = self.compiling
            _RulePrecision.exit(self.precision)
        finally:
            os._exit = self.exit
            if _posix is not None:
                _posix._exit = self.exit
            try:
                if os.getcwd() != self.cwd:
                    os.chdir(self.cwd)
            except OSError:  # the rule removed the directory it left
                os.chdir(self.cwd)
            _lock.release()
        return False


def _fresh_cuda_states(seed):
    states = []
    for d in range(torch.cuda.device_count()):
        g = torch.Generator(device=f"cuda:{d}")
        g.manual_seed(seed)
        states.append(g.get_state())
    return states
