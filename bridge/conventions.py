"""How twins builds, steps and measures a Python rule: the conventions of the
optimizer libraries people train with, each in one place (docs/extending.md,
"What each library needed").

This file is compiled into the bridge (bridge/CMakeLists.txt embeds it), so
that twin-run and `import twins` run the very same code, whatever is on
sys.path. The C++ adapter (bridge/python_optimizer.cpp) calls three
functions, always through this module:

    make(fn, groups, kwargs, model)  -> a Rule: the optimizer, built as its
                                        library expects, and its stream
    Rule.step(closure)               -> one step, isolated (below)
    Rule.evaluation() / training()   -> schedule-free rules' weight swap

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
"""

import contextlib
import functools
import importlib
import inspect
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


class _Stream:
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


class _Isolated:
    """The global torch state outside a rule, put back when the rule
    returns; the rule's own stream in the generators while it runs; and
    os._exit refused while it runs (it would end twin-run, or the
    notebook, at once: no record, no error, exit status 0)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        _lock.acquire()
        self.exit = os._exit
        os._exit = _refuse_exit
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
            _lock.release()
        return False


def _fresh_cuda_states(seed):
    states = []
    for d in range(torch.cuda.device_count()):
        g = torch.Generator(device=f"cuda:{d}")
        g.manual_seed(seed)
        states.append(g.get_state())
    return states


# ---------------------------------------------------------------------------
# A rule: the optimizer, its stream, the parameters' signatures.

def _signature(p):
    return (tuple(p.shape), p.dtype, p.device, p.requires_grad)


def _accepts_closure(step):
    try:
        params = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "closure"
               for p in params)


class Rule:
    """One copy's optimizer, built and stepped as its library expects."""

    def __init__(self, fn, groups, kwargs, model):
        self.library = library_of(fn)
        self.names = [g["name"] for g in groups]
        self.params = [g["params"][0] for g in groups]
        self.signatures = [_signature(p) for p in self.params]
        self.stream = _Stream(STREAM_SEED)
        self.steps = 0
        convention = CONVENTIONS.get(self.library, Convention)
        self.convention = convention
        with _Isolated(self.stream):
            with _cannot_run_here():
                self.optimizer = convention.build(fn, groups, dict(kwargs), model)
            if not callable(getattr(self.optimizer, "step", None)):
                raise TypeError(f"built a {type(self.optimizer).__name__} "
                                "without a step() method")
            self.takes_closure = convention.takes_closure(self.optimizer)
            self.modes = convention.modes(self.optimizer)
            if self.modes:
                self.modes[0]()  # train(): schedule-free rules start in it
        self._check("construction")

    def step(self, closure):
        self.steps += 1
        with _Isolated(self.stream), _cannot_run_here():
            if self.takes_closure:
                self.optimizer.step(closure)
            else:
                self.optimizer.step()
        self._check(f"step {self.steps}")

    def evaluation(self):
        """Swaps in the weights the rule evaluates with (schedule-free);
        nothing for other rules."""
        if self.modes:
            with _Isolated(self.stream):
                self.modes[1]()

    def training(self):
        if self.modes:
            with _Isolated(self.stream):
                self.modes[0]()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(),
                "attributes": _attributes(self.optimizer, self.params),
                "stream": self.stream.state(), "steps": self.steps}

    def load_state_dict(self, state):
        if "stream" not in state:  # written before the stream was kept
            state = {"optimizer": state, "stream": self.stream.state(),
                     "steps": self.steps}
        with _Isolated(self.stream):
            self.optimizer.load_state_dict(state["optimizer"])
            for name, value in state.get("attributes", {}).items():
                _restore(self.optimizer, name, value)
        self.stream.load(state["stream"])
        self.steps = state["steps"]

    def _check(self, when):
        for name, p, (shape, dtype, device, grad) in zip(
                self.names, self.params, self.signatures):
            now = _signature(p)
            if now == (shape, dtype, device, grad):
                continue
            what = []
            if now[0] != shape:
                what.append(f"shape {list(shape)} -> {list(now[0])}")
            if now[1] != dtype:
                what.append(f"dtype {dtype} -> {now[1]}".replace("torch.", ""))
            if now[2] != device:
                what.append(f"device {device} -> {now[2]}")
            if now[3] != grad:
                what.append(f"requires_grad {grad} -> {now[3]}")
            raise RuntimeError(f"the rule changed parameter {name} at {when}: "
                               + ", ".join(what) + " (a rule must update its "
                               "parameters in place)")


