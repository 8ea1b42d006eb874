"""torch.optim's rules as the adapter builds them (bridge/conventions.py,
TorchOptim): its per-parameter classes get all of a copy's tensors in one
group, Adam and AdamW on a CPU their foreach path, and their steps hold
the isolation's lock shared (no generator swapped in: torch/optim draws
none), the two copies' steps at once. What must hold: the bits of the
group per tensor that twins gave them before, step by step; a checkpoint
written with a group per tensor resuming into the one group to the bits of
a straight run; their steps never beside any other rule's isolated call;
and a rule of any other library still isolated: drawing from the copy's
stream, its steps taking turns.

The adapter's modules are loaded from bridge/ as twin-run embeds them. Run
by ctest with the Python of the build (Debian's torch 1.13; the wheel
build's torch 2.x)."""

import importlib.util
import os
import random
import sys
import threading
import time
import unittest
from unittest import mock

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "bridge", file))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


isolation = _load("_twins_isolation", "isolation.py")
_load("_twins_errors", "errors.py")
_load("_twins_conventions", "conventions.py")
adapter = _load("_twins_adapter", "adapter.py")

# A small model's tensors in the order twins gives them: embedding, gains,
# the attention's and the MLP's matrices, the head.
SHAPES = [(11, 16), (16,), (16, 16), (16, 16), (16, 16), (16, 16), (16,),
          (64, 16), (16, 64), (16,), (11, 16)]
STEPS = 12
# Every torch.optim class the adapter gives one group, with arguments that
# take their other branches (amsgrad, weight decay, Nesterov momentum).
RULES = [("Adam", {}), ("Adam", {"amsgrad": True, "weight_decay": 0.01}),
         ("AdamW", {"weight_decay": 0.1}), ("SGD", {"momentum": 0.9, "nesterov": True}),
         ("Adagrad", {}), ("RMSprop", {"momentum": 0.5}), ("NAdam", {}), ("RAdam", {}),
         ("Adamax", {}), ("Adadelta", {}), ("Rprop", {}), ("ASGD", {})]


def _parameters(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float32).requires_grad_()
            for s in SHAPES]


def _gradients(step):
    g = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(s, generator=g, dtype=torch.float32) for s in SHAPES]


def _groups(params):
    """The groups twins gives a rule (bridge/python_optimizer.cpp): one per
    tensor, with its name and role."""
    return [{"params": [p], "name": f"t{i}", "role": "other", "layer": None,
             "matrix": p.dim() == 2} for i, p in enumerate(params)]


def _step(optimizer, params, step, through_adapter):
    for p, g in zip(params, _gradients(step)):
        p.grad = g.clone()
    if through_adapter:
        optimizer.step(None)
    else:
        optimizer.step()


def _group_per_tensor(name, kwargs, params):
    """The rule as the adapter built it before: one group per tensor, the
    class's own default path."""
    return getattr(torch.optim, name)(_groups(params), lr=1e-2, **kwargs)


def _adapter(name, kwargs, params):
    return adapter.make(getattr(torch.optim, name), _groups(params),
                        dict(kwargs, lr=1e-2), {})


class OneGroup(unittest.TestCase):

    def test_one_group_gives_the_group_per_tensor_bits(self):
        for name, kwargs in RULES:
            with self.subTest(rule=name, **kwargs):
                old, new = _parameters(1), _parameters(1)
                before = _group_per_tensor(name, kwargs, old)
                after = _adapter(name, kwargs, new)
                self.assertEqual(len(after.optimizer.param_groups), 1)
                if name in ("Adam", "AdamW"):
                    self.assertIs(after.optimizer.param_groups[0]["foreach"], True)
                for step in range(STEPS):
                    _step(before, old, step, False)
                    _step(after, new, step, True)
                for i, (a, b) in enumerate(zip(old, new)):
                    self.assertTrue(torch.equal(a, b), f"tensor {i} differs")

    def test_a_group_per_tensor_checkpoint_resumes_to_the_straight_bits(self):
        half = STEPS // 2
        for name, kwargs in RULES:
            with self.subTest(rule=name, **kwargs):
                straight, resumed = _parameters(2), _parameters(2)
                run = _adapter(name, kwargs, straight)
                for step in range(STEPS):
                    _step(run, straight, step, True)
                # The first half under the old layout, its checkpoint (the
                # adapter's, with a state_dict of one group per tensor).
                old = _group_per_tensor(name, kwargs, resumed)
                for step in range(half):
                    _step(old, resumed, step, False)
                resume = _adapter(name, kwargs, resumed)
                state = resume.state_dict()
                state["optimizer"] = old.state_dict()
                state["steps"] = half
                self.assertEqual(len(state["optimizer"]["param_groups"]), len(SHAPES))
                resume.load_state_dict(state)
                self.assertEqual(len(resume.optimizer.param_groups), 1)
                for step in range(half, STEPS):
                    _step(resume, resumed, step, True)
                for i, (a, b) in enumerate(zip(straight, resumed)):
                    self.assertTrue(torch.equal(a, b), f"tensor {i} differs")

    def test_groups_that_differ_do_not_merge(self):
        params = _parameters(3)
        old = _group_per_tensor("Adam", {}, params)
        old.param_groups[4]["lr"] = 0.5
        resume = _adapter("Adam", {}, _parameters(3))
        state = resume.state_dict()
        state["optimizer"] = old.state_dict()
        with self.assertRaisesRegex(ValueError, "differ in 'lr'"):
            resume.load_state_dict(state)


