#!/usr/bin/env python3
"""Checks that the union of some results files (shards) holds exactly the
records of a reference file (one process running the whole table).

    compare_records.py REFERENCE.jsonl SHARD.jsonl...

Every field of every record is compared except the timing fields, which say
how a pair was scheduled rather than what it computed, and `numeric_env`,
which says where (the CPU's model name differs between machines whose
records are bitwise equal; docs/output-format.md). Numbers are compared
as the text the binary wrote (17 significant digits round-trip a double), so
equal means bitwise equal. Records are matched by their content, not by
position: shards interleave the job list. Fields added to the record later
are compared too, with no change here.

Exit 0 and one summary line when the sets are equal; otherwise one line per
difference and exit 1. Bad input (a missing or malformed file) is exit 2.
"""
import json
import sys

TIMING_FIELDS = {"wall_s", "threads", "numeric_env"}


def bad_input(message):
    print(f"compare_records: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    # parse_float=str keeps the digits as written.
                    r = json.loads(line, parse_float=str)
                except json.JSONDecodeError as e:
                    bad_input(f"{path}:{n}: malformed JSON ({e})")
                if not isinstance(r, dict):
                    bad_input(f"{path}:{n}: not a JSON object")
                records.append(r)
    except OSError as e:
        bad_input(f"cannot read {path}: {e.strerror}")
    return records


def canonical(record):
    return json.dumps({k: v for k, v in record.items() if k not in TIMING_FIELDS},
                      sort_keys=True)


def label(record):
    return record.get("key") or json.dumps(
        {k: record[k] for k in ("opt", "twin") if k in record})


def main(argv):
    if len(argv) < 3:
        print("usage: compare_records.py REFERENCE.jsonl SHARD.jsonl...",
              file=sys.stderr)
        return 2
    reference = load(argv[1])
    union = [r for path in argv[2:] for r in load(path)]
    if not reference:
        print(f"compare_records: {argv[1]} holds no records", file=sys.stderr)
        return 1
    want = {}
    for r in reference:
        want.setdefault(canonical(r), []).append(r)
    got = {}
    for r in union:
        got.setdefault(canonical(r), []).append(r)
    bad = 0
    for c, rs in want.items():
        n = len(got.get(c, []))
        if n != len(rs):
            bad += 1
            print(f"compare_records: {label(rs[0])}: {len(rs)} in the reference, "
                  f"{n} identical in the shards")
            # Name the fields that differ from the shard record of the same key.
            for s in union:
                if label(s) == label(rs[0]):
                    diff = sorted(k for k in set(s) | set(rs[0])
                                  if k not in TIMING_FIELDS
                                  and s.get(k) != rs[0].get(k))
                    print(f"  differs in: {', '.join(diff) or '(nothing)'}")
    for c, rs in got.items():
        if c not in want:
            bad += 1
            print(f"compare_records: {label(rs[0])}: in the shards, "
                  f"not in the reference")
    if bad or len(union) != len(reference):
        print(f"compare_records: FAILED: reference {len(reference)} records, "
              f"shards {len(union)}, {bad} mismatched")
        return 1
    fields = sorted(set().union(*reference) - TIMING_FIELDS)
    print(f"compare_records: the {len(union)} shard records equal the "
          f"{len(reference)} reference records in every field but "
          f"{', '.join(sorted(TIMING_FIELDS))} ({len(fields)} fields compared)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
