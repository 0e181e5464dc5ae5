#!/usr/bin/env python3
"""Paired comparison of methods in one `lctx eval` result file, at one length.

A pair is a (task, sample, seed) key at which every listed method has a
scored row (a row without "error", with a numeric score). On those pairs
only, each method's mean score (in %) gets a 95% bootstrap percentile
interval, and each difference of two methods the mean of the per-pair
differences with its interval. One bootstrap draw resamples the pairs with
replacement, and every method is read at the same drawn pairs, so a
difference's interval is that of the paired differences. The draws come
from Python's `random.Random(seed)`: the same file, options and seed give
the same output.

Rows: JSON lines with "method", "task", "length", "sample", "seed" and
"score". Lines with a "kind" key (the run records) and lines that do not
parse (one cut by an interruption) are skipped; a key written twice keeps
its last row, as `lctx eval` does on resume; error rows are counted and left
out. Keys where some method has no scored row are listed as left out.

  python3 bench/eval_paired.py docs/results/eval-scale-smollm2.jsonl --length 1m \\
      --methods oracle,ilre,reform --against oracle

--first-values rescores, more strictly than RULER's string_match_all, the
rows whose expected values are all numbers (the niah tasks with number
needles): string_match_all credits a value found anywhere in the answer, so
an answer that gives a distractor's number first and recites the asked
needle later scores 1. Read strictly, only the answer's first n numbers of
the expected values' lengths count, n being the number of expected values
(a number is a maximal run of digits, so "5976719" inside a run of "1000..."
does not count). Other rows keep their score.

Markdown goes to stdout (or --md FILE); --json prints the same figures as
JSON instead. Standard library only.
"""
import argparse
import json
import math
import random
import re
import sys

class Error(Exception):
    """A problem with the input: reported on stderr, exit status 1."""


def parse_length(s):
    """'8k' -> 8192, '1m' -> 1048576, '131072' -> 131072."""
    t = s.strip().lower()
    mult = {"k": 1024, "m": 1024 * 1024}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    if not digits.isdigit() or int(digits) == 0:
        raise Error(f"bad length {s!r} (use e.g. 8k, 512k, 1m or 131072)")
    return int(digits) * mult


def label(n):
    """The length labels of the plan and the reports: 8192 -> '8K', 1048576 -> '1M', 1000 -> '1000'."""
    return f"{n // (1024 * 1024)}M" if n % (1024 * 1024) == 0 else f"{n // 1024}K" if n % 1024 == 0 else str(n)


def load(path):
    """The rows of a result file: {(method, task, length, sample, seed): row}, the last row of a key winning."""
    rows = {}
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise Error(f"cannot read {path}: {e.strerror or e}")
    with f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if not isinstance(j, dict) or "kind" in j:
                continue
            if not all(k in j for k in ("method", "task", "length", "sample")):
                continue
            rows[(j["method"], j["task"], j["length"], j["sample"], j.get("seed", 0))] = j
    return rows


def is_error(row):
    return bool(row.get("error"))


def has_score(row):
    s = row.get("score")
    return isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s)


def first_values_score(row):
    """The strict score of a string_match_all row with number answers (see --first-values), else None."""
    expected = row.get("expected")
    answer = row.get("answer")
    if row.get("scoring") != "string_match_all" or not isinstance(answer, str) or not isinstance(expected, list):
        return None
    if not expected or not all(isinstance(e, str) and e.isdigit() for e in expected):
        return None
    widths = {len(e) for e in expected}
    first = [v for v in re.findall(r"[0-9]+", answer) if len(v) in widths][:len(expected)]
    return sum(1 for e in expected if e in first) / len(expected)


def rescore_first_values(rows):
    """The rows with the strict score where it applies (the old one kept as score_string_match_all)."""
    out = {}
    for k, r in rows.items():
        s = None if is_error(r) or not has_score(r) else first_values_score(r)
        if s is None:
            out[k] = r
        else:
            out[k] = dict(r, score=s, score_string_match_all=r["score"])
    return out


