#!/usr/bin/env python3
"""The checks scripts/gpu-check.sh applies to one results file.

    gpu-check-records.py FILE LABEL --device D --dtype T --pairs N [--tol X]

For every record: status "ok", the device and dtype asked for, and
- an identity twin (A_h = I) is exactly 0 at every checkpoint: logit drift,
  mean and max QK drift, and the final per-head QK drift;
- a gauge twin of a gauge-equivariant optimizer (sgd, scalar-adam, muon)
  has a logit drift <= tol at steps 0 and 1: rounding only, not training;
- a gauge twin of Adam has a step-1 logit drift >= 1e-6, so a broken
  measurement that reports 0 everywhere cannot pass the two checks above.
The file must hold exactly N records. Prints one line per check and a
verdict; exit 0 when all pass, 1 when one fails, 2 on bad input.
"""
import argparse
import json
import sys

EQUIVARIANT = {"sgd", "scalar-adam", "muon"}
ADAM_STEP1_MIN = 1e-6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("label")
    ap.add_argument("--device", required=True)
    ap.add_argument("--dtype", required=True)
    ap.add_argument("--pairs", type=int, required=True)
    ap.add_argument("--tol", type=float, default=1e-13)
    a = ap.parse_args()
    try:
        with open(a.file, encoding="utf-8") as f:
            records = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError) as e:
        print(f"FAIL {a.label}: cannot read {a.file}: {e}")
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
    verdict = "PASSED" if not failures else f"FAILED ({len(failures)} checks)"
    print(f"{verdict} {a.label}: {len(records)} records, worst equivariant "
          f"step-0/1 drift {worst_equivariant:.3g}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
