"""bench/plot_eval.py: the numbers behind the plots and the plots themselves.

The plot's numbers must be the markdown report's (src/eval/report.cpp): the
Wilson interval of a cell's mean score over its n samples, an average over
tasks that is the mean of the task means with a Wilson interval around it
of the effective count T^2 / sum(1/n_t), the last row of a combination winning (src/eval/results.cpp),
perplexity tasks left out. Both figures (OUT.png and OUT-cost.png) must be
written for ordinary and awkward files, and an empty file is an error.
"""
import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "plot_eval.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load_plot_module():
    spec = importlib.util.spec_from_file_location("plot_eval", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


plot = load_plot_module()


def row(method, task, length, score, sample=0, **extra):
    r = {"method": method, "task": task, "length": length, "sample": sample, "seed": 42,
         "score": score, "wall_s": 10.0, "peak_rss_mib": 500.0,
         "timings_s": {"feed": 1.0, "decode": 0.5}}
    r.update(extra)
    return r


def write_rows(path, rows, torn=True):
    with open(path, "w") as f:
        f.write(json.dumps({"kind": "run", "command": "lctx eval ..."}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
        if torn:
            f.write('{"method": "cut by an interrupt')   # a torn last line is skipped


def run_main(tmp_path, rows, name="r", torn=True):
    """main() on a file of `rows`; (status, OUT path, cost path)."""
    path = tmp_path / f"{name}.jsonl"
    write_rows(path, rows, torn)
    out = tmp_path / f"{name}.png"
    return plot.main([str(path), str(out)]), out, tmp_path / f"{name}-cost.png"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000, path


# --------------------------------------------------------------------------
# Numbers.

def test_wilson_hand_computed():
    # p = 0.5, n = 4, z = 1.96: denom = 1 + 3.8416/4 = 1.9604, centre = 0.5,
    # half = 1.96 * sqrt(0.0625 + 0.060025) / 1.9604 = 0.349964.
    lo, hi = plot.wilson(0.5, 4)
    assert (round(lo, 3), round(hi, 3)) == (0.150, 0.850)
    # p = 1, n = 1: centre = 2.9208/4.8416 = 0.603272, half = 1.9208/4.8416
    # = 0.396728: [0.207, 1].
    lo, hi = plot.wilson(1.0, 1)
    assert (round(lo, 3), round(hi, 3)) == (0.207, 1.0)
    lo, hi = plot.wilson(0.0, 1)
    assert (round(lo, 3), round(hi, 3)) == (0.0, 0.793)
    # p = 0.25, n = 8: denom = 1.4802, centre = (0.25 + 0.240100)/1.4802
    # = 0.331104, half = 1.96 * sqrt(0.0234375 + 0.0150063)/1.4802 = 0.259614.
    lo, hi = plot.wilson(0.25, 8)
    assert (round(lo, 3), round(hi, 3)) == (0.071, 0.591)
    assert plot.wilson(0.7, 0) == (0.0, 1.0)              # no samples: [0, 1], as in the report
    assert plot.wilson(1.5, 4) == plot.wilson(1.0, 4)     # p clamped to [0, 1]


def test_load_last_row_wins_and_bad_rows_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    write_rows(path, [
        row("a", "t1", 8192, 0.0),
        row("a", "t1", 8192, 0.0, sample=1),
        {"method": "a", "task": "t1", "length": 8192, "sample": 0, "seed": 42},   # no score, no error: skipped
        {"method": "a", "task": "t1", "sample": 0, "score": 1.0},                 # no length: skipped
        {"method": "", "task": "t1", "length": 8192, "sample": 0, "score": 1.0},  # no method: skipped
        row("a", "t1", 8192, 1.0),                  # re-run of sample 0 replaces the first row
        row("a", "t1", 8192, 0.5, seed=7),          # another seed: its own combination
        row("a", "t1", 8192, None, sample=1, error="timeout"),   # the re-run of sample 1 failed
        {"method": "a", "task": "t1", "length": 8192, "sample": 2, "score": 1.0},   # seed missing: 0
        {"method": "a", "task": "t1", "length": 8192, "sample": 2, "seed": 0, "score": 0.0},
    ])
    rows = plot.load(path)
    got = sorted((r["sample"], r["seed"] if "seed" in r else None, r["score"], r["ok"]) for r in rows)
    assert got == [(0, 7, 0.5, True), (0, 42, 1.0, True), (1, 42, None, False), (2, 0, 0.0, True)]


def test_cells_and_average_match_the_report(tmp_path):
    path = tmp_path / "r.jsonl"
    write_rows(path, [
        row("a", "t1", 8192, 1.0), row("a", "t1", 8192, 0.5, sample=1),   # t1: 1.5 / 2
        row("a", "t2", 8192, 0.0),
        row("a", "t2", 8192, 1.0),                         # replaces t2 sample 0: 1 / 1
        row("a", "t2", 8192, None, sample=1, error="oom"),
        row("a", "ppl", 8192, 12.5, scoring="perplexity"),   # a perplexity, not an accuracy
        row("b", "t1", 8192, None, error="timeout"),          # every sample of b/t1 failed
        row("b", "t2", 8192, 0.25, recall=None), row("b", "t2", 8192, 0.75, sample=1, recall=0.5),
    ])
    cells = plot.accuracy_cells(plot.load(path))
    assert not any(t == "ppl" for (_m, t, _l) in cells)
    a1, a2, b1, b2 = (cells[k] for k in [("a", "t1", 8192), ("a", "t2", 8192),
                                         ("b", "t1", 8192), ("b", "t2", 8192)])
    assert (a1.sum, a1.n, a1.errors, a1.mean) == (1.5, 2, 0, 0.75)
    assert (a2.sum, a2.n, a2.errors, a2.mean) == (1.0, 1, 1, 1.0)
    assert (b1.n, b1.errors, b1.mean, b1.interval()) == (0, 1, None, None)
    assert b2.mean == 0.5 and b2.interval() == plot.wilson(0.5, 2)

    tasks = plot.ordered_tasks({t for (_m, t, _l) in cells})
    assert tasks == ["t1", "t2"]
    avg = plot.task_average(cells, "a", 8192, tasks)
    # Mean of the task means (0.75 + 1.0) / 2 = 0.875 (pooling gives 2.5/3 = 0.833); the interval around it with
    # the effective count 2^2 / (1/2 + 1/1) = 8/3 samples of the 3.
    assert avg["mean"] == pytest.approx(0.875)
    assert (avg["n"], avg["n_tasks"]) == (3, 2)
    assert (avg["lo"], avg["hi"]) == pytest.approx(plot.wilson(0.875, 8 / 3))
    avg_b = plot.task_average(cells, "b", 8192, tasks)   # b's t1 failed: 1 of 2 tasks
    assert (avg_b["mean"], avg_b["n"], avg_b["n_tasks"]) == (0.5, 2, 1)
    assert plot.task_average(cells, "c", 8192, tasks) is None


def test_cost_cells_and_helpers(tmp_path):
    path = tmp_path / "r.jsonl"
    write_rows(path, [
        row("a", "t1", 8192, 1.0, wall_s=30.0, peak_rss_mib=600.0, cpu_s=50.0),
        row("a", "t1", 8192, 0.0, sample=1, wall_s=10.0, peak_rss_mib=400.0, cpu_s=18.0),
        row("a", "t2", 8192, 1.0, wall_s=20.0, peak_rss_mib=None),
        row("a", "ppl", 8192, 9.0, scoring="perplexity", wall_s=40.0, peak_rss_mib=800.0),
        row("a", "t1", 8192, None, sample=2, error="timeout", wall_s=900.0),   # errors do not count
        {"method": "b", "task": "t1", "length": 32768, "sample": 0, "score": 1.0},  # no cost fields
    ])
    cells = plot.cost_cells(plot.load(path))
    assert set(cells) == {("a", 8192)}
    assert sorted(cells[("a", 8192)]["wall"]) == [10.0, 20.0, 30.0, 40.0]
    assert plot.median(cells[("a", 8192)]["wall"]) == 25.0
    assert plot.median(cells[("a", 8192)]["rss"]) == 600.0
    assert sorted(cells[("a", 8192)]["cpu"]) == [18.0, 50.0]   # only the rows that recorded cpu_s
    assert plot.median([]) is None
    assert [plot.label(n) for n in (8192, 131072, 1 << 20, 3000)] == ["8K", "128K", "1M", "3000"]
    assert plot.cost_path("docs/results/eval-smollm2.png") == pathlib.Path("docs/results/eval-smollm2-cost.png")
    assert plot.ordered_methods({"zeta", "reform", "oracle", "full"}) == ["oracle", "full", "reform", "zeta"]
    styles = plot.method_styles({"zeta", "reform", "oracle", "alpha"})
    assert styles["oracle"]["color"] == "black" and styles["oracle"]["linestyle"] == "--"
    assert styles["reform"] == plot.method_styles({"reform"})["reform"]   # fixed colour per known method
    assert styles["alpha"]["color"] != styles["zeta"]["color"]
    # A method variant (lctx eval --methods reform:recompute=4096): its base's marker, dotted, its own colour.
    vs = plot.method_styles({"reform", "reform:recompute=4096", "reform:recompute=2048"})
    for v in ("reform:recompute=4096", "reform:recompute=2048"):
        assert vs[v]["marker"] == vs["reform"]["marker"] and vs[v]["linestyle"] == ":"
        assert vs[v]["color"] != vs["reform"]["color"]
    assert vs["reform:recompute=4096"]["color"] != vs["reform:recompute=2048"]["color"]


# --------------------------------------------------------------------------
# Figures.

def synthetic_rows():
    rows = []
    for length in (8192, 32768):
        for task, base in (("niah_single", 0.8), ("vt", 0.4)):
            for s in range(3):
                rows.append(row("oracle", task, length, 1.0, sample=s, wall_s=2.0, peak_rss_mib=300.0))
                rows.append(row("full", task, length, float(s < 2), sample=s,
                                wall_s=5.0 * length / 8192, peak_rss_mib=length / 16))
                rows.append(row("reform", task, length, base if s else 0.0, sample=s,
                                wall_s=3.0 + s, peak_rss_mib=450.0, recall=0.9))
                rows.append(row("my_new_method", task, length, 0.5, sample=s, wall_s=1.0, peak_rss_mib=350.0))
        rows.append(row("reform", "ppl", length, 14.2, scoring="perplexity"))
    rows.append(row("full", "vt", 32768, None, sample=3, error="timeout"))       # an error row
    rows += [row("streaming", "vt", 32768, None, sample=s, error="oom") for s in range(2)]   # all-error cell
    rows.append(row("streaming", "niah_single", 8192, 1.0))                       # n=1 point
    return rows


def test_plot_writes_both_pngs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    status, out, cost = run_main(tmp_path, synthetic_rows())
    assert status == 0
    assert_png(out)
    assert_png(cost)
    assert capsys.readouterr().out.split() == [str(out), str(cost)]


@pytest.mark.parametrize("case", ["single_length", "all_errors", "ppl_only", "missing_fields", "unknown_only"])
def test_plot_awkward_files(tmp_path, case):
    pytest.importorskip("matplotlib")
    rows = {
        "single_length": [row("reform", "qa", 8192, 1.0), row("oracle", "qa", 8192, 1.0)],
        "all_errors": [row("reform", "qa", 8192, None, error="timeout"),
                       row("full", "vt", 32768, None, error="oom")],
        "ppl_only": [row("reform", "ppl", 8192, 10.0, scoring="perplexity")],
        "missing_fields": [{"method": "reform", "task": "qa", "length": 8192, "sample": 0, "score": 0.5},
                           {"method": "reform", "task": "qa", "length": 16384, "sample": 0, "score": 1,
                            "wall_s": "slow", "peak_rss_mib": -1, "timings_s": None}],
        "unknown_only": [row(f"m{i}", "task_x", 4096 << i, i / 20, sample=0) for i in range(20)],
    }[case]
    status, out, cost = run_main(tmp_path, rows, name=case)
    assert status == 0
    assert_png(out)
    assert_png(cost)


def test_empty_and_missing_files_fail(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    status, out, cost = run_main(tmp_path, [], name="empty", torn=False)
    assert status == 1 and not out.exists() and not cost.exists()
    assert "no result rows" in capsys.readouterr().err
    assert plot.main([str(tmp_path / "absent.jsonl"), str(tmp_path / "x.png")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert plot.main([str(tmp_path / "only-one-argument")]) == 2


def test_exit_3_without_matplotlib(tmp_path):
    """`lctx eval --plot` reads status 3 as "matplotlib is not installed"."""
    path = tmp_path / "r.jsonl"
    write_rows(path, [row("a", "t1", 8192, 1.0)])
    code = ("import runpy, sys; sys.modules['matplotlib'] = None; "
            f"sys.argv = ['plot_eval.py', {str(path)!r}, {str(tmp_path / 'p.png')!r}]; "
            f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 3, p.stderr
    assert "matplotlib is not installed" in p.stderr