# ---------------------------------------------------------------------------
# What a rule keeps outside its state_dict(): a step counter in `self.t`, a
# generator of its own. Attributes of plain data (numbers, strings, tensors
# that are not parameters, torch generators, and lists, tuples and dicts of
# these) go into the checkpoint beside the state_dict(); any other
# attribute (functions, modules, configuration objects) is taken to be what
# the constructor set, and a resumed rule is constructed the same way.

_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def _standard_attributes():
    probe = torch.optim.Optimizer([torch.zeros(1, requires_grad=True)], {})
    return set(vars(probe))


def _plain(value, params, depth=0):
    if depth > 4:
        return False
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, torch.Generator):
        return depth == 0  # saved as its state
    if isinstance(value, torch.Tensor):
        return not any(value is p for p in params)
    if isinstance(value, (list, tuple)):
        return all(_plain(v, params, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, _PLAIN) and _plain(v, params, depth + 1)
                   for k, v in value.items())
    return False


def _attributes(optimizer, params):
    standard = _standard_attributes()
    out = {}
    for name, value in vars(optimizer).items():
        if name in standard or not _plain(value, params):
            continue
        out[name] = ({"generator": value.get_state(), "device": str(value.device)}
                     if isinstance(value, torch.Generator) else value)
    return out


def _restore(optimizer, name, value):
    current = getattr(optimizer, name, None)
    if isinstance(current, torch.Generator) and isinstance(value, dict) \
            and "generator" in value:
        current.set_state(value["generator"])
    else:
        setattr(optimizer, name, value)


def _first_line(e):
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
def _cannot_run_here():
    """An exception that says the rule cannot run here (cannot_run) becomes
    one line saying why; any other passes unchanged."""
    try:
        yield
    except Exception as e:
        reason = cannot_run(e)
        if reason is None:
            raise
        raise RuntimeError(f"cannot run here: {reason} "
                           f"({type(e).__name__}: {_first_line(e)})") from None


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


def library_of(fn):
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0]


def make(fn, groups, kwargs, model):
    return Rule(fn, groups, kwargs, model)


# ---------------------------------------------------------------------------
# The conventions, one class per library that needs one.

class Convention:
    """torch.optim's: Class(param_groups, lr=lr, **kwargs), or a flat list of
    the parameters for a rule that takes no parameter groups — one that says
    so (LBFGS: "per-parameter options"), or one that reads its argument as
    tensors and fails on a group's dict at construction (heavyball's
    PSGDLRA, kron-torch's distributed Krons: "'dict' object has no
    attribute 'numel'"); train() / eval() where the optimizer has both
    (schedule-free rules of any library)."""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        try:
            return fn(groups, **kwargs)
        except ValueError as e:
            if "per-parameter options" not in str(e):
                raise
        except AttributeError as e:
            if "'dict' object has no attribute" not in str(e):
                raise
        return fn([g["params"][0] for g in groups], **kwargs)

    @staticmethod
    def takes_closure(optimizer):
        return _accepts_closure(optimizer.step)

    @staticmethod
    def modes(optimizer):
        train = getattr(optimizer, "train", None)
        evaluate = getattr(optimizer, "eval", None)
        if callable(train) and callable(evaluate):
            return (train, evaluate)
        return None


def _matrices(groups):
    """(the hidden matrices' groups, the other groups)."""
    return ([g for g in groups if g["matrix"]], [g for g in groups if not g["matrix"]])


class _Split:
    """A matrix-only rule on the hidden matrices and Adam (1e-3, the zoo's
    muon-torch) on every other parameter, stepped as one optimizer."""

    AUX_LR = 1e-3

    @classmethod
    def build(cls, fn, groups, kwargs, plain=False):
        """fn on the hidden matrices' groups (`plain`: their parameters
        alone, for a rule that refuses any other key), Adam on the rest."""
        matrices, others = _matrices(groups)
        if plain:
            matrices = [dict(params=g["params"]) for g in matrices]
        return cls(fn(matrices, **kwargs), torch.optim.Adam(others, lr=cls.AUX_LR))

    def __init__(self, matrix, others):
        self.parts = [matrix, others]
        self.param_groups = matrix.param_groups + others.param_groups

    def step(self, closure=None):
        matrix = self.parts[0]
        loss = matrix.step(closure) if _accepts_closure(matrix.step) else matrix.step()
        self.parts[1].step()
        return loss

    def state_dict(self):
        return {"parts": [p.state_dict() for p in self.parts]}

    def load_state_dict(self, state):
        for p, s in zip(self.parts, state["parts"]):
            p.load_state_dict(s)


