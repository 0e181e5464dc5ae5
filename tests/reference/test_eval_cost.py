"""bench/eval_cost.py: rows left per grid and length, priced under several CPUs' rows, worked by hand."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_cost  # noqa: E402
import eval_plan  # noqa: E402
from eval_rows import write_results  # noqa: E402

K8, K32 = 8192, 32768
INTEL, AMD = "Intel(R) Xeon(R) Processor (family 6 model 207)", "AMD EPYC (family 25 model 17)"


def row(m, t, i, wall, cpu, length=K8, **extra):
    r = {"method": m, "task": t, "length": length, "sample": i, "seed": 42, "score": 0.0, "wall_s": wall, "cpu": cpu}
    r.update(extra)
    return r


def files(tmp_path):
    """reform at 8K: (t1, 0) 100 s and (t2, 0) 300 s on the Intel, (t3, 0) 1000 s on the AMD.
    An older file lends ilre one 8K row of 50 s on the Intel (not done: it is not in the run's file).
    A row with an error lends no time."""
    run = write_results(tmp_path / "run.jsonl", [
        row("reform", "t1", 0, 100, INTEL), row("reform", "t2", 0, 300, INTEL), row("reform", "t3", 0, 1000, AMD),
        row("reform", "t1", 1, 9999, AMD, error="timed out after 9999 s"),
    ])
    old = write_results(tmp_path / "old.jsonl", [row("ilre", "t1", 0, 50, INTEL)])
    return [str(run), str(old)]


GRIDS = ["--grid", "reform", "t1,t2,t3", "8k:2,32k:1", "--grid", "ilre,tova", "t1", "8k:1"]
PRICES = ["--price", "every CPU=", "--price", "Intel=family 6", "--price", "AMD=family 25"]


def lines_of(md):
    return md.strip().split("\n")


def test_rows_left_and_hours_per_pricing(tmp_path, capsys):
    assert eval_cost.main(files(tmp_path) + GRIDS + PRICES) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[0] == "| length | methods | tasks x samples | rows left | every CPU | Intel | AMD |"
    assert out[1] == "|---|---|---:|---:|---:|---:|---:|"
    # reform at 8K: (t2, 1) and (t3, 1) left; (t1, 1) timed out and counts as done, as lctx eval counts it.
    # Medians: every CPU 300 s (100, 300, 1000), Intel 200 s, AMD 1000 s. 2 rows: 600, 400, 2000 s.
    assert out[2] == "| 8K | REFORM | 3 x 2 | 2 | 0.2 h | 0.1 h | 0.6 h |"
    # 32K: 3 rows, REFORM linear from 8K: 1200, 800, 4000 s a row -> 1.0, 0.67, 3.33 h.
    assert out[3] == "| 32K | REFORM | 3 x 1 | 3 | 1.0 h | 0.7 h | 3.3 h |"
    # ilre (t1, 0): 50 s from the older file (Intel only); tova has no row anywhere: no time.
    assert out[4] == ("| 8K | ILRe, TOVA | 1 x 1 | 2 | 0.0 h + 1 row without a time | 0.0 h + 1 row without a time "
                      "| 0.0 h + 2 rows without a time |")
    # Totals: 600 + 3600 + 50 s (every CPU), 400 + 2400 + 50 s (Intel), 2000 + 12000 s (AMD).
    assert out[5] == ("| **all** | | | **7** | **1.2 h + 1 row without a time** | **0.8 h + 1 row without a time** "
                      "| **3.9 h + 2 rows without a time** |")
    # The older file's ilre row lends its time, and is counted with the CPU it ran on.
    assert out[9] == ("Column \"every CPU\", rows priced from: Intel(R) Xeon(R) Processor (family 6 model 207) (3); "
                      "AMD EPYC (family 25 model 17) (1).")
    assert out[11] == ("Column \"Intel\" (CPUs naming 'family 6'), rows priced from: "
                       "Intel(R) Xeon(R) Processor (family 6 model 207) (3).")
    assert out[13] == "Column \"AMD\" (CPUs naming 'family 25'), rows priced from: AMD EPYC (family 25 model 17) (1)."


def test_a_grid_costs_what_eval_plan_prices_it(tmp_path, capsys):
    f = files(tmp_path)
    sys_argv = sys.argv
    try:
        sys.argv = ["eval_plan.py"] + f + ["--methods", "reform", "--tasks", "t1,t2,t3", "--lengths", "8k:2,32k:1",
                                           "--cpu", "family 6"]
        assert eval_plan.main() == 0
    finally:
        sys.argv = sys_argv
    plan_all = [x for x in lines_of(capsys.readouterr().out) if x.startswith("| **all** |")]
    assert plan_all == ["| **all** | 0.1 h | 0.7 h | **0.8** |"]
    assert eval_cost.main(f + ["--grid", "reform", "t1,t2,t3", "8k:2,32k:1", "--price", "Intel=family 6"]) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[2:5] == ["| 8K | REFORM | 3 x 2 | 2 | 0.1 h |", "| 32K | REFORM | 3 x 1 | 3 | 0.7 h |",
                        "| **all** | | | **5** | **0.8 h** |"]


def test_cores_price_from_cpu_seconds(tmp_path, capsys):
    run = write_results(tmp_path / "run.jsonl", [row("h2o", "t1", 0, 500, AMD, cpu_s=360)])
    assert eval_cost.main([str(run), "--grid", "h2o", "t1,t2", "8k:1", "--price", "all=", "--cores", "2"]) == 0
    out = lines_of(capsys.readouterr().out)
    # One row left at 360 / 2 = 180 s, not the 500 s of wall time.
    assert out[2] == "| 8K | H2O | 2 x 1 | 1 | 0.1 h |"
    assert "CPU seconds over 2 cores" in out[5]


def test_replace_in_keeps_the_rest_of_the_file(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("head\n<!-- c begin -->\nold\n<!-- c end -->\ntail\n")
    assert eval_cost.main(files(tmp_path) + ["--grid", "reform", "t1", "8k:1", "--price", "all=",
                                             "--replace-in", str(doc), "--marker", "c"]) == 0
    text = doc.read_text()
    assert text.startswith("head\n<!-- c begin -->\n| length | methods | tasks x samples | rows left | all |\n")
    assert "| 8K | REFORM | 1 x 1 | 0 | 0.0 h |\n| **all** | | | **0** | **0.0 h** |\n" in text
    assert text.endswith("<!-- c end -->\ntail\n") and "old" not in text


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    f = files(tmp_path)
    for price in ("family 25", "=family 25"):
        assert eval_cost.main(f + ["--grid", "reform", "t1", "8k:1", "--price", price]) == 1
        assert "eval_cost: bad --price" in capsys.readouterr().err
    assert eval_cost.main(f + ["--grid", "reform", "t1", "8k", "--price", "a="]) == 1
    assert "eval_cost: bad --grid" in capsys.readouterr().err
    assert eval_cost.main(f + ["--grid", "reform", "t1", "8k:1", "--price", "a=", "--cores", "0"]) == 1
    assert "bad --cores" in capsys.readouterr().err
    assert eval_cost.main([str(tmp_path / "none.jsonl"), "--grid", "reform", "t1", "8k:1", "--price", "a="]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert eval_cost.main(f + ["--grid", "reform", "t1", "8k:1", "--price", "a=", "--marker", "c"]) == 1
    assert "go together" in capsys.readouterr().err


def test_a_grid_of_many_methods_names_its_first_and_last(tmp_path, capsys):
    assert eval_cost.main(files(tmp_path) + ["--grid", "reform,ilre,tova,h2o", "t1", "8k:1", "--price", "all="]) == 0
    out = lines_of(capsys.readouterr().out)
    # reform (t1, 0) is done; ilre's 50 s, and no time for tova or h2o.
    assert out[2] == "| 8K | 4 methods (REFORM ... H2O) | 1 x 1 | 3 | 0.0 h + 2 rows without a time |"
