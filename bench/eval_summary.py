#!/usr/bin/env python3
"""One table of paired means per model: methods by rows, lengths by columns.

Each column is one length and the methods compared there (--column
8k=oracle,reform,ilre). A cell is the method's mean score (%) on the pairs
of its column, the (task, sample, seed) keys where every method of the
column has a scored row (bench/eval_paired.py), and in brackets its share of
the reference method's mean on the same pairs (--against, default oracle;
"n/a" where the reference scored 0 there). A method that is not in a
column shows "-". A column without a single pair is shown as "no pairs"
and reported on stderr; the table is still written.

  python3 bench/eval_summary.py docs/results/eval-scale-smollm2.jsonl \\
      --column 8k=oracle,reform,ilre --column 1m=oracle,reform,ilre

The table goes to stdout, or with --replace-in FILE --marker NAME between
the lines `<!-- NAME begin -->` and `<!-- NAME end -->` of FILE (the rest
of FILE is kept as it is). --first-values reads the number needles strictly,
as bench/eval_paired.py --first-values does. Standard library only.
"""
import argparse
import sys

import eval_paired
from eval_paired import label

# How the docs name the methods; a method not listed here keeps its row name.
DISPLAY = {
    "reform": "REFORM", "ilre": "ILRe", "reattention": "ReAttention", "refreshkv": "RefreshKV",
    "full": "FULL", "truncate": "truncation", "streaming": "StreamingLLM", "h2o": "H2O", "tova": "TOVA",
    "snapkv": "SnapKV", "infinipot": "InfiniPot", "infllm": "InfLLM",
    "reform:recompute=4096": "REFORM, 4K recompute",
}


def parse_column(spec):
    """'8k=oracle,reform' -> (8192, ['oracle', 'reform'])."""
    length, sep, methods = spec.partition("=")
    ms = [m.strip() for m in methods.split(",") if m.strip()]
    if not sep or not ms:
        raise eval_paired.Error(f"bad --column {spec!r} (use LENGTH=METHOD,METHOD,..., e.g. 8k=oracle,reform)")
    if len(set(ms)) != len(ms):
        raise eval_paired.Error(f"--column {spec!r} lists a method twice")
    return eval_paired.parse_length(length), ms


def display(method, rows):
    if method == "oracle":
        windows = {r.get("oracle_tokens") for k, r in rows.items() if k[0] == "oracle"}
        if len(windows) == 1 and isinstance(next(iter(windows)), int):
            return f"oracle (FULL on a {next(iter(windows)) // 1024}K window)"
        return "oracle"
    return DISPLAY.get(method, method)


def summarise(rows, columns, against="oracle"):
    """[(length, methods, result or None, message)] with result as eval_paired.compare returns it."""
    out = []
    for length, methods in columns:
        ref = against if against in methods else None
        try:
            # The means do not depend on the draws; one keeps the table quick.
            r = eval_paired.compare(rows, length, methods, against=ref, resamples=1)
            out.append((length, methods, r, None))
        except eval_paired.Error as e:
            out.append((length, methods, None, str(e)))
    return out


def table(rows, summary, against="oracle"):
    order = []
    for _, methods, _, _ in summary:
        order += [m for m in methods if m not in order]
    if against in order:   # the reference first: the shares are of it
        order.remove(against)
        order.insert(0, against)
    head = "| method | " + " | ".join(
        f"{label(L)} ({r['n_pairs']} pairs)" if r else f"{label(L)} (no pairs)" for L, _, r, _ in summary) + " |"
    lines = [head, "|---|" + "---:|" * len(summary)]
    for m in order:
        cells = []
        for _, methods, r, _ in summary:
            if r is None or m not in methods:
                cells.append("-")
                continue
            s = r["methods_stats"][m]
            cell = eval_paired._pct(s["mean"])
            if m != against and against in methods:
                share = s["share_of_against"]   # None: the reference scored 0 on these pairs
                cell += f" ({100 * share:.0f}%)" if share is not None else " (n/a)"
            cells.append(cell)
        lines.append(f"| {display(m, rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def replace_between(path, marker, text):
    begin, end = f"<!-- {marker} begin -->", f"<!-- {marker} end -->"
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        raise eval_paired.Error(f"cannot read {path}: {e.strerror or e}")
    at_begin = [i for i, s in enumerate(lines) if s.strip() == begin]
    at_end = [i for i, s in enumerate(lines) if s.strip() == end]
    if len(at_begin) != 1 or len(at_end) != 1 or at_end[0] < at_begin[0]:
        raise eval_paired.Error(f"{path} needs one line '{begin}' and, after it, one line '{end}' "
                                f"(found {len(at_begin)} and {len(at_end)}); nothing written")
    new = lines[:at_begin[0] + 1] + text.rstrip("\n").split("\n") + lines[at_end[0]:]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(new))


def add_output_options(p):
    """--replace-in FILE --marker NAME: where a table goes instead of stdout (write_table)."""
    p.add_argument("--replace-in", metavar="FILE", help="write the table into FILE between the --marker lines")
    p.add_argument("--marker", help="with --replace-in: the name in <!-- NAME begin --> and <!-- NAME end -->")


def check_output_options(a):
    if bool(a.replace_in) != bool(a.marker):
        raise eval_paired.Error("--replace-in and --marker go together")


def write_table(md, a):
    """The table to stdout, or between the markers of --replace-in."""
    if a.replace_in:
        replace_between(a.replace_in, a.marker, md)
    else:
        sys.stdout.write(md)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="result file of lctx eval (JSONL)")
    p.add_argument("--column", action="append", required=True, metavar="LENGTH=METHODS",
                   help="a column: the length and the methods compared there; repeat for more columns")
    p.add_argument("--against", default="oracle", help="the reference of the shares (default oracle)")
    p.add_argument("--first-values", action="store_true",
                   help="score number answers strictly: only the answer's first numbers count (eval_paired.py)")
    add_output_options(p)
    a = p.parse_args(argv)
    try:
        check_output_options(a)
        columns = [parse_column(c) for c in a.column]
        rows = eval_paired.load(a.file)
        if a.first_values:
            rows = eval_paired.rescore_first_values(rows)
        summary = summarise(rows, columns, a.against)
        for L, _, r, msg in summary:
            if r is None:
                print(f"eval_summary: {label(L)}: {msg}", file=sys.stderr)
        write_table(table(rows, summary, a.against), a)
    except eval_paired.Error as e:
        print(f"eval_summary: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
