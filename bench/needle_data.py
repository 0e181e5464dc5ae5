"""Passkey / needle documents for REFORM evaluation and the CI needle test.

Haystack: docstrings of the Python standard library modules whose names start
with n..z (head identification uses a..m, so the two never share text), read
from the running interpreter's own library, shuffled by paragraph. Needle:
"The special magic number for {key} is {value}." at a given depth.
"""
import ast
import pathlib
import random
import re
import sysconfig


def haystack_paragraphs(first: str = "n", last: str = "z") -> list:
    """Long docstrings of the stdlib modules whose names start with first..last."""
    lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    out = []
    for f in sorted(lib.glob("*.py")):
        if not (first <= f.name[0] <= last):
            continue
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef)):
                d = ast.get_docstring(node)
                if d and len(d) > 200 and ">>>" not in d:
                    out.append(re.sub(r"\s+", " ", d))
    return out


def make_doc(n_chars: int, depth: float, seed: int):
    """Returns (document text, needle sentence, key, value)."""
    rng = random.Random(seed)
    paras = haystack_paragraphs()
    if not paras:
        raise RuntimeError("no haystack text found in the Python standard library")
    body = []
    size = 0
    while size < n_chars:
        p = rng.choice(paras)
        body.append(p)
        size += len(p) + 2
    key = rng.choice(["azure harbor", "silent meadow", "copper lantern", "northern orchard", "velvet canyon"])
    value = str(rng.randint(1000000, 9999999))
    needle = f"The special magic number for {key} is {value}."
    at = int(len(body) * depth)
    body.insert(at, needle)
    return "\n\n".join(body), needle, key, value


def question(key: str) -> str:
    return f"What is the special magic number for {key}? Answer with the number only."


if __name__ == "__main__":
    # `python bench/needle_data.py --heads-filler FILE`: the filler text of
    # head identification (`lctx heads --filler FILE`), modules a..m.
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads-filler", required=True, metavar="FILE")
    args = ap.parse_args()
    paras = haystack_paragraphs("a", "m")
    pathlib.Path(args.heads_filler).write_text("\n\n".join(paras) + "\n", encoding="utf-8")
    print(f"{len(paras)} paragraphs, {sum(len(p) for p in paras)} chars -> {args.heads_filler}")
