#!/usr/bin/env python3
"""Where a Python rule's step goes: one copy's step through the adapter,
taken apart.

    bench/python_step.py [--rule Adam | --rule MODULE:CLASS] [--steps 300] [--rounds 5]

Run it with the Python whose torch the bridge embeds (Debian's
/usr/bin/python3 for the default build; the venv's for the wheel build).
It loads the adapter's modules from bridge/ as twin-run embeds them and
steps a rule (torch.optim's, or a library's) on tensors of the Table-3
model's 20 shapes (mod-47, 2 blocks, d_model 64, MLP 256), with random
gradients, on one thread. Prints microseconds per step, the median of --rounds rounds of
--steps steps each:

- the adapter's step (Adapter.step: the isolation unless the rule's
  convention knows its steps need none, as torch.optim's; the rule's step;
  the parameters' check), as twin-run calls it once per copy;
- the rule's own step() as the adapter builds it (torch.optim's
  per-parameter classes: one group of all tensors, Adam and AdamW with
  foreach; bridge/conventions.py), and on one group per tensor (as the
  adapter built them before, and builds any other library's rules);
- an empty Isolated block (the process's global state saved, the copy's
  stream swapped in and back), as the steps of another library's rule run
  in it, and of it the four copies of numpy's global generator state;
- the parameters' check after a step;
- the same rule built on one group of all 20 tensors, with its for-loop
  and (where it has one) its foreach path.

With --bits N it then steps the three ways of building the rule (a group
per tensor, one group, one group with foreach) N steps from the same
parameters and gradients and says whether the parameters end bitwise
equal: which cheaper path keeps the adapter's bits.

A benchmark: it prints figures and asserts nothing.
"""
import argparse
import importlib.util
import os
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The Table-3 model's parameters in the order twins gives them to a rule.
SHAPES = ([(48, 64), (3, 64)]
          + [(64,), (64, 64), (64, 64), (64, 64), (64, 64), (64,), (256, 64),
             (64, 256)] * 2
          + [(64,), (47, 64)])


def load(name, file):
    """bridge/FILE as the module NAME, as the bridge embeds it."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "bridge", file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def microseconds(fn, steps, rounds):
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - start) / steps * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", default="Adam",
                    help="a torch.optim class, or a library's as MODULE:CLASS "
                         "(lion_pytorch:Lion)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bits", type=int, default=0, metavar="N",
                    help="compare the three builds' parameters after N steps")
    args = ap.parse_args()

    load("_twins_errors", "errors.py")
    isolation = load("_twins_isolation", "isolation.py")
    load("_twins_conventions", "conventions.py")
    adapter = load("_twins_adapter", "adapter.py")
    torch.set_num_threads(1)
    module, _, name = args.rule.rpartition(":")
    try:
        rule = getattr(importlib.import_module(module or "torch.optim"), name, None)
    except ImportError as e:
        sys.exit(f"python_step.py: --rule {args.rule}: {e}")
    if not isinstance(rule, type) or not issubclass(rule, torch.optim.Optimizer):
        sys.exit(f"python_step.py: --rule {args.rule}: not an optimizer "
                 f"class of {module or 'torch.optim ' + torch.__version__}")

    params = [torch.randn(*s, requires_grad=True) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p)
    groups = [{"params": [p], "name": f"p{i}"} for i, p in enumerate(params)]
    a = adapter.make(rule, groups, {"lr": 1e-3}, {})

    def isolated():
        with isolation.Isolated(a.stream):
            pass

    per_tensor = rule([{"params": [p]} for p in params], lr=1e-3)
    rows = [("adapter step", lambda: a.step(None)),
            ("rule's step as the adapter builds it", lambda: a.optimizer.step()),
            ("rule's step, one group per tensor", per_tensor.step),
            ("Isolated, empty", isolated)]
    numpy_random = isolation._numpy_random()
    if numpy_random is not None:
        state = numpy_random.get_state()
        rows.append(("  of it: numpy state, 4 copies",
                     lambda: (numpy_random.get_state(),
                              numpy_random.set_state(state),
                              numpy_random.get_state(),
                              numpy_random.set_state(state))))
    rows.append(("parameters' check", lambda: a._check("bench")))
    one = rule(params, lr=1e-3)
    rows.append(("rule's step, one group, for-loop", one.step))
    try:
        foreach = rule(params, lr=1e-3, foreach=True)
        rows.append(("rule's step, one group, foreach", foreach.step))
    except TypeError:
        pass  # no foreach path

    print(f"torch {torch.__version__}, {module or 'torch.optim'}.{name}, "
          f"{len(params)} tensors, steps isolated: "
          f"{'yes' if a.isolated_steps else 'no'}, microseconds per copy-step "
          f"(median of {args.rounds} x {args.steps})")
    for what, fn in rows:
        print(f"{what:36s} {microseconds(fn, args.steps, args.rounds):8.1f}")
    if args.bits > 0:
        compare_bits(rule, args.bits)


def stepped(rule, build, steps):
    """The parameters, flattened, after `steps` steps of rule built by
    `build` ("groups", "one", "foreach") from fixed random values."""
    values = torch.Generator().manual_seed(0)
    params = [torch.randn(*s, generator=values).requires_grad_()
              for s in SHAPES]
    if build == "groups":
        optimizer = rule([{"params": [p]} for p in params], lr=1e-3)
    else:
        optimizer = rule(params, lr=1e-3, **(
            {"foreach": True} if build == "foreach" else {}))
    grads = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=grads)
        optimizer.step()
    return torch.cat([p.detach().flatten() for p in params])


def compare_bits(rule, steps):
    reference = stepped(rule, "groups", steps)
    for build in ("one", "foreach"):
        try:
            other = stepped(rule, build, steps)
        except TypeError:
            print(f"bits after {steps} steps, {build}: no such path")
            continue
        differ = int((other != reference).sum())
        print(f"bits after {steps} steps, {build} against a group per "
              f"tensor: " + ("equal" if differ == 0 else
                             f"{differ} of {reference.numel()} differ"))


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # a rule that cannot step here (LBFGS: closure)
        sys.exit(f"python_step.py: {type(e).__name__}: {e}")
