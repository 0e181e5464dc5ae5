"""Forward::run (via lctx_forward_dump) against the numpy reference llama_ref.py.

Models: the tiny random-weight variants of make_tiny_model.py (F32, F16,
Q8_0, Q4_1, tied, linear and YaRN RoPE scaling), stories260K (tests/data/) and
SmolLM2-135M (models/; a missing model fails the test). Prompts of 1, 7, 100
and 2,000 random tokens. Checks every row of logits (cosine >= 0.9999) and the
residual stream after every layer (max abs diff relative to the largest
magnitude <= 1e-3).

Env: LCTX_BUILD_DIR (default build/release), LCTX_MODELS_DIR (default models/).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_ref  # noqa: E402
import make_tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _dir_from_env(var, default):
    p = Path(os.environ.get(var, default))
    return p if p.is_absolute() else ROOT / p


BUILD = _dir_from_env("LCTX_BUILD_DIR", "build/release")
MODELS = _dir_from_env("LCTX_MODELS_DIR", "models")
DUMP = BUILD / "tests" / "lctx_forward_dump"
STORIES = ROOT / "tests" / "data" / "stories260K.gguf"
SMOLLM = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"

LENGTHS = [1, 7, 100, 2000]
COS_MIN = 0.9999
HIDDEN_REL_MAX = 1e-3


@pytest.fixture(scope="session")
def dump_tool():
    if not DUMP.exists():
        pytest.skip(f"{DUMP} not built (set LCTX_BUILD_DIR)")
    return DUMP


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_models")
    make_tiny_model.write_all(str(d))
    return d


def _model_path(name, tiny_dir):
    if name.startswith("tiny_"):
        return tiny_dir / (name + ".gguf")
    path = {"stories260K": STORIES, "smollm2": SMOLLM}[name]
    if not path.exists():
        hint = "committed under tests/data/" if name == "stories260K" else "run scripts/fetch-models.sh"
        pytest.fail(f"model missing: {path} ({hint})", pytrace=False)
    return path


@functools.lru_cache(maxsize=2)
def _reference(path: str):
    # float64 for the small models, float32 (with float32 matmuls) for SmolLM2
    big = os.path.getsize(path) > 50_000_000
    return llama_ref.LlamaRef(path, dtype=np.float32 if big else np.float64)


def _run_dump(tool, model, tokens, out_dir, last=False, batch=0, n_layers=-1):
    out_dir.mkdir(parents=True, exist_ok=True)
    tok_file = out_dir / "tokens.txt"
    tok_file.write_text(" ".join(str(t) for t in tokens))
    cmd = [str(tool), str(model), str(out_dir), "--tokens", str(tok_file), "--threads", "2"]
    if last:
        cmd.append("--last")
    if batch:
        cmd += ["--batch", str(batch)]
    if n_layers >= 0:
        cmd += ["--n-layers", str(n_layers)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    n, n_vocab, n_embd, n_layers = (int(x) for x in res.stdout.split())
    logits = np.fromfile(out_dir / "logits.f32", dtype=np.float32).reshape(-1, n_vocab)
    hidden = np.fromfile(out_dir / "hidden.f32", dtype=np.float32).reshape(n_layers, n, n_embd)
    return logits, hidden


def _compare(label, ref_logits, ref_hidden, logits, hidden):
    assert logits.shape == ref_logits.shape
    r = ref_logits.astype(np.float64)
    o = logits.astype(np.float64)
    cos = np.sum(r * o, axis=1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(o, axis=1))
    logit_abs = float(np.abs(r - o).max())
    worst_rel = 0.0
    worst_abs = 0.0
    for layer, (rh, oh) in enumerate(zip(ref_hidden, hidden)):
        diff = float(np.abs(rh.astype(np.float64) - oh).max())
        rel = diff / max(float(np.abs(rh).max()), 1e-30)
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, rel)
        assert rel <= HIDDEN_REL_MAX, f"{label}: layer {layer} hidden max abs diff {diff:.3g} (rel {rel:.3g})"
    print(f"\n[forward-ref] {label}: 1 - min cos {1 - cos.min():.2e}, logits max abs diff {logit_abs:.3g}, "
          f"hidden max abs diff {worst_abs:.3g} (rel {worst_rel:.3g})")
    assert cos.min() >= COS_MIN, f"{label}: min logits cosine {cos.min():.8f} at row {int(cos.argmin())}"


def _tokens(n, n_vocab, seed):
    rng = np.random.default_rng(seed)
    return [1] + [int(t) for t in rng.integers(3, n_vocab, n - 1)]


TINY = list(make_tiny_model.VARIANTS)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", TINY + ["stories260K", "smollm2"])
def test_forward_matches_reference(name, n, dump_tool, tiny_dir, tmp_path):
    path = _model_path(name, tiny_dir)
    ref = _reference(str(path))
    if ref.hp["n_ctx_train"] and n > ref.hp["n_ctx_train"]:
        pytest.skip(f"{n} tokens exceed the model's context of {ref.hp['n_ctx_train']}")
    tokens = _tokens(n, ref.n_vocab, seed=n)
    # all-rows logits, except for the big vocabulary at long prompts
    last = name == "smollm2" and n > 100
    ref_logits, ref_hidden = ref.forward(tokens, last_only=last)
    logits, hidden = _run_dump(dump_tool, path, tokens, tmp_path, last=last)
    _compare(f"{name} n={n}", ref_logits, ref_hidden, logits, hidden)


@pytest.mark.parametrize("name", ["tiny_q8_0", "stories260K"])
def test_forward_in_several_calls_matches_reference(name, dump_tool, tiny_dir, tmp_path):
    """The same tokens fed in calls of 7 tokens (each attending to the cache)."""
    path = _model_path(name, tiny_dir)
    ref = _reference(str(path))
    tokens = _tokens(100, ref.n_vocab, seed=7)
    ref_logits, ref_hidden = ref.forward(tokens)
    logits, hidden = _run_dump(dump_tool, path, tokens, tmp_path, batch=7)
    _compare(f"{name} n=100 in calls of 7", ref_logits, ref_hidden, logits, hidden)


@pytest.mark.parametrize("name", ["tiny_f16", "stories260K"])
def test_early_exit_matches_reference(name, dump_tool, tiny_dir, tmp_path):
    """Only the first layer run (output head applied to its hidden state)."""
    path = _model_path(name, tiny_dir)
    ref = _reference(str(path))
    tokens = _tokens(50, ref.n_vocab, seed=9)
    ref_logits, ref_hidden = ref.forward(tokens, n_layers=1)
    logits, hidden = _run_dump(dump_tool, path, tokens, tmp_path, n_layers=1)
    _compare(f"{name} n=50 first layer only", ref_logits, ref_hidden, logits, hidden)


_LLAMA_CPP_SCRIPT = """
import sys, json, numpy as np, llama_cpp
path, toks = sys.argv[1], json.loads(sys.argv[2])
llm = llama_cpp.Llama(model_path=path, n_ctx=max(512, len(toks) + 8), n_batch=512, n_ubatch=512,
                      logits_all=True, verbose=False, n_threads=2)