class TorchOptim(Convention):
    """torch.optim: Muon (2.9+) takes 2-D matrices only, as its
    documentation says; the other parameters go to Adam."""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        if getattr(fn, "__name__", "") == "Muon":
            return _Split.build(fn, groups, kwargs)
        return super().build(fn, groups, kwargs, model)


class _Model:
    """What a rule that asks for the model reads of it: its named
    parameters (the groups' names) and its parameters."""

    def __init__(self, groups):
        self._named = [(g["name"], g["params"][0]) for g in groups]

    def named_parameters(self, *args, **kwargs):
        return iter(self._named)

    def parameters(self, *args, **kwargs):
        return iter(p for _, p in self._named)


def _source(fn):
    """fn's source text, "" where Python has none (a builtin, a C class)."""
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _takes(fn, name):
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class PytorchOptimizer(Convention):
    """pytorch-optimizer: its Muon family reads `use_muon` from every group
    (True on the hidden matrices); AdamMini takes the model (named
    parameters) and its widths as num_embeds / num_heads; SPlus's eval()
    waits for its first step."""

    # Rules whose eval() reads averages their first step makes (SPlus:
    # state['ema'] and group['step'], made by init_group in step 1; before
    # that its eval() stores a buffer for the first parameter and raises
    # KeyError). Their evaluation weights before the first step are their
    # parameters (nothing has been averaged yet), so eval() and train() are
    # skipped while the rule holds no state.
    EVAL_AFTER_FIRST_STEP = {"SPlus"}

    @classmethod
    def modes(cls, optimizer):
        modes = Convention.modes(optimizer)
        if modes is None or type(optimizer).__name__ not in cls.EVAL_AFTER_FIRST_STEP:
            return modes
        train, evaluate = modes

        def after_first_step(mode):
            def run():
                if optimizer.state:
                    mode()
            return run
        return (after_first_step(train), after_first_step(evaluate))

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        source = _source(fn)
        if "use_muon" in source:
            groups = [dict(g, use_muon=g["matrix"]) for g in groups]
        params = inspect.signature(fn).parameters if callable(fn) else {}
        if next(iter(params), None) == "model":
            for key, value in (("num_embeds", model["d_model"]),
                               ("num_heads", model["heads"])):
                if key in params:
                    kwargs.setdefault(key, value)
            return fn(_Model(groups), **kwargs)
        return super().build(fn, groups, kwargs, model)


# adam-mini finds its blocks by substrings of the parameter names: twins'
# names with the words it looks for (docs/extending.md).
_ADAM_MINI_NAMES = {"w1": "mlp.w1", "w2": "mlp.w2", "head": "lm_head"}


class AdamMini(Convention):
    """adam-mini: Adam_mini(named_parameters, lr, dim=, n_heads=,
    n_kv_heads=) with names it recognises (wq, wk, wv, wo, mlp, embed,
    lm_head); quiet (verbose=False)."""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        named = []
        for g in groups:
            name = g["name"]
            role = g["role"]
            if role in _ADAM_MINI_NAMES:
                prefix = name[: -len(role)]
                name = prefix + _ADAM_MINI_NAMES[role]
            named.append((name, g["params"][0]))
        for key, value in (("dim", model["d_model"]), ("n_heads", model["heads"]),
                           ("n_kv_heads", model["kv_heads"]), ("verbose", False)):
            if _takes(fn, key):
                kwargs.setdefault(key, value)
        return fn(named, **kwargs)


class KellerJordanMuon(Convention):
    """muon-optimizer (KellerJordan's Muon): SingleDeviceMuon takes the
    hidden matrices (its Newton-Schulz asserts ndim >= 2), Adam at 1e-3 the
    rest, as torch's Muon; SingleDeviceMuonWithAuxAdam takes groups with
    `use_muon` (True on the hidden matrices, at the run's rate; the others
    at the library's own Adam defaults) and no other key; Muon and
    MuonWithAuxAdam all-gather across ranks in step() (torch.distributed)."""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        name = getattr(fn, "__name__", "")
        if not name.startswith("SingleDevice"):
            if not torch.distributed.is_available() or \
                    not torch.distributed.is_initialized():
                raise RuntimeError(f"{name}.step() all-gathers across ranks "
                                   "(torch.distributed is not initialised)")
            return super().build(fn, groups, kwargs, model)
        if "use_muon" not in _source(fn):
            return _Split.build(fn, groups, kwargs, plain=True)
        matrices, others = _matrices(groups)
        rate = {k: v for k, v in kwargs.items() if k == "lr"}
        return fn([dict(params=g["params"], use_muon=True, **rate) for g in matrices] +
                  [dict(params=g["params"], use_muon=False) for g in others])