class Generators(unittest.TestCase):

    def test_torch_optim_is_not_given_the_copys_python_stream(self):
        """torch.optim draws from no generator, so its steps run without
        the isolation: a draw made inside its step (a stand-in patched in
        here) is the process's next number, not the stream's."""
        drawn = []
        step = torch.optim.Adam.step

        def drawing_step(self, closure=None):
            drawn.append(random.random())
            return step(self)

        params = _parameters(4)
        run = _adapter("Adam", {}, params)
        random.seed(5)
        with mock.patch.object(torch.optim.Adam, "step", drawing_step):
            _step(run, params, 0, True)
        self.assertEqual(drawn, [random.Random(5).random()])

    def test_another_librarys_rule_draws_its_own_stream(self):
        """A rule of a library without a convention that says otherwise
        draws Python's `random` from the copy's stream, and the process's
        state is put back after its step."""
        drawn = []

        class Drawing(torch.optim.SGD):
            def step(self, closure=None):
                drawn.append(random.random())
                return super().step()

        Drawing.__module__ = "some_library.rules"
        first = adapter.make(Drawing, _groups(_parameters(5)), {"lr": 1e-2}, {})
        second = adapter.make(Drawing, _groups(_parameters(5)), {"lr": 1e-2}, {})
        random.seed(6)
        expected = random.Random(6).random()
        _step(first, [g["params"][0] for g in first.optimizer.param_groups], 0, True)
        _step(second, [g["params"][0] for g in second.optimizer.param_groups], 0, True)
        self.assertEqual(drawn[0], drawn[1])
        self.assertEqual(drawn[0], random.Random(adapter.STREAM_SEED).random())
        self.assertEqual(random.random(), expected)


