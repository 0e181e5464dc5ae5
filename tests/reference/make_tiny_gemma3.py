"""Writes small random-weight Gemma 3 GGUF models with gguf.GGUFWriter.

7 layers (layers 0-4 and 6 sliding, layer 5 global, as Gemma 3's every-6th
pattern gives), n_embd 64, 2 heads of head_dim 32 (key_length, not
n_embd / n_head), 1 KV head, n_ff 128, sliding window 16 (shorter than the
test prompts, so both layer kinds matter), global RoPE base 1e6, the
300-token SentencePiece vocab of make_tiny_model.py, tied output. Norm
weights around 1 (the GGUF stores Gemma's 1 + w).

    python make_tiny_gemma3.py OUT_DIR     # writes every variant
"""

from __future__ import annotations

import os
import sys

import numpy as np
import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_model import spm_vocab  # noqa: E402

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF, WINDOW = 7, 64, 2, 1, 32, 128, 16

VARIANTS = {
    "tiny_gemma3_f32": dict(qtype="F32"),
    "tiny_gemma3_q8_0": dict(qtype="Q8_0"),
    "tiny_gemma3_softcap": dict(qtype="F32", softcap=3.0),
}


def write_model(path: str, qtype: str = "F32", softcap: float = 0.0, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    tokens, scores, types = spm_vocab()
    n_vocab = len(tokens)
    qt = gguf.GGMLQuantizationType[qtype]

    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name(os.path.basename(path))
    w.add_context_length(4096)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    w.add_sliding_window(WINDOW)
    if softcap:
        w.add_final_logit_softcapping(softcap)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def add(name, arr, quantize=True):
        arr = arr.astype(np.float32)
        if not quantize or qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qt), raw_dtype=qt)

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm(n):
        return 1.0 + 0.2 * rng.standard_normal(n)

    # small embeddings: the forward pass multiplies them by sqrt(n_embd)
    add("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)) / np.sqrt(N_EMBD))
    add("output_norm.weight", norm(N_EMBD), quantize=False)
    for i in range(N_LAYER):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", norm(N_EMBD), quantize=False)
        add(b + "attn_q.weight", mat(N_HEAD * HEAD_DIM, N_EMBD))
        add(b + "attn_k.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD))
        add(b + "attn_v.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD))
        add(b + "attn_q_norm.weight", norm(HEAD_DIM), quantize=False)
        add(b + "attn_k_norm.weight", norm(HEAD_DIM), quantize=False)
        add(b + "attn_output.weight", mat(N_EMBD, N_HEAD * HEAD_DIM))
        add(b + "post_attention_norm.weight", norm(N_EMBD), quantize=False)
        add(b + "ffn_norm.weight", norm(N_EMBD), quantize=False)
        add(b + "ffn_gate.weight", mat(N_FF, N_EMBD))
        add(b + "ffn_up.weight", mat(N_FF, N_EMBD))
        add(b + "ffn_down.weight", mat(N_EMBD, N_FF))
        add(b + "post_ffw_norm.weight", norm(N_EMBD), quantize=False)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_all(out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    return {name: write_model(os.path.join(out_dir, name + ".gguf"), seed=200 + i, **opts)
            for i, (name, opts) in enumerate(VARIANTS.items())}


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for p in write_all(out).values():
        print(p)
