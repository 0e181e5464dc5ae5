#!/usr/bin/env python3
"""llama.cpp side of the benchmark, through llama-cpp-python's low-level API.

Measures what `lctx bench` measures, the same way: prefill of N random token
ids into an empty context (logits for the last token only, batches of
n_batch tokens, n_ubatch per compute graph: llama.cpp's defaults 2048/512),
and single-token decode steps after a prompt of --decode-ctx tokens. Prints
one JSON object in the format of `lctx bench`.

Usage: llama_cpp_bench.py -m MODEL [-t THREADS] [-p 512,2048,8192]
                           [--decode-ctx 8192] [-n 32] [-r 3] [--flash-attn auto|on|off]
"""
import argparse
import ctypes
import json
import os
import random
import resource
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", "--prompts", default="512,2048,8192")
    ap.add_argument("--decode-ctx", type=int, default=8192)
    ap.add_argument("-n", "--n-decode", type=int, default=32)
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("--n-batch", type=int, default=2048)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--kv-type", choices=["f16", "q8_0"], default="f16",
                    help="element type of llama.cpp's K and V cache (q8_0 needs flash attention)")
    args = ap.parse_args()
    prompts = [int(x) for x in args.prompts.split(",") if x]

    import llama_cpp as L

    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda level, text, user_data: None)   # keep a reference: C holds it
    L.llama_log_set(quiet, ctypes.c_void_p())
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(args.model.encode(), mp)
    if not model:
        sys.exit(f"llama.cpp could not load {args.model}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    n_ctx = max(prompts + [args.decode_ctx]) + args.n_decode + 16
    cp = L.llama_context_default_params()
    cp.n_ctx = n_ctx
    cp.n_batch = args.n_batch
    cp.n_ubatch = args.n_ubatch
    cp.n_threads = args.threads
    cp.n_threads_batch = args.threads
    cp.no_perf = True
    cp.flash_attn_type = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[args.flash_attn]
    if args.kv_type == "q8_0":
        cp.type_k = cp.type_v = L.GGML_TYPE_Q8_0
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(args.n_batch, 0, 1)
    rng = random.Random(1234)

    def run(tokens, pos0, last_logits=True):
        """Decodes tokens at positions pos0.. in batches of n_batch."""
        for b0 in range(0, len(tokens), args.n_batch):
            chunk = tokens[b0:b0 + args.n_batch]
            batch.n_tokens = len(chunk)
            for i, t in enumerate(chunk):
                batch.token[i] = t
                batch.pos[i] = pos0 + b0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = last_logits and b0 + i == len(tokens) - 1
            rc = L.llama_decode(ctx, batch)
            if rc != 0:
                sys.exit(f"llama_decode failed ({rc})")
        L.llama_synchronize(ctx)

    def prefill(n):
        L.llama_memory_clear(mem, True)
        toks = [rng.randrange(n_vocab) for _ in range(n)]
        t0 = time.perf_counter()
        run(toks, 0)
        return time.perf_counter() - t0

    def decode(pos0, n):
        toks = [rng.randrange(n_vocab) for _ in range(n)]
        t0 = time.perf_counter()
        for i, t in enumerate(toks):
            run([t], pos0 + i)
        return time.perf_counter() - t0

    prefill(32)   # warm-up: weights paged in, threads started
    prefill_tps = {p: [] for p in prompts}
    decode_tps = []
    for _ in range(args.repeats):   # repeats outermost, as in lctx bench
        for p in prompts:
            prefill_tps[p].append(p / prefill(p))
            if p == args.decode_ctx:
                decode_tps.append(args.n_decode / decode(p, args.n_decode))
        if args.decode_ctx > 0 and args.decode_ctx not in prompts:
            prefill(args.decode_ctx)
            decode_tps.append(args.n_decode / decode(args.decode_ctx, args.n_decode))

    out = {
        "model": args.model,
        "threads": args.threads,
        "engine": f"llama.cpp via llama-cpp-python {L.__version__}",
        "system_info": L.llama_print_system_info().decode().strip(),
        "settings": {"n_batch": args.n_batch, "n_ubatch": args.n_ubatch, "flash_attn": args.flash_attn,
                     "type_k": args.kv_type, "type_v": args.kv_type, "n_ctx": n_ctx},
        "prefill": [{"n_prompt": p, "tok_s": [round(v, 3) for v in prefill_tps[p]]} for p in prompts],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    if args.decode_ctx > 0:
        out["decode"] = {"n_ctx": args.decode_ctx, "n_decode": args.n_decode,
                         "tok_s": [round(v, 3) for v in decode_tps]}
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
