"""Independent numpy reference of the Gemma 3 forward pass (architecture
"gemma3" in GGUF), written from the architecture description:

  x = embedding[token] * sqrt(n_embd)
  per layer l:
    h = RMSNorm(x) with attn_norm
    q, k, v = projections; q, k get a per-head RMSNorm (attn_q_norm / attn_k_norm)
    RoPE, NEOX layout (pairs (i, i + d/2)); sliding layers use base 10000
    unscaled, global layers (every 6th: l % 6 == 5) the file's freq_base and
    scaling
    attention with scale 1/sqrt(head_dim) (1/sqrt(n_embd/n_head) for the
    62-layer model), causal by position, and on sliding layers only keys with
    pos_q - pos_k < sliding_window
    x = x + RMSNorm(attention output projection) with post_attention_norm
    h = RMSNorm(x) with ffn_norm
    x = x + RMSNorm(down(gelu_tanh(gate(h)) * up(h))) with post_ffw_norm
  logits = RMSNorm(x) with output_norm, times token_embd (tied) or output;
  cap * tanh(logits / cap) when final_logit_softcapping is set.

Norm weights are used as stored: llama.cpp's converter stores Gemma's
(1 + w) in the GGUF. Weights are read with the `gguf` package; shares no
code with the C++ engine. Used by test_gemma3_reference.py.
"""

from __future__ import annotations

import math

import numpy as np
import gguf

import gguf_readers

# The GGUF readers are shared with the Llama reference; the model math below is its own.
from llama_ref import _dequant, _field


