"""Passkey/needle table for REFORM, ILRe, FULL and truncation on SmolLM2.

Usage (from the repo root, after building the CLI):
  python3 bench/reform_needle_eval.py --lctx build/release/tools/lctx \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --lengths 8192 32768 131072 \
      --depths 0.1 0.3 0.5 0.7 0.9 --out docs/results/reform-needle-smollm2.md
Each cell runs `lctx run --json` (chat template on); a cell is correct when
the answer contains the number. FULL runs only up to --full-max tokens.
`truncate` is `lctx run --method truncate`: FULL over the first and last
halves of the recompute budget (4096 tokens for SmolLM2). For REFORM the
needle recall of the gather stage (needle tokens among the selected ones) is
and ILRe the needle recall of the gather stage (needle tokens among the
selected ones) is also recorded when llama-cpp-python is importable (used as
the tokenizer). --extra METHOD=ARGS passes more `lctx run` flags to one method
(e.g. --extra "ilre=--dca").
--index-dir DIR saves each REFORM/ILRe encoding (DIR/METHOD-LENGTH-DEPTH.idx,
with the encoding's figures in a .json beside it) and answers later runs from
it, so a change to select is measured on the same encodings in seconds. Each
REFORM/ILRe cell also probes the needle: its rank among all scored tokens and
the share of its tokens gathered ('probes' in the JSON).
The table is rewritten after every cell, so an interrupted run keeps what it
measured. Load average is recorded per cell: timings are wall-clock.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import needle_data  # noqa: E402
import saved_index  # noqa: E402

CHARS_PER_TOKEN = 4.1   # haystack text, SmolLM2 tokenizer (measured)
RETRIEVERS = ("reform", "ilre")   # methods with an encode stage and a selection
ENCODERS = RETRIEVERS + ("reattention",)   # methods whose encode stage reads the whole input


def run(lctx, model, doc_path, q, method, extra, n_predict):
    cmd = [lctx, "run", "-m", model, "--file", doc_path, "--question", q, "-n", str(n_predict), "--json",
           "--method", method]
    t = time.time()
    r = subprocess.run(cmd + extra, capture_output=True, text=True)
    wall = time.time() - t
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:], "wall_s": wall}
    res = json.loads(r.stdout)
    res["wall_s"] = round(wall, 1)
    return res


def make_tokenizer(model):
    try:
        import llama_cpp
    except ImportError:
        return None
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    return lambda text: len(llm.tokenize(text.encode(), add_bos=False, special=False))


def needle_recall(res, n_tok, doc, needle):
    """Fraction of the needle's tokens (+-2 tokens of slack) among the selected ones."""
    if n_tok is None or "selected_spans" not in res:
        return None
    prefix = res["n_input_tokens"] - n_tok(doc)   # chat template tokens before the document
    start = prefix + n_tok(doc[: doc.index(needle)])
    n = n_tok(needle)
    sel = res["selected_spans"]
    hit = sum(1 for t in range(start, start + n) if any(a <= t + d < b for a, b in sel for d in (-2, -1, 0, 1, 2)))
    return hit / n


