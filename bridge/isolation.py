"""Isolation of a Python rule from the process it runs in (docs/extending.md).

Isolation. Every construction and step runs under one process-wide lock,
with the process's global torch state saved before and restored after (but
for the steps of a rule whose library's convention knows they draw no
random numbers and set nothing process-wide, torch.optim's per-parameter
classes, which save and swap nothing and share the lock, so that the two
copies step at once: Shared, below): the default dtype, the number of
intra-op threads, and the random generators (torch's CPU generator,
CUDA's where CUDA is initialised, Python's `random`, numpy's global one).
While the rule runs, the random generators hold the copy's own stream:
both copies of a pair start from the same seed, so a rule that draws
random numbers in step() (PSGD-Kron's probes) draws the same numbers in
both, the identity twin stays exactly 0, and the stream goes into the
checkpoint with the rule's state_dict(), so a resumed run draws what a
straight run draws, under any --jobs / --threads.
After each step every parameter is checked against what it was built
with: its shape, dtype, device and requires_grad.

This file is compiled into the bridge (bridge/CMakeLists.txt embeds it) as
the module _twins_isolation; the adapter (bridge/adapter.py) enters
Isolated(stream) around every call into a rule but torch.optim's steps,
which enter Shared.
"""

import ctypes
import os
import random
import sys
import threading
import time
import weakref

import torch

# The seed of every copy's random stream (docs/extending.md).
STREAM_SEED = 20260812