class Bitsandbytes(Convention):
    """bitsandbytes: its SGD and LARS rules default to momentum 0 and refuse
    it ("SGD without momentum is not supported!"), so they get the momentum
    its documentation's examples use, 0.9, unless the rule's arguments set
    one; its other defaults (min_8bit_size 4096: W_Q and W_K of the Table-3
    model, 4096 entries, keep 8-bit state) are its own."""

    MOMENTUM = 0.9

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        params = inspect.signature(fn).parameters if callable(fn) else {}
        momentum = params.get("momentum")
        if momentum is not None and momentum.default == 0:
            kwargs.setdefault("momentum", cls.MOMENTUM)
        return super().build(fn, groups, kwargs, model)


class AdamAtan2(Convention):
    """adam-atan2-pytorch: MuonAdamAtan2 and PolarAdamAtan2 take two lists
    of tensors, (muon_params, params) and (polar_params, params): the
    hidden matrices in the first, every other parameter in the second."""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        params = inspect.signature(fn).parameters if callable(fn) else {}
        if next(iter(params), None) in ("muon_params", "polar_params"):
            matrices, others = _matrices(groups)
            return fn([g["params"][0] for g in matrices],
                      [g["params"][0] for g in others], **kwargs)
        return super().build(fn, groups, kwargs, model)


class LowRank(Convention):
    """galore-torch and apollo-torch: a rule projects the gradients of the
    groups that carry a rank, so the hidden matrices' groups carry their
    READMEs' settings at a quarter of the width (rank 16 of 64: their
    rank 128 would be the whole 64-wide matrix): update_proj_gap 200,
    proj_type "std", scale 0.25 for GaLore; APOLLO's random projection
    with its channel-wise scaling, scale 1. The other parameters are
    plain AdamW / Adafactor groups, as in their READMEs."""

    GALORE = {"rank": 16, "update_proj_gap": 200, "scale": 0.25, "proj_type": "std"}
    APOLLO = {"proj": "random", "scale_type": "channel", "scale": 1.0}

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        source = _source(fn)
        keys = dict(cls.GALORE)
        if "scale_type" in source:
            keys.update(cls.APOLLO)
        groups = [dict(g, **keys) if g["matrix"] else g for g in groups]
        return super().build(fn, groups, kwargs, model)


class EmergingOptimizers(Convention):
    """emerging-optimizers (NVIDIA): step() takes a closure argument and
    raises for one that is not None ("closure is not supported"), so none
    is passed; its matrix rules (every rule but the scalar ones and
    PSGDPro: "Only 2D parameters are supported") take the hidden matrices,
    Adam at 1e-3 the rest, as torch's Muon; AdaptiveMuon, which has no
    default momentum or weight decay, gets its library's Muon's (0.95,
    0.01)."""

    ANY_SHAPE = ("emerging_optimizers.scalar_optimizers", "emerging_optimizers.psgd")
    MUON_DEFAULTS = {"momentum": 0.95, "weight_decay": 0.01}

    @staticmethod
    def takes_closure(optimizer):
        return False

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        if getattr(fn, "__name__", "") == "AdaptiveMuon":
            for key, value in cls.MUON_DEFAULTS.items():
                kwargs.setdefault(key, value)
        if getattr(fn, "__module__", "").startswith(cls.ANY_SHAPE):
            return super().build(fn, groups, kwargs, model)
        return _Split.build(fn, groups, kwargs)


CONVENTIONS = {
    "torch": TorchOptim,
    "pytorch_optimizer": PytorchOptimizer,
    "adam_mini": AdamMini,
    "muon": KellerJordanMuon,
    "emerging_optimizers": EmergingOptimizers,
    "bitsandbytes": Bitsandbytes,
    "adam_atan2_pytorch": AdamAtan2,
    "galore_torch": LowRank,
    "apollo_torch": LowRank,
}


