"""bench/eval_paired.py: pairs, means, paired differences and bootstrap intervals, worked by hand."""
import collections
import itertools
import json
import pathlib
import random
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import eval_paired  # noqa: E402
from eval_rows import write_results  # noqa: E402

L = 8192


def row(m, t, i, score, recall=None, error=None, length=L, seed=42):
    r = {"method": m, "task": t, "length": length, "sample": i, "seed": seed, "n_samples": 3, "score": score}
    if recall is not None:
        r["recall"] = recall
    if error:
        r["error"] = error
    return r


def sample_file(tmp_path):
    """4 pairs of a and b (t1/t2, samples 0 and 1), worked by hand:
    a: 1.0, 0.5, 0.0, 0.5 -> mean 0.5;  b: 1.0, 1.0, 0.25, 0.75 -> mean 0.75;
    b - a: 0, 0.5, 0.25, 0.25 -> mean 0.25.  Per task: t1 a 75 b 100, t2 a 25 b 50."""
    rows = [
        row("a", "t1", 0, 0.0, recall=0.0),           # replaced below: the last row of a key wins
        row("a", "t1", 0, 1.0, recall=1.0),
        row("a", "t1", 1, 0.5, recall=0.5),
        row("a", "t2", 0, 0.0),                       # no recall
        row("a", "t2", 1, 0.0, error="timed out"),    # an error row, retried below
        row("a", "t2", 1, 0.5),
        row("a", "t2", 2, 0.0, error="timed out"),    # excluded: b's (t2, 2) has no partner
        row("b", "t1", 0, 1.0, recall=1.0),
        row("b", "t1", 1, 1.0, recall=1.0),
        row("b", "t2", 0, 0.25, recall=0.5),
        row("b", "t2", 1, 0.75, recall=1.0),
        row("b", "t2", 2, 1.0),
        row("b", "t1", 2, 1.0),                       # no row of a at all
        row("a", "t1", 3, 1.0, length=32768),         # another length: not read
        row("b", "t1", 3, 0.0, length=32768),
    ]
    return write_results(tmp_path / "r.jsonl", rows, tail='{"method": "a", "task": "t1", "len')


def test_pairs_means_and_differences(tmp_path):
    rows = eval_paired.load(sample_file(tmp_path))
    r = eval_paired.compare(rows, L, ["a", "b"], against="a", seed=1, resamples=2000)
    assert r["n_pairs"] == 4
    assert r["pairs"] == [["t1", 0, 42], ["t1", 1, 42], ["t2", 0, 42], ["t2", 1, 42]]
    assert r["error_rows"] == {"a": 1, "b": 0}
    assert r["left_out"] == {"a": [], "b": [["t1", 2, 42], ["t2", 2, 42]]}
    a, b = r["methods_stats"]["a"], r["methods_stats"]["b"]
    assert a["mean"] == 0.5 and b["mean"] == 0.75
    assert a["recall"] == 0.75 and a["n_recall"] == 2      # (1.0 + 0.5) / 2: the rows without recall do not count
    assert b["recall"] == 0.875 and b["n_recall"] == 4
    assert b["share_of_against"] == 1.5 and a["share_of_against"] == 1.0
    assert len(r["diffs"]) == 1
    d = r["diffs"][0]
    assert (d["a"], d["b"], d["mean"]) == ("b", "a", 0.25)
    assert d["low"] <= 0.25 <= d["high"]
    assert 0 <= d["low"] and d["high"] <= 0.5           # no draw's mean difference leaves [0, 0.5]
    assert [(t["task"], t["n"], t["means"]) for t in r["per_task"]] == [
        ("t1", 2, {"a": 0.75, "b": 1.0}), ("t2", 2, {"a": 0.25, "b": 0.5})]


