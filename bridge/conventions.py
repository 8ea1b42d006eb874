"""The conventions of the optimizer libraries people train with, one class
per library that needs one (docs/extending.md, "What each library
needed"): how a library's rule is built on twins' parameter groups (flat
lists, the hidden matrices apart, named parameters, the model's widths),
whether its step() takes a closure, its train() / eval() modes.

Compiled into the bridge as the module _twins_conventions; the adapter
(bridge/adapter.py) asks convention_of(fn) for a rule's.
"""

import inspect

import torch


def accepts_closure(step):
    try:
        params = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "closure"
               for p in params)


def library_of(fn):
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0]


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
        return accepts_closure(optimizer.step)

    @staticmethod
    def isolated_steps(fn):
        """Whether fn's rule steps under the isolation (bridge/isolation.py):
        the process-wide lock, the process's state saved and its generators
        holding the copy's stream. Any rule does, unless its library's
        convention knows that its steps draw no random numbers and set
        nothing process-wide: then they hold the isolation's lock shared
        (the two copies' steps at once), nothing saved or swapped
        (Shared)."""
        return True

    @staticmethod
    def load_state_dict(optimizer, state):
        optimizer.load_state_dict(state)

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
        loss = matrix.step(closure) if accepts_closure(matrix.step) else matrix.step()
        self.parts[1].step()
        return loss

    def state_dict(self):
        return {"parts": [p.state_dict() for p in self.parts]}

    def load_state_dict(self, state):
        for p, s in zip(self.parts, state["parts"]):
            p.load_state_dict(s)


class TorchOptim(Convention):
    """torch.optim: Muon (2.9+) takes 2-D matrices only, as its
    documentation says; the other parameters go to Adam. Its per-parameter
    classes get all the tensors in one group (their bits, one call per
    step instead of one per tensor), Adam and AdamW on a CPU their foreach
    path; and those step holding the isolation's lock shared, the two
    copies at once: torch/optim draws from no generator (torch's, Python's
    `random`, numpy's) and sets no process-wide state, so nothing need be
    saved or swapped."""

    # Each tensor's update is computed from its own state and its group's
    # hyperparameters, which twins gives every group alike: one group of
    # all the tensors in the copy's order gives the group-per-tensor bits
    # (bench/python_step.py --bits, torch 1.13 and 2.11) and keeps the
    # state's indices 0..N-1.
    ONE_GROUP = {"Adam", "AdamW", "SGD", "Adagrad", "RMSprop", "NAdam", "RAdam",
                 "Adamax", "Adadelta", "Rprop", "ASGD"}
    # Of these, the ones whose foreach path is their for-loop's arithmetic
    # op for op (the same moments, bias corrections as Python floats, the
    # same addcdiv), which on a CPU torch's _foreach_ operations run tensor
    # by tensor with the same kernels: the same bits in fewer Python
    # operations. NAdam's, RAdam's and (2.x) ASGD's foreach paths order
    # their arithmetic differently and move bits (docs/performance.md).
    FOREACH = {"Adam", "AdamW"}

    @staticmethod
    def _own(fn):
        """fn's name where fn is one of torch.optim's classes, else ""."""
        name = getattr(fn, "__name__", "")
        return name if getattr(torch.optim, name, None) is fn else ""

    @classmethod
    def build(cls, fn, groups, kwargs, model):
        name = cls._own(fn)
        if name == "Muon":
            return _Split.build(fn, groups, kwargs)
        if name not in cls.ONE_GROUP:
            return super().build(fn, groups, kwargs, model)
        params = [g["params"][0] for g in groups]
        if name in cls.FOREACH and "fused" not in kwargs \
                and all(p.device.type == "cpu" for p in params):
            kwargs.setdefault("foreach", True)
        return fn([{"params": params}], **kwargs)

    @classmethod
    def isolated_steps(cls, fn):
        """Not for the per-parameter classes; LBFGS and Muon (dot and
        matrix products, whose bits a thread count can move) keep the whole
        isolation."""
        return cls._own(fn) not in cls.ONE_GROUP

    @staticmethod
    def load_state_dict(optimizer, state):
        """A checkpoint written with one group per tensor (twins before
        the one group) loads into the one group: the state's indices are
        the same, the hyperparameters those all its groups share."""
        saved = state.get("param_groups", [])
        if len(optimizer.param_groups) == 1 and len(saved) > 1:
            group = optimizer.param_groups[0]
            merged = {"params": [i for g in saved for i in g["params"]]}
            for key in group:
                if key in ("params", "foreach") or all(key not in g for g in saved):
                    continue  # one an older torch did not save: the class's default
                values = [g.get(key) for g in saved]
                if any(v != values[0] for v in values):
                    raise ValueError(
                        f"the checkpoint's {len(saved)} parameter groups differ "
                        f"in {key!r}: they do not merge into one group")
                merged[key] = values[0]
            merged["foreach"] = group.get("foreach")
            state = dict(state, param_groups=[merged])
        optimizer.load_state_dict(state)


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


def convention_of(fn):
    """The convention of fn's library (torch.optim's for one without)."""
    return CONVENTIONS.get(library_of(fn), Convention)
