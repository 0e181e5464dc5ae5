#!/usr/bin/env python3
"""Two lctx eval results files over the same samples (same --seed), row by
row: score and answer of each (method, task, length, sample) both hold, and
a Markdown table per (method, task) of mean scores, changed answers and
changed scores. Used to measure what an option changes (docs/bf16.md):

    bench/compare_eval_runs.py BASE.jsonl OTHER.jsonl [--methods reform,full] [-o OUT.md]
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path


def rows(path, methods):
    out = {}
    for line in Path(path).read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "method" not in r or r.get("error") or (methods and r["method"] not in methods):
            continue
        out[(r["method"], r["task"], r["length"], r["sample"], r.get("sample_seed"))] = r
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--methods", default="")
    ap.add_argument("-o", "--out")
    args = ap.parse_args()
    methods = set(filter(None, args.methods.split(",")))
    a, b = rows(args.base, methods), rows(args.other, methods)
    groups = defaultdict(list)
    skipped = 0
    for key in sorted(set(a) & set(b)):
        # The same sample seed gives another input when --samples differs
        # (the needle depths are spread over the samples): compare only rows
        # whose inputs match.
        if any(a[key].get(f) != b[key].get(f) for f in ("depth", "expected", "n_input_tokens")):
            skipped += 1
            continue
        groups[key[:3]].append((a[key], b[key]))
    md = [f"`{Path(args.base).name}` (base) against `{Path(args.other).name}` on the samples both hold", "",
          "| method | task | length | samples | base mean score | other mean score | answers changed | scores changed |",
          "|---|---|---:|---:|---:|---:|---:|---:|"]
    tot = [0, 0, 0]
    for (m, t, L), pairs in sorted(groups.items()):
        n = len(pairs)
        sa = sum(x["score"] for x, _ in pairs) / n
        sb = sum(y["score"] for _, y in pairs) / n
        ch = sum(x.get("answer") != y.get("answer") for x, y in pairs)
        sc = sum(abs(x["score"] - y["score"]) > 1e-9 for x, y in pairs)
        tot = [tot[0] + n, tot[1] + ch, tot[2] + sc]
        md.append(f"| {m} | {t} | {L} | {n} | {sa:.3f} | {sb:.3f} | {ch} | {sc} |")
    md.append(f"| all | | | {tot[0]} | | | {tot[1]} | {tot[2]} |")
    if skipped:
        md.append(f"\n{skipped} row(s) of the same (method, task, length, sample) had other inputs (another --samples) "
                  "and were left out.")
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