def test_markdown(tmp_path, capsys):
    path = sample_file(tmp_path)
    assert eval_paired.main([str(path), "--length", "8k", "--methods", "a,b", "--against", "a", "--seed", "3"]) == 0
    md = capsys.readouterr().out
    assert "--length 8k --methods a,b --against a --seed 3 --resamples 10000`" in md
    assert f"`{path}` at 8K (8192 tokens)" in md
    assert "4 pairs; 95% bootstrap percentile intervals over the pairs, 10000 resamples, seed 3." in md
    assert "Error rows left out: a 1." in md
    assert "b: (t1, 2, 42), (t2, 2, 42)" in md
    assert "| a | 50.0 |" in md and "| b | 75.0 |" in md and "| 150% |" in md
    assert "| b - a | +25.0 |" in md
    assert "| t1 | 2 | 75.0 | 100.0 |" in md and "| t2 | 2 | 25.0 | 50.0 |" in md
    # The same again, as JSON, and to a file.
    out = tmp_path / "o.md"
    assert eval_paired.main([str(path), "--length", "8192", "--methods", "a,b", "--against", "a", "--seed", "3",
                             "--md", str(out), "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["n_pairs"] == 4 and j["methods_stats"]["b"]["mean"] == 0.75
    assert out.read_text() == md


def test_tasks_and_all_pairs(tmp_path):
    rows = eval_paired.load(sample_file(tmp_path))
    r = eval_paired.compare(rows, L, ["a", "b"], tasks=["t2"])
    assert r["n_pairs"] == 2 and r["methods_stats"]["a"]["mean"] == 0.25 and r["methods_stats"]["b"]["mean"] == 0.5
    assert r["left_out"]["b"] == [["t2", 2, 42]]
    # Three methods without --against: later - earlier, every two.
    extra = [row("c", t, i, 0.5) for t in ("t1", "t2") for i in (0, 1)]
    rows.update(eval_paired.load(write_results(tmp_path / "c.jsonl", extra)))
    r = eval_paired.compare(rows, L, ["a", "b", "c"])
    assert [(d["a"], d["b"], d["mean"]) for d in r["diffs"]] == [("b", "a", 0.25), ("c", "a", 0.0), ("c", "b", -0.25)]
    r = eval_paired.compare(rows, L, ["a", "b", "c"], against="c")
    assert [(d["a"], d["b"]) for d in r["diffs"]] == [("a", "c"), ("b", "c")]
    r = eval_paired.compare(rows, L, ["a", "b", "c"], against="c", all_diffs=True)
    assert len(r["diffs"]) == 3 and r["methods_stats"]["a"]["share_of_against"] == 1.0


@pytest.mark.parametrize("args, message", [
    (["missing.jsonl", "--length", "8k", "--methods", "a"], "cannot read"),
    (["{f}", "--length", "1m", "--methods", "a"], "no rows at length 1048576 (1M); the file has: 8K, 32K"),
    (["{f}", "--length", "8k", "--methods", "a,zz"], "method 'zz' has no rows at 8K"),
    (["{f}", "--length", "8k", "--methods", "a,b", "--tasks", "t1", "--against", "zz"], "--against zz is not one of"),
    (["{f}", "--length", "8q", "--methods", "a"], "bad length"),
])
def test_errors(tmp_path, capsys, args, message):
    f = str(sample_file(tmp_path))
    assert eval_paired.main([x.replace("{f}", f) for x in args]) == 1
    assert message in capsys.readouterr().err


def test_zero_pairs(tmp_path, capsys):
    f = write_results(tmp_path / "z.jsonl", [row("a", "t1", 0, 1.0), row("b", "t1", 1, 1.0), row("b", "t1", 0, 0.0, error="x")])
    assert eval_paired.main([str(f), "--length", "8k", "--methods", "a,b"]) == 1
    assert "no pairs" in capsys.readouterr().err


def test_parse_length():
    assert [eval_paired.parse_length(s) for s in ("8k", "512K", "1m", "131072")] == [8192, 524288, 1048576, 131072]


def test_bootstrap_basics():
    values = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.75]
    m, lo, hi = eval_paired.bootstrap_mean_ci(values, random.Random(0), 5000)
    assert m == sum(values) / len(values)
    assert 0 <= lo < m < hi <= 1
    # Deterministic for a seed; another seed gives other draws.
    assert eval_paired.bootstrap_mean_ci(values, random.Random(0), 5000) == (m, lo, hi)
    assert eval_paired.draws(7, random.Random(0), 50) == eval_paired.draws(7, random.Random(0), 50)
    assert eval_paired.draws(7, random.Random(0), 50) != eval_paired.draws(7, random.Random(1), 50)
    # Equal values: the interval is [m, m].
    assert eval_paired.bootstrap_mean_ci([0.1] * 9, random.Random(0), 1000) == (sum([0.1] * 9) / 9,) * 3
    # One method alone in paired() draws as bootstrap_mean_ci does.
    p = eval_paired.paired({"x": values}, random.Random(0), 5000)
    assert p["means"]["x"] == (m, lo, hi) and p["diffs"] == []


def test_paired_resamples_pairs_jointly():
    # b = a + 0.25 at every pair: each draw's difference is 0.25, however wide each method's own interval.
    a = [0.0, 0.25, 0.5, 0.75, 0.0, 0.5]
    b = [x + 0.25 for x in a]
    p = eval_paired.paired({"a": a, "b": b}, random.Random(0), 3000)
    (a_, b_, d, lo, hi), = p["diffs"]
    assert (a_, b_) == ("b", "a") and d == pytest.approx(0.25, abs=1e-12)
    assert lo == pytest.approx(0.25, abs=1e-12) and hi == pytest.approx(0.25, abs=1e-12)
    assert p["means"]["a"][2] - p["means"]["a"][1] > 0.3


def exact_quantiles(stat, n, q):
    """The lower and upper q-quantiles of a statistic over all n^n equally likely resamples of n pairs."""
    dist = collections.Counter(round(stat(ix), 12) for ix in itertools.product(range(n), repeat=n))
    total, cum, atoms = n ** n, 0, []
    for x in sorted(dist):
        atoms.append((x, cum / total, (cum + dist[x]) / total))   # value, F below it, F at it
        cum += dist[x]
    out = []
    for p in (q, 1 - q):
        x, below, at = next(a for a in atoms if a[2] > p)
        # The test means something only if p falls well inside one atom's step.
        assert below < p - 0.005 and at > p + 0.005, (p, below, at)
        out.append(x)
    return out


def test_bootstrap_against_enumeration():
    # One mean over 4 pairs: 256 resamples.
    v = [0.0, 0.25, 0.5, 1.0]
    lo, hi = exact_quantiles(lambda ix: sum(v[i] for i in ix) / 4, 4, 0.025)
    m, blo, bhi = eval_paired.bootstrap_mean_ci(v, random.Random(7), 40000)
    assert (round(blo, 12), round(bhi, 12)) == (lo, hi)
    # A paired difference over 3 pairs: 27 resamples; the same index set for both methods.
    a, b = [0.0, 0.5, 1.0], [0.5, 0.5, 0.0]
    lo, hi = exact_quantiles(lambda ix: sum(b[i] - a[i] for i in ix) / 3, 3, 0.025)
    p = eval_paired.paired({"a": a, "b": b}, random.Random(7), 40000)
    (_, _, d, dlo, dhi), = p["diffs"]
    assert abs(d - (-0.5 / 3)) < 1e-12
    assert (round(dlo, 12), round(dhi, 12)) == (lo, hi)


def niah(m, i, answer, expected, score, scoring="string_match_all", task="niah_multikey"):
    r = row(m, task, i, score)
    r.update(answer=answer, expected=expected, scoring=scoring)
    return r


@pytest.mark.parametrize("answer,expected,strict", [
    (": 5976719.\nThe number is 5976719.", ["5976719"], 1.0),
    (": 2972452.\nThe special magic number for velvet-harbor is: 8186968.", ["8186968"], 0.0),  # distractor first
    ("\n1. 6110403\n2. 5605941\n3. 1111111\n4. 7815938", ["6110403", "5605941", "7815938", "9173125"], 0.75),
    (": 3619840, 2238466, 4649767", ["2238466", "3619840"], 1.0),        # extra values after the first two
    (": 3619840, 3619840, 2238466", ["2238466", "3619840"], 0.5),        # a repeat takes the second place
    (": 59767190000000000000", ["5976719"], 0.0),                        # inside a longer run of digits
    ("I do not know.", ["5976719"], 0.0),
])
def test_first_values_score(answer, expected, strict):
    assert eval_paired.first_values_score(niah("a", 0, answer, expected, 1.0)) == strict


@pytest.mark.parametrize("r", [
    niah("a", 0, ": hyacinth", ["hyacinth"], 1.0, task="niah_single"),   # a word needle
    niah("a", 0, ": 42998 and more", ["42998"], 1.0, scoring="string_match_part"),
    row("a", "t1", 0, 1.0),                                               # no answer recorded
])
def test_first_values_leaves_other_rows(r):
    assert eval_paired.first_values_score(r) is None


def test_first_values_rescores_pairs(tmp_path, capsys):
    """a names the distractor first on sample 0 and b on sample 1 (1 -> 0 strictly); their word rows keep their score."""
    rows = [
        niah("a", 0, ": 1111111.\nThe number is: 2222222.", ["2222222"], 1.0),
        niah("a", 1, ": 3333333.", ["3333333"], 1.0),
        niah("a", 2, ": hyacinth", ["hyacinth"], 1.0, task="niah_single"),
        niah("b", 0, ": 2222222.", ["2222222"], 1.0),
        niah("b", 1, ": 4444444.\nThe number is: 3333333.", ["3333333"], 1.0),
        niah("b", 2, ": tulip", ["hyacinth"], 0.0, task="niah_single"),
        dict(niah("a", 5, ": 1.", ["5555555"], 0.0), error="timed out"),   # an error row stays out
    ]
    path = write_results(tmp_path / "r.jsonl", rows)
    assert eval_paired.main([str(path), "--length", "8k", "--methods", "a,b", "--against", "a", "--json"]) == 0
    loose = json.loads(capsys.readouterr().out)
    assert loose["first_values"] is None
    assert loose["methods_stats"]["a"]["mean"] == pytest.approx(1.0)
    assert loose["methods_stats"]["b"]["mean"] == pytest.approx(2 / 3)
    assert eval_paired.main([str(path), "--length", "8k", "--methods", "a,b", "--against", "a",
                             "--first-values", "--json"]) == 0
    strict = json.loads(capsys.readouterr().out)
    assert strict["first_values"] == 4                     # the two methods' niah_multikey rows of the pairs
    assert strict["n_pairs"] == 3
    assert strict["methods_stats"]["a"]["mean"] == pytest.approx(2 / 3)
    assert strict["methods_stats"]["b"]["mean"] == pytest.approx(1 / 3)
    assert eval_paired.main([str(path), "--length", "8k", "--methods", "a,b", "--first-values"]) == 0
    md = capsys.readouterr().out
    assert "--first-values" in md and "Scored strictly (--first-values): 4 rows" in md
