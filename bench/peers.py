#!/usr/bin/env python3
"""twin-run's pair-step against the tools a user would pick instead.

    bench/peers.py [--rows mod47-f32,charlm-f32] [--runs 5] [--out FILE]

For each row (a `twin-run bench` row: the Adam gauge pair at the task's
default shape) it times, side by side in one run:

- ours: `twin-run bench --rows ROW` (the bench's own median over segments),
  and ROW-fma, the same pair on twins' FMA-chain kernels (--matmul
  fma-chain), where twin-run lists that row;
- eager PyTorch 1.13 (Debian's python3-torch, on twin-run's OpenBLAS
  kernels: the core its bench file names) and eager PyTorch 2.11 (the CPU
  side of the CUDA wheel, scripts/torch-venv.sh): bench/eager_pytorch.py;
- torch.compile of the same training step under 2.11 (inductor, CPU):
  bench/eager_pytorch.py --compile (its compilation is in the warm-up
  steps, outside the timing, and reported apart); with --max-autotune also
  its mode="max-autotune".

Every figure is the median over --runs whole processes (a process's own
figure is its median over timed steps), the peers interleaved round by round
so that a busy machine slows them alike. The Python peers run at each thread
setting T/B (torch threads / OpenBLAS threads; 2.11's wheel ships its own
BLAS, which follows T) and the best setting is compared. Prints a Markdown
table and writes every process's figure to --out (JSON).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def venv_python():
    out = subprocess.run([os.path.join(ROOT, "scripts", "torch-venv.sh")],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def row_args(row):
    """eager_pytorch.py's arguments for a bench row, and its step counts."""
    task, dtype = row.split("-")[:2]
    dtype = {"f32": "float32", "f64": "float64"}[dtype]
    args = ["--task", task, "--dtype", dtype, "--opt", "adam", "--twin", "gauge"]
    if task == "charlm":
        args += ["--data", os.path.join(ROOT, "data", "tinyshakespeare.txt"),
                 "--ctx", "128", "--batch", "32"]
        return args, 2, 6  # warm-up steps, timed steps (bench: 1 + 6)
    return args, 5, 40     # bench: 3 + 40


def known_rows(twin_run):
    """The rows `twin-run bench --rows` accepts, from its error for an
    unknown one."""
    p = subprocess.run([twin_run, "bench", "--rows", "none", "--out",
                        f"/tmp/peers-rows-{os.getpid()}.json"],
                       capture_output=True, text=True)
    text = p.stderr
    known = text[text.find("(known: ") + 8:].split(")")[0]
    return [r.strip() for r in known.split(",")]


