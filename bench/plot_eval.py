"""Accuracy and cost vs input length per method from `lctx eval` results.

Usage: python3 bench/plot_eval.py RESULTS.jsonl OUT.png

Writes two figures and prints their paths:

OUT.png: one panel per accuracy task plus "average over tasks" (first). x: the
  input length (log2 axis, ticks 8K, 32K, 1M, ...), y: mean score in %, one
  line per method, and the 95% Wilson interval of each point as a bar (points
  of different methods at one length are spread a little sideways so their
  bars do not hide each other). The numbers are the markdown report's
  (src/eval/report.cpp): a task point is the mean score over its samples
  (errors left out), its interval the Wilson interval of that mean taken as a
  proportion of n samples; an average point is the mean of the task means,
  its interval the Wilson interval around it with the effective count
  T^2 / sum(1/n_t) of its T tasks' sample counts (every sample pooled when
  the counts are equal).
  Perplexity tasks (ppl) are left out: their score is a perplexity, not an
  accuracy. "oracle" (FULL on a short window of the same haystack, the
  model's own ceiling) is a dashed black line. A cell where every sample
  failed is an "x" below 0. Sample counts: the title gives the usual n of a
  task point and of an average point; a point with another n is labelled
  "n=K". A task point gets an interval from 2 samples on (as in the report).
  An average over fewer tasks than the file has accuracy tasks (a run still
  going, a method or length not run on every task, a task that failed) is
  hollow and labelled "k/N tasks", as the report marks it.
OUT-cost.png (OUT's stem + "-cost"): per method, wall time per sample (median
  over the method's rows at that length, every task, bars: min-max) and peak
  RSS (median, MiB) against length, log-log. Rows with an error are left out.

Rows: the last row of a (method, task, length, sample, seed) combination wins,
as `lctx eval` reads the file (src/eval/results.cpp); "kind": "run" rows and
lines that do not parse are skipped. Each method keeps its colour in both
figures (known methods a fixed one, others in order of name).

Exit status: 0 drawn, 1 no result rows (or the file cannot be read), 2 usage,
3 matplotlib missing (`lctx eval --plot` reports that as a notice).
"""
import json
import math
import pathlib
import sys
import textwrap
from collections import Counter, defaultdict

Z95 = 1.96   # the report's z (src/eval/report.h)

# The report's task order (src/eval/task.cpp); other tasks follow by name.
TASK_ORDER = ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery",
              "vt", "cwe", "fwe", "qa", "essay_niah", "kv_list", "ppl"]

ORACLE = "oracle"

# Fixed colour and marker per known method, so a method looks the same in
# every plot; variants share their base method's hue (lighter).
KNOWN_STYLE = {
    "full": ("#555555", "s"),
    "reform": ("#1f77b4", "o"),
    "reform+refreshkv": ("#7fb5dc", "o"),
    "ilre": ("#d62728", "D"),
    "ilre+refreshkv": ("#f08a8b", "D"),
    "reattention": ("#9467bd", "^"),
    "refreshkv": ("#c5b0d5", "v"),
    "truncate": ("#8c564b", "<"),
    "streaming": ("#ff7f0e", ">"),
    "h2o": ("#bcbd22", "p"),
    "tova": ("#2ca02c", "h"),
    "snapkv": ("#17becf", "*"),
    "infinipot": ("#e377c2", "P"),
    "infllm": ("#8c6d31", "X"),
}
EXTRA_COLOURS = ["#7b4173", "#e7ba52", "#637939", "#843c39", "#393b79", "#6baed6",
                 "#31a354", "#fd8d3c", "#756bb1", "#ad494a", "#a55194", "#9c9ede"]
EXTRA_MARKERS = ["o", "s", "D", "^", "v", "<", ">", "p", "h", "*", "P", "X"]


# --------------------------------------------------------------------------
# Reading and aggregation (no matplotlib needed).

