#!/usr/bin/env python3
"""Eager-PyTorch reference of one attention-twin pair (docs/protocol.md).

The same pair `twin-run` trains, written the way a researcher would write it
in plain PyTorch: nn.Module classes built in the protocol's order (so
torch.manual_seed gives the C++ program's initial weights bit for bit),
F.cross_entropy, torch.optim.Adam / SGD, and small scalar-Adam and Muon
classes. It serves the benchmark (`twin-run bench --vs-pytorch`) as the
speed bar, and the tests as a numeric cross-check of the first steps.

Prints one JSON object: the configuration, drift at each checkpoint, the
seconds per pair-step (median over timed steps after warm-up) and a checksum
of the initial weights. Runs under Debian's python3-torch (1.13,
/usr/bin/python3) and under torch 2.x; `--device cuda` (2.x with CUDA) runs
the pair on the GPU, `--compile` (2.x) trains it through torch.compile
(inductor) instead of eagerly: the peers of `bench/peers.py`.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------- model
class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.sqrt_d = math.sqrt(d)

    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True) * self.sqrt_d * self.gain


class Attention(nn.Module):
    def __init__(self, d, heads, causal):
        super().__init__()
        self.wq = nn.Linear(d, d, bias=False)
        self.wk = nn.Linear(d, d, bias=False)
        self.wv = nn.Linear(d, d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.heads, self.causal = heads, causal

    def forward(self, x):
        B, T, d = x.shape
        hd = d // self.heads
        q, k, v = (w(x).view(B, T, self.heads, hd).transpose(1, 2)
                   for w in (self.wq, self.wk, self.wv))  # (B, nh, T, hd)
        att = q @ k.transpose(-2, -1) * hd ** -0.5
        if self.causal:
            mask = torch.ones(T, T, dtype=torch.bool,
                              device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = att.softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(B, T, d))


class Block(nn.Module):
    def __init__(self, d, heads, mlp, causal):
        super().__init__()
        self.norm1 = RMSNorm(d)
        self.attn = Attention(d, heads, causal)
        self.norm2 = RMSNorm(d)
        self.w1 = nn.Linear(d, mlp, bias=False)
        self.w2 = nn.Linear(mlp, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.w2(F.silu(self.w1(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab_in, vocab_out, n_ctx, depth, d, heads, mlp,
                 causal, last_only):
        super().__init__()
        self.tok = nn.Embedding(vocab_in, d)
        self.pos = nn.Parameter(torch.randn(1, n_ctx, d) * 0.02)
        self.blocks = nn.ModuleList(
            Block(d, heads, mlp, causal) for _ in range(depth))
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab_out, bias=False)
        self.last_only = last_only

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos[:, :tokens.shape[1]]
        for b in self.blocks:
            x = b(x)
        x = self.norm(x)
        return self.head(x[:, -1] if self.last_only else x)

    def matrices(self):
        return [p for b in self.blocks for p in (
            b.attn.wq.weight, b.attn.wk.weight, b.attn.wv.weight,
            b.attn.wo.weight, b.w1.weight, b.w2.weight)]


# ---------------------------------------------------------------- optimizers
class ScalarAdam(torch.optim.Optimizer):
    """Adam's moments with one denominator shared by every parameter."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        ps = [p for g in self.param_groups for p in g["params"]]
        total, count = 0.0, 0
        for p in ps:
            st = self.state[p]
            if not st:
                st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
            st["m"].mul_(0.9).add_(p.grad, alpha=0.1)
            st["v"].mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)
            total = total + st["v"].sum()
            count += p.numel()
        s = (total / (1 - 0.999 ** self.t) / count).sqrt() + 1e-8
        lr = self.param_groups[0]["lr"] / (1 - 0.9 ** self.t)
        for p in ps:
            p.addcdiv_(self.state[p]["m"], s, value=-lr)


def newton_schulz5(G):
    a, b, c = 3.4445, -4.7750, 2.0315
    X = G / (G.norm() + 1e-7)
    tall = G.shape[0] > G.shape[1]
    if tall:
        X = X.T
    for _ in range(5):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X


class Muon(torch.optim.Optimizer):
    """Hybrid Muon: NS5 of undamped momentum on hidden matrices; the rest
    goes to the Adam given alongside."""

    def __init__(self, matrices, lr):
        super().__init__(matrices, dict(lr=lr))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                buf = self.state[p].setdefault("b", torch.zeros_like(p))
                buf.mul_(0.9).add_(p.grad)
                p.add_(newton_schulz5(buf), alpha=-g["lr"])


