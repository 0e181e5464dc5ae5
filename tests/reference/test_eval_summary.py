"""bench/eval_summary.py: the per-model table of paired means and shares, worked by hand."""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_summary  # noqa: E402
from eval_rows import write_results  # noqa: E402

K8, K32 = 8192, 32768


def row(m, t, i, score, length=K8, **extra):
    r = {"method": m, "task": t, "length": length, "sample": i, "seed": 42, "n_samples": 2, "score": score}
    r.update(extra)
    return r


def sample_file(tmp_path):
    """At 8K: oracle 1.0 / 0.5 on (t1, 0) / (t1, 1); reform 0.5 / 0.0; full only (t1, 0) at 1.0.
    At 32K: oracle 0.0 and reform 0.5 on (t1, 0): the oracle's mean is 0, so there is no share."""
    return write_results(tmp_path / "r.jsonl", [
        row("oracle", "t1", 0, 1.0, oracle_tokens=4096), row("oracle", "t1", 1, 0.5, oracle_tokens=4096),
        row("reform", "t1", 0, 0.5), row("reform", "t1", 1, 0.0),
        row("full", "t1", 0, 1.0),
        row("oracle", "t1", 0, 0.0, length=K32, oracle_tokens=4096), row("reform", "t1", 0, 0.5, length=K32),
    ])


def lines_of(md):
    return [s for s in md.strip().split("\n")]


def test_cells_are_paired_means_and_shares(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform", "--column", "8k=reform,full,oracle"]) == 0
    out = lines_of(capsys.readouterr().out)
    # Column 1: both samples pair: oracle 75, reform 25 (33% of 75). Column 2: only (t1, 0) pairs:
    # oracle 100, reform 50 (50%), full 100 (100%). The oracle row comes first though listed last.
    assert out[0] == "| method | 8K (2 pairs) | 8K (1 pairs) |"
    assert out[2] == "| oracle (FULL on a 4K window) | 75.0 | 100.0 |"
    assert out[3] == "| REFORM | 25.0 (33%) | 50.0 (50%) |"
    assert out[4] == "| FULL | - | 100.0 (100%) |"
    assert len(out) == 5


def test_zero_reference_gives_no_share(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_summary.main([str(f), "--column", "32k=oracle,reform"]) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[2] == "| oracle (FULL on a 4K window) | 0.0 |"
    assert out[3] == "| REFORM | 50.0 (n/a) |"


def test_a_column_without_pairs_is_marked_and_reported(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform", "--column", "1m=oracle,reform"]) == 0
    cap = capsys.readouterr()
    out = lines_of(cap.out)
    assert out[0] == "| method | 8K (2 pairs) | 1M (no pairs) |"
    assert out[3] == "| REFORM | 25.0 (33%) | - |"
    assert "1M: no rows at length 1048576" in cap.err


def test_replace_between_markers_keeps_the_rest(tmp_path, capsys):
    f = sample_file(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n\nbefore\n<!-- s begin -->\nold table\nold\n<!-- s end -->\nafter\n")
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform", "--replace-in", str(doc), "--marker", "s"]) == 0
    assert capsys.readouterr().out == ""
    text = doc.read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- s begin -->\n| method | 8K (2 pairs) |\n")
    assert "old" not in text
    assert text.endswith("| REFORM | 25.0 (33%) |\n<!-- s end -->\nafter\n")
    # Again: the same file (the block is replaced, not added to).
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform", "--replace-in", str(doc), "--marker", "s"]) == 0
    assert doc.read_text() == text


def test_missing_marker_leaves_the_file_alone(tmp_path, capsys):
    f = sample_file(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- s begin -->\nkeep\n")
    assert eval_summary.main([str(f), "--column", "8k=oracle", "--replace-in", str(doc), "--marker", "s"]) == 1
    assert "needs one line '<!-- s begin -->'" in capsys.readouterr().err
    assert doc.read_text() == "<!-- s begin -->\nkeep\n"


def test_bad_input_is_refused_with_a_message(tmp_path, capsys):
    f = sample_file(tmp_path)
    for args, msg in [(["--column", "8k"], "bad --column '8k'"),
                      (["--column", "8k=oracle,oracle"], "lists a method twice"),
                      (["--column", "8q=oracle"], "bad length '8q'"),
                      (["--column", "8k=oracle", "--marker", "s"], "go together")]:
        assert eval_summary.main([str(f)] + args) == 1
        assert msg in capsys.readouterr().err
    assert eval_summary.main([str(tmp_path / "none.jsonl"), "--column", "8k=oracle"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_first_values_reads_number_needles_strictly(tmp_path, capsys):
    """reform names a distractor first on (niah_multikey, 0): 1 under string_match_all, 0 strictly."""
    needle = dict(scoring="string_match_all", expected=["2222222"])
    f = write_results(tmp_path / "r.jsonl", [
        row("oracle", "niah_multikey", 0, 1.0, answer=": 2222222.", **needle),
        row("reform", "niah_multikey", 0, 1.0, answer=": 1111111.\nThe number is: 2222222.", **needle),
        row("oracle", "t1", 1, 0.5), row("reform", "t1", 1, 0.5),
    ])
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform"]) == 0
    assert lines_of(capsys.readouterr().out)[3] == "| REFORM | 75.0 (100%) |"
    assert eval_summary.main([str(f), "--column", "8k=oracle,reform", "--first-values"]) == 0
    out = lines_of(capsys.readouterr().out)
    assert out[2] == "| oracle | 75.0 |"
    assert out[3] == "| REFORM | 25.0 (33%) |"
