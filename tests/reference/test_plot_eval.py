"""bench/plot_eval.py: averages over tasks, and partial averages flagged.

The plot's numbers must match the markdown report's, and a length where a
method has fewer tasks done than others must be counted as partial (the plot
draws it hollow with "n/N tasks").
"""
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_plot_module():
    spec = importlib.util.spec_from_file_location("plot_eval", ROOT / "bench" / "plot_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(method, task, length, score, sample=0, **extra):
    r = {"method": method, "task": task, "length": length, "sample": sample,
         "seed": 42, "score": score}
    r.update(extra)
    return r


def write_rows(path, rows):
    with open(path, "w") as f:
        f.write(json.dumps({"kind": "run", "command": "lctx eval ..."}) + "\n")
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write('{"method": "cut by an interrupt')   # a torn last line is skipped


def test_averages_counts_partial_lengths(tmp_path):
    plot = load_plot_module()
    rows = [
        row("a", "t1", 8192, 1.0), row("a", "t2", 8192, 0.0),
        row("a", "t1", 8192, 0.5, sample=1),            # t1 mean 0.75
        row("b", "t1", 8192, 0.0), row("b", "t2", 8192, 1.0),
        row("a", "t1", 32768, 1.0), row("a", "t2", 32768, 0.0),
        row("b", "t1", 32768, 1.0),                      # b has 1 of 2 tasks
        row("b", "t2", 32768, None, error="timeout"),    # errors are left out
        row("a", "t2", 8192, 1.0),                       # re-run replaces the first t2 row
    ]
    path = tmp_path / "r.jsonl"
    write_rows(path, rows)
    data, counts, tasks_at = plot.averages(plot.load(path))
    assert data["a"][8192] == pytest.approx(100 * (0.75 + 1.0) / 2)
    assert data["b"][8192] == pytest.approx(50.0)
    assert data["b"][32768] == pytest.approx(100.0)
    assert counts["a"][32768] == 2 and counts["b"][32768] == 1
    assert tasks_at == {8192: 2, 32768: 2}


def test_plot_writes_png_with_partial_points(tmp_path):
    pytest.importorskip("matplotlib")
    plot = load_plot_module()
    path = tmp_path / "r.jsonl"
    write_rows(path, [row("a", "t1", 8192, 1.0), row("a", "t2", 8192, 0.0),
                      row("b", "t1", 8192, 1.0)])
    out = tmp_path / "p.png"
    import sys
    argv = sys.argv
    sys.argv = ["plot_eval.py", str(path), str(out)]
    try:
        assert plot.main() == 0
    finally:
        sys.argv = argv
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
