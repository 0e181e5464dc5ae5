"""A needle question about a long document through `lctx serve` and the
official openai client: starts the server, uploads a haystack document with a
needle (bench/needle_data.py) to /v1/documents, waits for its encoding, asks
for the needle by document_id, prints one JSON line (times, answer, found).

usage: python bench/serve_needle.py [--lctx build/release/tools/lctx] [--model M]
       [--chars 400000] [--depth 0.5] [--method reform] [--threads N]
(docs/results/serve-smollm2.md has a run)
"""
import argparse
import json
import pathlib
import re
import subprocess
import threading
import time
import urllib.request

import openai

import needle_data

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lctx", default=str(ROOT / "build" / "release" / "tools" / "lctx"))
    ap.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--chars", type=int, default=400000)
    ap.add_argument("--depth", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--method", default="reform")
    ap.add_argument("--threads", default="0")
    ap.add_argument("--max-memory", default="8192")
    args = ap.parse_args()

    cmd = [args.lctx, "serve", "-m", args.model, "--port", "0", "--timeout", "7200", "--max-memory", args.max_memory]
    if args.threads != "0":
        cmd += ["--threads", args.threads]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port, started = [], threading.Event()

    def drain():
        for line in proc.stderr:
            m = re.search(r"on http://[^:]+:(\d+)", line)
            if m and not port:
                port.append(int(m.group(1)))
                started.set()
        started.set()

    threading.Thread(target=drain, daemon=True).start()
    started.wait(120)
    url = f"http://127.0.0.1:{port[0]}"
    try:
        doc, needle, key, value = needle_data.make_doc(n_chars=args.chars, depth=args.depth, seed=args.seed)
        t0 = time.time()
        req = urllib.request.Request(url + "/v1/documents", method="POST", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"text": doc, "method": args.method}).encode())
        d = json.load(urllib.request.urlopen(req))
        while d["state"] not in ("ready", "failed"):
            time.sleep(1)
            d = json.load(urllib.request.urlopen(f"{url}/v1/documents/{d['id']}"))
        t_encode = time.time() - t0
        if d["state"] != "ready":
            raise SystemExit(f"encoding failed: {d}")
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", timeout=7200, max_retries=0)
        model = client.models.list().data[0].id
        t1 = time.time()
        r = client.chat.completions.create(model=model, temperature=0, max_tokens=32,
                                           messages=[{"role": "user", "content": needle_data.question(key)}],
                                           extra_body={"document_id": d["id"]})
        t_answer = time.time() - t1
        answer = r.choices[0].message.content
        print(json.dumps({"method": d["method"], "document_tokens": d["tokens_total"], "needle_depth": args.depth,
                          "encode_s_client": round(t_encode, 1), "encode_s_server": round(d["encode_seconds"], 1),
                          "answer_s": round(t_answer, 1), "answer": answer, "expected": value,
                          "found": value in answer, "completion_tokens": r.usage.completion_tokens}))
    finally:
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
