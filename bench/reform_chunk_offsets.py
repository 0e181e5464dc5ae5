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
those of the chunks the encoder ran.

  PYTHONPATH=build/release/bindings/python python3 bench/reform_chunk_offsets.py \\
      models/gemma-3-270m-q4_k_m.gguf /tmp/prompts/niah_single-1M-1 [CHUNK]
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


def main() -> int:
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
            row.update(report(raw, np.asarray(sel.positions), chunk))
            print(json.dumps(row), flush=True)
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