def write_table(path, rows, a, argv):
    depths = a.depths
    lines = [f"# {a.title}", "",
             "Command: `" + " ".join(argv) + "`", "",
             "Needle: \"The special magic number for KEY is NNNNNNN.\" inserted at the given depth into shuffled "
             "Python stdlib docstrings (bench/needle_data.py); question \"What is the special magic number for KEY? "
             "Answer with the number only.\" through the chat template; greedy, 32 answer tokens. A cell is correct "
             "when the answer contains the 7-digit number. `truncate` = FULL over the first 2048 and last 2048 "
             "tokens (`lctx run --method truncate`, budget = REFORM's recompute budget 4096). FULL only where noted "
             "(SmolLM2 is trained on 8K).", "",
             "| length | method | " + " | ".join(f"d={d}" for d in depths) +
             " | correct | gather recall | encode tok/s | select s | recompute s | decode tok/s | wall s / run | peak RSS MiB"
             " | load avg |",
             "|---|---|" + "---|" * len(depths) + "---|---|---|---|---|---|---|---|---|"]
    for L in a.lengths:
        for m in a.methods:
            rs = [r for r in rows if r["length"] == L and r["method"] == m]
            if not rs:
                continue
            cells = []
            for d in depths:
                c = [r for r in rs if r["depth"] == d]
                cells.append("-" if not c else ("yes" if c[0]["ok"] else ("err" if "error" in c[0] else "no")))
            ok = [r for r in rs if "error" not in r]

            def mean(key, sub=None):
                v = [(r[key][sub] if sub else r[key]) for r in ok if key in r]
                return sum(v) / len(v) if v else 0

            rec = [r["needle_recall"] for r in ok if r.get("needle_recall") is not None]
            rec_s = f"{sum(rec) / len(rec):.2f}" if rec else "-"
            lines.append(f"| {L} | {m} | " + " | ".join(cells) +
                         f" | {sum(r['ok'] for r in rs)}/{len(rs)} | {rec_s} | "
                         f"{mean('encode_tokens_per_s') if m in ENCODERS else 0:.0f} | "
                         f"{mean('timings_s', 'select'):.2f} | {mean('timings_s', 'recompute'):.1f} | "
                         f"{mean('decode_tokens_per_s'):.1f} | "
                         f"{mean('wall_s'):.0f} | {max((r.get('peak_rss_mib', 0) for r in rs), default=0):.0f} | "
                         f"{mean('load_avg'):.1f} |")
    lines += ["", "encode tok/s is REFORM's, ILRe's or ReAttention's reading of the whole input (FULL/truncate prefill is "
              "inside 'recompute'); decode tok/s counts the answer tokens (0 where lctx run did not report it). "
              "Per-cell JSON (selected spans dropped):", "", "```"]
    for r in rows:
        lines.append(json.dumps({k: v for k, v in r.items() if k != "selected_spans"}))
    lines.append("```")
    path.write_text("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lctx", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768, 131072])
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--methods", nargs="+", default=["reform", "full", "truncate"])
    ap.add_argument("--full-max", type=int, default=8192, help="longest input FULL runs on")
    ap.add_argument("--heads", default="")
    ap.add_argument("-n", "--n-predict", type=int, default=32)
    ap.add_argument("--out", default="docs/results/reform-needle-smollm2.md")
    ap.add_argument("--title", default="Needle retrieval on SmolLM2-135M-Instruct (Q4_1)")
    ap.add_argument("--extra", action="append", default=[], help="METHOD=ARGS: more lctx run flags for one method")
    ap.add_argument("--index-dir", default="", help="save REFORM/ILRe encodings here and answer later runs from them")
    a = ap.parse_args()
    if a.index_dir:
        pathlib.Path(a.index_dir).mkdir(parents=True, exist_ok=True)
    n_tok = make_tokenizer(a.model)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for L in a.lengths:
        for d in a.depths:
            doc, needle, key, value = needle_data.make_doc(int(L * CHARS_PER_TOKEN), d, seed=int(L + 1000 * d))
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                f.write(doc)
            for m in a.methods:
                if m == "full" and L > a.full_max:
                    continue
                extra = ["--heads", a.heads] if (a.heads and m == "reform") else []
                for e in a.extra:
                    name, _, args = e.partition("=")
                    if name == m:
                        extra += args.split()
                idx, saved = None, None
                if m in RETRIEVERS:
                    extra += ["--probe", needle]
                    if a.index_dir:
                        idx = pathlib.Path(a.index_dir, f"{m}-{L}-{d}.idx")
                        idx_flags, saved = saved_index.flags(idx)
                        extra += idx_flags
                load = os.getloadavg()[0]
                res = run(a.lctx, a.model, f.name, needle_data.question(key), m, extra, a.n_predict)
                if saved is not None and "error" not in res:   # the encoding's figures, from the run that made it
                    res.update(saved, from_index=True)
                elif idx is not None and "error" not in res:
                    saved_index.save_figures(idx, {"encode_tokens_per_s": res.get("encode_tokens_per_s"),
                                                   "peak_rss_mib": res.get("peak_rss_mib"),
                                                   "encode_s": res.get("timings_s", {}).get("encode")})
                ok = "error" not in res and value in res.get("answer", "")
                row = {"length": L, "depth": d, "method": m, "ok": ok, "value": value,
                       "load_avg": round((load + os.getloadavg()[0]) / 2, 2), **res}
                if m in RETRIEVERS:
                    row["needle_recall"] = needle_recall(res, n_tok, doc, needle)
                rows.append(row)
                print(json.dumps({k: row.get(k) for k in ("length", "depth", "method", "ok", "answer", "needle_recall", "probes",
                                                          "encode_tokens_per_s", "timings_s", "peak_rss_mib",
                                                          "wall_s", "load_avg", "error")}), flush=True)
                write_table(out, rows, a, [pathlib.Path(sys.executable).name] + sys.argv)
            os.unlink(f.name)


if __name__ == "__main__":
    main()
