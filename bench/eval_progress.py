#!/usr/bin/env python3
"""What an evaluation plan has done so far: rows done per method and length.

Reads one result file of `lctx eval` (JSONL) and one or more planned grids
(--grid METHODS TASKS LENGTHS, as bench/eval_plan.py takes them: LENGTHS is
LEN:SAMPLES,... and samples are numbered from 0). Prints one table: methods
by rows, lengths by columns. A cell is "done/wanted" for the (task, sample)
combinations of the grids, "complete" added when none is missing; a cell
begun but not complete adds the rows done per sample, e.g. "22/30 (10, 10,
2)". "-": the method is not planned at that length. A row counts as done
when the file has it, as `lctx eval` counts it when it resumes (a row that
timed out too: the footer says how many). Rows outside the grids are not
counted.

  python3 bench/eval_progress.py docs/results/eval-scale-smollm2.jsonl \\
      --grid oracle,reform niah_single,vt 8k:5,128k:3

The table goes to stdout, or with --replace-in FILE --marker NAME between
the marker lines of FILE (as bench/eval_summary.py writes). Standard library
only.
"""
import argparse
import sys

import eval_paired
from eval_paired import label, parse_length
from eval_summary import add_output_options, check_output_options, display, write_table


def parse_grid(methods, tasks, lengths):
    """('a,b', 't1,t2', '8k:5,128k:3') -> (['a', 'b'], ['t1', 't2'], [(8192, 5), (131072, 3)])."""
    ms = [m.strip() for m in methods.split(",") if m.strip()]
    ts = [t.strip() for t in tasks.split(",") if t.strip()]
    ls = parse_lengths(lengths, "--grid lengths")
    if not ms or not ts:
        raise eval_paired.Error(f"bad --grid {methods!r} {tasks!r}: no methods or no tasks")
    return ms, ts, ls


def parse_lengths(lengths, option):
    """'8k:5,128k:3' -> [(8192, 5), (131072, 3)]; anything else is an error that names `option`."""
    ls = []
    for x in lengths.split(","):
        length, _, n = x.strip().partition(":")
        try:
            L, samples = parse_length(length), int(n)
        except (ValueError, eval_paired.Error):
            L, samples = 0, 0
        if L < 1 or samples < 1:
            raise eval_paired.Error(f"bad {option} {lengths!r} (use LEN:SAMPLES,..., e.g. 8k:5,128k:3)")
        ls.append((L, samples))
    return ls


def add_grid_option(p):
    """--grid METHODS TASKS LENGTHS, repeatable and required (parse each with parse_grid)."""
    p.add_argument("--grid", nargs=3, action="append", required=True, metavar=("METHODS", "TASKS", "LENGTHS"),
                   help="a planned grid: methods, tasks, LEN:SAMPLES,...; repeat for more grids")


def wanted(grids):
    """{(method, length): {sample: [tasks]}} over the grids: each grid wants its own tasks on its own
    samples, so two grids that share a method and length add their (task, sample) pairs, no more."""
    want = {}
    for ms, ts, ls in grids:
        for m in ms:
            for L, n in ls:
                per_sample = want.setdefault((m, L), {})
                for i in range(n):
                    tasks = per_sample.setdefault(i, [])
                    tasks += [t for t in ts if t not in tasks]
    return want


def progress(rows, grids, seed=42):
    """{(method, length): [(done, wanted) per sample]} and the number of rows done with an error."""
    cells, errors = {}, 0
    for (m, L), per_sample in wanted(grids).items():
        cells[(m, L)] = []
        for i in sorted(per_sample):
            have = [rows[(m, t, L, i, seed)] for t in per_sample[i] if (m, t, L, i, seed) in rows]
            errors += sum(1 for j in have if j.get("error"))
            cells[(m, L)].append((len(have), len(per_sample[i])))
    return cells, errors


def cell_text(per_sample):
    done, want = sum(d for d, _ in per_sample), sum(w for _, w in per_sample)
    if done == want:
        return f"{done}/{want} complete"
    if done == 0 or len(per_sample) == 1:
        return f"{done}/{want}"
    return f"{done}/{want} (" + ", ".join(str(d) for d, _ in per_sample) + ")"


def table(rows, grids, seed=42):
    cells, errors = progress(rows, grids, seed)
    methods, lengths = [], []
    for ms, _, ls in grids:
        methods += [m for m in ms if m not in methods]
        lengths += [L for L, _ in ls if L not in lengths]
    lengths.sort()
    lines = ["| method | " + " | ".join(label(L) for L in lengths) + " |", "|---|" + "---:|" * len(lengths)]
    for m in methods:
        row = [cell_text(cells[(m, L)]) if (m, L) in cells else "-" for L in lengths]
        lines.append(f"| {display(m, rows)} | " + " | ".join(row) + " |")
    done = sum(d for c in cells.values() for d, _ in c)
    want = sum(w for c in cells.values() for _, w in c)
    lines.append("")
    lines.append(f"{done} of {want} planned rows done" +
                 (f"; {errors} of them ended with an error (a time-out), counted as done as `lctx eval` does."
                  if errors else "."))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="result file of lctx eval (JSONL)")
    add_grid_option(p)
    p.add_argument("--seed", type=int, default=42, help="the run's seed (default 42, lctx eval's)")
    add_output_options(p)
    a = p.parse_args(argv)
    try:
        check_output_options(a)
        grids = [parse_grid(*g) for g in a.grid]
        write_table(table(eval_paired.load(a.file), grids, a.seed), a)
    except eval_paired.Error as e:
        print(f"eval_progress: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
