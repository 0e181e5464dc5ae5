"""Independent numpy reference of the llama forward pass.

Reads a GGUF file with the `gguf` package (GGUFReader + gguf.quants.dequantize)
and computes logits and per-layer hidden states with the math conventions of
llama.cpp: RMSNorm, NORMAL-layout RoPE (rotating the pairs (2i, 2i+1)) with
linear / YaRN scaling as ggml computes it, grouped-query attention where query
head h uses KV head h // (n_head / n_head_kv), SwiGLU MLP, output tied to the
token embeddings when output.weight is absent.

Shares no code with the C++ engine; used by test_forward_reference.py.
"""

from __future__ import annotations

import math

import numpy as np
import gguf

import gguf_readers


def _field(reader: gguf.GGUFReader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _dequant(t) -> np.ndarray:
    """Tensor as float32 with numpy shape (ne[1], ne[0]) (or (ne[0],) for 1-D)."""
    ne = [int(x) for x in t.shape]
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    a = np.asarray(a, dtype=np.float32)
    if len(ne) == 1:
        return a.reshape(ne[0])
    return a.reshape(ne[1], ne[0])


class LlamaRef:
    def __init__(self, path: str, dtype=np.float64):
        self.dtype = dtype
        r = gguf_readers.reader(path)
        arch = _field(r, "general.architecture")
        if arch != "llama":
            raise ValueError(f"reference supports llama only, got {arch!r}")
        p = "llama."
        hp = {}
        hp["n_layer"] = int(_field(r, p + "block_count"))
        hp["n_embd"] = int(_field(r, p + "embedding_length"))
        hp["n_head"] = int(_field(r, p + "attention.head_count"))
        hp["n_head_kv"] = int(_field(r, p + "attention.head_count_kv", hp["n_head"]))
        hp["head_dim"] = int(_field(r, p + "attention.key_length", hp["n_embd"] // hp["n_head"]))
        hp["n_ff"] = int(_field(r, p + "feed_forward_length"))
        hp["n_ctx_train"] = int(_field(r, p + "context_length", 0))
        hp["eps"] = float(_field(r, p + "attention.layer_norm_rms_epsilon", 1e-5))
        hp["rope_base"] = float(_field(r, p + "rope.freq_base", 10000.0))
        hp["n_rot"] = int(_field(r, p + "rope.dimension_count", hp["head_dim"]))
        # as llama.cpp: the type defaults to linear, and a factor of 0 means none
        scaling = _field(r, p + "rope.scaling.type", "linear")
        factor = float(_field(r, p + "rope.scaling.factor", _field(r, p + "rope.scale_linear", 0.0)))
        if scaling not in ("none", "linear", "yarn"):
            raise ValueError(f"unsupported rope scaling {scaling!r}")
        if factor == 0.0 or (scaling == "linear" and factor == 1.0):
            scaling = "none"
        hp["rope_scaling"] = scaling
        hp["freq_scale"] = 1.0 / factor if scaling != "none" else 1.0
        hp["orig_ctx"] = int(_field(r, p + "rope.scaling.original_context_length", hp["n_ctx_train"]))
        hp["ext_factor"] = float(_field(r, p + "rope.scaling.yarn_ext_factor", 1.0 if scaling == "yarn" else 0.0))
        hp["attn_factor"] = float(_field(r, p + "rope.scaling.yarn_attn_factor", 1.0))
        hp["beta_fast"] = float(_field(r, p + "rope.scaling.yarn_beta_fast", 32.0))
        hp["beta_slow"] = float(_field(r, p + "rope.scaling.yarn_beta_slow", 1.0))
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
                "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")})

    # --- pieces -------------------------------------------------------------
    def rms_norm(self, x, w):
        eps = self.hp["eps"]
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def _rope_cos_sin(self, pos):
        """cos/sin [n_tok, n_rot/2] as ggml's rope_yarn computes them."""
        hp = self.hp
        n_rot = hp["n_rot"]
        freq_scale = hp["freq_scale"]
        i = np.arange(n_rot // 2, dtype=np.float64)
        theta_extrap = pos.astype(np.float64)[:, None] * hp["rope_base"] ** (-2.0 * i / n_rot)[None, :]
        theta = freq_scale * theta_extrap
        mscale = hp["attn_factor"] if hp["rope_scaling"] == "yarn" else 1.0
        ext = hp["ext_factor"] if hp["rope_scaling"] == "yarn" else 0.0
        if ext != 0.0:
            def corr_dim(n_rot_beta):
                return n_rot * math.log(hp["orig_ctx"] / (n_rot_beta * 2 * math.pi)) / (2 * math.log(hp["rope_base"]))
            low = max(0.0, math.floor(corr_dim(hp["beta_fast"])))
            high = min(n_rot - 1.0, math.ceil(corr_dim(hp["beta_slow"])))
            y = (i - low) / max(0.001, high - low)   # i == i0 / 2
            ramp = (1.0 - np.clip(y, 0.0, 1.0)) * ext
            theta = theta * (1 - ramp)[None, :] + theta_extrap * ramp[None, :]
            mscale = mscale * (1.0 + 0.1 * math.log(1.0 / freq_scale))
        return np.cos(theta) * mscale, np.sin(theta) * mscale

    def rope(self, x, pos):
        """x: [n_tok, n_heads, head_dim]; rotates pairs (2i, 2i+1) for 2i < n_rot."""
        n_rot = self.hp["n_rot"]
        cos, sin = self._rope_cos_sin(pos)
        cos = cos[:, None, :].astype(x.dtype)
        sin = sin[:, None, :].astype(x.dtype)
        out = x.copy()
        x0 = x[..., 0:n_rot:2]
        x1 = x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x0 * cos - x1 * sin
        out[..., 1:n_rot:2] = x0 * sin + x1 * cos
        return out

    def attention(self, q, k, v, q_pos, kv_pos):
        """q [n, n_head, d], k/v [m, n_head_kv, d] -> [n, n_head * d]."""
        n_head, n_head_kv, d = self.hp["n_head"], self.hp["n_head_kv"], self.hp["head_dim"]
        group = n_head // n_head_kv
        mask = kv_pos[None, :] <= q_pos[:, None]          # [n, m]
        out = np.empty((q.shape[0], n_head, d), dtype=q.dtype)
        scale = 1.0 / math.sqrt(d)
        for h in range(n_head):
            kh = k[:, h // group, :]
            vh = v[:, h // group, :]
            s = (q[:, h, :] @ kh.T) * scale
            s = np.where(mask, s, -np.inf)
            s = s - s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            out[:, h, :] = p @ vh
        return out.reshape(q.shape[0], n_head * d)

    # --- forward ------------------------------------------------------------
    def forward(self, tokens, positions=None, n_layers=None, last_only=False):
        """Returns (logits [n, n_vocab] or [1, n_vocab] with last_only,
        hiddens: list of [n, n_embd], the residual stream after each layer)."""
        hp = self.hp
        tokens = np.asarray(tokens, dtype=np.int64)
        n = len(tokens)
        pos = np.arange(n) if positions is None else np.asarray(positions, dtype=np.int64)
        n_layers = hp["n_layer"] if n_layers is None else n_layers
        d = hp["head_dim"]
        x = self.tok_embd[tokens].copy()
        hiddens = []
        for L in self.layers[:n_layers]:
            xn = self.rms_norm(x, L["attn_norm"])
            q = (xn @ L["attn_q"].T).reshape(n, hp["n_head"], d)
            k = (xn @ L["attn_k"].T).reshape(n, hp["n_head_kv"], d)
            v = (xn @ L["attn_v"].T).reshape(n, hp["n_head_kv"], d)
            q = self.rope(q, pos)
            k = self.rope(k, pos)
            a = self.attention(q, k, v, pos, pos)
            x = x + a @ L["attn_output"].T
            xn = self.rms_norm(x, L["ffn_norm"])
            g = xn @ L["ffn_gate"].T
            u = xn @ L["ffn_up"].T
            with np.errstate(over="ignore"):   # exp(-g) -> inf gives silu -> 0, as it should
                h = g / (1.0 + np.exp(-g)) * u
            x = x + h @ L["ffn_down"].T
            hiddens.append(x.copy())
        if last_only:
            x = x[-1:]
        xn = self.rms_norm(x, self.output_norm)
        logits = xn @ self.output.T
        return logits, hiddens