llm.eval(toks)
np.save(sys.argv[3], np.array(llm.scores[:len(toks)], dtype=np.float32))
"""


@pytest.mark.parametrize("name", ["tiny_f32", "tiny_rope_yarn", "stories260K"])
def test_reference_matches_llama_cpp(name, tiny_dir, tmp_path):
    """Checks the numpy reference itself against llama.cpp (F32 weights, so
    llama.cpp's quantized activations play no part). Run in a subprocess:
    llama.cpp may crash on unusual tiny models."""
    pytest.importorskip("llama_cpp")
    path = _model_path(name, tiny_dir)
    ref = _reference(str(path))
    tokens = _tokens(300, ref.n_vocab, seed=1)
    out = tmp_path / "llama_cpp_logits.npy"
    res = subprocess.run([sys.executable, "-c", _LLAMA_CPP_SCRIPT, str(path), str(tokens), str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    theirs = np.load(out).astype(np.float64)
    ours, _ = ref.forward(tokens)
    cos = np.sum(ours * theirs, axis=1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
    print(f"\n[ref-vs-llama.cpp] {name} n=300: 1 - min cos {1 - cos.min():.2e}, "
          f"max abs diff {np.abs(ours - theirs).max():.3g}")
    assert cos.min() >= COS_MIN