def run_json(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    if p.returncode != 0 or not last.startswith("{"):
        sys.exit(f"peers.py: {' '.join(cmd)} failed (exit {p.returncode}): "
                 f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return json.loads(last)


def print_row_table(row, runs, date, cores, medians, extra):
    """One row's table: each peer and setting, against ours (2 x 1)."""
    print(f"\n{row}: seconds per pair-step, median of {runs} processes "
          f"({date}, {cores} cores)\n")
    print("| peer | setting | s/pair-step | vs ours (2 x 1) | warm-up s |")
    print("|---|---|---|---|---|")
    ours = medians["ours, 2 copies x 1 thread"]
    for k, v in medians.items():
        name, _, setting = k.rpartition(" ") if not k.startswith("ours") else (k, "", "")
        w = statistics.median(extra[k]) if k in extra else None
        print(f"| {name} | {setting or '-'} | {v:.4f} | {v / ours:.2f}x | "
              + (f"{w:.1f} |" if w is not None else "- |"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="mod47-f32,charlm-f32")
    ap.add_argument("--runs", type=int, default=5,
                    help="processes per peer and setting (charlm rows: "
                         "at most 3)")
    ap.add_argument("--twin-run", default=os.path.join(ROOT, "build", "twin-run"))
    ap.add_argument("--python113", default="/usr/bin/python3")
    ap.add_argument("--python211", default=None,
                    help="default: the venv of scripts/torch-venv.sh")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--max-autotune", action="store_true",
                    help="also torch.compile(mode='max-autotune'), whose "
                         "warm-up tunes every product's kernel")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    py211 = a.python211 or venv_python()
    cores = os.cpu_count() or 2
    script = os.path.join(HERE, "eager_pytorch.py")
    base_env = dict(os.environ)
    base_env.pop("OMP_NUM_THREADS", None)

    peers = []  # (name, python, extra args, torch threads, OpenBLAS threads)
    for t, b in ((1, 1), (1, cores), (cores, cores)):
        peers.append(("eager 1.13", a.python113, [], t, b))
    for t in (1, cores):
        peers.append(("eager 2.11", py211, [], t, t))
    if not a.no_compile:
        for t in (1, cores):
            peers.append(("compile 2.11", py211, ["--compile"], t, t))
        if a.max_autotune:
            for t in (1, cores):
                peers.append(("compile max-autotune 2.11", py211,
                              ["--compile", "--compile-mode", "max-autotune"],
                              t, t))

    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": cores,
               "rows": {}}
    for row in a.rows.split(","):
        args, warmup, timed = row_args(row)
        runs = min(a.runs, 3) if row.startswith("charlm") else a.runs
        ours_rows = [row] + ([row.replace("f32", "f32-seq1")]
                             if row == "mod47-f32" else [])
        if f"{row}-fma" in known_rows(a.twin_run):
            ours_rows.append(f"{row}-fma")
        samples = {}  # config name -> list of per-process figures
        extra = {}    # config name -> list of compile (warm-up) seconds
        for r in range(runs):
            out = f"/tmp/peers-{os.getpid()}.json"
            p = subprocess.run([a.twin_run, "bench", "--rows", ",".join(ours_rows),
                                "--out", out], env=base_env, capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"peers.py: twin-run bench failed: {p.stderr.strip()[-300:]}")
            with open(out) as f:
                bench = json.load(f)
            os.unlink(out)
            for br in bench["rows"]:
                label = ("ours, 2 copies x 1 thread" if br["concurrent_copies"]
                         else "ours, sequential, 1 thread")
                if br.get("matmul", "blas") != "blas":
                    label = label.replace("ours,", f"ours ({br['matmul']}),")
                samples.setdefault(label, []).append(br["s_per_pair_step"])
            results.setdefault("twin_run_torch", bench["torch_version"])
            # Debian's PyTorch 1.13 runs on the same OpenBLAS as twin-run:
            # the same kernels, where twin-run chose them for a CPU that
            # OpenBLAS does not know (docs/output-format.md), unless the
            # caller named a core.
            core = bench.get("blas_core", "unknown")
            same_core = ({} if "OPENBLAS_CORETYPE" in base_env
                         or core in ("", "unknown")
                         else {"OPENBLAS_CORETYPE": core})
            results.setdefault("blas_core", core)
            for name, py, flags, t, b in peers:
                env = dict(base_env, OPENBLAS_NUM_THREADS=str(b))
                if name == "eager 1.13":
                    env.update(same_core)
                j = run_json([py, script, *args, "--steps", str(warmup + timed),
                              "--warmup", str(warmup), "--threads", str(t),
                              *flags], env)
                label = f"{name} {t}/{b}" if name == "eager 1.13" else f"{name} {t}"
                samples.setdefault(label, []).append(j["s_per_pair_step"])
                extra.setdefault(label, []).append(j.get("warmup_s", 0.0))
                results.setdefault("versions", {})[name] = j["torch_version"]
            print(f"peers.py: {row} round {r + 1}/{runs} done", file=sys.stderr)
            if a.out:  # every round kept, should a later one not finish
                results["rows"][row] = {"runs": r + 1, "samples": samples,
                                        "warmup_s": extra}
                with open(a.out, "w") as f:
                    json.dump(results, f, indent=2)
        medians = {k: statistics.median(v) for k, v in samples.items()}
        results["rows"][row] = {"runs": runs, "samples": samples,
                                "median_s_per_pair_step": medians,
                                "warmup_s": extra}
        print_row_table(row, runs, results["date"], cores, medians, extra)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=2)
        print(f"\npeers.py: every figure in {a.out}")


if __name__ == "__main__":
    main()
