"""Greedy generation of lctx against llama.cpp (llama-cpp-python): 32-token
continuations of 10 prompts.

- On an F32 copy of SmolLM2 (every tensor dequantized by the `gguf`
  package), both engines compute in f32 and the continuations must match
  token for token, except at a near-tie of llama.cpp's own logits.
- On the Q4_1 file itself llama.cpp quantizes activations to 8 bits inside
  its matrix products (lctx does not: it matches an f32 reference to 1e-12),
  so continuations drift apart after a few tokens. There the test checks the
  first-step logits are close and reports where each continuation diverges,
  with llama.cpp's top-1/top-2 logit margin at that step."""
import pathlib
import subprocess

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Water boils at 100 degrees Celsius at sea level. At higher altitudes,",
    "The three primary colors are",
    "Question: What is 12 times 7?\nAnswer:",
    "In 1969, Neil Armstrong",
    "A list of fruits: apple, banana,",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "<|im_start|>user\nWrite a haiku about autumn.<|im_end|>\n<|im_start|>assistant\n",
]
N_PREDICT = 32   # 64 steps took 45 + 19 s in CI; the divergence rules are the same


def llama_greedy(llm, prompt_ids, n):
    """Greedy continuation with llama.cpp; also returns the logit margins."""
    llm.reset()
    llm.eval(prompt_ids)
    out, margins = [], []
    for _ in range(n):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        tok = int(top2[1])
        out.append(tok)
        margins.append(float(logits[top2[1]] - logits[top2[0]]))
        llm.eval([tok])
    return out, margins


def lctx_greedy(cli, model, prompt_ids, n):
    ids = " ".join(map(str, prompt_ids))
    res = subprocess.run(
        [str(cli), "generate", "-m", str(model), "--prompt-ids", ids, "-n", str(n), "--ignore-eos",
         "--print-ids", "-t", "2"],
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return [int(x) for x in res.stdout.split()]


def compare(cli, model):
    """Returns (number identical, [(prompt, step, margin)], first-step logits of both)."""
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    diverged, exact = [], 0
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        ref, margins = llama_greedy(llm, ids, N_PREDICT)
        got = lctx_greedy(cli, model, ids, N_PREDICT)
        if got == ref:
            exact += 1
            continue
        n = min(len(got), len(ref))
        k = next((i for i in range(n) if got[i] != ref[i]), n)
        diverged.append((prompt, k, margins[k] if k < len(margins) else float("nan")))
    print(f"\n{model.name}: {exact}/{len(PROMPTS)} continuations identical")
    for prompt, k, m in diverged:
        print(f"  {prompt[:30]!r}: diverges at step {k}; llama.cpp top-1/top-2 margin there {m:.4f}")
    return exact, diverged


@pytest.fixture(scope="session")
def smollm2_f32(smollm2, tmp_path_factory):
    from dequantized_copy import write_f32_copy
    out = pathlib.Path(tmp_path_factory.mktemp("f32")) / "smollm2-f32.gguf"
    return pathlib.Path(write_f32_copy(str(smollm2), str(out)))


def test_greedy_matches_llama_cpp_in_f32(lctx_cli, smollm2_f32):
    exact, diverged = compare(lctx_cli, smollm2_f32)
    # Different summation orders can only flip a near-tie.
    for prompt, k, margin in diverged:
        assert margin < 0.02, f"{prompt[:30]!r} diverges at step {k} with a clear margin {margin:.4f}"
    assert exact >= 9


def test_greedy_on_q4_1_reports_divergence(lctx_cli, smollm2):
    exact, diverged = compare(lctx_cli, smollm2)
    # Only llama.cpp's 8-bit activations separate the two: the first
    # generated token agrees except at small margins.
    for prompt, k, margin in diverged:
        assert k > 0 or margin < 0.2, f"{prompt[:30]!r}: first token differs at margin {margin:.4f}"
    assert exact + len(diverged) == len(PROMPTS)
