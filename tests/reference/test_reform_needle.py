"""Needle test on SmolLM2 at 16K tokens with REFORM (lctx run --json).

Checks the gather stage (the needle sentence's tokens are among the selected
spans) and that the decoded answer contains the number. The question goes
through the chat template (as `lctx run` does by default); the answer budget
(32 tokens) leaves room for "The special magic number for ... is NNNNNNN."
(17 tokens), which a 16-token budget cut before the last digit.
Runtime: about 30 s on 2 idle cores.
"""
import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import needle_data  # noqa: E402


def token_count(cli, model, text):
    out = subprocess.run([str(cli), "tokenize", "-m", str(model), "--no-special", text], capture_output=True, text=True, check=True)
    return len(out.stdout.split())


def test_needle_16k_gathered(lctx_cli, smollm2, tmp_path):
    doc, needle, key, value = needle_data.make_doc(n_chars=62000, depth=0.4, seed=7)
    path = tmp_path / "doc.txt"
    path.write_text(doc)
    r = subprocess.run([str(lctx_cli), "run", "-m", str(smollm2), "--file", str(path), "--question",
                        needle_data.question(key), "-n", "32", "--json"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["n_input_tokens"] > 14000
    # Needle position in input tokens: the chat prefix (input tokens minus the
    # document's own), then the document tokens before the needle.
    prefix = res["n_input_tokens"] - token_count(lctx_cli, smollm2, doc)
    assert 0 <= prefix < 100, prefix
    start = prefix + token_count(lctx_cli, smollm2, doc[: doc.index(needle)])
    n_needle = token_count(lctx_cli, smollm2, needle)
    selected = set()
    for a, b in res["selected_spans"]:
        selected.update(range(a, b))
    # +-2 tokens of slack for tokenization at the cut.
    hit = sum(1 for t in range(start, start + n_needle) if any(t + d in selected for d in (-2, -1, 0, 1, 2)))
    print(f"needle recall {hit}/{n_needle}; answer {res['answer']!r} (expected {value}); "
          f"encode {res['encode_tokens_per_s']:.0f} tok/s; peak RSS {res['peak_rss_mib']:.0f} MiB")
    assert hit == n_needle, f"needle not gathered: {hit}/{n_needle} tokens selected"
    assert value in res["answer"], f"answer {res['answer']!r} lacks the needle value {value}"
