"""Passkey/needle table for REFORM vs FULL vs truncation on SmolLM2.

Usage (from the repo root, after building the CLI):
  python3 bench/reform_needle_eval.py --lctx build/release/tools/lctx \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --lengths 8192 32768 131072 \
      --depths 0.1 0.3 0.5 0.7 0.9 --out docs/results/reform_needle.md
Each cell runs `lctx run --json`; a cell is correct when the answer contains
the number. FULL runs only where the input fits the trained context. Also
records needle recall of the gather stage, encode tokens/s and peak RSS.
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import needle_data  # noqa: E402

CHARS_PER_TOKEN = 4.1   # haystack text, SmolLM2 tokenizer (measured)


def run(lctx, model, doc_path, q, method, extra):
    cmd = [lctx, "run", "-m", model, "--file", doc_path, "--question", q, "-n", "24", "--json", "--method", method]
    r = subprocess.run(cmd + extra, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-300:]}
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lctx", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[8192, 32768, 131072])
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--methods", nargs="+", default=["reform", "full", "truncate"])
    ap.add_argument("--heads", default="")
    ap.add_argument("--out", default="docs/results/reform_needle.md")
    a = ap.parse_args()
    rows = []
    for L in a.lengths:
        for d in a.depths:
            doc, needle, key, value = needle_data.make_doc(int(L * CHARS_PER_TOKEN), d, seed=int(L + 1000 * d))
            with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
                f.write(doc)
            for m in a.methods:
                if m == "full" and L > 8192:
                    continue
                extra = ["--heads", a.heads] if (a.heads and m == "reform") else []
                res = run(a.lctx, a.model, f.name, needle_data.question(key), m, extra)
                ok = "error" not in res and value in res.get("answer", "")
                rows.append({"length": L, "depth": d, "method": m, "ok": ok, **res})
                print(json.dumps({k: rows[-1].get(k) for k in ("length", "depth", "method", "ok", "answer",
                                                                 "encode_tokens_per_s", "peak_rss_mib", "error")}),
                      flush=True)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# REFORM needle retrieval on SmolLM2-135M-Instruct (Q4_1)", "",
             "Command: `python3 " + " ".join(sys.argv) + "`", "",
             "| length | method | correct / depths | mean encode tok/s | max peak RSS MiB |", "|---|---|---|---|---|"]
    for L in a.lengths:
        for m in a.methods:
            rs = [r for r in rows if r["length"] == L and r["method"] == m]
            if not rs:
                continue
            tps = [r.get("encode_tokens_per_s", 0) for r in rs if r.get("encode_tokens_per_s")]
            rss = [r.get("peak_rss_mib", 0) for r in rs if "peak_rss_mib" in r]
            lines.append(f"| {L} | {m} | {sum(r['ok'] for r in rs)}/{len(rs)} | "
                         f"{(sum(tps) / len(tps)) if tps else 0:.0f} | {max(rss) if rss else 0:.0f} |")
    out.write_text("\n".join(lines) + "\n\n```\n" + "\n".join(json.dumps(r) for r in rows) + "\n```\n")


if __name__ == "__main__":
    main()
