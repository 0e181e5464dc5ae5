#!/usr/bin/env python3
"""How long the rest of an `lctx eval` run will take.

Reads result files (JSONL of `lctx eval`), takes the median wall time per
(method, length) of the rows without error, and for a planned run (methods x
tasks x lengths with samples per length) counts the combinations not yet in
the first file and estimates their time. A length a method has no rows at is
extrapolated as the report's "est." cells do: linearly for the methods
whose work per input token does not grow with the input (REFORM, ILRe and
the recurrent eviction baselines read it chunk by chunk into a cache of
fixed size), from the nearest measured length; along the power law through
the two nearest measured lengths for the others (exponent clamped to
[1, 2]); the oracle
costs the same at every length, and truncation past its largest measured
length what it cost there (both read a fixed number of tokens). Rows of older
files (given after the first) only lend their times, not their results.
Times come from the rows of one backend (--backend, default cpu; a row
without the field ran on the CPU), so rows run on a GPU do not price the
CPU's work or the other way round; every row counts as done. The rows
come from several machines, some twice as fast as others: --cpu TEXT prices
only with the rows whose `cpu` names TEXT, and the footer says which CPUs
the priced rows ran on.

`lctx eval` runs the RefreshKV rows of a sample on FULL's session, after
FULL, when FULL's row is still to run too (on models without sliding-window
layers; its rows say "prefill_shared_with"). Such a RefreshKV row then costs
only its question and answer: it is priced with the median of that part of
its rows (the wall time less the load, sample and prefill times).
--no-shared-prefill prices every row as a run of its own (Gemma 3).

  python3 bench/eval_plan.py docs/results/eval-scale-smollm2.jsonl docs/results/eval-smollm2.jsonl \\
      --methods oracle,reform,ilre --tasks niah_single,vt --lengths 8k:5,32k:5,128k:3
"""
import argparse
import collections
import math
import statistics
import sys

import eval_paired
from eval_paired import label
from eval_progress import parse_lengths


def prefill_s(j):
    """The seconds of a row before its question: what a shared prefill saves."""
    if isinstance(j.get("shared_s"), (int, float)):
        return j["shared_s"]
    t = j.get("timings_s") or {}
    return sum(t.get(k, 0.0) for k in ("load", "generate", "tokenize", "feed", "build_index"))


def cpu_matches(j, cpu):
    """Whether a row ran on the CPU named by `cpu` (a part of its `cpu` field, any case); None: any."""
    return cpu is None or cpu.lower() in str(j.get("cpu", "")).lower()


def times(files, backend="cpu", cores=None, cpu=None, seen=None):
    """Median time per (method, length), and the median share of it that is
    not the prefill (the question and answer). The time is the rows' wall
    time; with `cores`, their CPU seconds divided by the cores where the
    (method, length) has rows that recorded them (cpu_s): what a run alone
    on that many cores takes at best, whatever else shared the machine.
    With `cpu`, only rows that ran on that CPU count; `seen`, a Counter,
    gets the number of priced rows per CPU."""
    t, cpu_t, own = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(list)
    for rows in files:
        for (m, _, L, _, _), j in rows.items():
            if j.get("backend", "cpu") != backend or not cpu_matches(j, cpu):
                continue
            if not j.get("error") and isinstance(j.get("wall_s"), (int, float)):
                t[(m, L)].append(j["wall_s"])
                if seen is not None:
                    seen[j.get("cpu") or "unrecorded"] += 1
                if cores and isinstance(j.get("cpu_s"), (int, float)):
                    cpu_t[(m, L)].append(j["cpu_s"] / cores)
                if j["wall_s"] > 0:
                    own[(m, L)].append(max(0.0, j["wall_s"] - prefill_s(j)) / j["wall_s"])
    t.update(cpu_t)
    return ({k: statistics.median(v) for k, v in t.items()}, {k: statistics.median(v) for k, v in own.items()})


def own_share(own, method, L):
    """The share of a row's time after its prefill, at L or the nearest measured length."""
    pts = sorted((abs(math.log(l / L)), s) for (m, l), s in own.items() if m == method)
    return pts[0][1] if pts else 1.0


def shares_prefill(method):
    return method == "refreshkv" or method.startswith("refreshkv:")


# Methods that read the input chunk by chunk into a cache of fixed size: the
# same work per input token at any length (the report's cost_grows_linearly).
LINEAR = {"reform", "ilre", "streaming", "h2o", "tova", "snapkv", "infinipot", "infllm"}


def grows_linearly(method):
    return method.split(":")[0].split("+")[0] in LINEAR


# Methods whose cost at an unmeasured length is another's: RefreshKV prefills
# with full attention, as FULL does.
COST_LIKE = {"refreshkv": "full"}