class _IsolationLock:
    """The isolation's lock, held alone by an isolated call (again, nested,
    on the thread that holds it) and together by the steps of rules that
    set nothing process-wide (Shared, below): two copies' torch.optim
    steps run at once, and never beside an isolated call, which may change
    the default dtype their first step makes state in. A thread holding
    it shared must not ask for it alone (two such threads would wait for
    each other): the adapter never does; asking is an error, not a hang."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._owner = None   # the thread holding it alone
        self._depth = 0      # the owner's nesting
        self._shared = 0     # holders sharing it
        self._mine = threading.local()  # .shared: this thread's count

    def acquire(self):
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            if getattr(self._mine, "shared", 0):
                raise RuntimeError(
                    "twins isolation: an isolated call inside a shared step")
            while self._owner is not None or self._shared:
                self._cond.wait()
            self._owner, self._depth = me, 1

    def release(self):
        with self._cond:
            self._release_held()

    def _release_held(self):
        """One level of the owner's hold given back (the condition's lock
        held): the last one frees it, in whichever order a nested Shared
        and its Isolated end."""
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
            self._cond.notify_all()

    def acquire_shared(self):
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:  # inside its own isolated call: nested
                self._depth += 1
                return
            while self._owner is not None:
                self._cond.wait()
            self._shared += 1
            self._mine.shared = getattr(self._mine, "shared", 0) + 1

    def release_shared(self):
        with self._cond:
            if getattr(self._mine, "shared", 0) == 0:  # taken as nested
                self._release_held()
                return
            self._mine.shared -= 1
            self._shared -= 1
            if self._shared == 0:
                self._cond.notify_all()


_lock = _IsolationLock()


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


_COMPILE_CONFIG = []  # [torch._dynamo.config or None], once asked


def _compile_config():
    """torch.compile's switch (torch._dynamo.config), None before torch 2.
    A rule's compiled functions run eagerly under twins: the eager
    operations are the rule's definition, compiling them on a CPU costs
    minutes per shape, and inductor's workers would start from inside
    twin-run (docs/extending.md). Asked once: a failed import is not
    remembered by Python, and trying it again on every call of a rule cost
    about 40 microseconds under torch 1.13."""
    if not _COMPILE_CONFIG:
        try:
            import torch._dynamo
            _COMPILE_CONFIG.append(torch._dynamo.config)
        except ImportError:
            _COMPILE_CONFIG.append(None)
    return _COMPILE_CONFIG[0]


def _cuda_in_use():
    return torch.cuda.is_available() and torch.cuda.is_initialized()


# ---------------------------------------------------------------------------
# What a rule may not do to the process: end it (os._exit), move its working
# directory (os.chdir), or leave threads running after its call returns.
# The guards replace os's and posix's functions once, when this module
# loads (before any rule is imported), so that a reference a rule takes at
# import (`from os import _exit`) is the guard too; they refuse only inside
# a rule's call or import, on its own thread or a thread it started (a
# child process it forks may end itself).

try:
    import posix as _posix
except ImportError:  # not a POSIX system
    _posix = None

_state = threading.local()          # .depth, .isolated: inside a rule
_rule_threads = weakref.WeakSet()   # threads a rule started
_reported = weakref.WeakSet()       # of those, the ones refused already
abandoned_threads = False           # the embedding process must not wait
                                    # for them at exit (bridge/python.cpp)

# How long a thread a rule started may take to end after the call returns.
THREAD_GRACE_S = 1.0


class StopRequested(BaseException):
    """Raised inside a rule's call by the bridge's watchdog
    (bridge/rule_call.cpp) when a stop signal came and the call had not
    returned after the grace: a BaseException, so that a rule's `except
    Exception` does not take it."""


def _inside_rule():
    if getattr(_state, "depth", 0) > 0:
        return True
    return threading.current_thread() in _rule_threads


def _forget_rules_in_child():
    """A process forked inside a rule (multiprocessing's workers end with
    os._exit) is not inside one."""
    _state.depth = 0
    _state.isolated = 0
    _rule_threads.clear()
    _in_rule_code.clear()


# The threads (by ident) now running a rule's own code, where the watchdog
# may raise StopRequested; and those it raised it in. Read and written
# with the GIL held.
_in_rule_code = {}
_interrupted = set()


class RuleCode:
    """The rule's own code (its import, constructor, step, train() /
    eval()), innermost inside Guarded / Isolated, so that a StopRequested
    the watchdog raises lands in the rule's code or here, never in the
    code that puts the process's state back."""

    def __enter__(self):
        ident = threading.get_ident()
        _in_rule_code[ident] = _in_rule_code.get(ident, 0) + 1
        return self

    def __exit__(self, *exc):
        ident = threading.get_ident()
        depth = _in_rule_code.pop(ident, 1) - 1
        if depth > 0:
            _in_rule_code[ident] = depth
        elif ident in _interrupted:
            _interrupted.discard(ident)
            # Raised but not yet delivered (the rule returned first): the
            # step is whole, nothing is pending past this point.
            _raise_in(ident, None)
        return False


def _raise_in(ident, exception):
    """`exception` raised in thread `ident` at its next instruction; None
    withdraws one not yet delivered."""
    if ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(ident),
            None if exception is None else ctypes.py_object(exception))


class _Guard:
    """os.NAME (and posix.NAME, one builtin under two names) refused inside
    a rule with `why`, the original called everywhere else."""

    def __init__(self, name, why):
        self.original = getattr(os, name)
        self.name = name
        self.why = why

    def __call__(self, *args, **kwargs):
        if _inside_rule():
            shown = ", ".join(repr(a) for a in args)
            raise RuntimeError(f"the rule called os.{self.name}({shown}), "
                               + self.why)
        return self.original(*args, **kwargs)

    def install(self):
        guard = self

        def guarded_function(*args, **kwargs):
            return guard(*args, **kwargs)

        guarded_function.__name__ = self.name
        guarded_function.__doc__ = self.original.__doc__
        guarded_function.twins_original = self.original
        for module in (os, _posix):
            if module is not None and getattr(module, self.name, None) is self.original:
                setattr(module, self.name, guarded_function)


def _install_guards():
    if getattr(os._exit, "twins_original", None) is not None:
        return  # installed (this module loaded again in the process)
    _Guard("_exit", "which would end the process without its "
           "records").install()
    cwd = ("a rule may not change the process's working directory "
           "(twin-run's results, checkpoints and saved models are named "
           "relative to it)")
    _Guard("chdir", cwd).install()
    if hasattr(os, "fchdir"):
        _Guard("fchdir", cwd).install()
    start = threading.Thread.start

    def start_marked(thread):
        if _inside_rule() and getattr(_state, "isolated", 0) > 0 or \
                threading.current_thread() in _rule_threads:
            _rule_threads.add(thread)
        return start(thread)

    start_marked.twins_original = start
    threading.Thread.start = start_marked


_install_guards()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_rules_in_child)


class Guarded:
    """A rule's import or call: os._exit and os.chdir refused on this
    thread. Nests."""

    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1
        return self

    def __exit__(self, *exc):
        _state.depth -= 1
        return False


class Shared(Guarded):
    """A step of a rule that draws no random numbers and sets nothing
    process-wide (torch.optim's per-parameter classes): the guards and the
    isolation's lock held shared, nothing saved or swapped, so the two
    copies' steps run at once. The lock still matters: its first step
    makes state of the default dtype (torch.optim's step counters, NAdam's
    and ASGD's running products), which another rule may change inside
    its own isolated call, so the two never overlap."""

    def __enter__(self):
        _lock.acquire_shared()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _lock.release_shared()


def call_guarded(fn, *args):
    """fn(*args) as a rule's code: executing a rule's file, importing its
    module."""
    with Guarded(), RuleCode():
        return fn(*args)


def _threads_left_running():
    """The threads a rule started that are still running THREAD_GRACE_S
    after its call returned (each reported once)."""
    global abandoned_threads
    left = _still_running([t for t in list(_rule_threads)
                           if t not in _reported
                           and t is not threading.current_thread()])
    _reported.update(left)
    # Ended where they run Python (SystemExit at their next instruction,
    # which threading ends them with quietly): a thread left writing the
    # parameters while the process exits crashed it. One in native code
    # runs on, and the embedding process does not wait for it.
    for thread in left:
        _raise_in(thread.ident, SystemExit)
    if _still_running(left):
        abandoned_threads = True
    return left


def _still_running(threads):
    """Those of `threads` still running after THREAD_GRACE_S in all."""
    deadline = time.monotonic() + THREAD_GRACE_S
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def _refuse_threads(left):
    names = ", ".join(repr(t.name) for t in left)
    raise RuntimeError(
        f"the rule left {len(left)} thread(s) running after its call "
        f"returned ({names}): a thread that goes on with the parameters "
        "makes the numbers a race's; a rule's threads must end before it "
        "returns")


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
    returns; the rule's own stream in the generators while it runs; and
    the process's guards (above) active: os._exit, os.chdir refused, and
    a thread the rule leaves running after it returns refused. The working
    directory is put back too, should a rule's native code have changed
    it."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        _lock.acquire()
        self.cwd = os.getcwd()
        self.guarded = Guarded().__enter__()
        _state.isolated = getattr(_state, "isolated", 0) + 1
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
            _state.isolated -= 1
            self.guarded.__exit__()
            try:
                if os.getcwd() != self.cwd:
                    os.chdir(self.cwd)
            except OSError:  # the rule removed the directory it left
                os.chdir(self.cwd)
            try:
                left = _threads_left_running() if _state.isolated == 0 else []
            finally:
                _lock.release()
        if left and exc[0] is None:
            _refuse_threads(left)
        return False


def _fresh_cuda_states(seed):
    states = []
    for d in range(torch.cuda.device_count()):
        g = torch.Generator(device=f"cuda:{d}")
        g.manual_seed(seed)
        states.append(g.get_state())
    return states
