#!/usr/bin/env python3
"""Before/after check of a refactor: every method on the same input through two
builds of lctx (tests/tools/method_answers.cpp), answers compared token for
token and the decode logits within a relative tolerance.

    .venv/bin/python bench/compare_methods.py --before /path/old/build --after build/release \
        --chars 30000 --seed 1 [--methods full,reform,...] [--out docs/results/x.md]

The document is a needle haystack (bench/needle_data.py) of about --chars
characters, asked for its needle through the chat template. Exit status 1
when any method's answer differs or its logits differ by more than --tol
(max |a - b| / max |a| over the first decode steps).
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import needle_data  # noqa: E402

METHODS = "full,reform,truncate,streaming,h2o,tova,snapkv,infinipot,infllm"


def run(build, model, doc, question, methods, threads, steps):
    tool = Path(build) / "tests" / "lctx_method_answers"
    cmd = [str(tool), "--model", model, "--doc-file", doc, "--question", question, "--methods", methods,
           "--steps", str(steps), "--logit-steps", "4", "--threads", str(threads)]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{tool} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout), time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="build directory of the old code")
    ap.add_argument("--after", required=True, help="build directory of the new code")
    ap.add_argument("-m", "--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--chars", type=int, default=30000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--methods", default=METHODS)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--out", default="", help="append a Markdown table here")
    ap.add_argument("--cache", default="", help="keep the --before outputs here and reuse them (the old build "
                    "does not change; its FULL run at 32K takes minutes)")
    a = ap.parse_args()

    text, needle, key, value = needle_data.make_doc(a.chars, 0.5, a.seed)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
        doc = f.name
    q = needle_data.question(key)
    key = hashlib.sha256(f"{Path(a.before).resolve()} {a.model} {a.chars} {a.seed} {a.methods} {a.steps}".encode())
    cached = Path(a.cache) / f"before-{key.hexdigest()[:16]}.json" if a.cache else None
    if cached and cached.exists():
        old, t_old = json.loads(cached.read_text()), float("nan")
    else:
        old, t_old = run(a.before, a.model, doc, q, a.methods, a.threads, a.steps)
        if cached:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(old))
    new, t_new = run(a.after, a.model, doc, q, a.methods, a.threads, a.steps)
    os.unlink(doc)
    rows, ok = [], True
    for m in a.methods.split(","):
        x, y = old["methods"][m], new["methods"][m]
        diff = max(abs(p - r) for lx, ly in zip(x["logits"], y["logits"]) for p, r in zip(lx, ly))
        scale = max(abs(p) for lx in x["logits"] for p in lx)
        rel = diff / scale if scale else diff
        same = x["tokens"] == y["tokens"] and x["selected_hash"] == y["selected_hash"]
        ok = ok and same and rel <= a.tol
        rows.append(f"| {m} | {old['n_doc']} | {'yes' if same else 'NO'} | {rel:.2e} |")
        print(rows[-1], flush=True)
    md = [f"### {old['n_doc']} document tokens (seed {a.seed}), {datetime.date.today()}, "
          f"{platform.processor() or platform.machine()}, {a.threads} threads",
          "", f"before: `{a.before}` ({t_old:.0f} s), after: `{a.after}` ({t_new:.0f} s)", "",
          "| method | doc tokens | same answer and selection | max rel. logit diff (4 steps) |",
          "|---|---:|---|---:|", *rows, ""]
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(md) + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
