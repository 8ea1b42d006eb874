"""The Python half of the adapter (docs/extending.md): a Python rule — a
torch.optim.Optimizer class or a factory of one — built as its library
expects on the copy's parameter groups, stepped under isolation, checked
after each step, and checkpointed with what it keeps outside its
state_dict(). The C++ half (bridge/python_optimizer.cpp) calls, always
through this module:

    make(fn, groups, kwargs, model)     -> an Adapter: the optimizer, built
                                           by its library's convention
                                           (bridge/conventions.py), and its
                                           random stream
    Adapter.step(closure)               -> one step, isolated
                                           (bridge/isolation.py), or holding
                                           its lock shared for a rule its
                                           convention knows draws and sets
                                           nothing (torch.optim's Adam, SGD, ...)
    Adapter.evaluation() / training()   -> schedule-free rules' weight swap
    Adapter.state_dict() / load_state_dict()

After each step every parameter is checked against what it was built
with: its shape, dtype, device and requires_grad.

Compiled into the bridge as the module _twins_adapter.
"""

import inspect

import torch

from _twins_conventions import convention_of, library_of
from _twins_errors import cannot_run_here
from _twins_isolation import STREAM_SEED, Isolated, RuleCode, Shared, Stream


def _signature(p):
    return (tuple(p.shape), p.dtype, p.device, p.requires_grad)


def _swallowed_keywords(fn, kwargs, optimizer):
    """The keywords a rule's **kwargs took without using them: neither a
    named parameter of `fn` nor a key of the built optimizer's defaults
    (pytorch-optimizer's AdaBelief{"nosuchkw": 1} ran as plain AdaBelief).
    A signature without **kwargs refuses an unknown keyword itself; lr is
    the protocol's, given to every rule."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    named = {p.name for p in params
             if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        return []
    defaults = getattr(optimizer, "defaults", None)
    defaults = defaults if isinstance(defaults, dict) else {}
    return sorted(k for k in kwargs
                  if k != "lr" and k not in named and k not in defaults)


class Adapter:
    """One copy's optimizer, built and stepped as its library expects: a
    Python rule (its class or factory, `fn`) made into the optimizer the
    C++ side steps."""

    def __init__(self, fn, groups, kwargs, model):
        self.library = library_of(fn)
        self.names = [g["name"] for g in groups]
        self.params = [g["params"][0] for g in groups]
        self.signatures = [_signature(p) for p in self.params]
        self.stream = Stream(STREAM_SEED)
        self.steps = 0
        convention = convention_of(fn)
        self.convention = convention
        self.isolated_steps = convention.isolated_steps(fn)
        with Isolated(self.stream):
            with cannot_run_here(), RuleCode():
                self.optimizer = convention.build(fn, groups, dict(kwargs), model)
            unused = _swallowed_keywords(fn, kwargs, self.optimizer)
            if unused:
                raise TypeError(
                    f"keyword {unused[0]!r} is neither a parameter of "
                    f"{getattr(fn, '__name__', fn)} nor in its defaults: its "
                    "**kwargs would ignore it (a misspelling?)")
            if not callable(getattr(self.optimizer, "step", None)):
                raise TypeError(f"built a {type(self.optimizer).__name__} "
                                "without a step() method")
            self.takes_closure = convention.takes_closure(self.optimizer)
            self.modes = convention.modes(self.optimizer)
            if self.modes:
                with RuleCode():
                    self.modes[0]()  # train(): schedule-free rules start in it
        self._check("construction")

    def step(self, closure):
        self.steps += 1
        scope = Isolated(self.stream) if self.isolated_steps else Shared()
        with scope, cannot_run_here(), RuleCode():
            if self.takes_closure:
                self.optimizer.step(closure)
            else:
                self.optimizer.step()
        self._check(f"step {self.steps}")

    def evaluation(self):
        """Swaps in the weights the rule evaluates with (schedule-free);
        nothing for other rules."""
        if self.modes:
            with Isolated(self.stream), RuleCode():
                self.modes[1]()

    def training(self):
        if self.modes:
            with Isolated(self.stream), RuleCode():
                self.modes[0]()

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(),
                "attributes": _attributes(self.optimizer, self.params),
                "stream": self.stream.state(), "steps": self.steps}

    def load_state_dict(self, state):
        if "stream" not in state:  # written before the stream was kept
            state = {"optimizer": state, "stream": self.stream.state(),
                     "steps": self.steps}
        with Isolated(self.stream):
            self.convention.load_state_dict(self.optimizer, state["optimizer"])
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


def make(fn, groups, kwargs, model):
    return Adapter(fn, groups, kwargs, model)
