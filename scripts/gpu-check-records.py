#!/usr/bin/env python3
"""The checks scripts/gpu-check.sh applies to one results file.

    gpu-check-records.py FILE LABEL --device D --dtype T --pairs N [--tol X]
                         [--ref CPU_FILE [--rel R]]

For every record: status "ok", the device and dtype asked for, and
- an identity twin (A_h = I) is exactly 0 at every checkpoint: logit drift,
  mean and max QK drift, and the final per-head QK drift;
- a gauge twin of a gauge-equivariant optimizer (sgd, scalar-adam, muon)
  has a logit drift <= tol at steps 0 and 1: rounding only, not training;
- a gauge twin of Adam has a step-1 logit drift >= 1e-6, so a broken
  measurement that reports 0 everywhere cannot pass the two checks above.
The file must hold exactly N records. With --ref (the CPU records of the
same pairs), every pair must have its CPU record, and at steps 0 and 1 its
logit drift, mean QK drift and both copies' validation losses must agree
with the CPU's to a relative R (1e-10), or to the rounding floor `tol` in
absolute terms for a drift that small (an equivariant twin's step-1 drift
is float64 rounding, ~1e-16, and no two devices round alike); the final
drifts and accuracies of both are printed side by side, not judged
(training amplifies rounding into chaos). Prints one line per check and a
verdict; exit 0 when all pass, 1 when one fails, 2 on bad input.
"""
import argparse
import json
import sys

EQUIVARIANT = {"sgd", "scalar-adam", "muon"}
ADAM_STEP1_MIN = 1e-6


def read_records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pair_key(r):
    """The record's key with its device left out: the same pair on CPU."""
    return "|".join("DEVICE" if part == r.get("device") else part
                    for part in r["key"].split("|"))


def agree(x, y, rel, floor):
    return abs(x - y) <= rel * max(abs(x), abs(y)) + floor


def compare_with_cpu(records, refs, a, check):
    by_key = {pair_key(r): r for r in refs}
    worst = 0.0
    finals = []
    for r in records:
        name = (f"{r.get('opt')} {r.get('twin')} init {r.get('init_seed')}"
                + (f" seed {r['twin_seed']}" if r.get("twin_seed") is not None else ""))
        ref = by_key.get(pair_key(r))
        if ref is None:
            check(False, f"{name}: no CPU record of this pair in {a.ref}")
            continue
        got = {p["step"]: p for p in r["curve"]}
        want = {p["step"]: p for p in ref["curve"]}
        bad = []
        for step in (0, 1):
            if step not in got or step not in want:
                bad.append(f"no step {step}")
                continue
            g, w = got[step], want[step]
            pairs = [(k, g[k], w[k], a.tol) for k in ("logit_drift", "qk_drift_mean")]
            pairs += [(f"val_loss[{i}]", g["val_loss"][i], w["val_loss"][i], 0.0)
                      for i in (0, 1)]
            for what, x, y, floor in pairs:
                if x is None or y is None or not agree(x, y, a.rel, floor):
                    bad.append(f"step {step} {what} {x!r} vs CPU {y!r}")
                elif max(abs(x), abs(y)) > floor:
                    worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
        check(not bad, f"{name}: steps 0, 1 agree with the CPU record "
                       f"(relative {a.rel:g}, floor {a.tol:g})"
                       + (": " + "; ".join(bad[:3]) if bad else ""))
        last, ref_last = r["curve"][-1], ref["curve"][-1]
        finals.append(f"  final {name:<34} step {last['step']}: drift "
                      f"{last['logit_drift']:.3g} (CPU {ref_last['logit_drift']:.3g}), "
                      f"val acc {r['val_acc'][0]:.4f}/{r['val_acc'][1]:.4f} "
                      f"(CPU {ref['val_acc'][0]:.4f}/{ref['val_acc'][1]:.4f})")
    print(f"INFO {a.label}: largest relative step-0/1 difference from the CPU "
          f"records, above the floor: {worst:.3g}")
    for line in finals:
        print(f"INFO {a.label}:{line}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("label")
    ap.add_argument("--device", required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--pairs", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-13)
    ap.add_argument("--ref", help="CPU records of the same pairs")
    ap.add_argument("--rel", type=float, default=1e-10)
    a = ap.parse_args()
    try:
        records = read_records(a.file)
        refs = read_records(a.ref) if a.ref else None
    except (OSError, json.JSONDecodeError) as e:
        print(f"FAIL {a.label}: cannot read {e.filename or a.file}: {e}")
        return 2

    failures = []

    def check(ok, what):
        print(f"{'PASS' if ok else 'FAIL'} {a.label}: {what}")
        if not ok:
            failures.append(what)

    check(len(records) == a.pairs, f"{len(records)} records (want {a.pairs})")
    worst_equivariant = 0.0
    for r in records:
        name = f"{r.get('opt')} {r.get('twin')} init {r.get('init_seed')} seed {r.get('twin_seed')}"
        if (r.get("status") != "ok" or r.get("dtype") != a.dtype
                or not str(r.get("device", "")).startswith(a.device)):
            check(False, f"{name}: status {r.get('status')}, dtype "
                         f"{r.get('dtype')}, device {r.get('device')}")
            continue
        curve = {p["step"]: p for p in r["curve"]}
        if r["twin"] == "identity":
            values = [p[k] for p in r["curve"]
                      for k in ("logit_drift", "qk_drift_mean", "qk_drift_max")]
            values += r["qk_drift_per_head"]
            nonzero = [v for v in values if v != 0]
            check(not nonzero, f"{name}: exactly 0 at all {len(r['curve'])} "
                               f"checkpoints" + (f" (found {nonzero[0]!r})" if nonzero else ""))
        elif r["twin"] == "gauge" and r["opt"] in EQUIVARIANT:
            d = [curve[s]["logit_drift"] for s in (0, 1) if s in curve]
            ok = len(d) == 2 and all(v is not None and v <= a.tol for v in d)
            worst_equivariant = max([worst_equivariant] +
                                    [v for v in d if v is not None])
            check(ok, f"{name}: logit drift at steps 0, 1 = {d} (<= {a.tol:g})")
        elif r["twin"] == "gauge" and r["opt"] == "adam":
            d = curve.get(1, {}).get("logit_drift")
            check(d is not None and d >= ADAM_STEP1_MIN,
                  f"{name}: step-1 logit drift {d} (>= {ADAM_STEP1_MIN:g}: "
                  f"Adam sees the basis)")
    if refs is not None:
        compare_with_cpu(records, refs, a, check)
    verdict = "PASSED" if not failures else f"FAILED ({len(failures)} checks)"
    print(f"{verdict} {a.label}: {len(records)} records, worst equivariant "
          f"step-0/1 drift {worst_equivariant:.3g}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
