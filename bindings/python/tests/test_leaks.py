"""No growth of native memory over a create/feed/ask/free loop: resident
memory after 60 more iterations stays within 24 MiB of where it was after
the warm-up. Each session holds a 4096-token KV cache (about 5 MiB on
stories260K), so leaking the sessions (or their caches) would grow memory by
about 300 MiB."""
import gc

import lctx

DOC = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
       "One day, she saw a big red ball under a tree. ") * 4


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS")


def loop(model, n):
    for i in range(n):
        method = lctx.Method.FULL if i % 2 == 0 else lctx.Method.STREAMING
        with model.session(n_ctx=4096, n_threads=1, method=method) as s:
            s.feed(DOC)
            s.ask(" Lily saw a", max_tokens=4)
    gc.collect()


def test_create_feed_ask_free_does_not_grow(model):
    loop(model, 15)
    before = rss_mib()
    loop(model, 60)
    grown = rss_mib() - before
    assert grown < 24, f"resident memory grew by {grown:.1f} MiB over 60 sessions"
