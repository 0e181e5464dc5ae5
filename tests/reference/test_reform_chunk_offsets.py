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


def test_offset_normalized_by_hand():
    chunk, w = 8, 4
    raw = np.arange(24, dtype=np.float64) ** 1.5 % 7   # 3 chunks of 8: bins {0..3} and {4..7} of each
    out = reform_chunk_offsets.offset_normalized(raw, chunk, w, robust=False)
    outz = reform_chunk_offsets.offset_normalized(raw, chunk, w, robust=True)
    for b in (0, 1):
        members = [t for t in range(24) if (t % chunk) // w == b]
        vals = sorted(raw[t] for t in members)
        med = (vals[5] + vals[6]) / 2                   # 12 members: the mean of the middle two
        devs = sorted(abs(raw[t] - med) for t in members)
        mad = (devs[5] + devs[6]) / 2
        for t in members:
            assert abs(out[t] - (raw[t] - med)) < 1e-12
            assert abs(outz[t] - (raw[t] - med) / mad) < 1e-12


def test_gather_matches_a_brute_force_ranking():
    rng = np.random.default_rng(7)
    n, budget, first, last, half = 300, 40, 5, 3, 2
    s = np.round(rng.random(n), 2)                      # ties, so the tie-breaks are exercised
    sel = reform_chunk_offsets.gather(s, budget, first, last, half)
    pooled = [max(s[max(0, t - half):t + half + 1]) for t in range(n)]
    rest = sorted(range(first, n - last), key=lambda t: (-pooled[t], -s[t], t))
    want = sorted(list(range(first)) + rest[:budget - first - last] + list(range(n - last, n)))
    assert sel.tolist() == want
    assert reform_chunk_offsets.gather(s[:30], budget, first, last, half).tolist() == list(range(30))


def test_offset_norm_takes_a_head_lift_away_and_keeps_the_needle():
    chunk = 2048
    raw = np.random.default_rng(5).random(6 * chunk) * 0.3
    off = np.arange(len(raw)) % chunk
    raw[off < 256] += 0.2                               # every chunk head scores higher throughout
    needle = 3 * chunk + 1000
    raw[needle] = 1.0
    rows = {r["scores"]: r for r in reform_chunk_offsets.offset_norm_rows(raw, chunk, budget=600, first=8, last=8,
                                                                         half=4)}
    assert rows["raw"]["selection_at_head"] > 0.9      # the lift wins nearly all of the budget
    for name in ("median, bins of 16", "median, bins of 64", "median/MAD, bins of 64"):
        assert rows[name]["selection_at_head"] < 0.3, name   # near the uniform 256 / 2048
        norm = reform_chunk_offsets.offset_normalized(raw, chunk, int(name.split()[-1]), robust="MAD" in name)
        assert needle in reform_chunk_offsets.gather(norm, 600, 8, 8, 4)
    assert all(r["spans"] > 0 for r in rows.values())
