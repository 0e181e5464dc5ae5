"""Writes small random-weight llama GGUF models with gguf.GGUFWriter.

Each model has 2 layers, n_embd 64, 4 heads (head_dim 16), 2 KV heads,
n_ff 128 and a 300-token SentencePiece vocab (<unk>, <s>, </s>, 256 byte
tokens, 41 pieces with scores). Variants differ in weight type (F32, F16,
Q8_0, Q4_1 via gguf.quants.quantize), tied/untied output and RoPE scaling.

    python make_tiny_model.py OUT_DIR     # writes every variant
"""

from __future__ import annotations

import os
import sys

import numpy as np
import gguf

N_LAYER, N_EMBD, N_HEAD, N_HEAD_KV, N_FF = 2, 64, 4, 2, 128
HEAD_DIM = N_EMBD // N_HEAD

# name -> options
VARIANTS = {
    "tiny_f32": dict(qtype="F32", tied=False),
    "tiny_f32_tied": dict(qtype="F32", tied=True),
    "tiny_f16": dict(qtype="F16", tied=False),
    "tiny_q8_0": dict(qtype="Q8_0", tied=False),
    "tiny_q4_1": dict(qtype="Q4_1", tied=True),
    "tiny_rope_linear": dict(qtype="F32", tied=False, scaling=("linear", 4.0)),
    "tiny_rope_yarn": dict(qtype="F32", tied=False, scaling=("yarn", 4.0)),
}

_PIECES = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + [
    "\u2581t", "\u2581th", "\u2581the", "he", "in", "\u2581a", "an", "er", "on",
    "\u2581s", "en", "at", "re", "\u2581o"]


def spm_vocab():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + _PIECES
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
        [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(_PIECES)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(_PIECES))]
    # longer merges should win: give multi-char pieces higher scores
    for i, p in enumerate(_PIECES):
        scores[259 + i] = float(len(p)) - 0.01 * i
    assert len(tokens) == 300
    return tokens, scores, types


def write_model(path: str, qtype: str = "F32", tied: bool = False, scaling=None, seed: int = 0,
                n_ctx: int = 4096) -> str:
    rng = np.random.default_rng(seed)
    tokens, scores, types = spm_vocab()
    n_vocab = len(tokens)
    qt = gguf.GGMLQuantizationType[qtype]

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(os.path.basename(path))
    w.add_context_length(n_ctx)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    if scaling is not None:
        kind, factor = scaling
        w.add_rope_scaling_type(gguf.RopeScalingType(kind))
        w.add_rope_scaling_factor(factor)
        w.add_rope_scaling_orig_ctx_len(256)
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
        elif qt == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, arr.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(arr, qt), raw_dtype=qt)

    def mat(rows, cols):
        return rng.standard_normal((rows, cols)) / np.sqrt(cols)

    def norm(n):
        return 1.0 + 0.1 * rng.standard_normal(n)

    add("token_embd.weight", rng.standard_normal((n_vocab, N_EMBD)))
    add("output_norm.weight", norm(N_EMBD), quantize=False)
    if not tied:
        add("output.weight", mat(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        b = f"blk.{i}."
        add(b + "attn_norm.weight", norm(N_EMBD), quantize=False)
        add(b + "attn_q.weight", mat(N_HEAD * HEAD_DIM, N_EMBD))
        add(b + "attn_k.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD))
        add(b + "attn_v.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD))
        add(b + "attn_output.weight", mat(N_EMBD, N_HEAD * HEAD_DIM))
        add(b + "ffn_norm.weight", norm(N_EMBD), quantize=False)
        add(b + "ffn_gate.weight", mat(N_FF, N_EMBD))
        add(b + "ffn_up.weight", mat(N_FF, N_EMBD))
        add(b + "ffn_down.weight", mat(N_EMBD, N_FF))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_all(out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for i, (name, opts) in enumerate(VARIANTS.items()):
        paths[name] = write_model(os.path.join(out_dir, name + ".gguf"), seed=100 + i, **opts)
    return paths


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for name, p in write_all(out).items():
        print(p)
