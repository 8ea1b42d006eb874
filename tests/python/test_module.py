"""`import twins` from Python (python/module.cpp): rules defined in the calling
code (a class, a lambda factory), the records' schema, the verdict, and the
errors as Python exceptions. Run by ctest with Debian's /usr/bin/python3 and
PYTHONPATH=build/python; each case trains the small mod-11 model (2 blocks,
d 16, 4 heads) for a few steps."""

import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest
from unittest import mock

import torch

import twins

TINY = dict(task="mod11", depth=2, d_model=16, heads=4, mlp=64)



class ScalarAdam(torch.optim.Optimizer):
    """Adam's moments per entry, one denominator shared by every parameter
    (docs/protocol.md §5): the update commutes with a rotation of a head."""

    twins_predicted = "equivariant"

    def __init__(self, params, lr=3e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.param_groups[0]["betas"]
        total, count = 0.0, 0
        for g in self.param_groups:
            for p in g["params"]:
                s = self.state[p]
                if not s:
                    s["m"], s["v"] = torch.zeros_like(p), torch.zeros_like(p)
                s["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                s["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                total += s["v"].sum().item()
                count += p.numel()
        denom = math.sqrt(total / count / (1 - b2 ** self.t)) + self.param_groups[0]["eps"]
        for g in self.param_groups:
            for p in g["params"]:
                p.add_(self.state[p]["m"], alpha=-g["lr"] / (1 - b1 ** self.t) / denom)


def numbers(record):
    """What two rules computing the same thing share in their records."""
    drop = {"opt", "hparams", "key", "wall_s", "threads", "group_pairs"}
    return {k: v for k, v in record.items() if k not in drop}


class ModuleTest(unittest.TestCase):
    def test_verdict_of_a_class_defined_here(self):
        v = twins.verdict(ScalarAdam, steps=20, **TINY)
        self.assertEqual(v["verdict"], "equivariant", v["line"])
        self.assertEqual(v["predicted"], "equivariant")
        self.assertTrue(v["as_predicted"])
        self.assertEqual(v["identity_max"], 0.0)
        self.assertEqual(len(v["records"]), 5)
        self.assertTrue(v["opt"].startswith("python:"), v["opt"])
        self.assertIn("ScalarAdam#", v["opt"])

    def test_the_callers_random_stream_and_threads_are_kept(self):
        threads = torch.get_num_threads()
        for call in (lambda: twins.run("adam", steps=3, lr=1e-3, **TINY),
                     lambda: twins.verdict("torch:Adam", steps=3, lr=1e-3, **TINY)):
            torch.manual_seed(1234)
            expected = torch.rand(3)
            torch.manual_seed(1234)
            call()
            self.assertTrue(torch.equal(torch.rand(3), expected))
            self.assertEqual(torch.get_num_threads(), threads)

    def test_verdict_of_torch_adam_is_basis_dependent(self):
        v = twins.verdict("torch:Adam", steps=20, lr=1e-3, **TINY)
        self.assertEqual(v["verdict"], "basis-dependent", v["line"])
        self.assertGreater(v["onset_ratio"], 10)

    def test_a_lambda_factory_is_the_builtin_sgd(self):
        # torch's SGD with momentum 0.9, dampening 0 is the built-in sgd,
        # op for op: the records are equal.
        sgd = lambda groups, lr: torch.optim.SGD(groups, lr=lr, momentum=0.9)
        mine = twins.run(sgd, twins=["gauge", "identity"], steps=30, lr=0.5, **TINY)
        builtin = twins.run("sgd", twins=["gauge", "identity"], steps=30, lr=0.5, **TINY)
        self.assertEqual(len(mine), 2)
        for a, b in zip(mine, builtin):
            self.assertEqual(numbers(a), numbers(b))
        self.assertEqual(mine[1]["twin"], "identity")
        self.assertEqual(max(c["logit_drift"] for c in mine[1]["curve"]), 0.0)

    def test_records_are_the_jsonl_records(self):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.jsonl")
            got = twins.run("torch:SGD", args={"momentum": 0.9}, steps=5, lr=0.1,
                            out=out, **TINY)
            with open(out) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual(got, lines)
            self.assertEqual(got[0]["opt"], 'torch:SGD{"momentum":0.9}')
            self.assertEqual(got[0]["hparams"]["momentum"], 0.9)
            self.assertEqual(got[0]["lr"], 0.1)
            # A rerun resumes: the same records, nothing trained again.
            again = twins.run("torch:SGD", args={"momentum": 0.9}, steps=5, lr=0.1,
                              out=out, **TINY)
            self.assertEqual(again, got)

    def test_the_rule_receives_named_groups(self):
        seen = []

        def factory(groups, lr):
            seen.extend({k: v for k, v in g.items() if k != "params"} for g in groups)
            return torch.optim.SGD(groups, lr=lr)

        twins.run(factory, steps=1, lr=0.1, **TINY)
        # built once per model: the reference and the twin
        self.assertEqual(len(seen), 2 * 20)
        wq = seen[0]
        self.assertEqual((wq["name"], wq["role"], wq["layer"]), ("layers.0.wq", "wq", 0))
        self.assertEqual(wq["head_rows"], [(0, 4), (4, 8), (8, 12), (12, 16)])
        self.assertTrue(wq["gauge"])
        self.assertEqual([g["role"] for g in seen[12:20]],
                         ["embedding", "positional", "gain", "gain", "gain", "gain",
                          "gain", "head"])

    def test_the_identity_follows_the_closure(self):
        def sgd_at(m):
            return lambda groups, lr: torch.optim.SGD(groups, lr=lr, momentum=m)

        self.assertNotEqual(twins.resolve(sgd_at(0.9)), twins.resolve(sgd_at(0.5)))
        self.assertEqual(twins.resolve(ScalarAdam), twins.resolve(ScalarAdam))

    def test_the_identity_covers_what_has_no_source(self):
        import functools
        # A partial: its arguments (both once hashed the SHA-256 of nothing,
        # so the second run returned the first's records).
        plain = functools.partial(torch.optim.SGD, momentum=0.0)
        nesterov = functools.partial(torch.optim.SGD, momentum=0.9, nesterov=True)
        self.assertNotEqual(twins.resolve(plain), twins.resolve(nesterov))
        self.assertEqual(twins.resolve(plain),
                         twins.resolve(functools.partial(torch.optim.SGD, momentum=0.0)))
        self.assertNotIn("#e3b0c44298fc1c14", twins.resolve(plain))
        # Classes made by type() and exec: their members.
        low = type("Rule", (torch.optim.SGD,), {"scale": 1.0})
        high = type("Rule", (torch.optim.SGD,), {"scale": 2.0})
        self.assertNotEqual(twins.resolve(low), twins.resolve(high))
        ns_a, ns_b = {}, {}
        exec("import torch\nclass R(torch.optim.SGD):\n    def step(self, closure=None):\n"
             "        return super().step()\n", ns_a)
        exec("import torch\nclass R(torch.optim.SGD):\n    def step(self, closure=None):\n"
             "        self.param_groups[0]['lr'] *= 2\n        return super().step()\n", ns_b)
        self.assertNotEqual(twins.resolve(ns_a["R"]), twins.resolve(ns_b["R"]))

    def test_the_identity_follows_the_globals_a_rule_reads(self):
        ns = {"torch": torch, "MOMENTUM": 0.9}
        exec("def factory(groups, lr):\n"
             "    return torch.optim.SGD(groups, lr=lr, momentum=MOMENTUM)\n", ns)
        before = twins.resolve(ns["factory"])
        ns["MOMENTUM"] = 0.5  # a notebook cell changed the global
        self.assertNotEqual(twins.resolve(ns["factory"]), before)
        self.assertNotEqual(twins.resolve(ScalarAdam, args={"eps": 1e-6}),
                            twins.resolve(ScalarAdam))

    def test_errors_are_python_exceptions(self):
        class Raises(torch.optim.SGD):
            def __init__(self, params, lr=0.1):
                super().__init__(params, lr=lr)
                self.t = 0

            def step(self):
                self.t += 1
                if self.t == 2:
                    raise KeyError("two")
                return super().step()

        with self.assertRaisesRegex(RuntimeError, r"step\(\) raised at step 2: KeyError"):
            twins.run(Raises, steps=5, **TINY)
        with self.assertRaisesRegex(RuntimeError, "Unknown torch.optim optimizer"):
            twins.run("torch:Nope", steps=5, **TINY)
        with self.assertRaisesRegex(RuntimeError, "rejected its arguments"):
            twins.run("torch:SGD", args={"momentum": -1}, lr=0.1, steps=5, **TINY)
        with self.assertRaisesRegex(RuntimeError, "rejected its arguments or parameters"):
            twins.run(lambda groups, lr: torch.optim.SGD(groups, lr=lr, bogus=1),
                      lr=0.1, steps=5, **TINY)
        with self.assertRaisesRegex(RuntimeError, "not a torch.optim.Optimizer"):
            twins.run(dict, steps=5, **TINY)


class _InterruptedAfter:
    """A job of twins._core.start whose wait raises KeyboardInterrupt, as
    Ctrl-C does, once `steps` steps are done; it polls every millisecond."""

    def __init__(self, job, steps):
        self.job, self.steps, self.fired = job, steps, False

    def wait(self, seconds):
        if not self.fired and self.job.counts()[3] >= self.steps:
            self.fired = True
            raise KeyboardInterrupt
        return self.job.wait(min(seconds, 0.001))

    def __getattr__(self, name):
        return getattr(self.job, name)


class NotebookPathTest(unittest.TestCase):
    """What a notebook needs: progress it can show, a stop on
    KeyboardInterrupt that keeps what was done, a figure."""

    def test_progress_is_a_bar_on_python_stderr(self):
        try:
            import tqdm  # noqa: F401
        except ImportError:
            self.skipTest("tqdm is not installed here")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            twins.run("sgd", steps=5, lr=0.5, progress=True, **TINY)
        self.assertIn("1/1 pairs", err.getvalue())

    def test_keyboard_interrupt_stops_and_a_rerun_resumes(self):
        # Ctrl-C lands in the main thread while it waits for the engine
        # (twins/_engine.py's _drive): the job's wait raises it once 20
        # steps are done, so the stop does not race the run's speed.
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.jsonl")
            settings = dict(TINY, steps=400, lr=1e-3, twins=["gauge", "identity"])
            start = twins._engine._core.start
            interrupted = []

            def start_then_interrupt(*args):
                job = _InterruptedAfter(start(*args), steps=20)
                interrupted.append(job)
                return job

            with mock.patch.object(twins._engine._core, "start",
                                   start_then_interrupt):
                with self.assertRaises(KeyboardInterrupt) as stop:
                    twins.run(ScalarAdam, out=out, progress=False, **settings)
            self.assertTrue(interrupted[0].fired)
            _, _, steps, steps_done = interrupted[0].counts()
            self.assertLess(steps_done, steps, "the run ended before the stop")
            self.assertIn(f"rerun with out='{out}' to resume", str(stop.exception))
            self.assertTrue(os.listdir(out + ".ckpt"), "no checkpoint kept")
            resumed = twins.run(ScalarAdam, out=out, progress=False, **settings)
            straight = twins.run(ScalarAdam, progress=False, **settings)
            self.assertEqual([numbers(r) for r in resumed],
                             [numbers(r) for r in straight])
            self.assertFalse(os.path.exists(out + ".ckpt"))

    def test_plot_is_figure_two(self):
        try:
            import matplotlib
        except ImportError:
            self.skipTest("matplotlib is not installed here")
        matplotlib.use("Agg")
        records = twins.run("adam", twins=["gauge", "identity"], steps=5, **TINY)
        fig = twins.plot(records)
        self.assertEqual(type(fig).__name__, "Figure")
        ax = fig.axes[0]
        self.assertEqual(ax.get_yscale(), "log")
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        self.assertIn("adam gauge", labels)
        self.assertIn("adam identity (exactly 0)", labels)
        with self.assertRaisesRegex(ValueError, "unknown metric"):
            twins.plot(records, metric="nope")


    def test_plot_refuses_what_it_cannot_draw_and_reads_a_file(self):
        # Checked before matplotlib is imported: these hold without it.
        records = twins.run("adam", twins=["gauge"], steps=3, **TINY)
        with self.assertRaisesRegex(ValueError, "no record carries 'vo_drift_mean' "
                                    r"\(the gauge-vo and gauge-all twins do\)"):
            twins.plot(records, metric="vo_drift_mean")
        with self.assertRaisesRegex(ValueError, "cannot read records from 'nope.jsonl'"):
            twins.plot("nope.jsonl")
        with self.assertRaisesRegex(TypeError, "records are dicts"):
            twins.plot(["not a record"])
        try:
            import matplotlib
        except ImportError:
            self.skipTest("matplotlib is not installed here")
        matplotlib.use("Agg")
        # A null (non-finite) value is left out, not a TypeError.
        broken = [dict(records[0], curve=[dict(records[0]["curve"][0],
                                               logit_drift=None)]
                       + records[0]["curve"][1:])]
        self.assertEqual(type(twins.plot(broken)).__name__, "Figure")
        vo = twins.run("adam", twins=["gauge-vo"], steps=3, **TINY)
        self.assertEqual(type(twins.plot(vo, metric="vo_drift_mean")).__name__,
                         "Figure")
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "r.jsonl")
            twins.run("adam", twins=["gauge"], steps=3, out=out, progress=False,
                      **TINY)
            self.assertEqual(type(twins.plot(out)).__name__, "Figure")


class IdentityTest(unittest.TestCase):
    def test_a_class_keeps_its_name_once_built(self):
        # torch.optim.Optimizer wraps a subclass's step() at its first
        # instance; the name (and so the records' keys, and a resume in
        # the same process) must not change with it.
        namespace = {}
        exec("import torch\n"
             "class Fresh(torch.optim.SGD):\n"
             "    def step(self, closure=None):\n"
             "        return super().step(closure)\n", namespace)
        fresh = namespace["Fresh"]
        fresh.__module__ = __name__
        before = twins.resolve(fresh)
        fresh([torch.zeros(1, requires_grad=True)], lr=0.1)
        self.assertEqual(twins.resolve(fresh), before)


class SettingsTest(unittest.TestCase):
    def test_zero_and_empty_are_refused_naming_the_value(self):
        # None is "the default"; 0, an empty list or name, a bool for a
        # number and a string for a list are mistakes, refused before
        # anything runs.
        for bad, says in [(dict(steps=0), "steps=0 must be at least 1"),
                          (dict(depth=0), "depth=0 must be at least 1"),
                          (dict(d_model=0), "d_model=0 must be at least 1"),
                          (dict(heads=0), "heads=0 must be at least 1"),
                          (dict(mlp=0), "mlp=0 must be at least 1"),
                          (dict(jobs=0), "jobs=0 must be at least 1"),
                          (dict(twins=[]), r"twins=\[\] names no twin"),
                          (dict(out=""), "out='' names no file"),
                          (dict(steps=True), "steps=True has the wrong type"),
                          (dict(lr=0.0), "lr=0 must be a positive number")]:
            with self.subTest(bad=bad):
                with self.assertRaisesRegex(RuntimeError, says):
                    twins.run("adam", progress=False, **bad)
        with self.assertRaisesRegex(TypeError, "twins='gauge' is a string"):
            twins.run("adam", twins="gauge", progress=False)


class ModuleRulesTest(unittest.TestCase):
    def test_a_module_without_distribution_is_named_by_its_hash(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "my_rules_x.py"), "w") as f:
                f.write("import torch\nclass Mine(torch.optim.SGD):\n    pass\n")
            sys.path.insert(0, d)
            try:
                name = twins.resolve("py:my_rules_x:Mine")
            finally:
                sys.path.remove(d)
            self.assertRegex(name, r"^py:my_rules_x#[0-9a-f]{16}:Mine$")

    def test_a_module_with_distribution_carries_its_version(self):
        import importlib.metadata
        version = importlib.metadata.version("torch")
        name = twins.resolve("py:torch.optim:SGD", args={"momentum": 0.9})
        self.assertEqual(name, f'py:torch.optim[torch=={version}]:SGD{{"momentum":0.9}}')

if __name__ == "__main__":
    unittest.main()