def percentile(sorted_values, q):
    """The q-quantile (0..1) of sorted values, linear between closest ranks (numpy's default)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    h = (len(sorted_values) - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo])


def mean(values):
    return sum(values) / len(values)


def draws(n, rng, resamples):
    """`resamples` index lists of n pairs drawn with replacement."""
    idx = range(n)
    return [rng.choices(idx, k=n) for _ in range(resamples)]


def resampled_means(values, index_sets):
    """The mean of `values` at each drawn index set."""
    n = len(values)
    return [sum(values[i] for i in ix) / n for ix in index_sets]


def interval(boot, level=0.95):
    """The percentile interval of bootstrap statistics."""
    s = sorted(boot)
    a = (1 - level) / 2
    return percentile(s, a), percentile(s, 1 - a)


def bootstrap_mean_ci(values, rng, resamples=10000, level=0.95):
    """(mean, low, high): the mean of values and its bootstrap percentile interval."""
    if not values:
        raise ValueError("no values")
    boot = resampled_means(values, draws(len(values), rng, resamples))
    return (mean(values),) + interval(boot, level)


def paired(columns, rng, resamples=10000, against=None, level=0.95):
    """Means and paired differences of methods scored on the same pairs.

    columns: {method: [value at pair 0, value at pair 1, ...]}, all of one
    length, in one order of the pairs. Each draw resamples the pairs once
    and reads every method there. Returns {"means": {method: (mean, low,
    high)}, "diffs": [(a, b, mean of a - b, low, high)]}: the differences
    m - against for every other method when `against` is given, otherwise
    later - earlier for every two methods in the order of `columns`."""
    methods = list(columns)
    if not methods:
        raise ValueError("no methods")
    n = len(columns[methods[0]])
    if n == 0 or any(len(columns[m]) != n for m in methods):
        raise ValueError("columns must be non-empty and of equal length")
    if against is not None and against not in columns:
        raise ValueError(f"{against!r} is not one of the methods")
    index_sets = draws(n, rng, resamples)
    boot = {m: resampled_means(columns[m], index_sets) for m in methods}
    means = {m: (mean(columns[m]),) + interval(boot[m], level) for m in methods}
    if against is not None:
        pairs = [(m, against) for m in methods if m != against]
    else:
        pairs = [(methods[j], methods[i]) for i in range(len(methods)) for j in range(i + 1, len(methods))]
    diffs = []
    for a, b in pairs:
        d = mean([x - y for x, y in zip(columns[a], columns[b])])
        lo, hi = interval([x - y for x, y in zip(boot[a], boot[b])], level)
        diffs.append((a, b, d, lo, hi))
    return {"means": means, "diffs": diffs}


def compare(rows, length, methods, tasks=None, against=None, all_diffs=False, seed=0, resamples=10000):
    """The figures of one length, as a dict (the JSON output)."""
    if len(set(methods)) != len(methods):
        raise Error(f"a method is listed twice: {','.join(methods)}")
    if against is not None and against not in methods:
        raise Error(f"--against {against} is not one of --methods")
    at_length = {k: r for k, r in rows.items() if k[2] == length}
    if not at_length:
        have = ", ".join(label(L) for L in sorted({k[2] for k in rows})) or "none"
        raise Error(f"no rows at length {length} ({label(length)}); the file has: {have}")
    if tasks:
        at_length = {k: r for k, r in at_length.items() if k[1] in tasks}
    keys, errors, unscored = {}, {}, {}
    for m in methods:
        mine = {(t, i, s): r for (mm, t, _, i, s), r in at_length.items() if mm == m}
        if not mine:
            have = ", ".join(sorted({k[0] for k in at_length})) or "none"
            raise Error(f"method {m!r} has no rows at {label(length)}"
                        + (f" in tasks {','.join(tasks)}" if tasks else "") + f"; there: {have}")
        errors[m] = sum(1 for r in mine.values() if is_error(r))
        unscored[m] = sum(1 for r in mine.values() if not is_error(r) and not has_score(r))
        keys[m] = {k: r for k, r in mine.items() if not is_error(r) and has_score(r)}
    common = set.intersection(*(set(keys[m]) for m in methods))
    pairs = sorted(common, key=lambda k: (k[0], k[1], str(k[2])))
    left_out = {m: sorted(set(keys[m]) - common, key=lambda k: (k[0], k[1], str(k[2]))) for m in methods}
    if not pairs:
        raise Error(f"no pairs: no (task, sample, seed) key at {label(length)} has a scored row of every method "
                    + "(" + ", ".join(f"{m}: {len(keys[m])}" for m in methods) + " scored rows)")
    columns = {m: [keys[m][k]["score"] for k in pairs] for m in methods}
    rng = random.Random(seed)
    res = paired(columns, rng, resamples, against=None if all_diffs else against)
    out = {
        "length": length, "methods": methods, "tasks": tasks, "against": against,
        "seed": seed, "resamples": resamples, "n_pairs": len(pairs),
        "pairs": [list(k) for k in pairs],
        "error_rows": errors, "unscored_rows": unscored,
        "left_out": {m: [list(k) for k in v] for m, v in left_out.items()},
        "methods_stats": {}, "diffs": [], "per_task": [],
    }
    ref = res["means"][against][0] if against is not None else None
    for m in methods:
        mu, lo, hi = res["means"][m]
        rec = [keys[m][k]["recall"] for k in pairs
               if isinstance(keys[m][k].get("recall"), (int, float)) and not isinstance(keys[m][k].get("recall"), bool)]
        out["methods_stats"][m] = {
            "mean": mu, "low": lo, "high": hi,
            "recall": mean(rec) if rec else None, "n_recall": len(rec),
            "share_of_against": (mu / ref if ref else None) if against is not None else None,
        }
    out["diffs"] = [{"a": a, "b": b, "mean": d, "low": lo, "high": hi} for a, b, d, lo, hi in res["diffs"]]
    for t in sorted({k[0] for k in pairs}, key=lambda t: min(i for i, k in enumerate(pairs) if k[0] == t)):
        ix = [i for i, k in enumerate(pairs) if k[0] == t]
        out["per_task"].append({"task": t, "n": len(ix), "means": {m: mean([columns[m][i] for i in ix]) for m in methods}})
    return out


def _pct(x):
    return f"{100 * x:.1f}"


def _signed(x, fmt):
    s = format(x, fmt)
    if float(s) == 0:
        return format(0.0, fmt)
    return s if s.startswith("-") else "+" + s


def _key(k):
    return f"({k[0]}, {k[1]}, {k[2]})"


def command(path, a):
    cmd = f"python3 bench/eval_paired.py {path} --length {label(a['length']).lower()} --methods {','.join(a['methods'])}"
    if a["tasks"]:
        cmd += f" --tasks {','.join(a['tasks'])}"
    if a["against"]:
        cmd += f" --against {a['against']}"
    if a.get("all_diffs"):
        cmd += " --all-diffs"
    if a.get("first_values") is not None:
        cmd += " --first-values"
    return cmd + f" --seed {a['seed']} --resamples {a['resamples']}"


def markdown(path, r):
    L = r["length"]
    lines = [f"# Paired comparison: `{path}` at {label(L)} ({L} tokens)", ""]
    lines.append(f"{r['n_pairs']} pairs; 95% bootstrap percentile intervals over the pairs, "
                 f"{r['resamples']} resamples, seed {r['seed']}. Remake: `{command(path, r)}`")
    lines.append("")
    if r.get("first_values") is not None:
        lines.append(f"Scored strictly (--first-values): {r['first_values']} rows with number answers count only "
                     "the answer's first numbers, as many as the expected values; the other rows keep "
                     "string_match_all's score.")
        lines.append("")
    lines.append("A pair is a (task, sample, seed) key where every method below has a row without error"
                 + (f" (tasks: {', '.join(r['tasks'])})" if r["tasks"] else "") + ".")
    excl = [f"{m} {n}" for m, n in r["error_rows"].items() if n]
    lines.append(f"Error rows left out: {', '.join(excl) if excl else 'none'}.")
    uns = [f"{m} {n}" for m, n in r["unscored_rows"].items() if n]
    if uns:
        lines.append(f"Rows without a score left out: {', '.join(uns)}.")
    lo_any = {m: v for m, v in r["left_out"].items() if v}
    if lo_any:
        lines.append("Left out for lack of a partner: "
                     + "; ".join(f"{m}: {', '.join(_key(k) for k in v)}" for m, v in lo_any.items()) + ".")
    else:
        lines.append("Left out for lack of a partner: none.")
    lines.append("")
    against = r["against"]
    head = "| method | score % | 95% interval |" + (f" share of {against} |" if against else "") + " recall (rows) |"
    lines += [head, "|---|---:|---|" + ("---:|" if against else "") + "---|"]
    for m in r["methods"]:
        s = r["methods_stats"][m]
        cell = f"| {m} | {_pct(s['mean'])} | [{100 * s['low']:.0f}-{100 * s['high']:.0f}] |"
        if against:
            cell += f" {100 * s['share_of_against']:.0f}% |" if s["share_of_against"] is not None else " - |"
        cell += f" {s['recall']:.2f} ({s['n_recall']}) |" if s["recall"] is not None else " - |"
        lines.append(cell)
    if r["diffs"]:
        lines += ["", "Paired differences (mean of the per-pair differences, points):", "",
                  "| difference | mean | 95% interval |", "|---|---:|---|"]
        for d in r["diffs"]:
            lines.append(f"| {d['a']} - {d['b']} | {_signed(100 * d['mean'], '.1f')} | "
                         f"[{_signed(100 * d['low'], '.0f')} to {_signed(100 * d['high'], '.0f')}] |")
    lines += ["", "Per task (mean score %):", "",
              "| task | pairs | " + " | ".join(r["methods"]) + " |",
              "|---|---:|" + "---:|" * len(r["methods"])]
    for t in r["per_task"]:
        lines.append(f"| {t['task']} | {t['n']} | " + " | ".join(_pct(t["means"][m]) for m in r["methods"]) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="result file of lctx eval (JSONL)")
    p.add_argument("--length", required=True, help="prompt length: 8k, 512k, 1m, 131072")
    p.add_argument("--methods", required=True, help="comma-separated methods, as in the rows")
    p.add_argument("--tasks", help="comma-separated tasks to keep (default: all)")
    p.add_argument("--against", help="reference method: differences against it, and each mean as its share of it")
    p.add_argument("--all-diffs", action="store_true", help="with --against: every two methods' difference anyway")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap draws (default 10000)")
    p.add_argument("--first-values", action="store_true",
                   help="score number answers strictly: only the answer's first numbers count (see above)")
    p.add_argument("--md", metavar="FILE", help="write the markdown here instead of stdout")
    p.add_argument("--json", action="store_true", help="print the figures as JSON to stdout")
    a = p.parse_args(argv)
    try:
        if a.resamples < 1:
            raise Error("--resamples must be at least 1")
        methods = [m.strip() for m in a.methods.split(",") if m.strip()]
        if not methods:
            raise Error("--methods is empty")
        tasks = [t.strip() for t in a.tasks.split(",") if t.strip()] if a.tasks else None
        length = parse_length(a.length)
        rows = rescore_first_values(load(a.file)) if a.first_values else load(a.file)
        r = compare(rows, length, methods, tasks, a.against, a.all_diffs, a.seed, a.resamples)
        r["file"] = a.file
        r["all_diffs"] = a.all_diffs
        # With --first-values: how many rows of the pairs (the rows the tables rest on) were rescored.
        r["first_values"] = (sum("score_string_match_all" in rows[(m, t, length, i, sd)]
                                 for m in methods for t, i, sd in r["pairs"]) if a.first_values else None)
        md = markdown(a.file, r)
        if a.md:
            with open(a.md, "w", encoding="utf-8") as f:
                f.write(md)
        if a.json:
            json.dump(r, sys.stdout, indent=1)
            sys.stdout.write("\n")
        elif not a.md:
            sys.stdout.write(md)
    except Error as e:
        print(f"eval_paired: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
