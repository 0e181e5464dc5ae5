#!/usr/bin/env python3
"""Where in its encoding chunk does REFORM's selection fall?

Feeds one `lctx eval --dump-prompts` sample to a REFORM session (Python
binding, one thread), selects with the eval's query ("\\n\\n" + question +
"\\n" + answer prefix) and with the question alone, and prints per query:
the share of the selection and of the top raw scores at offsets < 256 of
an encoding chunk (uniform: 256 / chunk), and how often a chunk's first 256
tokens hold its highest raw score, per half of the document.

CHUNK (default: the model's trained context / 4, REFORM's documented
default, 8192 on Gemma 3) is set on the session, so the offsets counted are
those of the chunks the encoder ran. The scores and selections are saved
beside the sample (STEM.QUERY.raw.npy, STEM.QUERY.sel.npy).

--offset-norm STEM CHUNK reads those files back (no model, seconds) and
asks what scoring each token against the others at its chunk offset would
change: for the median of each offset bin subtracted, and for that divided
by the bin's median absolute deviation, it prints the selection REFORM's
gather would make from the new scores (its first/last 256 forced and
16K budget, max-pool half width 64; repeated text is not demoted here), its
share at a chunk head, its number of spans, how many of the 100 best
raw scores it still holds and how many of its tokens lie within 64 of one
(the rest of the budget is filler whichever scores pick it).

  PYTHONPATH=build/release/bindings/python python3 bench/reform_chunk_offsets.py \\
      models/gemma-3-270m-q4_k_m.gguf /tmp/prompts/niah_single-1M-1 [CHUNK]
  python3 bench/reform_chunk_offsets.py --offset-norm /tmp/prompts/niah_single-1M-1 8192
"""
import json
import sys

import numpy as np


def report(raw: np.ndarray, sel: np.ndarray, chunk: int) -> dict:
    """raw: one score per document token; sel: the selected positions."""
    n = len(raw)
    off = np.arange(n) % chunk
    top = np.argsort(-raw)
    heads = []
    for c in range(1, (n + chunk - 1) // chunk):
        seg = raw[c * chunk:(c + 1) * chunk]
        if len(seg) >= 1024:
            heads.append(seg[:256].max() > seg[256:].max())
    h = len(heads) // 2

    def share(wins):   # None for an empty half (a document of one or two chunks)
        return round(float(np.mean(wins)), 2) if wins else None

    return {"n": n, "chunk": chunk, "uniform": round(256 / chunk, 3),
            "selection_at_head": round(float(np.mean(sel % chunk < 256)), 3),
            "top100_at_head": round(float(np.mean(off[top[:100]] < 256)), 3),
            "top1000_at_head": round(float(np.mean(off[top[:1000]] < 256)), 3),
            "head_max_wins_first_half": share(heads[:h]),
            "head_max_wins_second_half": share(heads[h:]),
            "raw_p99": round(float(np.quantile(raw, 0.99)), 3)}


def offset_normalized(raw: np.ndarray, chunk: int, bin_width: int, robust: bool) -> np.ndarray:
    """raw minus the median of its offset bin (offset in the chunk // bin_width),
    divided by the bin's median absolute deviation when robust."""
    b = (np.arange(len(raw)) % chunk) // bin_width
    out = np.empty_like(raw, dtype=np.float64)
    for k in np.unique(b):
        members = b == k
        d = raw[members] - np.median(raw[members])
        if robust:
            mad = np.median(np.abs(d))
            d /= mad if mad > 0 else 1.0
        out[members] = d
    return out


def gather(s: np.ndarray, budget: int, first: int, last: int, half: int) -> np.ndarray:
    """REFORM's gather on scores s (src/session/selector.h, without the
    repeat demotion): [0, first) and the last `last`, then the best others by
    (max-pool of s over +-half desc, s desc, position asc) up to budget."""
    n = len(s)
    if n <= budget:
        return np.arange(n)
    padded = np.pad(s, half, constant_values=-np.inf)
    p = np.lib.stride_tricks.sliding_window_view(padded, 2 * half + 1).max(axis=1)
    rest = np.arange(first, n - last)
    order = np.lexsort((rest, -s[rest], -p[rest]))[:budget - first - last]
    return np.sort(np.concatenate([np.arange(first), rest[order], np.arange(n - last, n)]))


def offset_norm_rows(raw: np.ndarray, chunk: int, budget: int = 16384, first: int = 256, last: int = 256,
                     half: int = 64) -> list:
    top_idx = np.argsort(-raw)[:100]
    top = set(top_idx.tolist())
    near = np.zeros(len(raw), dtype=bool)   # within the pool's reach of a top-100 raw score
    for t in top_idx:
        near[max(0, t - half):t + half + 1] = True
    variants = [("raw", raw)]
    for w in (16, 64, 256):
        variants.append((f"median, bins of {w}", offset_normalized(raw, chunk, w, False)))
        variants.append((f"median/MAD, bins of {w}", offset_normalized(raw, chunk, w, True)))
    rows = []
    for name, s in variants:
        sel = gather(s, budget, first, last, half)
        middle = sel[(sel >= first) & (sel < len(raw) - last)]
        rows.append({"scores": name,
                     "selection_at_head": round(float(np.mean(middle % chunk < 256)), 3) if len(middle) else None,
                     "spans": int(np.sum(np.diff(sel) > 1) + 1),
                     "raw_top100_kept": len(top.intersection(sel.tolist())),
                     "near_raw_top100": int(near[sel].sum())})
    return rows


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--offset-norm":
        stem, chunk = sys.argv[2], int(sys.argv[3])
        for query in ("eval", "question"):
            raw = np.load(f"{stem}.{query}.raw.npy").astype(np.float64)
            for row in offset_norm_rows(raw, chunk):
                print(json.dumps({"sample": stem.split("/")[-1], "query": query, **row}), flush=True)
        return 0
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    import lctx   # here, so that report() is importable without the binding

    model_path, stem = sys.argv[1:3]
    meta = json.load(open(stem + ".json"))
    doc = open(stem + ".document.txt", encoding="utf-8").read()
    q = open(stem + ".question.txt", encoding="utf-8").read()
    queries = {"eval": "\n\n" + q + "\n" + meta["answer_prefix"], "question": "\n\n" + q}
    with lctx.Model(model_path) as m:
        chunk = int(sys.argv[3]) if len(sys.argv) == 4 else m.n_ctx_train // 4
        if chunk < 2048:   # the head is 256 tokens, and a chunk needs a rest to compare it with
            print(f"reform_chunk_offsets: chunk {chunk} is below 2048", file=sys.stderr)
            return 2
        s = m.session(method=lctx.Method.REFORM, n_threads=1, reform_chunk=chunk)
        s.feed_text(doc)
        s.build_index()
        for name, text in queries.items():
            sel = s.select(text)
            raw = np.asarray(s.select_scores().raw, dtype=np.float64)
            row = {"sample": stem.split("/")[-1], "query": name}
            positions = np.asarray(sel.positions)
            np.save(f"{stem}.{name}.raw.npy", raw.astype(np.float32))
            np.save(f"{stem}.{name}.sel.npy", positions)
            row.update(report(raw, positions, chunk))
            print(json.dumps(row), flush=True)
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
