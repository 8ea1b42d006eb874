#!/usr/bin/env python3
"""Sets twins' records beside the paper's published Table-9 records.

    compare-paper-records.py RESULTS.jsonl PAPER [--opt adam] [--digits 8]

RESULTS is a twin-run results file (e.g. of `twin-run table table9-mod47`);
PAPER is either one of the paper's record files
(`experiments/nibi_results/attn_*.jsonl` of idevender/loss-basis-adam: one
JSON object a line, curves as [step, logit drift, mean QK drift, max QK
drift]) or a JSON file of the same records under "records" (as
tests/data/paper_attn_mod_2L64_adam.json). Each paper record of the chosen
optimizer is matched to the twins record of the same twin kind, init seed,
twin seed and noise scale; every checkpoint both have is compared in its
three figures. Prints the worst relative difference per pair and overall,
and exits 1 if it exceeds 10^-digits (a record missing on either side is a
failure too). Exact zeros must be exact zeros.
"""
import argparse
import json
import sys

# The paper's optimizer names and twins'.
OPT_NAMES = {"adam": "adam", "sgd": "sgd", "adam_p0rms": "scalar-adam",
             "muon": "muon"}


def load_paper(path, opt):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        records = json.loads(text)["records"]
    except (json.JSONDecodeError, KeyError, TypeError):
        records = [json.loads(line) for line in text.splitlines()
                   if line.strip()]
    out = []
    for r in records:
        if r.get("kind") == "meta" or r.get("opt", opt) != opt:
            continue
        out.append(r)
    return out


def pair_key(twin, init_seed, twin_seed, noise_scale):
    if twin == "identity":
        return (twin, int(init_seed), None, None)
    if twin == "gauge":
        return (twin, int(init_seed), int(twin_seed), None)
    return (twin, int(init_seed), int(twin_seed), float(noise_scale))


def relative(a, b):
    if a == b:
        return 0.0
    if a == 0 or b == 0:
        return float("inf")
    return abs(a - b) / abs(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results")
    ap.add_argument("paper")
    ap.add_argument("--opt", default="adam", help="the paper's name")
    ap.add_argument("--digits", type=float, default=8)
    a = ap.parse_args()
    try:
        paper = load_paper(a.paper, a.opt)
        ours = {}
        with open(a.results, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                if r.get("opt") != OPT_NAMES.get(a.opt, a.opt):
                    continue
                ours[pair_key(r["twin"], r["init_seed"], r.get("twin_seed"),
                              r.get("noise_scale"))] = r
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"compare-paper-records: {e}")
    if not paper:
        sys.exit(f"compare-paper-records: no '{a.opt}' records in {a.paper}")
    worst, failed = 0.0, False
    for p in paper:
        key = pair_key(p["twin"], p["init_seed"], p["twin_seed"],
                       p["noise_scale"])
        r = ours.get(key)
        if r is None:
            print(f"missing in {a.results}: {key}")
            failed = True
            continue
        mine = {c["step"]: c for c in r["curve"]}
        pair_worst, where, compared = 0.0, "", 0
        for step, drift, qk_mean, qk_max in p["curve"]:
            c = mine.get(step)
            if c is None:
                continue
            compared += 1
            for name, theirs, value in (("logit", drift, c["logit_drift"]),
                                        ("qk mean", qk_mean, c["qk_drift_mean"]),
                                        ("qk max", qk_max, c["qk_drift_max"])):
                # Step 0 is float64 rounding of the rotation (~1e-16), not a
                # figure of the protocol: report it, do not judge it.
                d = relative(value, theirs)
                if step > 0 and d > pair_worst:
                    pair_worst, where = d, f"step {step} {name}: {value!r} vs {theirs!r}"
        print(f"{key}: {compared} checkpoints, worst relative {pair_worst:.2e}"
              + (f" ({where})" if where else ""))
        if compared == 0:
            failed = True
        worst = max(worst, pair_worst)
    limit = 10.0 ** -a.digits
    print(f"worst relative difference past step 0: {worst:.2e} "
          f"(limit {limit:.0e})")
    sys.exit(1 if failed or worst > limit else 0)


if __name__ == "__main__":
    main()
