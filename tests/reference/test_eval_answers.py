"""bench/eval_answers.py: answers matching a pattern, counted per method and length, worked by hand."""
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_answers  # noqa: E402
from eval_rows import write_results  # noqa: E402

K8, K32 = 8192, 32768
RUN = "1000000000000000000000000"


def row(m, t, i, answer, length=K8, score=0.0, **extra):
    r = {"method": m, "task": t, "length": length, "sample": i, "seed": 42, "score": score, "answer": answer}
    r.update(extra)
    return r


def sample_file(tmp_path):
    """8K: oracle runs on (a, 0), answers (a, 1); full runs on both; reform runs on (a, 0) with recall 1.0,
    not on (b, 0), and has an error row on (a, 1). 32K: full runs on (a, 0) with recall 0.5; no oracle."""
    rows = [
        row("oracle", "a", 0, ": " + RUN, oracle_tokens=4096),
        row("oracle", "a", 1, ": 1234567", score=1.0, oracle_tokens=4096),
        row("full", "a", 0, RUN + " and so on"), row("full", "a", 1, "x" + RUN),
        row("reform", "a", 0, RUN, recall=1.0), row("reform", "b", 0, ": 7654321", recall=1.0),
        {"method": "reform", "task": "a", "length": K8, "sample": 1, "seed": 42, "error": "timed out"},
        row("full", "a", 0, RUN, length=K32, recall=0.5),
    ]
    return write_results(tmp_path / "r.jsonl", rows)


def test_counts_per_method_and_length(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_answers.main([str(f), "--pattern", "[01]{20,}", "--methods", "oracle,full,reform"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out[0] == "| method | 8K | 32K |"
    # oracle: 1 of its 2 rows runs; full: both at 8K, its one 32K row (recall 0.5, so not gathered);
    # reform: (a, 0) runs with recall 1.0, (b, 0) does not, the error row is not counted.
    assert out[2] == "| oracle (FULL on a 4K window) | 1/2 (0) | - |"
    assert out[3] == "| FULL | 2/2 (0) | 1/1 (0) |"
    assert out[4] == "| REFORM | 1/2 (1) | - |"
    assert len(out) == 5


def test_paired_counts_only_shared_keys(tmp_path, capsys):
    f = sample_file(tmp_path)
    # Shared scored keys at 8K: only (a, 0) (reform's (a, 1) is an error, only reform has (b, 0)).
    # 32K has no oracle row, so it is left out.
    assert eval_answers.main([str(f), "--pattern", "[01]{20,}", "--methods", "oracle,full,reform", "--paired"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out[0] == "| method | 8K |"
    assert out[2:] == ["| oracle (FULL on a 4K window) | 1/1 (0) |", "| FULL | 1/1 (0) |", "| REFORM | 1/1 (1) |"]


def test_tasks_and_lengths_filter(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_answers.main([str(f), "--pattern", "^:", "--methods", "reform,full", "--tasks", "b",
                              "--lengths", "8k"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    # Only reform has task b: its answer starts with ":"; full has no row there.
    assert out[2:] == ["| REFORM | 1/1 (1) |", "| FULL | - |"]


def test_count_matches_a_brute_force_recount(tmp_path):
    rows = eval_answers.eval_paired.load(str(sample_file(tmp_path)))
    pat = re.compile("[01]{20,}")
    got = eval_answers.count(rows, pat, ["oracle", "full", "reform"])
    for L, per in got.items():
        for m, (k, n, g) in per.items():
            mine = [r for (mm, _, LL, _, _), r in rows.items() if mm == m and LL == L and "score" in r]
            assert n == len(mine)
            assert k == sum(1 for r in mine if pat.search(r["answer"]))
            assert g == sum(1 for r in mine if pat.search(r["answer"]) and r.get("recall") == 1.0)


def test_bad_input_is_reported(tmp_path, capsys):
    f = sample_file(tmp_path)
    assert eval_answers.main([str(f), "--pattern", "([", "--methods", "full"]) == 1
    assert "bad --pattern" in capsys.readouterr().err
    assert eval_answers.main([str(f), "--pattern", "x", "--methods", "full,full"]) == 1
    assert "name each method once" in capsys.readouterr().err
    assert eval_answers.main([str(f), "--pattern", "x", "--methods", "nosuch"]) == 1
    assert "no scored rows" in capsys.readouterr().err
    assert eval_answers.main([str(tmp_path / "missing.jsonl"), "--pattern", "x", "--methods", "full"]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_paired_leaves_out_a_length_without_shared_keys(tmp_path, capsys):
    f = sample_file(tmp_path)
    with open(f, "a") as fh:   # 32K: an oracle row on another key than FULL's only row there
        fh.write(json.dumps(row("oracle", "c", 0, RUN, length=K32, oracle_tokens=4096)) + "\n")
    assert eval_answers.main([str(f), "--pattern", "[01]{20,}", "--methods", "oracle,full", "--paired"]) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert out[0] == "| method | 8K |"
    assert out[2:] == ["| oracle (FULL on a 4K window) | 1/2 (0) |", "| FULL | 2/2 (0) |"]


def test_replace_in_writes_between_the_markers_only(tmp_path):
    f = sample_file(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- runs begin -->\nold table\n<!-- runs end -->\nafter\n")
    assert eval_answers.main([str(f), "--pattern", "[01]{20,}", "--methods", "full", "--lengths", "32k",
                              "--replace-in", str(doc), "--marker", "runs"]) == 0
    assert doc.read_text() == ("before\n<!-- runs begin -->\n| method | 32K |\n|---|---:|\n| FULL | 1/1 (0) |\n"
                               "<!-- runs end -->\nafter\n")
    # Without the markers nothing is written; --marker alone is refused.
    assert eval_answers.main([str(f), "--pattern", "x", "--methods", "full", "--replace-in", str(doc),
                              "--marker", "other"]) == 1
    assert "runs" in doc.read_text()
    assert eval_answers.main([str(f), "--pattern", "x", "--methods", "full", "--marker", "runs"]) == 1
