"""The rules of the optimizer libraries people train with, unmodified, through
`import twins` (docs/extending.md, "What each library needed"): at least one
rule of each library, each needing the convention bridge/conventions.py
gives it. Each library is skipped, saying why, where it does not import
(Debian's torch 1.13 imports few of them; the CUDA leg of CI installs them
all into its torch 2.11 venv: tests/python/requirements.txt).

Every rule runs on the small mod-11 model and must keep the identity twin
at exactly 0 (the copies in lockstep, random numbers included); where a
rule's class is certain from its update, the verdict is checked too."""

import importlib
import unittest

import twins

TINY = dict(task="mod11", depth=2, d_model=16, heads=4, mlp=64, progress=False)


def library(module):
    """The module, or a skip naming why it does not import here."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # ImportError, and whatever a library raises on import
        raise unittest.SkipTest(f"{module} does not import here: "
                                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def identity_max(records):
    return max(p["logit_drift"] for r in records if r["twin"] == "identity"
               for p in r["curve"])


class LibraryRules(unittest.TestCase):
    def verdict(self, name, steps=12, **kw):
        settings = dict(TINY)
        settings.update(kw)
        v = twins.verdict(name, steps=steps, **settings)
        self.assertEqual(v["identity_max"], 0.0, v["line"])
        self.assertNotEqual(v["class"], "invalid", v["line"])
        self.assertIn("[", v["opt"], v["opt"])  # DIST==VERSION in the identity
        return v

    def run_identity(self, name, steps=8, **kw):
        settings = dict(TINY)
        settings.update(kw)
        records = twins.run(name, twins=["identity", "gauge"], steps=steps, **settings)
        self.assertEqual(identity_max(records), 0.0, name)
        return records

    def test_pytorch_optimizer(self):
        library("pytorch_optimizer")
        v = self.verdict("py:pytorch_optimizer:AdaBelief", lr=1e-2)
        self.assertEqual(v["class"], "basis-dependent", v["line"])
        # Its Muon reads use_muon from every group (the hidden matrices).
        self.run_identity("py:pytorch_optimizer:Muon", lr=0.02)
        # AdamMini takes the model (named parameters) and its widths.
        self.run_identity("py:pytorch_optimizer:AdamMini", lr=1e-3)
        # SPlus's eval() reads averages its first step makes: step 0 is
        # measured in its parameters, later steps in its averages.
        records = self.run_identity("py:pytorch_optimizer:SPlus", lr=1e-3)
        self.assertEqual(records[0]["status"], "ok", records[0])

    def test_heavyball(self):
        library("heavyball")
        # PSGD-Kron draws probe vectors in step(): the same stream in both
        # copies; its torch.compile'd helpers run eagerly.
        self.run_identity("py:heavyball:PSGDKron", lr=1e-3)
        # Schedule-free: train() / eval() around every measurement.
        self.run_identity("py:heavyball:SFAdamW", lr=1e-3)
        # PSGDLRA reads its argument as tensors: given the flat list.
        self.run_identity("py:heavyball:PSGDLRA", lr=1e-3)
        self.run_identity("py:heavyball:SOAP", lr=3e-3)

    def test_timm(self):
        library("timm.optim")
        v = self.verdict("py:timm.optim:Lamb", lr=1e-2)
        self.assertEqual(v["class"], "basis-dependent", v["line"])
        # timm's own factory by name, as its users build optimizers.
        self.run_identity("py:timm.optim:create_optimizer_v2",
                          args={"opt": "adamw"}, lr=1e-3)

    def test_torch_optimizer(self):
        library("torch_optimizer")
        v = self.verdict("py:torch_optimizer:Yogi", lr=1e-2)
        self.assertEqual(v["class"], "basis-dependent", v["line"])

    def test_schedulefree(self):
        library("schedulefree")
        self.run_identity("py:schedulefree:AdamWScheduleFree", lr=1e-3)
        # The closure variant calls step(closure) at the point it moved to.
        self.run_identity("py:schedulefree:SGDScheduleFreeClosure", lr=0.1)

    def test_lion_pytorch(self):
        library("lion_pytorch")
        v = self.verdict("py:lion_pytorch:Lion", lr=1e-4)
        self.assertEqual(v["class"], "basis-dependent", v["line"])  # entrywise sign

    def test_kron_torch(self):
        library("kron_torch")
        self.run_identity("py:kron_torch:Kron", lr=1e-3)

    def test_prodigyopt(self):
        library("prodigyopt")
        self.run_identity("py:prodigyopt:Prodigy", lr=1.0)

    def test_adam_mini(self):
        library("adam_mini")
        # Adam_mini(named_parameters, dim=, n_heads=): one v per head of
        # W_Q, W_K, a norm the gauge keeps.
        v = self.verdict("py:adam_mini:Adam_mini", lr=1e-3)
        self.assertEqual(v["class"], "equivariant", v["line"])

    def test_torch_muon(self):
        import torch
        if not hasattr(torch.optim, "Muon"):
            self.skipTest(f"torch {torch.__version__} has no torch.optim.Muon (2.9+)")
        # Muon on the hidden matrices, Adam on the rest (its documentation).
        self.run_identity("torch:Muon", lr=1e-3)

    # The census's libraries added on 2026-12-05 (docs/results.md, "The rest
    # of the ecosystem"): each one's convention.

    def test_emerging_optimizers(self):
        library("emerging_optimizers")
        # No closure passed (it raises for one); 2-D rules on the hidden
        # matrices, Adam on the rest; its "medium" matmul precision its own
        # while it steps (without that, the verdict's identity twin was
        # 0.012 here: the five twins' copies step beside copy 1's forward).
        self.verdict("py:emerging_optimizers.orthogonalized_optimizers:Muon",
                     lr=3e-4, jobs=2)

    def test_muon_optimizer(self):
        library("muon")
        # use_muon groups with no other key; the plain one on the matrices.
        self.run_identity("py:muon:SingleDeviceMuonWithAuxAdam", lr=0.02)
        self.run_identity("py:muon:SingleDeviceMuon", lr=0.02)
        with self.assertRaisesRegex(Exception, "needs torch.distributed"):
            twins.run("py:muon:Muon", twins=["identity"], steps=2, lr=0.02, **TINY)

    def test_bitsandbytes(self):
        library("bitsandbytes")
        # Momentum 0.9 where its default 0 is refused.
        self.run_identity("py:bitsandbytes.optim:SGD8bit", lr=1e-2)

    def test_torch_optimi(self):
        library("optimi")
        # Predicted by the census (no twins_predicted): equivariant.
        v = self.verdict("py:optimi:SGD", lr=1e-2)
        self.assertEqual(v["predicted"], "equivariant", v["line"])
        self.assertEqual(v["class"], "equivariant", v["line"])

    def test_dadaptation(self):
        library("dadaptation")
        self.run_identity("py:dadaptation:DAdaptAdam", lr=1.0)

    def test_torch_adopt(self):
        library("adopt")
        with self.assertRaisesRegex(Exception, "needs another torch"):
            twins.run("py:adopt:ADOPT", twins=["identity"], steps=2, lr=1e-3, **TINY)

    def test_adam_atan2(self):
        library("adam_atan2_pytorch")
        # (muon_params, params) and (polar_params, params).
        self.run_identity("py:adam_atan2_pytorch:MuonAdamAtan2", lr=1e-4)
        self.run_identity("py:adam_atan2_pytorch:PolarAdamAtan2", lr=1e-4)

    def test_came_sophia_grokadamw(self):
        for module, name, lr in (("came_pytorch", "CAME", 1e-3),
                                 ("sophia_opt", "SophiaG", 1e-4),
                                 ("grokadamw", "GrokAdamW", 1e-3)):
            with self.subTest(name):
                library(module)
                v = self.verdict(f"py:{module}:{name}", lr=lr)
                self.assertEqual(v["class"], "basis-dependent", v["line"])

    def test_galore_apollo(self):
        # The hidden matrices' groups carry a rank (16 of the width).
        for module, name in (("galore_torch", "GaLoreAdamW"),
                             ("apollo_torch", "APOLLOAdamW")):
            with self.subTest(name):
                library(module)
                self.run_identity(f"py:{module}:{name}", lr=1e-3)


if __name__ == "__main__":
    unittest.main()