# ---------------------------------------------------------------------------
# A module's rule: its identity and its hyperparameters.

@functools.lru_cache(maxsize=None)
def _packages_distributions():
    """importlib.metadata's map of top-level packages to distributions: it
    reads every installed distribution's file list (0.3 s in the test
    venv), and the census resolves 326 rules."""
    import importlib.metadata as metadata
    return metadata.packages_distributions()


def _distributions_of(top):
    """The distributions providing top-level package `top`, read again when
    the map kept has none (a package installed since, in a notebook)."""
    dists = _packages_distributions().get(top)
    if dists is None:
        _packages_distributions.cache_clear()
        dists = _packages_distributions().get(top, [])
    return dists


def module_identity(module, target):
    """'DIST==VERSION' of the distribution that provides `module`, or the
    first 16 hex digits of the SHA-256 of the file defining `target` where
    none does. Raises naming what is missing."""
    import hashlib
    import importlib
    import importlib.metadata as metadata
    try:
        mod = importlib.import_module(module)
    except Exception as e:
        raise ImportError(f"module '{module}' does not import: "
                          f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    if not hasattr(mod, target):
        rules = sorted(n for n, v in vars(mod).items()
                       if isinstance(v, type) and issubclass(v, torch.optim.Optimizer))
        raise AttributeError(f"module '{module}' defines no '{target}'"
                             + (f" (its optimizers: {', '.join(rules)})" if rules else ""))
    top = module.split(".")[0]
    dists = _distributions_of(top)
    if dists:
        dist = metadata.distribution(dists[0])
        return f"{dist.metadata['Name']}=={dist.version}"
    fn = getattr(mod, target)
    try:
        path = inspect.getsourcefile(fn) or mod.__file__
    except TypeError:
        path = mod.__file__
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def signature_defaults(fn):
    """The keyword defaults of `fn`'s signature (a class: its __init__), as
    the record's hyperparameters read them."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in params
            if p.default is not inspect.Parameter.empty}


# ---------------------------------------------------------------------------
# A callable's identity (twins.run(SomeClass)): what decides its numbers.

class _Identity:
    """The text a callable rule's name hashes: its code (the source where
    Python has it, else its code objects), defaults, closure values and
    the globals its code reads (plain values by repr, the user's own
    functions and classes followed), a functools.partial's function and
    arguments, a class's members and its bases'. Library code (installed
    distributions, the standard library) counts by name and version. A
    value whose repr is its address (an arbitrary object) makes the hash
    this process's alone: its records are never resumed by another."""

    def __init__(self):
        self.seen = set()
        self.parts = []

    def of(self, obj):
        import functools
        if isinstance(obj, functools.partial):
            self.parts.append("partial")
            self.of(obj.func)
            self.parts.append("args " + self.value(obj.args))
            self.parts.append("keywords " + self.value(obj.keywords or {}))
        elif id(obj) in self.seen:
            self.parts.append("seen " + self.name(obj))
        elif self.library(obj):
            self.parts.append("library " + self.name(obj) + " " + self.version(obj))
        elif isinstance(obj, type):
            self.seen.add(id(obj))
            self.klass(obj)
        elif inspect.isfunction(obj) or inspect.ismethod(obj):
            self.seen.add(id(obj))
            self.function(getattr(obj, "__func__", obj))
        else:
            self.parts.append("value " + self.value(obj))
        return self.parts

    @staticmethod
    def name(obj):
        return (f"{getattr(obj, '__module__', '?')}."
                f"{getattr(obj, '__qualname__', type(obj).__qualname__)}")

    @staticmethod
    def library(obj):
        import sysconfig
        module = sys.modules.get(getattr(obj, "__module__", None) or "")
        if module is None:
            return False  # type() or exec with a module name of their own
        # Only what the module itself defines under that name: a class made
        # by exec() without __name__ calls itself builtins' own.
        found = module
        for part in (getattr(obj, "__qualname__", "") or "?").split("."):
            found = getattr(found, part, None)
        if found is not obj:
            return False
        if module.__name__ in sys.builtin_module_names:
            return True
        path = getattr(module, "__file__", None)
        if not path:
            return False  # __main__ of a notebook
        stdlib = sysconfig.get_paths()["stdlib"]
        return ("site-packages" in path or "dist-packages" in path
                or path.startswith(stdlib))

    @classmethod
    def version(cls, obj):
        top = (getattr(obj, "__module__", "") or "").split(".")[0]
        try:
            import importlib.metadata as metadata
            dists = _distributions_of(top)
            if dists:
                return f"{dists[0]}=={metadata.version(dists[0])}"
        except Exception:
            pass
        return f"python {sys.version.split()[0]}"

    def value(self, value, depth=0):
        if isinstance(value, (bool, int, float, complex, str, bytes, type(None))):
            return repr(value)
        if depth < 4 and isinstance(value, (tuple, list)):
            return (type(value).__name__ + "("
                    + ",".join(self.value(v, depth + 1) for v in value) + ")")
        if depth < 4 and isinstance(value, (set, frozenset)):
            return "set(" + ",".join(sorted(self.value(v, depth + 1) for v in value)) + ")"
        if depth < 4 and isinstance(value, dict):
            items = sorted((self.value(k, depth + 1), self.value(v, depth + 1))
                           for k, v in value.items())
            return "{" + ",".join(f"{k}:{v}" for k, v in items) + "}"
        if isinstance(value, type(sys)):
            return "module " + value.__name__
        if isinstance(value, torch.Tensor):
            flat = value.detach().cpu().flatten()
            if flat.numel() > 4096:  # its first values and two sums
                flat = [flat[:16].tolist(), flat.sum().item(), flat.abs().sum().item()]
            else:
                flat = flat.tolist()
            return f"tensor {value.dtype} {tuple(value.shape)} {flat}"
        if isinstance(value, type) or inspect.isfunction(value) or inspect.ismethod(value):
            if self.library(value):
                return "library " + self.name(value)
            if id(value) not in self.seen:
                self.of(value)  # the user's own helper: its code counts too
            return "own " + self.name(value)
        return repr(value)

    def code(self, fn):
        try:
            return inspect.getsource(fn)
        except (OSError, TypeError):
            import marshal
            return marshal.dumps(fn.__code__).hex()

    def function(self, fn):
        self.parts.append("function " + self.name(fn))
        self.parts.append(self.code(fn))
        self.parts.append("defaults " + self.value(fn.__defaults__))
        self.parts.append("kwdefaults " + self.value(fn.__kwdefaults__))
        for cell in fn.__closure__ or ():
            try:
                self.parts.append("closure " + self.value(cell.cell_contents))
            except ValueError:  # an empty cell
                self.parts.append("closure empty")
        try:
            read = inspect.getclosurevars(fn).globals
        except (TypeError, ValueError):
            read = {}
        for name in sorted(read):
            self.parts.append(f"global {name} " + self.value(read[name]))

    def klass(self, cls):
        self.parts.append("class " + self.name(cls))
        for base in cls.__mro__[1:]:
            if base is not object:
                self.of(base)
        skip = {"__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"}
        for name, member in sorted(vars(cls).items()):
            if name in skip:
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member):
                self.parts.append("member " + name)
                self.function(member)
            else:
                self.parts.append(f"member {name} " + self.value(member))