def make_optimizers(name, model, lr):
    if name == "adam":
        return [torch.optim.Adam(model.parameters(), lr=lr)]
    if name == "sgd":
        return [torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)]
    if name == "scalar-adam":
        return [ScalarAdam(model.parameters(), lr)]
    if name == "muon":
        mats = model.matrices()
        ids = {id(p) for p in mats}
        rest = [p for p in model.parameters() if id(p) not in ids]
        return [Muon(mats, lr), torch.optim.Adam(rest, lr=1e-3)]
    sys.exit(f"eager_pytorch.py: unknown optimizer {name!r}")


# ---------------------------------------------------------------------- data
def mod_task(p, seed):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(p * p, generator=g)
    a, b = perm // p, perm % p
    x = torch.stack([a, b, torch.full_like(a, p)], 1)
    y = (a + b) % p
    n = 4 * p * p // 10
    return (x[:n], y[:n]), (x[n:], y[n:]), p + 1, p, 3


def charlm_task(path, ctx, batch, steps, seed):
    text = open(path, encoding="utf-8").read()
    vocab = sorted(set(text))
    index = {c: i for i, c in enumerate(vocab)}
    ids = torch.tensor([index[c] for c in text])
    n = len(ids) * 9 // 10
    train, val = ids[:n], ids[n:]
    g = torch.Generator().manual_seed(seed)
    offs = torch.randint(0, n - ctx - 1, (steps, batch), generator=g)
    voffs = torch.randint(0, len(val) - ctx - 1, (64,), generator=g)
    win = torch.arange(ctx + 1)
    vch = val[voffs[:, None] + win]

    def batches(t):  # the windows of step t (from 1): inputs, next chars
        ch = train[offs[t - 1][:, None] + win]
        return ch[:, :-1], ch[:, 1:]

    return batches, (vch[:, :-1], vch[:, 1:]), len(vocab), ctx


# ------------------------------------------------------------------- twins
def rel(a, b):
    a, b = a.double(), b.double()
    num = (a - b).norm().item()
    return 0.0 if num == 0 else num / (0.5 * (a.norm() + b.norm()).item())


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="mod47")
    ap.add_argument("--opt", default="adam")
    ap.add_argument("--twin", default="gauge",
                    choices=["gauge", "identity", "noise"])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--dtype", default="float32",
                    choices=["float32", "float64"])
    ap.add_argument("--protocol", default=None,
                    choices=["paper-cpu", "twins"],
                    help="docs/protocol.md §2a: the dtype of the gauge and "
                    "noise draws, float32 (paper-cpu) or float64 (twins) "
                    "[default: paper-cpu in float32, twins in float64]; the "
                    "paper-gpu init is not reproduced here")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init-seed", type=int, default=42)
    ap.add_argument("--twin-seed", type=int, default=None)
    ap.add_argument("--noise-scale", type=float, default=1e-7)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--depth", type=int, default=None)
    ap.add_argument("--d-model", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--data", default=None)
    ap.add_argument("--data-seed", type=int, default=42)
    ap.add_argument("--warmup", type=int, default=3,
                    help="steps excluded from the per-step timing")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile (inductor) the models' forward and "
                         "backward and the optimizers' steps")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "reduce-overhead", "max-autotune"],
                    help="torch.compile's mode with --compile")
    return ap.parse_args()


def set_up_torch(a):
    """Threads, determinism and the device's checks; returns whether the
    run is on CUDA."""
    cuda = a.device != "cpu"
    if cuda:
        # Read when cuBLAS makes its handle: deterministic reductions, as
        # twin-run sets it (twins/device.cpp).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if not torch.cuda.is_available():
            sys.exit(f"eager_pytorch.py: --device {a.device}: torch "
                     f"{torch.__version__} sees no CUDA device")
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"eager_pytorch.py: --compile needs torch 2.x, this is "
                 f"{torch.__version__}")
    torch.set_num_threads(a.threads)
    # On CUDA only a warning where an op has no deterministic kernel: the
    # GPU rows are timed, not compared bit for bit.
    torch.use_deterministic_algorithms(True, **({"warn_only": True} if cuda else {}))
    return cuda


