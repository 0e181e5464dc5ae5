#!/usr/bin/env python3
"""How often each method's answers match a pattern, per length.

A failure mode is easier to pin on the model or on a method when one can
count it everywhere: Gemma 3 270M, for one, sometimes answers a number
question with a run of "1000...". This counts, for each method and length,
the scored rows whose answer matches --pattern (a Python regular
expression, searched anywhere in the answer), and how many of those rows
had every needle token gathered (recall 1.0, where the row records a
recall). A cell reads "k/n (g)": k matching rows of n, g of the k with
recall 1.0.

  python3 bench/eval_answers.py docs/results/eval-scale-gemma3.jsonl \\
      --pattern '[0-9]{20,}' --tasks niah_multikey,niah_multivalue,niah_multiquery \\
      --methods oracle,full,reform,ilre

--lengths restricts the columns (default: every length with rows). With
--paired a length counts only the (task, sample, seed) keys where every
listed method has a scored row, so the methods of a column are counted on
the same inputs. Markdown to stdout, or with --replace-in FILE --marker
NAME between the lines `<!-- NAME begin -->` and `<!-- NAME end -->` of
FILE (as bench/eval_summary.py writes). Standard library only.
"""
import argparse
import re
import sys

import eval_paired
from eval_paired import label
from eval_summary import add_output_options, check_output_options, display, write_table


def count(rows, pattern, methods, lengths=None, tasks=None, paired=False):
    """{length: {method: (matching, scored, matching with recall 1.0)}}; lengths without rows are left out."""
    scored = {}
    for (m, t, L, i, s), r in rows.items():
        if m not in methods or (tasks and t not in tasks) or (lengths and L not in lengths):
            continue
        if eval_paired.is_error(r) or not eval_paired.has_score(r):
            continue
        scored.setdefault(L, {}).setdefault(m, {})[(t, i, s)] = r
    out = {}
    for L in sorted(scored):
        by_method = scored[L]
        if paired:
            if any(m not in by_method for m in methods):
                continue
            common = set.intersection(*(set(by_method[m]) for m in methods))
            if not common:
                continue
            by_method = {m: {k: r for k, r in by_method[m].items() if k in common} for m in methods}
        out[L] = {}
        for m, mine in by_method.items():
            hits = [r for r in mine.values() if isinstance(r.get("answer"), str) and pattern.search(r["answer"])]
            gathered = sum(1 for r in hits if r.get("recall") == 1.0)
            out[L][m] = (len(hits), len(mine), gathered)
    return out


def table(rows, counts, methods):
    Ls = sorted(counts)
    lines = ["| method | " + " | ".join(label(L) for L in Ls) + " |", "|---|" + "---:|" * len(Ls)]
    for m in methods:
        cells = []
        for L in Ls:
            c = counts[L].get(m)
            cells.append(f"{c[0]}/{c[1]} ({c[2]})" if c else "-")
        lines.append(f"| {display(m, rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="result file of lctx eval (JSONL)")
    p.add_argument("--pattern", required=True, help="Python regular expression searched in each answer")
    p.add_argument("--methods", required=True, help="comma-separated methods, in the order of the table's rows")
    p.add_argument("--tasks", help="comma-separated tasks (default: all)")
    p.add_argument("--lengths", help="comma-separated lengths, e.g. 8k,32k,1m (default: all)")
    p.add_argument("--paired", action="store_true",
                   help="count only the keys where every method of a length has a scored row")
    add_output_options(p)
    a = p.parse_args(argv)
    try:
        check_output_options(a)
        try:
            pattern = re.compile(a.pattern)
        except re.error as e:
            raise eval_paired.Error(f"bad --pattern {a.pattern!r}: {e}")
        methods = [m for m in a.methods.split(",") if m]
        if not methods or len(set(methods)) != len(methods):
            raise eval_paired.Error(f"--methods {a.methods!r}: name each method once")
        tasks = set(t for t in (a.tasks or "").split(",") if t) or None
        lengths = set(eval_paired.parse_length(x) for x in a.lengths.split(",")) if a.lengths else None
        rows = eval_paired.load(a.file)
        counts = count(rows, pattern, methods, lengths, tasks, a.paired)
        if not counts:
            raise eval_paired.Error("no scored rows of those methods" + (" on shared keys" if a.paired else "")
                                    + " at those lengths and tasks")
        write_table(table(rows, counts, methods), a)
    except eval_paired.Error as e:
        print(f"eval_answers: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