def _number(v):
    """A finite JSON number (bools are not numbers), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def load(path):
    """The result rows of a results file, the last row per (method, task,
    length, sample, seed) winning, in order of first appearance: the rows
    `lctx eval` reads (src/eval/results.cpp). A row without method, task, a
    length >= 0 or a sample >= 0, or with neither an error nor a numeric
    score, is skipped (as a bad line there: it replaces nothing). Each row
    gets "ok" (no error) and a numeric "length". Raises OSError when the file
    cannot be read."""
    rows = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue   # a line cut by an interruption
            if not isinstance(r, dict) or r.get("kind") == "run":
                continue
            method, task = r.get("method"), r.get("task")
            length, sample = _number(r.get("length")), _number(r.get("sample"))
            if not isinstance(method, str) or not method or not isinstance(task, str) or not task:
                continue
            if length is None or length < 0 or sample is None or sample < 0:
                continue
            error = r.get("error")
            error = error if isinstance(error, str) else ""
            score = _number(r.get("score"))
            if not error and score is None:
                continue
            seed = _number(r.get("seed"))
            r = dict(r, length=int(length), ok=not error, score=score if not error else None)
            key = (method, task, int(length), int(sample), int(seed) if seed is not None else 0)
            rows[key] = r   # a re-run replaces the row in place
    return list(rows.values())


def is_perplexity(task, row=None):
    return task == "ppl" or (row is not None and row.get("scoring") == "perplexity")


def wilson(p, n, z=Z95):
    """The Wilson score interval (lo, hi) of a proportion p over n trials, as
    src/eval/report.cpp computes it (p clamped to [0, 1]; bounds clamped to
    [0, 1]); n <= 0 gives (0, 1)."""
    if n <= 0:
        return 0.0, 1.0
    p = min(max(p, 0.0), 1.0)
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2.0 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


class Cell:
    """The samples of one (method, task, length): sum and count of the scores
    of successful rows, and the failed rows."""
    __slots__ = ("sum", "n", "errors")

    def __init__(self):
        self.sum, self.n, self.errors = 0.0, 0, 0

    @property
    def mean(self):
        return self.sum / self.n if self.n else None

    def interval(self):
        return wilson(self.sum / self.n, self.n) if self.n else None


def accuracy_cells(rows):
    """{(method, task, length): Cell} of the accuracy tasks (perplexity rows
    left out)."""
    cells = defaultdict(Cell)
    for r in rows:
        if is_perplexity(r["task"], r):
            continue
        c = cells[(r["method"], r["task"], r["length"])]
        if r["ok"]:
            c.sum += r["score"]
            c.n += 1
        else:
            c.errors += 1
    return dict(cells)


def task_average(cells, method, length, tasks):
    """The report's average over `tasks` of one method at one length: None
    when no task has a successful sample, else a dict with mean (of the task
    means), lo/hi (Wilson around the mean with the effective count
    T^2 / sum(1/n_t), as src/eval/report.cpp's task_average_interval), n
    (pooled samples) and n_tasks (tasks averaged)."""
    means, inv_n, samples = [], 0.0, 0
    for t in tasks:
        c = cells.get((method, t, length))
        if c is not None and c.n:
            means.append(c.mean)
            inv_n += 1.0 / c.n
            samples += c.n
    if not means:
        return None
    mean = sum(means) / len(means)
    lo, hi = wilson(mean, len(means) ** 2 / inv_n)
    return {"mean": mean, "lo": lo, "hi": hi, "n": samples, "n_tasks": len(means)}


def ordered_tasks(tasks):
    known = [t for t in TASK_ORDER if t in tasks]
    return known + sorted(t for t in tasks if t not in TASK_ORDER)


def ordered_methods(methods):
    """oracle, then the known methods in their order, then others by name."""
    known = [m for m in [ORACLE] + list(KNOWN_STYLE) if m in methods]
    return known + sorted(m for m in methods if m not in KNOWN_STYLE and m != ORACLE)


def method_styles(methods):
    """{method: dict(color, marker, linestyle)}: fixed for known methods and
    the oracle (black, dashed), the extra palette in name order for others;
    a method variant ("reform:recompute=4096") keeps its base method's marker,
    dotted."""
    styles, extra = {}, 0
    for m in ordered_methods(methods):
        if m == ORACLE:
            styles[m] = {"color": "black", "marker": "o", "linestyle": "--"}
        elif m in KNOWN_STYLE:
            colour, marker = KNOWN_STYLE[m]
            styles[m] = {"color": colour, "marker": marker, "linestyle": "-"}
        elif m.split(":", 1)[0] in KNOWN_STYLE:
            styles[m] = {"color": EXTRA_COLOURS[extra % len(EXTRA_COLOURS)],
                         "marker": KNOWN_STYLE[m.split(":", 1)[0]][1], "linestyle": ":"}
            extra += 1
        else:
            styles[m] = {"color": EXTRA_COLOURS[extra % len(EXTRA_COLOURS)],
                         "marker": EXTRA_MARKERS[extra % len(EXTRA_MARKERS)], "linestyle": "-."
                         if extra >= len(EXTRA_COLOURS) else "-"}
            extra += 1
    return styles


def median(values):
    v = sorted(values)
    k = len(v)
    if not k:
        return None
    return v[k // 2] if k % 2 else 0.5 * (v[k // 2 - 1] + v[k // 2])


def cost_cells(rows):
    """{(method, length): {"wall": [...], "cpu": [...], "rss": [...]}}: wall_s,
    cpu_s (rows written since it was recorded) and peak_rss_mib (positive
    numbers only) of the rows without error, every task."""
    out = defaultdict(lambda: {"wall": [], "cpu": [], "rss": []})
    for r in rows:
        if not r["ok"]:
            continue
        cell = out[(r["method"], r["length"])]
        for key, field in (("wall", "wall_s"), ("cpu", "cpu_s"), ("rss", "peak_rss_mib")):
            v = _number(r.get(field))
            if v is not None and v > 0:
                cell[key].append(v)
    return {k: v for k, v in out.items() if v["wall"] or v["cpu"] or v["rss"]}


def label(n):
    """8192 -> 8K, 1048576 -> 1M (length_label in src/eval/results.cpp)."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10}K"
    return str(n)


def cost_path(out):
    """OUT's sibling: stem + "-cost" + OUT's suffix (.png when none)."""
    p = pathlib.Path(out)
    return p.with_name(p.stem + "-cost" + (p.suffix or ".png"))


# --------------------------------------------------------------------------
# Drawing.

def _dodge(methods, lengths):
    """{method: factor}: a small sideways shift per method on the log2 x axis
    (at most 0.06 of a doubling between neighbours, the whole spread at most
    a quarter of the narrowest gap between lengths)."""
    logs = sorted(math.log2(x) for x in lengths if x > 0)
    gap = min((b - a for a, b in zip(logs, logs[1:])), default=2.0)
    k = len(methods)
    step = min(0.06, 0.25 * gap / (k - 1)) if k > 1 else 0.0
    return {m: 2 ** ((i - (k - 1) / 2) * step) for i, m in enumerate(methods)}


def _length_axis(ax, lengths):
    from matplotlib.ticker import NullLocator
    pos = [x for x in lengths if x > 0]
    ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(pos)
    every = math.ceil(len(pos) / 9)   # at most 9 labels: "128K" labels overlap beyond
    ax.set_xticklabels([label(x) if i % every == 0 else "" for i, x in enumerate(pos)], fontsize=8)
    if pos:
        ax.set_xlim(min(pos) / 1.6, max(pos) * 1.6)


def _modal(values):
    c = Counter(values)
    return max(c, key=lambda v: (c[v], -v)) if c else None


def _minor_log_labels(ax, key):
    """Plain labels for the minor ticks of a log y axis spanning under two
    decades (2, 3, 5 x 10^k), none on a wider one (its decades are labelled)."""
    from matplotlib.ticker import FuncFormatter

    def fmt(v, _pos):
        lo, hi = ax.get_ylim()
        if lo <= 0 or math.log10(hi / lo) > 2 or v <= 0:
            return ""
        lead = round(v / 10 ** math.floor(math.log10(v) + 1e-9), 6)
        return f"{v:g}" if lead in (2, 3, 5) else ""
    return FuncFormatter(fmt)


def _save_no_data(plt, out, text):
    """A small figure that says why there is nothing to plot."""
    fig = plt.figure(figsize=(7, 3))
    ax = fig.add_subplot(1, 1, 1)
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11, wrap=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_accuracy(plt, rows, styles, out):
    cells = accuracy_cells(rows)
    tasks = ordered_tasks({t for (_m, t, _l) in cells})
    if not tasks:
        _save_no_data(plt, out, "no accuracy results (perplexity tasks are not plotted)")
        return
    lengths = sorted({length for (_m, _t, length) in cells})
    methods = [m for m in ordered_methods({m for (m, _t, _l) in cells})]
    dodge = _dodge(methods, lengths)

    # Per panel: {method: [(length, mean%, lo%, hi%, n, note)]} and the
    # all-error cells.
    panels = [("average over tasks", None)] + [(t, t) for t in tasks]
    points, failed = {}, {}
    for title, task in panels:
        pts, bad = defaultdict(list), defaultdict(list)
        for m in methods:
            for length in lengths:
                if task is None:
                    a = task_average(cells, m, length, tasks)
                    if a is None:
                        if any((m, t, length) in cells for t in tasks):
                            bad[m].append(length)
                        continue
                    # Partial as in the report: fewer than the file's accuracy tasks.
                    note = f"{a['n_tasks']}/{len(tasks)} tasks" if a["n_tasks"] < len(tasks) else ""
                    pts[m].append((length, 100 * a["mean"], 100 * a["lo"], 100 * a["hi"], a["n"], note))
                else:
                    c = cells.get((m, task, length))
                    if c is None:
                        continue
                    if not c.n:
                        bad[m].append(length)
                        continue
                    # The report gives a task cell its interval from 2 samples on.
                    lo, hi = (100 * b for b in c.interval()) if c.n >= 2 else (None, None)
                    pts[m].append((length, 100 * c.mean, lo, hi, c.n, ""))
        points[title], failed[title] = pts, bad
    task_ns = [p[4] for title, task in panels if task is not None
               for pts in points[title].values() for p in pts]
    avg_ns = [p[4] for pts in points["average over tasks"].values() for p in pts]
    usual = {"task": _modal(task_ns), "avg": _modal(avg_ns)}

    npanel = len(panels)
    ncols = min(3, npanel)
    nrows = math.ceil(npanel / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.4 * ncols, 3.3 * nrows + 0.9),
                             squeeze=False, sharey=True, layout="constrained")
    handles = {}
    for i, (title, task) in enumerate(panels):
        ax = axes[i // ncols][i % ncols]
        normal_n = usual["avg" if task is None else "task"]
        for m in methods:
            st = styles[m]
            pts = points[title].get(m, [])
            xs = [p[0] * dodge[m] for p in pts]
            if pts:
                line, = ax.plot(xs, [p[1] for p in pts], color=st["color"], marker=st["marker"],
                                linestyle=st["linestyle"], linewidth=1.6 if m == ORACLE else 1.2,
                                markersize=5, label=m, zorder=3 if m == ORACLE else 2)
                handles.setdefault(m, line)
                bars = [(x, p[2], p[3]) for x, p in zip(xs, pts) if p[2] is not None]
                if bars:
                    ax.vlines([b[0] for b in bars], [b[1] for b in bars], [b[2] for b in bars],
                              color=st["color"], linewidth=0.9, alpha=0.5, zorder=1)
                for x, p in zip(xs, pts):
                    notes = [p[5]] if p[5] else []
                    if p[4] != normal_n:
                        notes.append(f"n={p[4]}")
                    if p[5]:   # partial average: hollow
                        ax.plot([x], [p[1]], marker=st["marker"], markersize=7, color=st["color"],
                                markerfacecolor="white", linestyle="none", zorder=4)
                    if notes:
                        ax.annotate(", ".join(notes), (x, p[1]), fontsize=6, color=st["color"],
                                    xytext=(3, -9 if p[1] > 90 else 3), textcoords="offset points")
            bad = failed[title].get(m, [])
            if bad:
                h, = ax.plot([x * dodge[m] for x in bad], [-5] * len(bad), linestyle="none", marker="x",
                             color=st["color"], markersize=6, zorder=2)
                if m not in handles:
                    handles[m] = ax.plot([], [], color=st["color"], marker=st["marker"],
                                         linestyle=st["linestyle"], label=m)[0]
        _length_axis(ax, lengths)
        ax.set_ylim(-9, 104)
        ax.set_yticks(range(0, 101, 20))
        ax.axhline(0, color="0.8", linewidth=0.6, zorder=0)
        ax.grid(True, alpha=0.25)
        ax.set_title(title, fontsize=10, fontweight="bold" if task is None else "normal")
        if i % ncols == 0:
            ax.set_ylabel("accuracy (%)")
        if i // ncols == nrows - 1 or i + ncols >= npanel:
            ax.set_xlabel("input length (tokens)", fontsize=8)
    for j in range(npanel, nrows * ncols):
        axes[j // ncols][j % ncols].axis("off")
    sub = []
    if usual["task"] is not None:
        sub.append(f"n={usual['task']} sample{'s' if usual['task'] != 1 else ''} per task point")
    if usual["avg"] is not None:
        sub.append(f"n={usual['avg']} pooled per average point")
    if sub:
        sub[-1] += " (other n labelled)"
    sub.append("bars: 95% Wilson interval (task points from n=2, as in the report)")
    sub.append("x: every sample failed")
    if ORACLE in methods:
        sub.append("dashed black: oracle (FULL on a short window)")
    width = int(4.4 * ncols * 13)   # characters of a 9-point line across the figure
    fig.suptitle("lctx eval: accuracy vs input length\n" + textwrap.fill("; ".join(sub), width), fontsize=9.5)
    ordered = [m for m in methods if m in handles]
    fig.legend([handles[m] for m in ordered], ordered, loc="outside lower center",
               ncol=min(len(ordered), 8), fontsize=8, frameon=False)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def plot_cost(plt, rows, styles, out):
    cells = cost_cells(rows)
    if not cells:
        _save_no_data(plt, out, "no successful rows with wall_s, cpu_s or peak_rss_mib")
        return
    from matplotlib.ticker import FuncFormatter
    lengths = sorted({length for (_m, length) in cells})
    methods = ordered_methods({m for (m, _l) in cells})
    dodge = _dodge(methods, lengths)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), layout="constrained")
    handles = {}
    # CPU seconds beside wall time: a row's wall time grows when other runs share the machine, its CPU
    # seconds do not (rows before cpu_s was recorded have none).
    for ax, key, ylabel, title in ((axes[0], "wall", "seconds per sample",
                                    "wall time per sample (median, bars: min-max)"),
                                   (axes[1], "cpu", "CPU seconds per sample",
                                    "CPU seconds per sample, every thread (median, bars: min-max)"),
                                   (axes[2], "rss", "peak RSS (MiB)", "peak RSS (median)")):
        for m in methods:
            st = styles[m]
            pts = [(length, cells[(m, length)][key]) for length in lengths
                   if (m, length) in cells and cells[(m, length)][key]]
            if not pts:
                continue
            xs = [length * dodge[m] for length, _v in pts]
            line, = ax.plot(xs, [median(v) for _l, v in pts], color=st["color"], marker=st["marker"],
                            linestyle=st["linestyle"], markersize=5, linewidth=1.2, label=m)
            handles.setdefault(m, line)
            if key in ("wall", "cpu"):
                ax.vlines(xs, [min(v) for _l, v in pts], [max(v) for _l, v in pts], color=st["color"],
                          linewidth=0.9, alpha=0.55)
        _length_axis(ax, lengths)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.yaxis.set_minor_formatter(_minor_log_labels(ax, key))
        ax.grid(True, which="both", alpha=0.2)
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
    fig.suptitle("lctx eval: cost vs input length (rows without error, every task)", fontsize=10)
    ordered = [m for m in methods if m in handles]
    fig.legend([handles[m] for m in ordered], ordered, loc="outside lower center",
               ncol=min(len(ordered), 8), fontsize=8, frameon=False)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_eval.py: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 3
    results, out = argv
    try:
        rows = load(results)
    except OSError as e:
        print(f"plot_eval.py: cannot read {results}: {e.strerror or e}", file=sys.stderr)
        return 1
    if not rows:
        print(f"plot_eval.py: no result rows in {results}", file=sys.stderr)
        return 1
    styles = method_styles({r["method"] for r in rows})
    cost = cost_path(out)
    plot_accuracy(plt, rows, styles, out)
    plot_cost(plt, rows, styles, cost)
    print(out)
    print(cost)
    return 0


if __name__ == "__main__":
    sys.exit(main())