def make_twins(a, dtype, draw, shape):
    """The checksum of the initial weights and the two copies, copy 2 with
    the twin's change (gauge, identity or noise)."""
    vocab_in, vocab_out, n_ctx, depth, d, heads, lm = shape

    def model():
        return Transformer(vocab_in, vocab_out, n_ctx, depth, d, heads, 4 * d,
                           lm, not lm)

    torch.manual_seed(a.init_seed)
    base = model()
    checksum = sum(p.double().sum().item() for p in base.parameters())
    base = base.to(dtype)
    m1, m2 = model().to(dtype), model().to(dtype)
    m1.load_state_dict(base.state_dict())
    m2.load_state_dict(base.state_dict())
    seed = a.twin_seed if a.twin_seed is not None else (
        888 if a.twin == "noise" else 777)
    g = torch.Generator().manual_seed(seed)
    hd = d // heads
    with torch.no_grad():
        for b in m2.blocks:
            if a.twin == "noise":
                for w in (b.attn.wq.weight, b.attn.wk.weight):
                    n = torch.randn(w.shape, generator=g, dtype=draw)
                    w.add_((n * a.noise_scale).to(dtype))
                continue
            for h in range(heads):
                A = (torch.linalg.qr(torch.randn(hd, hd, generator=g,
                                                 dtype=draw))[0]
                     if a.twin == "gauge" else torch.eye(hd, dtype=draw))
                A = A.to(dtype)
                for w in (b.attn.wq.weight, b.attn.wk.weight):
                    w[h * hd:(h + 1) * hd] = A @ w[h * hd:(h + 1) * hd]
    return checksum, seed, m1, m2


def train(a, models, opts, batches, val, cuda, device):
    """Both copies through a.steps steps in lockstep; the drift curve at
    the checkpoints and each step's seconds."""
    m1, m2 = models
    forwards = [m1, m2]
    steps = [[o.step for o in os_] for os_ in opts]
    if a.compile:
        forwards = [torch.compile(m, mode=a.compile_mode) for m in forwards]
        steps = [[torch.compile(s, mode=a.compile_mode) for s in ss]
                 for ss in steps]
    checkpoints = sorted({s for s in (0, 1, 10, 50, 100, 300, 600, 1000,
                                      1500, 2000, 3000) if s <= a.steps}
                         | {a.steps})
    curve, times = [], []

    def measure(step):
        with torch.no_grad():
            z1, z2 = m1(val[0]), m2(val[0])  # eagerly: no recompilation
        curve.append(dict(step=step, logit_drift=rel(z1, z2)))

    measure(0)
    for t in range(1, a.steps + 1):
        t0 = time.perf_counter()
        x, y = batches(t)
        for forward, os_, ss in zip(forwards, opts, steps):
            for o in os_:
                o.zero_grad(set_to_none=True)
            z = forward(x)
            loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), y.reshape(-1))
            loss.backward()
            for s in ss:
                s()
        if cuda:
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
        if t in checkpoints:
            measure(t)
    return curve, times


def main():
    a = parse_args()
    cuda = set_up_torch(a)
    device = torch.device(a.device)
    lm = a.task == "charlm"
    dtype = torch.float32 if a.dtype == "float32" else torch.float64
    protocol = a.protocol or ("paper-cpu" if a.dtype == "float32" else "twins")
    draw = torch.float32 if protocol == "paper-cpu" else torch.float64
    depth = a.depth or (6 if lm else 2)
    d = a.d_model or (256 if lm else 64)
    heads = a.heads or (8 if lm else 4)
    lrs = {"adam": 1e-3, "sgd": 0.1 if lm else 0.5, "scalar-adam": 3e-3,
           "muon": 0.02}
    lr = a.lr or lrs[a.opt]
    if lm:
        path = a.data or "data/tinyshakespeare.txt"
        batches, val, vocab, n_ctx = charlm_task(path, a.ctx, a.batch,
                                                 a.steps, a.data_seed)
        vocab_in = vocab_out = vocab
    else:
        train_set, val, vocab_in, vocab_out, n_ctx = mod_task(
            int(a.task[3:]), a.data_seed)
        batches = lambda t: train_set

    checksum, seed, m1, m2 = make_twins(
        a, dtype, draw, (vocab_in, vocab_out, n_ctx, depth, d, heads, lm))
    m1, m2 = m1.to(device), m2.to(device)
    opts = [make_optimizers(a.opt, m, lr) for m in (m1, m2)]
    if cuda:
        val = tuple(t.to(device) for t in val)
        if lm:  # a new window each step, drawn on the host
            host_batches = batches
            batches = lambda t: tuple(u.to(device) for u in host_batches(t))
        else:  # the whole training set, every step
            train_set = tuple(u.to(device) for u in train_set)
            batches = lambda t: train_set
    curve, times = train(a, (m1, m2), opts, batches, val, cuda, device)
    timed = times[a.warmup:] or times
    print(json.dumps(dict(
        task=a.task, opt=a.opt, twin=a.twin, steps=a.steps, dtype=a.dtype,
        threads=a.threads, device=a.device, compile=a.compile,
        compile_mode=a.compile_mode if a.compile else None,
        init_seed=a.init_seed, twin_seed=seed,
        torch_version=torch.__version__, init_checksum=checksum,
        curve=curve, s_per_pair_step=statistics.median(timed),
        warmup_s=sum(times[:a.warmup]), wall_s=sum(times))))


if __name__ == "__main__":
    main()
