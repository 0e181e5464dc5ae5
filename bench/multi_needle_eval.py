"""Five needles in one document: read it once, ask five questions.

For methods whose reading of a long document dominates the cost (ReAttention
is O(N^2) in prefill), one document per length holds five needles, each with
its own key and value, at five depths; `lctx run --questions` reads it once
and answers the five questions from the same state (each question starts
from the document alone, so the answers are independent).

Usage (from the repo root):
  python3 bench/multi_needle_eval.py --lctx build/release/tools/lctx \
      --model models/SmolLM2-135M-Instruct.Q4_1.gguf --lengths 131072 --methods reattention \
      --out docs/results/reattention-multi-needle-smollm2.md
The table is rewritten after every (length, method) run.
"""
import argparse
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import needle_data  # noqa: E402

CHARS_PER_TOKEN = 4.1
KEYS = ["azure harbor", "silent meadow", "copper lantern", "northern orchard", "velvet canyon"]


def make_doc(n_chars, depths, seed):
    """Returns (text, [(depth, key, value)]): one needle per depth, each key once."""
    rng = random.Random(seed)
    paras = needle_data.haystack_paragraphs()
    body, size = [], 0
    while size < n_chars:
        p = rng.choice(paras)
        body.append(p)
        size += len(p) + 2
    needles = []
    for i, d in enumerate(sorted(depths, reverse=True)):   # deepest first: earlier inserts do not shift it
        key, value = KEYS[i % len(KEYS)], str(rng.randint(1000000, 9999999))
        body.insert(int(len(body) * d), f"The special magic number for {key} is {value}.")
        needles.append((d, key, value))
    return "\n\n".join(body), sorted(needles)


def completion_question(key):
    """For base models (no chat template): the answer is the completion of this line."""
    return f"Question: What is the special magic number for {key}? Answer: The special magic number for {key} is"


def write_table(path, rows, argv, title, asked):
    lines = [f"# {title}", "", "Command: `" + " ".join(argv) + "`", "",
             "One document per length with five needles (\"The special magic number for KEY is NNNNNNN.\", five "
             "different keys) in shuffled Python stdlib docstrings (bench/needle_data.py); the document is read once "
             "and each question (" + asked + ", greedy) is answered from it. A needle counts when the answer "
             "contains its number.", "",
             "| length | method | needles found | depths found | encode s | encode tok/s | decode tok/s | peak RSS MiB "
             "| load avg | CPU |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        found = [d for d, ok in zip(r["depths"], r["ok"]) if ok]
        lines.append(f"| {r['length']} | {r['method']} | {sum(r['ok'])}/{len(r['ok'])} | "
                     f"{', '.join(str(d) for d in found) or '-'} | {r['encode_s']:.0f} | {r['encode_tok_s']:.0f} | "
                     f"{r['decode_tok_s']:.1f} | {r['peak_rss_mib']:.0f} | {r['load_avg']:.1f} | {r['cpu']} |")
    lines += ["", "Per-question answers:", "", "```"]
    for r in rows:
        for i, (d, ans, val, ok) in enumerate(zip(r["depths"], r["answers"], r["values"], r["ok"])):
            q = {"length": r["length"], "method": r["method"], "depth": d, "value": val, "ok": ok, "answer": ans}
            if "gathered" in r:
                q["gathered"] = r["gathered"][i]   # fraction of the needle sentence's tokens selected
            lines.append(json.dumps(q))
    lines.append("```")
    path.write_text("\n".join(lines) + "\n")


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lctx", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[131072])
    ap.add_argument("--depths", type=float, nargs="+", default=[0.1, 0.3, 0.5, 0.7, 0.9])
    ap.add_argument("--methods", nargs="+", default=["reattention"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", "--n-predict", type=int, default=24)
    ap.add_argument("--extra", action="append", default=[], help="METHOD=ARGS: more lctx run flags for one method")
    ap.add_argument("--out", default="docs/results/multi-needle-smollm2.md")
    ap.add_argument("--title", default="Five needles per document on SmolLM2-135M-Instruct (Q4_1)")
    ap.add_argument("--completion", action="store_true",
                    help="base models: no chat template; each question is a sentence for the model to complete")
    ap.add_argument("--chars-per-token", type=float, default=CHARS_PER_TOKEN)
    ap.add_argument("--probes", action="store_true",
                    help="REFORM, ILRe: probe each question's needle sentence (`lctx run --probes`) and report "
                         "the fraction of its tokens the select gathered")
    a = ap.parse_args()
    asked = ("\"" + completion_question("KEY") + "\" completed, no chat template (`--no-chat`)" if a.completion
             else "\"What is the special magic number for KEY? Answer with the number only.\", chat template")
    asked += f", {a.n_predict} answer tokens"
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for L in a.lengths:
        doc, needles = make_doc(int(L * a.chars_per_token), a.depths, seed=L + 7)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(doc)
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fq:
            ask = completion_question if a.completion else needle_data.question
            fq.write("\n".join(ask(k) for _, k, _ in needles) + "\n")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fp:
            fp.write("".join(f"The special magic number for {k} is {v}.\n" for _, k, v in needles))
        for m in a.methods:
            extra = []
            for e in a.extra:
                name, _, args = e.partition("=")
                if name == m:
                    extra += args.split()
            cmd = [a.lctx, "run", "-m", a.model, "--file", f.name, "--questions", fq.name, "-n", str(a.n_predict),
                   "--json", "--method", m, "-t", str(a.threads)] + (["--no-chat"] if a.completion else []) + (["--probes", fp.name] if a.probes else []) + extra
            load0, t = os.getloadavg()[0], time.time()
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(json.dumps({"length": L, "method": m, "error": r.stderr[-400:]}), flush=True)
                continue
            res = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
            row = {"length": L, "method": m, "depths": [d for d, _, _ in needles],
                   "values": [v for _, _, v in needles], "answers": [x["answer"] for x in res],
                   "ok": [v in x["answer"] for (_, _, v), x in zip(needles, res)],
                   "encode_s": res[0]["timings_s"]["encode"], "encode_tok_s": res[0]["encode_tokens_per_s"],
                   "decode_tok_s": sum(x["decode_tokens_per_s"] for x in res) / len(res),
                   "peak_rss_mib": max(x["peak_rss_mib"] for x in res), "n_input": res[0]["n_input_tokens"],
                   "wall_s": round(time.time() - t, 1), "load_avg": round((load0 + os.getloadavg()[0]) / 2, 2),
                   "cpu": cpu_name()}
            if a.probes:
                row["gathered"] = [x["probes"][0].get("gathered_fraction") for x in res]
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_table(out, rows, [pathlib.Path(sys.executable).name] + sys.argv, a.title, asked)
        os.unlink(f.name)
        os.unlink(fq.name)
        os.unlink(fp.name)


if __name__ == "__main__":
    main()
