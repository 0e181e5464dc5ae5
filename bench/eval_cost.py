#!/usr/bin/env python3
"""What is left of an evaluation plan and what it costs, under several pricings.

Reads the run's result file of `lctx eval` (JSONL), then older files that
lend their times only (as bench/eval_plan.py), the planned grids (--grid
METHODS TASKS LENGTHS, as bench/eval_progress.py) and one or more pricings
(--price LABEL=CPU: price with the rows whose `cpu` field names CPU, as
eval_plan.py --cpu; an empty CPU prices with every CPU's rows). Prints one
table: a row per grid and length with the rows left and their hours under
each pricing, then the totals. The hours are eval_plan.py's, summed: the
same medians, extrapolations and RefreshKV-on-FULL's-prefill rule, so a
grid's row here equals the "all" line of `eval_plan.py` on that grid.
Each grid counts its rows on its own, as eval_plan.py does: grids that share
a (method, task, length, sample) count that row in each (the plan's do not).

  python3 bench/eval_cost.py docs/results/eval-scale-gemma3.jsonl --cores 2 \\
      --grid oracle,reform niah_single,vt 8k:5,128k:3 --price "every CPU=" --price "EPYC=family 25"

The table goes to stdout, or with --replace-in FILE --marker NAME between
the marker lines of FILE (as bench/eval_summary.py writes). Standard library
only.
"""
import argparse
import collections
import sys

import eval_paired
from eval_paired import label
from eval_plan import price, times
from eval_progress import add_grid_option, parse_grid
from eval_summary import add_output_options, check_output_options, display, write_table


def parse_price(text):
    """'LABEL=CPU' -> ('LABEL', 'CPU' or None for every CPU)."""
    name, eq, cpu = text.partition("=")
    if not eq or not name.strip():
        raise eval_paired.Error(f"bad --price {text!r} (use LABEL=CPU, e.g. 'EPYC=family 25'; "
                                "an empty CPU prices with every CPU's rows)")
    return name.strip(), (cpu.strip() or None)


def methods_text(ms, rows):
    names = [display(m, rows) for m in ms]
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} methods ({names[0]} ... {names[-1]})"


def cost(files, grids, pricings, cores=None, backend="cpu", seed=42, no_shared_prefill=False):
    """For each grid and length: (methods, tasks, length, samples, rows left, [(hours, unpriced rows)
    per pricing]), and per pricing the rows each CPU lent ({cpu: rows})."""
    done = files[0]
    priced, seen = [], []
    for _, cpu in pricings:
        counts = collections.Counter()
        priced.append(times(files, backend, cores, cpu, counts))
        seen.append(counts)
    out = []
    for ms, ts, ls in grids:
        for L, n in ls:
            left = sum(1 for m in ms for t in ts for i in range(n) if (m, t, L, i, seed) not in done)
            per_pricing = []
            for med, own in priced:
                cells = [price(done, med, own, m, ms, ts, [(L, n)], seed, no_shared_prefill)[0] for m in ms]
                per_pricing.append((sum(c.hours for c in cells), sum(c.todo for c in cells if c.seconds is None)))
            out.append((ms, ts, L, n, left, per_pricing))
    return out, seen


def hours_text(hours, unpriced):
    return f"{hours:.1f} h" + (f" + {unpriced} row{'s' if unpriced > 1 else ''} without a time" if unpriced else "")


def table(files, grids, pricings, cores=None, backend="cpu", seed=42, no_shared_prefill=False):
    rows = files[0]
    cells, seen = cost(files, grids, pricings, cores, backend, seed, no_shared_prefill)
    lines = ["| length | methods | tasks x samples | rows left | " + " | ".join(n for n, _ in pricings) + " |",
             "|---|---|---:|---:|" + "---:|" * len(pricings)]
    totals = [[0.0, 0] for _ in pricings]
    left_all = 0
    for ms, ts, L, n, left, per_pricing in cells:
        lines.append(f"| {label(L)} | {methods_text(ms, rows)} | {len(ts)} x {n} | {left} | " +
                     " | ".join(hours_text(h, u) for h, u in per_pricing) + " |")
        left_all += left
        for t, (h, u) in zip(totals, per_pricing):
            t[0] += h
            t[1] += u
    lines.append(f"| **all** | | | **{left_all}** | " +
                 " | ".join(f"**{hours_text(h, u)}**" for h, u in totals) + " |")
    lines.append("")
    basis = (f"the rows' CPU seconds over {cores} cores where they recorded them, else their wall time"
             if cores else "the rows' wall time")
    lines.append(f"Hours: rows left x the median time of a row of the method and length ({basis}; "
                 "extrapolated where the method has no row at that length), as `bench/eval_plan.py` prices them.")
    for (name, cpu), counts in zip(pricings, seen):
        lent = "; ".join(f"{c} ({k})" for c, k in counts.most_common()) or "none"
        lines.append("")
        lines.append(f"Column \"{name}\"" + (f" (CPUs naming '{cpu}')" if cpu else "") + f", rows priced from: {lent}.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="the run's results file, then older files lending their times")
    add_grid_option(p)
    p.add_argument("--price", action="append", required=True, metavar="LABEL=CPU",
                   help="a column: price with the rows whose cpu names CPU (empty: every CPU); repeatable")
    p.add_argument("--cores", type=int, default=None,
                   help="price from the rows' CPU seconds over this many cores where they recorded them")
    p.add_argument("--backend", default="cpu", help="price with the rows of this backend (default cpu)")
    p.add_argument("--no-shared-prefill", action="store_true",
                   help="price RefreshKV rows as runs of their own (lctx eval --no-share-prefill)")
    p.add_argument("--seed", type=int, default=42, help="the run's seed (default 42, lctx eval's)")
    add_output_options(p)
    a = p.parse_args(argv)
    try:
        check_output_options(a)
        if a.cores is not None and a.cores < 1:
            raise eval_paired.Error(f"bad --cores {a.cores} (use 1 or more)")
        grids = [parse_grid(*g) for g in a.grid]
        pricings = [parse_price(x) for x in a.price]
        files = [eval_paired.load(path) for path in a.results]
        write_table(table(files, grids, pricings, a.cores, a.backend, a.seed, a.no_shared_prefill), a)
    except eval_paired.Error as e:
        print(f"eval_cost: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
