"""bench/eval_progress.py: rows done per method and length against planned grids, counted by hand."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_progress  # noqa: E402
from eval_rows import write_results  # noqa: E402

K8, K128 = 8192, 131072


def row(m, t, i, length=K8, seed=42, **extra):
    r = {"method": m, "task": t, "length": length, "sample": i, "seed": seed, "score": 0.5}
    r.update(extra)
    return r


def sample_file(tmp_path):
    """oracle: both tasks of samples 0 and 1 at 8K (complete for 8k:2); at 128K only (t1, 0).
    reform: (t1, 0), (t2, 0), (t1, 1) at 8K; (t1, 2) too, outside the 8k:2 grid; (t2, 1) under another
    seed. full: (t1, 0) at 128K, timed out. A row of a method outside the grids."""
    return write_results(tmp_path / "r.jsonl", [
        row("oracle", "t1", 0, oracle_tokens=4096), row("oracle", "t2", 0, oracle_tokens=4096),
        row("oracle", "t1", 1, oracle_tokens=4096), row("oracle", "t2", 1, oracle_tokens=4096),
        row("oracle", "t1", 0, length=K128, oracle_tokens=4096),
        row("reform", "t1", 0), row("reform", "t2", 0), row("reform", "t1", 1), row("reform", "t1", 2),
        row("reform", "t2", 1, seed=7),
        row("full", "t1", 0, length=K128, score=None, error="timed out after 3600 s"),
        row("h2o", "t1", 0),
    ])


def lines_of(md):
    return md.strip().split("\n")


def test_cells_count_rows_per_sample(tmp_path, capsys):
    f = sample_file(tmp_path)
    args = [str(f), "--grid", "oracle,reform", "t1,t2", "8k:2", "--grid", "oracle,full", "t1,t2", "128k:3"]
    assert eval_progress.main(args) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[0] == "| method | 8K | 128K |"
    assert out[1] == "|---|---:|---:|"
    # oracle: 4 of 2 tasks x 2 samples at 8K; 1 of 2 x 3 at 128K, sample 0 only.
    assert out[2] == "| oracle (FULL on a 4K window) | 4/4 complete | 1/6 (1, 0, 0) |"
    # reform: (t1, 2) is past the grid's samples and (t2, 1) under another seed: 3 of 4.
    assert out[3] == "| REFORM | 3/4 (2, 1) | - |"
    assert out[4] == "| FULL | - | 1/6 (1, 0, 0) |"
    assert len(out) == 7
    # 4 + 1 + 3 + 1 done of 4 + 6 + 4 + 6 wanted; full's timed-out row is counted and named.
    assert out[6] == ("9 of 20 planned rows done; 1 of them ended with an error (a time-out), "
                      "counted as done as `lctx eval` does.")


def test_grids_merge_and_one_sample_cells_stay_short(tmp_path, capsys):
    f = sample_file(tmp_path)
    # A second grid adds task t2 to oracle at 128K (2 tasks x 1 sample); reform has one sample at 8K.
    args = [str(f), "--grid", "oracle", "t1", "128k:1", "--grid", "oracle,reform", "t2", "128k:1,8k:1"]
    assert eval_progress.main(args) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[0] == "| method | 8K | 128K |"
    assert out[2] == "| oracle (FULL on a 4K window) | 1/1 complete | 1/2 |"
    assert out[3] == "| REFORM | 1/1 complete | 0/1 |"
    # oracle (t1, 0) at 128K, (t2, 0) at 8K; reform (t2, 0) at 8K: 3 of 2 + 1 + 1 + 1.
    assert out[5] == "3 of 5 planned rows done."


def test_grids_of_different_samples_add_only_their_own_pairs(tmp_path, capsys):
    f = sample_file(tmp_path)
    # reform at 8K: t1 on samples 0-2, t2 on sample 0 only: 4 wanted, not 2 tasks x 3 samples.
    # Done: (t1, 0), (t1, 1), (t1, 2), (t2, 0); (t2, 1) is another seed's and not wanted anyway.
    args = [str(f), "--grid", "reform", "t1", "8k:3", "--grid", "reform", "t2", "8k:1"]
    assert eval_progress.main(args) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[2] == "| REFORM | 4/4 complete |"
    assert out[4] == "4 of 4 planned rows done."


def test_replace_in_keeps_the_rest_of_the_file(tmp_path):
    f = sample_file(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("head\n<!-- p begin -->\nold\n<!-- p end -->\ntail\n")
    assert eval_progress.main([str(f), "--grid", "oracle", "t1", "8k:1", "--replace-in", str(doc),
                               "--marker", "p"]) == 0
    assert doc.read_text() == ("head\n<!-- p begin -->\n| method | 8K |\n|---|---:|\n"
                               "| oracle (FULL on a 4K window) | 1/1 complete |\n\n1 of 1 planned rows done.\n"
                               "<!-- p end -->\ntail\n")


def test_bad_input_is_a_clear_error(tmp_path, capsys):
    f = sample_file(tmp_path)
    for grid in (["oracle", "t1", "8k"], ["oracle", "t1", "8k:0"], ["oracle", "t1", "abc:2"], [",", "t1", "8k:1"]):
        assert eval_progress.main([str(f), "--grid"] + grid) == 1
        assert "eval_progress: bad --grid" in capsys.readouterr().err
    assert eval_progress.main([str(tmp_path / "none.jsonl"), "--grid", "oracle", "t1", "8k:1"]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert eval_progress.main([str(f), "--grid", "oracle", "t1", "8k:1", "--marker", "p"]) == 1
    assert "go together" in capsys.readouterr().err
