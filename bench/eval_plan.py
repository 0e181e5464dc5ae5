#!/usr/bin/env python3
"""How long the rest of an `lctx eval` run will take.

Reads result files (JSONL of `lctx eval`), takes the median wall time per
(method, length) of the rows without error, and for a planned run (methods x
tasks x lengths with samples per length) counts the combinations not yet in
the first file and estimates their time. A length a method has no rows at is
extrapolated along the power law through its two nearest measured lengths
(exponent clamped to [1, 2], as the report's "est." cells). Rows of older
files (given after the first) only lend their times, not their results.
Times come from the rows of one backend (--backend, default cpu; a row
without the field ran on the CPU), so rows run on a GPU do not price the
CPU's work or the other way round; every row counts as done.

  python3 bench/eval_plan.py docs/results/eval-scale-smollm2.jsonl docs/results/eval-smollm2.jsonl \\
      --methods oracle,reform,ilre --tasks niah_single,vt --lengths 8k:5,32k:5,128k:3
"""
import argparse
import collections
import json
import math
import statistics
import sys


def parse_length(s):
    s = s.strip().lower()
    mult = {"k": 1024, "m": 1024 * 1024}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def label(n):
    return f"{n // (1024 * 1024)}M" if n % (1024 * 1024) == 0 else f"{n // 1024}K" if n % 1024 == 0 else str(n)


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "method" not in j:
                continue
            rows[(j["method"], j["task"], j["length"], j["sample"], j.get("seed", 0))] = j
    return rows


def times(files, backend="cpu"):
    t = collections.defaultdict(list)
    for rows in files:
        for (m, _, L, _, _), j in rows.items():
            if j.get("backend", "cpu") != backend:
                continue
            if not j.get("error") and isinstance(j.get("wall_s"), (int, float)):
                t[(m, L)].append(j["wall_s"])
    return {k: statistics.median(v) for k, v in t.items()}


# Methods whose cost at an unmeasured length is another's: RefreshKV prefills
# with full attention, as FULL does.
COST_LIKE = {"refreshkv": "full"}


def estimate(med, method, L):
    if (method, L) in med:
        return med[(method, L)], False
    if method == "oracle":   # the oracle's window is the same at every length
        own = [s for (m, _), s in med.items() if m == "oracle"]
        return (statistics.median(own), True) if own else (None, True)
    if method in COST_LIKE and (COST_LIKE[method], L) in med:
        return med[(COST_LIKE[method], L)], True
    pts = sorted((l, s) for (m, l), s in med.items() if m == method)
    if not pts:
        return None, True
    if len(pts) == 1:
        return pts[0][1] * L / pts[0][0], True   # linear from one point: a lower bound for quadratic methods
    below = [p for p in pts if p[0] < L]
    (l1, t1), (l2, t2) = (below[-2:] if len(below) >= 2 else pts[:2])
    b = min(2.0, max(1.0, math.log(t2 / t1) / math.log(l2 / l1)))
    return t2 * (L / l2) ** b, True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="the run's results file, then older files lending their times")
    ap.add_argument("--methods", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--lengths", required=True, help="LEN:SAMPLES,... e.g. 8k:5,32k:5,128k:3")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--backend", default="cpu", help="price with the rows of this backend (default cpu)")
    a = ap.parse_args()
    files = [load(p) for p in a.results]
    med = times(files, a.backend)
    done = files[0]
    methods, tasks = a.methods.split(","), a.tasks.split(",")
    plan = [(parse_length(x.split(":")[0]), int(x.split(":")[1])) for x in a.lengths.split(",")]
    total = 0.0
    print("| method | " + " | ".join(label(L) for L, _ in plan) + " | hours |")
    print("|---|" + "---:|" * (len(plan) + 1))
    per_len = collections.Counter()
    for m in methods:
        cells, hours = [], 0.0
        for L, n in plan:
            todo = sum(1 for t in tasks for i in range(n) if (m, t, L, i, a.seed) not in done)
            t, est = estimate(med, m, L)
            if t is None:
                cells.append(f"{todo} rows, no time")
                continue
            h = todo * t / 3600
            hours += h
            per_len[L] += h
            cells.append(f"{todo} x {t:.0f} s{'*' if est else ''} = {h:.1f} h")
        total += hours
        print(f"| {m} | " + " | ".join(cells) + f" | {hours:.1f} |")
    print("| **all** | " + " | ".join(f"{per_len[L]:.1f} h" for L, _ in plan) + f" | **{total:.1f}** |")
    print("\n*: extrapolated (no row of the method at that length). Times are medians per row of the given files' "
          f"{a.backend} rows.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
