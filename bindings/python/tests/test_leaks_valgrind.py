"""Leak check under valgrind: the bytes valgrind reports as lost (definitely
+ indirectly) after a create/feed/select/recompute/decode/free loop must not
grow with the number of iterations. Comparing 1 and 5 iterations cancels what
the interpreter and SWIG's module teardown lose once per process; anything
lost per session, selection or model shows up as a difference. Also fails on
an invalid read or write inside lctx. (test_leaks.py checks resident memory
over many more iterations; this one sees leaks of a few bytes.)"""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

LOOP = textwrap.dedent("""
    import gc, sys
    import lctx
    doc = ("Once upon a time, there was a little girl named Lily. She loved to play outside. "
           "One day, she saw a big red ball under a tree. ") * 3
    for i in range(int(sys.argv[2])):
        m = lctx.Model(sys.argv[1], n_threads=1)
        method = lctx.Method.FULL if i % 2 == 0 else lctx.Method.STREAMING
        with m.session(n_ctx=1024, n_threads=1, method=method) as s:
            s.feed(doc)
            s.ask(" Lily saw a", max_tokens=3)
        m.close()
    gc.collect()
""")


def lost_bytes(tiny_path, tmp_path, iterations):
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    env = dict(os.environ, PYTHONMALLOC="malloc")  # valgrind sees every Python allocation
    # The child imports the package this process found (conftest puts the
    # build's package on sys.path; the child does not inherit sys.path).
    import lctx
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(lctx.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    r = subprocess.run(["valgrind", "--leak-check=full", "--show-leak-kinds=definite,indirect",
                        sys.executable, str(script), str(tiny_path), str(iterations)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    log = r.stderr
    # An invalid access anywhere in lctx's own code (the core or its wrapper).
    records = re.split(r"\n==\d+== \n", log)
    bad = [rec for rec in records if re.search(r"Invalid (read|write|free)", rec) and re.search(r"liblctx|_capi", rec)]
    assert not bad, "invalid memory access in lctx:\n" + "\n".join(bad)[:3000]

    def total(kind):
        m = re.search(rf"{kind} lost: ([\d,]+) bytes", log)
        return int(m.group(1).replace(",", "")) if m else 0

    return total("definitely") + total("indirectly"), log


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_lost_bytes_do_not_grow_with_iterations(tiny_path, tmp_path):
    once, _ = lost_bytes(tiny_path, tmp_path, 1)
    five, log = lost_bytes(tiny_path, tmp_path, 5)
    print(f"\nvalgrind: {once} bytes lost after 1 iteration, {five} after 5")
    assert five <= once, f"lost bytes grew from {once} (1 iteration) to {five} (5 iterations):\n{log[-4000:]}"
