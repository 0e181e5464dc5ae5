// Plain data the model layer fills in from a GGUF file and the kernels compute
// with: a quantized weight matrix as stored, and the hyper-parameters (the
// kernels read the RoPE fields). Lives below both model/ and kernels/ so that
// the kernels do not depend on the model layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/ggml_type.h"

namespace lctx {

// A 2-D weight matrix as stored: n_rows rows of n_cols elements each
// (GGUF ne[0] = n_cols, ne[1] = n_rows), row-major, quantized by `type`.
// A 1-D tensor (norm weight) has n_rows = 1.
struct WeightView {
    GgmlType type = GgmlType::F32;
    int64_t n_cols = 0;
    int64_t n_rows = 0;
    size_t row_bytes = 0;
    const uint8_t *data = nullptr;
    bool empty() const { return data == nullptr; }
    const uint8_t *row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

enum class RopeLayout { NORMAL, NEOX };  // NORMAL: pairs (2i, 2i+1); NEOX: pairs (i, i + n_rot/2)
enum class RopeScaling { NONE, LINEAR, YARN };
enum class Arch { LLAMA, GEMMA3, QWEN2, QWEN3, PHI3, GEMMA2 };
enum class FfnAct { SILU, GELU_TANH };   // gate activation of the gated FFN (SwiGLU, GeGLU)

struct Hparams {
    std::string arch;         // general.architecture (docs/models.md lists those that load)
    Arch arch_id = Arch::LLAMA;
    std::string name;
    int32_t n_layer = 0;
    int32_t n_embd = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;     // n_embd / n_head unless the file says otherwise
    int32_t n_ff = 0;
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    float rms_eps = 1e-5f;
    // RoPE
    int32_t n_rot = 0;        // rotated dims per head (rope.dimension_count, default head_dim)
    float rope_base = 10000.0f;
    RopeLayout rope_layout = RopeLayout::NORMAL;
    RopeScaling rope_scaling = RopeScaling::NONE;
    float rope_freq_scale = 1.0f;    // 1 / scaling factor
    int32_t rope_orig_ctx = 0;       // YaRN: original context length
    float yarn_ext_factor = 0.0f;    // YaRN ramp mix (1 with YaRN scaling)
    float yarn_attn_factor = 1.0f;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
    // Per-pair frequency divisors (llama3 rope scaling's rope_freqs tensor):
    // pair i turns at theta_i / rope_freq_factors[i]. n_rot / 2 floats in the
    // model's data, or null (all 1).
    const float *rope_freq_factors = nullptr;
    // Per-architecture switches (docs/models.md): per-head Q/K RMSNorm
    // (gemma3, qwen3), norms after attention and FFN, GeGLU, scaled
    // embeddings, sliding-window layers with their own RoPE base (gemma2/3),
    // soft-capping (gemma2), q/k/v biases (qwen2). Defaults are the llama
    // values (all off).
    FfnAct ffn_act = FfnAct::SILU;
    bool qk_norm = false;
    bool post_norms = false;
    float embd_scale = 1.0f;         // token embeddings are multiplied by this
    float attn_scale = 0.0f;         // 0: 1/sqrt(head_dim)
    float final_softcap = 0.0f;      // > 0: logits = cap * tanh(logits / cap)
    float attn_softcap = 0.0f;       // > 0 (gemma2): attention scores = cap * tanh(score / cap)
    bool qkv_bias = false;           // qwen2: q, k, v projections have biases
    int32_t swa_window = 0;          // > 0: sliding layers see keys with pos_q - pos_k < swa_window
    int32_t swa_pattern = 0;         // > 0: layer l slides iff l % swa_pattern < swa_pattern - 1
    float rope_base_swa = 10000.0f;  // RoPE of the sliding layers (no scaling)
    float rope_freq_scale_swa = 1.0f;

    bool is_swa(int32_t layer) const {
        return swa_window > 0 && swa_pattern > 0 && layer % swa_pattern < swa_pattern - 1;
    }
    // The attention window of a layer (0: none).
    int32_t window_of(int32_t layer) const { return is_swa(layer) ? swa_window : 0; }
    // The RoPE setup of a layer: sliding layers use their own base, unscaled.
    Hparams rope_of(int32_t layer) const {
        Hparams r = *this;
        if (is_swa(layer)) {
            r.rope_base = rope_base_swa;
            r.rope_scaling = RopeScaling::NONE;
            r.rope_freq_scale = rope_freq_scale_swa;
            r.yarn_ext_factor = 0.0f;
            r.yarn_attn_factor = 1.0f;
        }
        return r;
    }
};

} // namespace lctx