def estimate(med, method, L):
    if (method, L) in med:
        return med[(method, L)], False
    if method == "oracle":   # the oracle's window is the same at every length
        own = [s for (m, _), s in med.items() if m == "oracle"]
        return (statistics.median(own), True) if own else (None, True)
    if method.split(":")[0] == "truncate":
        # Truncation keeps the same tokens at every length past its budget, so past its largest
        # measured length it costs what it cost there (making and tokenizing the input grow with
        # the length, but take seconds).
        own = sorted((l, s) for (m, l), s in med.items() if m == method)
        if own and L > own[-1][0]:
            return own[-1][1], True
    if method in COST_LIKE and (COST_LIKE[method], L) in med:
        return med[(COST_LIKE[method], L)], True
    pts = sorted((l, s) for (m, l), s in med.items() if m == method)
    if not pts:
        return None, True
    if len(pts) == 1 or grows_linearly(method):
        # linear from the nearest measured length (from one point: a lower bound for the others)
        l0, t0 = min(pts, key=lambda p: (abs(math.log(p[0] / L)), -p[0]))   # a tie: the longer run
        return t0 * L / l0, True
    below = [p for p in pts if p[0] < L]
    (l1, t1), (l2, t2) = (below[-2:] if len(below) >= 2 else pts[:2])
    b = min(2.0, max(1.0, math.log(t2 / t1) / math.log(l2 / l1)))
    return t2 * (L / l2) ** b, True


Cell = collections.namedtuple("Cell", "length todo seconds estimated n_shared shared_seconds hours")


def price(done, med, own, method, methods, tasks, plan, seed, no_shared_prefill=False):
    """One Cell per (length, samples) of `plan`: the rows of `method` x `tasks` not in `done`, the
    time of one (None: no row to price it with), and their hours (0 without a time). `methods` is
    the whole grid's: a RefreshKV row runs on FULL's prefill when FULL's row is missing too."""
    cells = []
    for L, n in plan:
        missing = [(t, i) for t in tasks for i in range(n) if (method, t, L, i, seed) not in done]
        t, est = estimate(med, method, L)
        if t is None:
            cells.append(Cell(L, len(missing), None, est, 0, None, 0.0))
            continue
        n_shared = 0
        if shares_prefill(method) and "full" in methods and not no_shared_prefill:
            n_shared = sum(1 for tk, i in missing if ("full", tk, L, i, seed) not in done)
        t_shared = t * own_share(own, method, L)
        h = ((len(missing) - n_shared) * t + n_shared * t_shared) / 3600
        cells.append(Cell(L, len(missing), t, est, n_shared, t_shared, h))
    return cells


def report(a):
    """Print the table of what is left of the plan `a` (the parsed options) and its hours."""
    plan = parse_lengths(a.lengths, "--lengths")
    files = [eval_paired.load(p) for p in a.results]
    seen = collections.Counter()
    med, own = times(files, a.backend, a.cores, a.cpu, seen)
    done = files[0]
    methods, tasks = a.methods.split(","), a.tasks.split(",")
    total = 0.0
    print("| method | " + " | ".join(label(L) for L, _ in plan) + " | hours |")
    print("|---|" + "---:|" * (len(plan) + 1))
    per_len = collections.Counter()
    for m in methods:
        cells, hours = [], 0.0
        for c in price(done, med, own, m, methods, tasks, plan, a.seed, a.no_shared_prefill):
            if c.seconds is None:
                cells.append(f"{c.todo} rows, no time")
                continue
            hours += c.hours
            per_len[c.length] += c.hours
            shared_txt = f" ({c.n_shared} on FULL's prefill, {c.shared_seconds:.0f} s)" if c.n_shared else ""
            cells.append(f"{c.todo} x {c.seconds:.0f} s{'*' if c.estimated else ''}{shared_txt} = {c.hours:.1f} h")
        total += hours
        print(f"| {m} | " + " | ".join(cells) + f" | {hours:.1f} |")
    print("| **all** | " + " | ".join(f"{per_len[L]:.1f} h" for L, _ in plan) + f" | **{total:.1f}** |")
    print("\n*: extrapolated (no row of the method at that length). Times are medians per row of the given files' "
          f"{a.backend} rows" + (f", from CPU seconds / {a.cores} where rows recorded them." if a.cores else "."))
    print("Priced from rows that ran on: " + ("; ".join(f"{c} ({n})" for c, n in seen.most_common()) or "none") +
          (f" (only CPUs naming '{a.cpu}')." if a.cpu else "."))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="the run's results file, then older files lending their times")
    ap.add_argument("--methods", required=True)
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--lengths", required=True, help="LEN:SAMPLES,... e.g. 8k:5,32k:5,128k:3")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--backend", default="cpu", help="price with the rows of this backend (default cpu)")
    ap.add_argument("--no-shared-prefill", action="store_true",
                    help="price RefreshKV rows as runs of their own (lctx eval --no-share-prefill)")
    ap.add_argument("--cores", type=int, default=None,
                    help="price from the rows' CPU seconds divided by this many cores where they recorded them "
                         "(cpu_s), not from their wall time, which grows when other runs share the machine")
    ap.add_argument("--cpu", default=None,
                    help="price only with the rows that ran on this CPU (a part of their `cpu` field, any case)")
    a = ap.parse_args()
    try:
        return report(a)
    except eval_paired.Error as e:
        print(f"eval_plan: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
