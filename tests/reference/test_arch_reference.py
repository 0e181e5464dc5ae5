"""qwen2, qwen3, phi3, gemma2 and llama 3.x rope scaling (rope_freqs) against
llama.cpp (llama-cpp-python), on tiny random-weight F32 models written in
each architecture's exact GGUF layout (make_tiny_arch.py):

- logits of all 200 tokens of a random prompt (llama.cpp with an f32 KV
  cache, as lctx's default; with its f16 default the difference is ~5e-3) (gemma2's window is 16, so
  most rows attend across it): lctx's Forward::run (lctx_forward_dump) vs
  llama.cpp's, per-row cosine and max abs difference;
- greedy continuations: 5 prompts x 32 tokens, lctx generate vs llama.cpp's
  argmax loop, identical;
- phi3 with long-rope factors is refused with LCTX_ERR_UNSUPPORTED.

The summary line each test prints is the table of docs/models.md.
Env: LCTX_BUILD_DIR (default build/release).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("gguf")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_tiny_arch  # noqa: E402
from conftest import build_tool  # noqa: E402

N_TOKENS = 200
COS_MIN = 0.99999
N_PROMPTS, N_PREDICT = 5, 32


@pytest.fixture(scope="session")
def arch_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_arch")
    make_tiny_arch.write_all(str(d))
    return d


def _tokens(n, n_vocab, seed):
    rng = np.random.default_rng(seed)
    return [1] + [int(t) for t in rng.integers(3, n_vocab, n - 1)]


_LLAMA_CPP_LOGITS = """
import sys, json, numpy as np, llama_cpp
path, toks = sys.argv[1], json.loads(sys.argv[2])
llm = llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, logits_all=True,
                      verbose=False, n_threads=2, type_k=0, type_v=0)   # f32 KV cache, as lctx's
llm.eval(toks)
np.save(sys.argv[3], np.array(llm.scores[:len(toks)], dtype=np.float32))
"""

_LLAMA_CPP_GREEDY = """
import sys, json, numpy as np, llama_cpp
path, prompts, n_predict = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
llm = llama_cpp.Llama(model_path=path, n_ctx=512, logits_all=True, verbose=False, n_threads=2, type_k=0, type_v=0)
out = []
for ids in prompts:
    llm.reset()
    llm.eval(ids)
    got, margins = [], []
    for _ in range(n_predict):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        got.append(int(top2[1]))
        margins.append(float(logits[top2[1]] - logits[top2[0]]))
        llm.eval([got[-1]])
    out.append({"ids": got, "margins": margins})
print(json.dumps(out))
"""


def _llama_cpp(script, *args):
    pytest.importorskip("llama_cpp")
    res = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _lctx_logits(path, tokens, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_file = out_dir / "tokens.txt"
    tok_file.write_text(" ".join(map(str, tokens)))
    res = subprocess.run([str(build_tool("lctx_forward_dump")), str(path), str(out_dir), "--tokens", str(tok_file),
                          "--threads", "2"], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    n_vocab = int(res.stdout.split()[1])
    return np.fromfile(out_dir / "logits.f32", dtype=np.float32).reshape(-1, n_vocab)


@pytest.mark.parametrize("name", list(make_tiny_arch.VARIANTS))
def test_arch_logits_match_llama_cpp(name, arch_dir, tmp_path):
    path = arch_dir / (name + ".gguf")
    import gguf
    n_vocab = len(gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"].data)
    tokens = _tokens(N_TOKENS, n_vocab, seed=7)
    out = tmp_path / "llama_cpp.npy"
    _llama_cpp(_LLAMA_CPP_LOGITS, path, json.dumps(tokens), out)
    theirs = np.load(out).astype(np.float64)
    ours = _lctx_logits(path, tokens, tmp_path / "lctx").astype(np.float64)
    assert ours.shape == theirs.shape
    cos = np.sum(ours * theirs, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    diff = float(np.abs(ours - theirs).max())
    top_same = int(np.sum(ours.argmax(axis=1) == theirs.argmax(axis=1)))
    print(f"\n[arch-vs-llama.cpp] {name} n={N_TOKENS}: min cos {cos.min():.8f} (1 - cos {1 - cos.min():.2e}), "
          f"max abs diff {diff:.3g} (logits max |x| {np.abs(theirs).max():.3g}), argmax same {top_same}/{N_TOKENS}")
    assert cos.min() >= COS_MIN, f"min cosine {cos.min():.8f} at row {int(cos.argmin())}"
    # llama.cpp's GELU (gemma2's GeGLU) reads an fp16 table: ~4e-4 relative
    rel = 1e-3 if make_tiny_arch.VARIANTS[name][0] == "gemma2" else 1e-5
    assert diff <= rel * np.abs(theirs).max(), f"max abs diff {diff}"


@pytest.mark.parametrize("name", list(make_tiny_arch.VARIANTS))
def test_arch_greedy_matches_llama_cpp(name, arch_dir, lctx_cli):
    path = arch_dir / (name + ".gguf")
    rng = np.random.default_rng(11)
    prompts = [[1] + [int(t) for t in rng.integers(3, 300, int(rng.integers(4, 24)))] for _ in range(N_PROMPTS)]
    ref = json.loads(_llama_cpp(_LLAMA_CPP_GREEDY, path, json.dumps(prompts), N_PREDICT))
    exact, min_margin = 0, float("inf")
    for ids, r in zip(prompts, ref):
        res = subprocess.run([str(lctx_cli), "generate", "-m", str(path), "--prompt-ids", " ".join(map(str, ids)),
                              "-n", str(N_PREDICT), "--ignore-eos", "--print-ids", "-t", "2"],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        got = [int(x) for x in res.stdout.split()]
        min_margin = min(min_margin, min(r["margins"]))
        if got == r["ids"]:
            exact += 1
        else:
            k = next(i for i in range(min(len(got), len(r["ids"]))) if got[i] != r["ids"][i])
            print(f"  prompt {ids[:6]}...: diverges at step {k}, llama.cpp margin there {r['margins'][k]:.4g}")
    print(f"\n[arch-greedy] {name}: {exact}/{N_PROMPTS} continuations of {N_PREDICT} tokens identical "
          f"(smallest llama.cpp top-1/top-2 margin {min_margin:.3g})")
    assert exact == N_PROMPTS


def test_phi3_longrope_is_refused(arch_dir, lctx_cli):
    path = arch_dir / "tiny_phi3_longrope.gguf"
    res = subprocess.run([str(lctx_cli), "generate", "-m", str(path), "--prompt-ids", "1 5 6", "-n", "1",
                          "--print-ids", "-t", "1"], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "long-rope" in res.stderr and "not supported" in res.stderr, res.stderr