def callable_identity(fn):
    """What a callable rule is, for its name's hash (_Identity)."""
    return "\n".join(_Identity().of(fn))


# ---------------------------------------------------------------------------
# A library class's predicted class (bridge/predictions.tsv).

def predictions(text):
    """{(library, alias): row} of the predictions file."""
    table = {}
    header = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        fields = line.split("\t")
        if header is None:
            header = fields
            continue
        row = dict(zip(header, fields))
        for alias in row["aliases"].split(","):
            table[(row["library"], alias.strip())] = row
    return table


def prediction_of(predictions_tsv, fn):
    """The predicted class of the rows whose definition is `fn`'s class at
    its defaults (module and qualified name, no bound defaults); "" where
    none names it or the rows disagree."""
    top = (getattr(fn, "__module__", None) or "").split(".")[0]
    classes = set()
    for row in predictions(predictions_tsv).values():
        definition = row["definition"]
        if "(" not in definition and definition.split(".")[0] == top \
                and _resolve(definition) is fn:
            classes.add(row["class"])
    return classes.pop() if len(classes) == 1 else ""


def _resolve(path):
    """The object a dotted path names (torch.optim.Adam), None where it
    names none; only modules of an already imported package are imported."""
    module, _, name = path.rpartition(".")
    while module:
        try:
            value = importlib.import_module(module)
        except ImportError:
            module, _, outer = module.rpartition(".")
            name = f"{outer}.{name}"
            continue
        for part in name.split("."):
            value = getattr(value, part, None)
        return value
    return None
