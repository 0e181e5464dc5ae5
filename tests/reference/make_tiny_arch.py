"""Writes small random-weight GGUF models of the architectures lctx loads
besides llama and gemma3, each in its architecture's exact tensor layout and
metadata (as llama.cpp's converter writes them; docs/models.md):

- qwen2: q/k/v biases, NEOX RoPE; tied and untied output.
- qwen3: per-head Q/K RMSNorm, head_dim (key_length 32) != n_embd / n_head.
- phi3: fused attn_qkv and fused gate+up ffn_up (no ffn_gate).
- phi3_longrope: phi3 with rope_factors_long/short (lctx refuses it).
- gemma2: alternating sliding (window 16) / global layers, attention and
  final logit soft-capping, post-norms, GeGLU, scaled embeddings.
- llama3_rope: llama with a rope_freqs tensor (llama 3.x rope scaling
  factors, not all 1) and RoPE base 500000.

F32 weights, n_embd 64, 4 heads, 2 KV heads, the 300-token SentencePiece
vocab of make_tiny_model.py. Output weights are scaled up so the logits
spread (std ~4) and greedy tokens are separated by clear margins.

    python make_tiny_arch.py OUT_DIR     # writes every variant
"""

from __future__ import annotations

import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_model import spm_vocab  # noqa: E402

N_EMBD, N_HEAD, N_HEAD_KV, N_FF = 64, 4, 2, 128
WINDOW = 16          # gemma2's sliding window: shorter than the test prompts
OUT_SCALE = 4.0      # logits std ~4

# name -> (architecture, options)
VARIANTS = {
    "tiny_qwen2": ("qwen2", dict(tied=False)),
    "tiny_qwen2_tied": ("qwen2", dict(tied=True)),
    "tiny_qwen3": ("qwen3", dict(tied=True, head_dim=32)),
    "tiny_phi3": ("phi3", dict(tied=False)),
    "tiny_gemma2": ("gemma2", dict(tied=True, n_layer=4)),
    "tiny_llama3_rope": ("llama", dict(tied=False, rope_freqs=True)),
}
# written by write_all too, but refused by lctx (not in the comparisons)
REFUSED = {
    "tiny_phi3_longrope": ("phi3", dict(tied=False, longrope=True)),
}


def llama3_rope_factors(n_pairs: int, base: float) -> np.ndarray:
    """The factors llama.cpp's converter writes for llama3 rope scaling
    (factor 8, low/high frequency factors 1 and 4, original context 8192),
    computed here from the published formula so that they differ from 1
    over a good share of the pairs at this small head size."""
    factor, low, high, old_ctx = 8.0, 1.0, 4.0, 64   # old_ctx small: most pairs are "low frequency"
    low_wl, high_wl = old_ctx / low, old_ctx / high
    out = []
    for i in range(n_pairs):
        freq = base ** (-2.0 * i / (2 * n_pairs))
        wl = 2 * np.pi / freq
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(factor)
        else:
            smooth = (old_ctx / wl - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_model(path: str, arch: str, tied: bool = False, n_layer: int = 2, head_dim: int = 0,
                rope_freqs: bool = False, longrope: bool = False, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    tokens, scores, types = spm_vocab()
    if arch == "phi3":   # llama.cpp's vocabulary loader looks these up for phi3
        for t in ("<|endoftext|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"):
            tokens, scores, types = tokens + [t], scores + [0.0], types + [gguf.TokenType.CONTROL]
    n_vocab = len(tokens)
    hd = head_dim or N_EMBD // N_HEAD
    Q, KV = N_HEAD * hd, N_HEAD_KV * hd
    base = 500000.0 if rope_freqs else 10000.0

    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.basename(path))
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    if head_dim:
        w.add_key_length(hd)
        w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(base)
    if arch == "gemma2":
        w.add_sliding_window(WINDOW)
        w.add_attn_logit_softcapping(8.0)     # small enough to bend the larger scores
        w.add_final_logit_softcapping(10.0)
    if longrope:
        w.add_rope_scaling_orig_ctx_len(4096)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def add(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))

    def mat(rows, cols, gain=1.0):
        return gain * rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    if arch == "gemma2":   # the forward pass multiplies embeddings by sqrt(n_embd)
        add("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)) * OUT_SCALE / np.sqrt(N_EMBD))
    else:
        add("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)) * (OUT_SCALE / np.sqrt(N_EMBD) if tied else 1.0))
    add("output_norm.weight", norm(N_EMBD))
    if not tied:
        add("output.weight", mat(n_vocab, N_EMBD, OUT_SCALE))
    if rope_freqs:
        add("rope_freqs.weight", llama3_rope_factors(hd // 2, base))
    if longrope:
        add("rope_factors_long.weight", 1.0 + rng.random(hd // 2))
        add("rope_factors_short.weight", np.ones(hd // 2))
    qk_gain = 2.5 if arch == "gemma2" else 1.0   # larger scores, so the soft-cap matters
    for i in range(n_layer):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", norm(N_EMBD))
        wq, wk, wv = mat(Q, N_EMBD, qk_gain), mat(KV, N_EMBD, qk_gain), mat(KV, N_EMBD)
        if arch == "phi3":
            add(b + "attn_qkv.weight", np.concatenate([wq, wk, wv], axis=0))
        else:
            add(b + "attn_q.weight", wq)
            add(b + "attn_k.weight", wk)
            add(b + "attn_v.weight", wv)
        if arch == "qwen2":
            add(b + "attn_q.bias", 0.5 * rng.standard_normal(Q))
            add(b + "attn_k.bias", 0.5 * rng.standard_normal(KV))
            add(b + "attn_v.bias", 0.5 * rng.standard_normal(KV))
        if arch == "qwen3":
            add(b + "attn_q_norm.weight", norm(hd))
            add(b + "attn_k_norm.weight", norm(hd))
        add(b + "attn_output.weight", mat(N_EMBD, Q))
        if arch == "gemma2":
            add(b + "post_attention_norm.weight", norm(N_EMBD))
            add(b + "post_ffw_norm.weight", norm(N_EMBD))
        add(b + "ffn_norm.weight", norm(N_EMBD))
        gate, up = mat(N_FF, N_EMBD), mat(N_FF, N_EMBD)
        if arch == "phi3":   # rows [0, n_ff): gate, [n_ff, 2 n_ff): up
            add(b + "ffn_up.weight", np.concatenate([gate, up], axis=0))
        else:
            add(b + "ffn_gate.weight", gate)
            add(b + "ffn_up.weight", up)
        add(b + "ffn_down.weight", mat(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_all(out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    return {name: write_model(os.path.join(out_dir, name + ".gguf"), arch, seed=300 + i, **opts)
            for i, (name, (arch, opts)) in enumerate({**VARIANTS, **REFUSED}.items())}


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for p in write_all(out).values():
        print(p)
