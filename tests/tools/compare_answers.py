#!/usr/bin/env python3
"""The method regression test: runs lctx_method_answers (every method through
the C API on one fixed input) and compares its output with a golden file made
by the build before a refactor (tests/data/method_answers_*.json, written by
the commit named in tests/data/README.md). Answers and selections must be
identical; the logits of the first decode steps must agree within --tol
relative (max |a - b| / max |a|). Independently of the golden file, the
answers are greedy, so the logits read before decode step i
(lctx_session_logits) must have their maximum at token i.

    compare_answers.py [--tol 1e-4] GOLDEN.json -- lctx_method_answers ARGS...

Stdlib only, so CI needs no venv for it.
"""
import json
import subprocess
import sys


def main(argv):
    tol = 1e-4
    if argv[:1] == ["--tol"]:
        tol = float(argv[1])
        argv = argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        sys.exit(__doc__)
    golden = json.load(open(argv[0]))
    r = subprocess.run(argv[2:], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{argv[2]} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    got = json.loads(r.stdout)
    bad = []
    for key in ("n_doc", "n_query", "n_vocab"):
        if golden[key] != got[key]:
            bad.append(f"{key}: {got[key]} != golden {golden[key]}")
    for name, want in golden["methods"].items():
        have = got["methods"].get(name)
        if have is None:
            bad.append(f"{name}: missing from the output")
            continue
        for key in ("tokens", "n_selected", "selected_hash"):
            if have[key] != want[key]:
                bad.append(f"{name}: {key} {have[key]} != golden {want[key]}")
        diff = max((abs(a - b) for la, lb in zip(want["logits"], have["logits"]) for a, b in zip(la, lb)), default=0)
        scale = max((abs(a) for la in want["logits"] for a in la), default=1.0) or 1.0
        rel = diff / scale
        if len(have["logits"]) != len(want["logits"]) or rel > tol:
            bad.append(f"{name}: logits differ by {rel:.3g} relative (tolerance {tol:g})")
        for i, row in enumerate(have["logits"]):
            best = max(range(len(row)), key=row.__getitem__)
            if i < len(have["tokens"]) and best != have["tokens"][i]:
                bad.append(f"{name}: the logits read before decode step {i} peak at token {best}, "
                           f"but the greedy decode chose {have['tokens'][i]}")
        print(f"{name:10s} answer {'same' if have['tokens'] == want['tokens'] else 'DIFFERENT'}, "
              f"max rel logit diff {rel:.3g}")
    if bad:
        print("\n".join(["FAILED:"] + bad))
        return 1
    print("all methods match the golden answers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
