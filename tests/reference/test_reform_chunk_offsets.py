"""bench/reform_chunk_offsets.py: report() against counts made by hand."""
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import reform_chunk_offsets  # noqa: E402


def test_report_counts_chunk_heads():
    chunk = 2048
    n = 5 * chunk
    # Distinct background scores below every peak, so the top 100 is one set.
    raw = np.random.default_rng(3).permutation(n) / n * 0.5
    # Chunks 1..4 are scored (chunk 0 has no working cache before it).
    raw[1 * chunk + 10] = 0.9    # chunk 1: the head holds the best score
    raw[2 * chunk + 500] = 0.9   # chunk 2: the rest does
    raw[3 * chunk + 3] = 0.8     # chunk 3: the head
    raw[3 * chunk + 900] = 0.7
    raw[4 * chunk + 255] = 0.95  # chunk 4: the head (offset 255 is the last head token)
    sel = np.array([0, 1, 2, 256, chunk + 300, 3 * chunk + 3, 4 * chunk + 256, 4 * chunk + 255])
    r = reform_chunk_offsets.report(raw, sel, chunk)
    assert r["n"] == n and r["chunk"] == chunk
    assert r["uniform"] == 0.125
    assert r["selection_at_head"] == round(5 / 8, 3)       # offsets 0, 1, 2, 3, 255
    by_score = sorted(range(n), key=lambda t: -raw[t])
    assert sorted(by_score[:5]) == sorted([4 * chunk + 255, chunk + 10, 2 * chunk + 500, 3 * chunk + 3, 3 * chunk + 900])
    for k in (100, 1000):
        heads = sum(1 for t in by_score[:k] if t % chunk < 256)
        assert r[f"top{k}_at_head"] == round(heads / k, 3)
    assert r["head_max_wins_first_half"] == 0.5              # chunks 1 and 2
    assert r["head_max_wins_second_half"] == 1.0             # chunks 3 and 4
    s, x = sorted(raw), 0.99 * (n - 1)                       # the 99th percentile, interpolated by hand
    lo = int(x)
    assert r["raw_p99"] == round(s[lo] + (x - lo) * (s[lo + 1] - s[lo]), 3)


def test_short_last_chunk_is_left_out():
    chunk = 2048
    raw = np.zeros(2 * chunk + 1000)
    raw[chunk + 700] = 0.5       # chunk 1: the rest holds the best score
    raw[2 * chunk + 5] = 1.0     # in a last chunk of 1000 < 1024 tokens: not counted
    r = reform_chunk_offsets.report(raw, np.array([5]), chunk)
    assert r["head_max_wins_first_half"] is None              # one counted chunk: an empty first half
    assert r["head_max_wins_second_half"] == 0.0