class Gemma3Ref:
    SWA_PATTERN = 6
    SWA_ROPE_BASE = 10000.0

    def __init__(self, path: str, dtype=np.float64):
        self.dtype = dtype
        r = gguf_readers.reader(path)
        arch = _field(r, "general.architecture")
        if arch != "gemma3":
            raise ValueError(f"reference supports gemma3 only, got {arch!r}")
        p = "gemma3."
        hp = {}
        hp["n_layer"] = int(_field(r, p + "block_count"))
        hp["n_embd"] = int(_field(r, p + "embedding_length"))
        hp["n_head"] = int(_field(r, p + "attention.head_count"))
        hp["n_head_kv"] = int(_field(r, p + "attention.head_count_kv", hp["n_head"]))
        hp["head_dim"] = int(_field(r, p + "attention.key_length", hp["n_embd"] // hp["n_head"]))
        hp["n_ctx_train"] = int(_field(r, p + "context_length", 0))
        hp["eps"] = float(_field(r, p + "attention.layer_norm_rms_epsilon", 1e-6))
        hp["rope_base"] = float(_field(r, p + "rope.freq_base", 10000.0))
        hp["window"] = int(_field(r, p + "attention.sliding_window"))
        factor = float(_field(r, p + "rope.scaling.factor", 0.0))
        scaling = _field(r, p + "rope.scaling.type", "linear")
        if scaling not in ("none", "linear"):
            raise ValueError(f"unsupported rope scaling {scaling!r}")
        hp["freq_scale"] = 1.0 / factor if scaling == "linear" and factor > 0.0 else 1.0
        hp["softcap"] = float(_field(r, p + "final_logit_softcapping", 0.0))
        if hp["n_layer"] == 62:
            hp["attn_scale"] = 1.0 / math.sqrt(hp["n_embd"] // hp["n_head"])
        else:
            hp["attn_scale"] = 1.0 / math.sqrt(hp["head_dim"])
        self.hp = hp

        tensors = {t.name: t for t in r.tensors}

        def w(name):
            return _dequant(tensors[name]).astype(dtype)

        self.tok_embd = w("token_embd.weight")
        self.n_vocab = self.tok_embd.shape[0]
        self.output_norm = w("output_norm.weight")
        self.output = w("output.weight") if "output.weight" in tensors else self.tok_embd
        self.layers = []
        for i in range(hp["n_layer"]):
            b = f"blk.{i}."
            self.layers.append({k: w(b + k + ".weight") for k in (
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_q_norm", "attn_k_norm", "attn_output",
                "post_attention_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_ffw_norm")})

    def is_sliding(self, layer: int) -> bool:
        return layer % self.SWA_PATTERN != self.SWA_PATTERN - 1

    # --- pieces -------------------------------------------------------------
    def rms_norm(self, x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.hp["eps"]) * w

    def rope(self, x, pos, base, freq_scale):
        """x: [n_tok, n_heads, d]; NEOX layout: rotates the pairs (i, i + d/2)."""
        d = x.shape[-1]
        half = d // 2
        i = np.arange(half, dtype=np.float64)
        theta = freq_scale * pos.astype(np.float64)[:, None] * base ** (-2.0 * i / d)[None, :]
        cos = np.cos(theta)[:, None, :].astype(x.dtype)
        sin = np.sin(theta)[:, None, :].astype(x.dtype)
        a, b = x[..., :half], x[..., half:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)

    def attention(self, q, k, v, pos, window):
        """q [n, n_head, d], k/v [n, n_head_kv, d] -> [n, n_head * d]."""
        n_head, n_head_kv, d = self.hp["n_head"], self.hp["n_head_kv"], self.hp["head_dim"]
        group = n_head // n_head_kv
        dist = pos[:, None] - pos[None, :]                  # pos_q - pos_k
        mask = dist >= 0
        if window:
            mask &= dist < window
        out = np.empty((q.shape[0], n_head, d), dtype=q.dtype)
        for h in range(n_head):
            s = (q[:, h, :] @ k[:, h // group, :].T) * self.hp["attn_scale"]
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=1, keepdims=True)
            pr = np.exp(s)
            pr /= pr.sum(axis=1, keepdims=True)
            out[:, h, :] = pr @ v[:, h // group, :]
        return out.reshape(q.shape[0], n_head * d)

    @staticmethod
    def gelu_tanh(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    # --- forward ------------------------------------------------------------
    def forward(self, tokens, last_only=False):
        """Returns (logits [n or 1, n_vocab], hiddens: the residual stream after each layer)."""
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        pos = np.arange(n)
        d = hp["head_dim"]
        x = self.tok_embd[tokens] * self.dtype(math.sqrt(hp["n_embd"]))
        hiddens = []
        for li, L in enumerate(self.layers):
            sliding = self.is_sliding(li)
            base = self.SWA_ROPE_BASE if sliding else hp["rope_base"]
            fs = 1.0 if sliding else hp["freq_scale"]
            xn = self.rms_norm(x, L["attn_norm"])
            q = self.rms_norm((xn @ L["attn_q"].T).reshape(n, hp["n_head"], d), L["attn_q_norm"])
            k = self.rms_norm((xn @ L["attn_k"].T).reshape(n, hp["n_head_kv"], d), L["attn_k_norm"])
            v = (xn @ L["attn_v"].T).reshape(n, hp["n_head_kv"], d)
            q = self.rope(q, pos, base, fs)
            k = self.rope(k, pos, base, fs)
            a = self.attention(q, k, v, pos, hp["window"] if sliding else 0)
            x = x + self.rms_norm(a @ L["attn_output"].T, L["post_attention_norm"])
            xn = self.rms_norm(x, L["ffn_norm"])
            h = self.gelu_tanh(xn @ L["ffn_gate"].T) * (xn @ L["ffn_up"].T)
            x = x + self.rms_norm(h @ L["ffn_down"].T, L["post_ffw_norm"])
            hiddens.append(x.copy())
        if last_only:
            x = x[-1:]
        logits = self.rms_norm(x, self.output_norm) @ self.output.T
        if hp["softcap"] > 0.0:
            logits = hp["softcap"] * np.tanh(logits / hp["softcap"])
        return logits, hiddens
