"""Summary of two REFORM recall curves (bench/recall_curve.py .jsonl files), one without the
repeat filter and one with it: per haystack and length, needles gathered and answered, the worst
pooled rank, and the encoding run's time and RSS. Markdown on stdout.

usage: python bench/recall_summary.py OFF.jsonl ON.jsonl
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from recall_curve import load_rows  # noqa: E402

off, on = load_rows(pathlib.Path(sys.argv[1])), load_rows(pathlib.Path(sys.argv[2]))
keys = sorted({(r["haystack"], r["length"]) for r in off + on}, key=lambda k: (k[0] != "stdlib", k[1]))
print("| haystack | length | tokens | gathered, filter off | gathered, filter on (default) | worst rank off / on | answered off / on | encode s | encode tok/s | peak RSS MiB | load avg (encode) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
tot = {"off": [0, 0, 0], "on": [0, 0, 0]}
for h, L in keys:
    a = [r for r in off if (r["haystack"], r["length"]) == (h, L)]
    b = [r for r in on if (r["haystack"], r["length"]) == (h, L)]
    def g(rs): return sum(1 for r in rs if r["probe"].get("gathered_fraction") == 1)
    def ans(rs): return sum(1 for r in rs if r["ok"])
    def worst(rs): return max((r["probe"].get("rank", 0) for r in rs), default="-")
    for name, rs in (("off", a), ("on", b)):
        tot[name][0] += g(rs); tot[name][1] += len(rs); tot[name][2] += ans(rs)
    e = (a or b)[0]
    print(f"| {h} | {L:,} | {e['n_input']:,} | {g(a)}/{len(a)} | {g(b)}/{len(b)} | {worst(a)} / {worst(b)} | {ans(a)}/{len(a)} / {ans(b)}/{len(b)} | "
          f"{e['encode_s']:.0f} | {e['encode_tok_s']:.0f} | {e['peak_rss_mib']:.0f} | {e['load_avg']:.2f} |")
print()
for k, (g_, n, a_) in tot.items():
    print(f"- filter {k}: {g_}/{n} needles gathered ({100 * g_ / max(n, 1):.0f}%), {a_}/{n} answered")
