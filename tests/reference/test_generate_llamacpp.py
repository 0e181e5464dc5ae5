"""Greedy generation of lctx against llama.cpp (llama-cpp-python) on the same
GGUF: 64-token continuations of 10 prompts must match token for token. A
divergence is reported with llama.cpp's top-1/top-2 logit margin at that step
(a near-tie can flip under different float summation orders)."""
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
N_PREDICT = 64


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


def test_greedy_continuations_match_llama_cpp(lctx_cli, smollm2):
    llm = llama_cpp.Llama(model_path=str(smollm2), n_ctx=512, n_threads=2, logits_all=True, verbose=False)
    report, exact = [], 0
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        ref, margins = llama_greedy(llm, ids, N_PREDICT)
        got = lctx_greedy(lctx_cli, smollm2, ids, N_PREDICT)
        if got == ref:
            exact += 1
            continue
        k = next(i for i in range(min(len(got), len(ref))) if got[i] != ref[i]) if len(got) == len(ref) else \
            min(len(got), len(ref))
        report.append(f"prompt {prompt[:30]!r}: diverges at step {k}; llama.cpp margin there "
                      f"{margins[k] if k < len(margins) else float('nan'):.4f}")
    print(f"\n{exact}/{len(PROMPTS)} continuations identical")
    for line in report:
        print(line)
    # A divergence is only acceptable at a near-tie of llama.cpp's own logits.
    for line in report:
        margin = float(line.rsplit(" ", 1)[1])
        assert margin < 0.05, "divergence at a clear margin: " + line
    assert exact >= 8, "\n".join(report)
