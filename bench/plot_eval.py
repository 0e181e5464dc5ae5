"""Accuracy vs input length per method from `lctx eval` results.

Usage: python3 bench/plot_eval.py RESULTS.jsonl OUT.png

One line per method: the mean score over tasks (each task's mean over its
samples, errors left out) at each length, log2 length axis. Perplexity tasks
(ppl) are left out: their score is a perplexity, not an accuracy. A point that
averages fewer tasks than the length has results for (an evaluation still
running, or a method not run on every task) is drawn hollow and labelled
"n/N tasks", so a partial average is never mistaken for a complete one.
Exits with status 3 when matplotlib is missing (`lctx eval --plot` reports
that as a notice).
"""
import json
import sys
from collections import defaultdict


def load(path):
    """Last row per (method, task, length, sample, seed), as lctx eval reads it."""
    rows = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue   # a line cut by an interruption
            if not isinstance(r, dict) or r.get("kind") == "run" or "method" not in r:
                continue
            rows[(r["method"], r["task"], r["length"], r["sample"], r.get("seed"))] = r
    return list(rows.values())


def averages(rows):
    """({method: {length: mean over tasks of the task's mean score}},
    {method: {length: tasks averaged}}, {length: tasks with any result})."""
    per_task = defaultdict(list)
    for r in rows:
        if r.get("scoring") == "perplexity" or r.get("task") == "ppl":
            continue   # a perplexity, not an accuracy: in the report's own table, not in the plot
        if not r.get("error") and isinstance(r.get("score"), (int, float)):
            per_task[(r["method"], r["length"], r["task"])].append(r["score"])
    by_ml = defaultdict(list)
    for (m, length, _task), scores in per_task.items():
        by_ml[(m, length)].append(sum(scores) / len(scores))
    out = defaultdict(dict)
    counts = defaultdict(dict)
    for (m, length), means in by_ml.items():
        out[m][length] = 100.0 * sum(means) / len(means)
        counts[m][length] = len(means)
    tasks_at = defaultdict(set)
    for (_m, length, task) in per_task:
        tasks_at[length].add(task)
    return out, counts, {length: len(t) for length, t in tasks_at.items()}


def label(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return str(n)


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_eval.py: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 3
    data, counts, tasks_at = averages(load(sys.argv[1]))
    if not data:
        print(f"plot_eval.py: no scored rows in {sys.argv[1]}", file=sys.stderr)
        return 1
    lengths = sorted({length for per in data.values() for length in per})
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for m in sorted(data):
        xs = [x for x in lengths if x in data[m]]
        line, = ax.plot(xs, [data[m][x] for x in xs], marker="o", label=m)
        for x in xs:
            n, total = counts[m][x], tasks_at[x]
            if n < total:   # partial average: hollow marker and its task count
                ax.plot([x], [data[m][x]], marker="o", markersize=9,
                        markerfacecolor="white", color=line.get_color())
                ax.annotate(f"{n}/{total} tasks", (x, data[m][x]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points",
                            color=line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths)
    ax.set_xticklabels([label(x) for x in lengths])
    ax.set_ylim(-2, 102)
    ax.set_xlabel("input length (model tokens)")
    ax.set_ylabel("mean score over tasks (%)")
    ax.set_title("lctx eval: accuracy vs length")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