class Concurrency(unittest.TestCase):
    """The isolation's lock: torch.optim's two copies step at once, another
    library's take turns, and a torch.optim step and another rule's
    isolated call never overlap."""

    @staticmethod
    def _first_waits_for_second(cls, wait_s):
        """Whether copy 1's step, held inside the rule until copy 2's step
        has ended, saw it end within wait_s."""
        inside, second_done, seen = threading.Event(), threading.Event(), []
        original = cls.step
        main = threading.current_thread()

        def step(self, closure=None):
            if threading.current_thread() is not main:  # copy 1, on the worker
                inside.set()
                seen.append(second_done.wait(wait_s))
                return original(self)
            out = original(self)
            second_done.set()
            return out

        params = [_parameters(6), _parameters(6)]
        copies = [adapter.make(cls, _groups(p), {"lr": 1e-2}, {}) for p in params]
        with mock.patch.object(cls, "step", step):
            for p, g in zip(params[0], _gradients(0)):
                p.grad = g.clone()
            for p, g in zip(params[1], _gradients(0)):
                p.grad = g.clone()
            worker = threading.Thread(target=copies[0].step, args=(None,))
            worker.start()
            inside.wait(5)
            copies[1].step(None)
            worker.join()
        return seen == [True]

    def test_torch_optims_copies_step_at_once(self):
        self.assertTrue(self._first_waits_for_second(torch.optim.Adam, 5))

    def test_an_isolated_call_waits_out_a_torch_optim_step(self):
        """Another rule's isolated call, asked for while a torch.optim step
        is inside, enters only after the step has returned."""
        params = _parameters(9)
        rule = adapter.make(torch.optim.Adam, _groups(params), {"lr": 1e-2}, {})
        for p, g in zip(params, _gradients(0)):
            p.grad = g.clone()
        inside, asked, events = threading.Event(), threading.Event(), []
        original = torch.optim.Adam.step

        def step(self, closure=None):
            inside.set()
            asked.wait(5)
            time.sleep(0.3)  # the other rule waits at the lock meanwhile
            out = original(self)
            events.append("step returns")
            return out

        def other_rule():
            inside.wait(5)
            events.append("isolated call asks")
            asked.set()
            with isolation.Isolated(isolation.Stream(1)):
                events.append("isolated call enters")

        worker = threading.Thread(target=other_rule)
        worker.start()
        with mock.patch.object(torch.optim.Adam, "step", step):
            rule.step(None)
        worker.join()
        self.assertEqual(events, ["isolated call asks", "step returns",
                                  "isolated call enters"])

    def test_an_isolated_call_inside_a_shared_step_is_an_error(self):
        """Two threads each holding the lock shared and asking for it
        alone would wait for each other: refused at once. Nested the other
        way, a Shared in its thread's own Isolated holds nothing more, and
        frees the lock whichever of the two ends last."""
        with isolation.Shared():
            with self.assertRaisesRegex(RuntimeError, "inside a shared step"):
                with isolation.Isolated(isolation.Stream(1)):
                    pass
        with isolation.Isolated(isolation.Stream(1)):  # the lock is free again
            with isolation.Shared():  # nested in its own isolated call
                pass
        # Ended out of order (a nested Shared after its Isolated), the
        # lock is still freed: another thread gets it.
        held = isolation.Isolated(isolation.Stream(1)).__enter__()
        nested = isolation.Shared().__enter__()
        held.__exit__(None, None, None)
        nested.__exit__(None, None, None)
        got = []

        def take_it():
            with isolation.Isolated(isolation.Stream(1)):
                got.append(True)

        other = threading.Thread(target=take_it, daemon=True)
        other.start()
        other.join(5)
        self.assertEqual(got, [True])

    def test_a_first_step_waits_out_another_rules_default_dtype(self):
        """NAdam's first step makes its running product in the default
        dtype; another rule's isolated call that sets float64 meanwhile
        must not reach it (float64 parameters: the product's dtype moves
        their bits)."""
        def run(interfere):
            params = [p.detach().double().requires_grad_() for p in _parameters(8)]
            rule = adapter.make(torch.optim.NAdam, _groups(params), {"lr": 1e-2}, {})
            inside, done = threading.Event(), threading.Event()

            def other_rule():
                with isolation.Isolated(isolation.Stream(1)):
                    torch.set_default_dtype(torch.float64)
                    inside.set()
                    done.wait(0.5)

            if interfere:
                worker = threading.Thread(target=other_rule)
                worker.start()
                inside.wait(5)
            for step in range(STEPS):
                for p, g in zip(params, _gradients(step)):
                    p.grad = g.double()
                rule.step(None)
            done.set()
            if interfere:
                worker.join()
            self.assertEqual(torch.get_default_dtype(), torch.float32)
            return params

        for a, b in zip(run(False), run(True)):
            self.assertTrue(torch.equal(a, b))

    def test_rules_with_reductions_keep_the_isolation(self):
        """LBFGS's dot products (and Muon's matrix products, torch 2.9+)
        could be moved by a thread count another rule sets meanwhile."""
        lbfgs = adapter.make(torch.optim.LBFGS, _groups(_parameters(7)),
                             {"lr": 1e-2}, {})
        self.assertTrue(lbfgs.isolated_steps)
        adam = adapter.make(torch.optim.Adam, _groups(_parameters(7)),
                            {"lr": 1e-2}, {})
        self.assertFalse(adam.isolated_steps)

    def test_another_librarys_steps_take_turns(self):
        class Plain(torch.optim.SGD):
            pass

        Plain.__module__ = "some_library.rules"
        self.assertFalse(self._first_waits_for_second(Plain, 0.5))


if __name__ == "__main__":
    unittest.main()
