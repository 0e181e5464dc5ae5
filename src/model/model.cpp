// Model loading: hyper-parameters from the `<arch>.*` metadata keys, weight
// views validated against them, tokenizer and chat template.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "common/error.h"

namespace lctx {

namespace {

// Upper bounds that keep every size computation far from overflow.
constexpr int64_t kMaxDim = int64_t(1) << 20;
constexpr int64_t kMaxLayers = 4096;

int32_t get_dim(const GgufFile &f, const std::string &key, int64_t max_value) {
    const int64_t v = f.get_int(key);
    if (v <= 0 || v > max_value)
        fail(LCTX_ERR_FORMAT, "metadata '%s' = %lld is out of range [1, %lld]", key.c_str(), (long long)v,
             (long long)max_value);
    return static_cast<int32_t>(v);
}

int32_t get_dim_or(const GgufFile &f, const std::string &key, int64_t def, int64_t max_value) {
    if (!f.find(key)) return static_cast<int32_t>(def);
    return get_dim(f, key, max_value);
}

float get_finite_or(const GgufFile &f, const std::string &key, double def) {
    const double v = f.get_float_or(key, def);
    if (!std::isfinite(v)) fail(LCTX_ERR_FORMAT, "metadata '%s' is not a finite number", key.c_str());
    return static_cast<float>(v);
}

// Gemma 3 as llama.cpp reads it (docs/models.md): every 6th layer global,
// the others sliding with RoPE base 10000 unscaled; GeGLU (tanh GELU); Q/K
// norms and post-norms; embeddings scaled by sqrt(n_embd); queries scaled
// by 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 62-layer (27B) model.
void read_gemma3(const GgufFile &f, const std::string &p, Hparams &hp) {
    hp.ffn_act = FfnAct::GELU_TANH;
    hp.qk_norm = true;
    hp.post_norms = true;
    hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
    hp.swa_window = get_dim(f, p + "attention.sliding_window", int64_t(1) << 30);
    hp.swa_pattern = 6;
    hp.rope_base_swa = 10000.0f;
    hp.rope_freq_scale_swa = 1.0f;
    hp.attn_scale = hp.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head))
                                     : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
}

// Gemma 2 as llama.cpp reads it (docs/models.md): even layers slide
// (window default 4096), odd ones are global, one RoPE base for both;
// attention scores soft-capped (default cap 50) and final logits (default
// 30); GeGLU; post-norms; embeddings scaled by sqrt(n_embd); queries scaled by
// 1/sqrt(head_dim), or 1/sqrt(n_embd / n_head) for the 46-layer (27B) model.
void read_gemma2(const GgufFile &f, const std::string &p, Hparams &hp) {
    hp.ffn_act = FfnAct::GELU_TANH;
    hp.post_norms = true;
    hp.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
    hp.swa_window = get_dim_or(f, p + "attention.sliding_window", 4096, int64_t(1) << 30);
    hp.swa_pattern = 2;
    hp.rope_base_swa = hp.rope_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
    hp.attn_softcap = get_finite_or(f, p + "attn_logit_softcapping", 50.0);
    hp.final_softcap = get_finite_or(f, p + "final_logit_softcapping", 30.0);
    if (hp.attn_softcap < 0.0f || hp.final_softcap < 0.0f)
        fail(LCTX_ERR_FORMAT, "gemma2 soft-capping values must be >= 0");
    hp.attn_scale = hp.n_layer == 46 ? 1.0f / std::sqrt(static_cast<float>(hp.n_embd / hp.n_head))
                                     : 1.0f / std::sqrt(static_cast<float>(hp.head_dim));
}

Hparams read_hparams(const GgufFile &f) {
    Hparams hp;
    hp.arch = f.get_string("general.architecture");
    static const struct {
        const char *name;
        Arch id;
    } kArchs[] = {{"llama", Arch::LLAMA}, {"gemma3", Arch::GEMMA3}, {"gemma2", Arch::GEMMA2},
                  {"qwen2", Arch::QWEN2}, {"qwen3", Arch::QWEN3},   {"phi3", Arch::PHI3}};
    bool known = false;
    for (const auto &a : kArchs)
        if (hp.arch == a.name) {
            hp.arch_id = a.id;
            known = true;
        }
    if (!known)
        fail(LCTX_ERR_UNSUPPORTED, "architecture '%s' is not supported (llama, gemma2, gemma3, qwen2, qwen3, phi3)",
             hp.arch.c_str());
    hp.name = f.get_string_or("general.name", "");
    const std::string p = hp.arch + ".";

    hp.n_layer = get_dim(f, p + "block_count", kMaxLayers);
    hp.n_embd = get_dim(f, p + "embedding_length", kMaxDim);
    hp.n_head = get_dim(f, p + "attention.head_count", kMaxDim);
    hp.n_head_kv = get_dim_or(f, p + "attention.head_count_kv", hp.n_head, kMaxDim);
    hp.n_ff = get_dim(f, p + "feed_forward_length", kMaxDim);
    hp.n_ctx_train = get_dim_or(f, p + "context_length", 0, int64_t(1) << 30);

    if (f.find(p + "attention.key_length")) {
        hp.head_dim = get_dim(f, p + "attention.key_length", kMaxDim);
    } else {
        if (hp.n_embd % hp.n_head != 0)
            fail(LCTX_ERR_FORMAT, "embedding_length %d is not a multiple of head_count %d", hp.n_embd, hp.n_head);
        hp.head_dim = hp.n_embd / hp.n_head;
    }
    if (f.find(p + "attention.value_length")) {
        const int32_t vl = get_dim(f, p + "attention.value_length", kMaxDim);
        if (vl != hp.head_dim)
            fail(LCTX_ERR_UNSUPPORTED, "attention.value_length %d differs from key_length %d", vl, hp.head_dim);
    }
    if (hp.n_head % hp.n_head_kv != 0)
        fail(LCTX_ERR_FORMAT, "head_count %d is not a multiple of head_count_kv %d", hp.n_head, hp.n_head_kv);
    if (int64_t(hp.n_head) * hp.head_dim > kMaxDim)
        fail(LCTX_ERR_FORMAT, "head_count * head_dim = %lld is too large", (long long)hp.n_head * hp.head_dim);

    hp.rms_eps = get_finite_or(f, p + "attention.layer_norm_rms_epsilon", 1e-5);
    if (!(hp.rms_eps > 0.0f)) fail(LCTX_ERR_FORMAT, "layer_norm_rms_epsilon must be > 0");

    // RoPE. llama uses the NORMAL layout (converted checkpoints permute q/k),
    // the others the NEOX one (llama.cpp's rope type for these architectures).
    hp.rope_layout = hp.arch_id == Arch::LLAMA ? RopeLayout::NORMAL : RopeLayout::NEOX;
    hp.rope_base = get_finite_or(f, p + "rope.freq_base", 10000.0);
    if (!(hp.rope_base > 1.0f)) fail(LCTX_ERR_FORMAT, "rope.freq_base %g must be > 1", hp.rope_base);
    hp.n_rot = get_dim_or(f, p + "rope.dimension_count", hp.head_dim, kMaxDim);
    if (hp.n_rot != hp.head_dim)   // as llama.cpp requires for this architecture
        fail(LCTX_ERR_FORMAT, "rope.dimension_count %d must equal the head dimension %d", hp.n_rot, hp.head_dim);
    if (hp.n_rot % 2 != 0) fail(LCTX_ERR_FORMAT, "rope.dimension_count %d must be even", hp.n_rot);

    // Scaling type defaults to linear (as llama.cpp); a factor of 0 means none.
    const std::string scaling = f.get_string_or(p + "rope.scaling.type", "linear");
    float factor = get_finite_or(f, p + "rope.scale_linear", 0.0);
    factor = get_finite_or(f, p + "rope.scaling.factor", factor);
    if (factor < 0.0f) fail(LCTX_ERR_FORMAT, "rope.scaling.factor %g must be >= 0", factor);
    if (scaling == "none") {
        hp.rope_scaling = RopeScaling::NONE;
    } else if (scaling == "linear") {
        hp.rope_scaling = factor > 0.0f && factor != 1.0f ? RopeScaling::LINEAR : RopeScaling::NONE;
    } else if (scaling == "yarn") {
        hp.rope_scaling = RopeScaling::YARN;
    } else {
        fail(LCTX_ERR_UNSUPPORTED, "rope scaling type '%s' is not supported", scaling.c_str());
    }
    hp.rope_freq_scale = hp.rope_scaling != RopeScaling::NONE && factor > 0.0f ? 1.0f / factor : 1.0f;
    hp.rope_orig_ctx = get_dim_or(f, p + "rope.scaling.original_context_length", hp.n_ctx_train, int64_t(1) << 30);
    const bool yarn = hp.rope_scaling == RopeScaling::YARN;
    hp.yarn_ext_factor = get_finite_or(f, p + "rope.scaling.yarn_ext_factor", yarn ? 1.0 : 0.0);
    hp.yarn_attn_factor = get_finite_or(f, p + "rope.scaling.yarn_attn_factor", 1.0);
    hp.yarn_beta_fast = get_finite_or(f, p + "rope.scaling.yarn_beta_fast", 32.0);
    hp.yarn_beta_slow = get_finite_or(f, p + "rope.scaling.yarn_beta_slow", 1.0);
    if (!(hp.yarn_attn_factor > 0.0f)) fail(LCTX_ERR_FORMAT, "rope.scaling.yarn_attn_factor must be > 0");
    if (yarn && hp.rope_orig_ctx <= 0)
        fail(LCTX_ERR_FORMAT, "YaRN scaling needs rope.scaling.original_context_length or context_length");

    hp.final_softcap = get_finite_or(f, p + "final_logit_softcapping", 0.0);
    if (hp.final_softcap < 0.0f) fail(LCTX_ERR_FORMAT, "final_logit_softcapping %g must be >= 0", hp.final_softcap);
    switch (hp.arch_id) {
        case Arch::GEMMA3: read_gemma3(f, p, hp); break;
        case Arch::GEMMA2: read_gemma2(f, p, hp); break;
        case Arch::QWEN2: hp.qkv_bias = true; break;
        case Arch::QWEN3: hp.qk_norm = true; break;
        case Arch::PHI3:
            // llama.cpp turns phi3's sliding window off (its converter's
            // value is not what the model was trained with); so does lctx.
            break;
        case Arch::LLAMA: break;
    }
    return hp;
}

// Looks up a tensor and checks it has exactly the expected shape and a usable type.
WeightView weight(const GgufFile &f, const std::string &name, int64_t n_cols, int64_t n_rows, bool f32_only) {
    const GgufTensorInfo *t = f.find_tensor(name);
    if (!t) fail(LCTX_ERR_FORMAT, "missing tensor '%s'", name.c_str());
    const bool is_1d = n_rows == 1 && f32_only;
    const bool ok = t->ne[0] == n_cols && t->ne[2] == 1 && t->ne[3] == 1 &&
                    (is_1d ? t->n_dims == 1 || t->ne[1] == 1 : t->ne[1] == n_rows && t->n_dims == 2);
    if (!ok) {
        if (is_1d)
            fail(LCTX_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld]", name.c_str(),
                 (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                 (long long)n_cols);
        fail(LCTX_ERR_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name.c_str(),
             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], (long long)n_cols,
             (long long)n_rows);
    }
    const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(t->type));
    if (!info || !info->can_dequantize)
        fail(LCTX_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %s", name.c_str(),
             info ? info->name : "(unknown)");
    if (f32_only && t->type != GgmlType::F32)
        fail(LCTX_ERR_UNSUPPORTED, "tensor '%s' has type %s, expected F32", name.c_str(), info->name);
    if (n_cols % info->block_size != 0)
        fail(LCTX_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size %lld",
             name.c_str(), (long long)n_cols, info->name, (long long)info->block_size);
    WeightView w;
    w.type = t->type;
    w.n_cols = n_cols;
    w.n_rows = n_rows;
    w.row_bytes = ggml_row_size(t->type, n_cols);
    w.data = t->data;
    if (!w.data || t->nbytes < w.row_bytes * static_cast<size_t>(n_rows))
        fail(LCTX_ERR_FORMAT, "tensor '%s' has %zu bytes of data, expected %zu", name.c_str(), t->nbytes,
             w.row_bytes * static_cast<size_t>(n_rows));
    return w;
}

// Rows [r0, r0 + n) of a matrix, as a view of the same data.
WeightView row_range(const WeightView &w, int64_t r0, int64_t n) {
    WeightView v = w;
    v.data = w.row(r0);
    v.n_rows = n;
    return v;
}

} // namespace

// RoPE frequency factors. llama: `rope_freqs.weight` (llama 3.x rope
// scaling), n_rot / 2 divisors of the pairs' frequencies, as llama.cpp
// applies them. phi3's long-rope factors are chosen by llama.cpp from the
// context size a session asks for, with an attention factor; lctx does not
// implement that choice and refuses such files (docs/models.md).
void Model::read_rope_factors(const GgufFile &f) {
    if (hp_.arch_id == Arch::PHI3) {
        for (const char *name : {"rope_factors_long.weight", "rope_factors_short.weight"})
            if (f.find_tensor(name))
                fail(LCTX_ERR_UNSUPPORTED,
                     "phi3 long-rope scaling ('%s', the 128K-context variants) is not supported; the 4K-context "
                     "phi3 files load",
                     name);
        return;
    }
    if (!f.find_tensor("rope_freqs.weight")) return;
    if (hp_.arch_id != Arch::LLAMA)   // llama.cpp passes the factors to RoPE for llama only
        fail(LCTX_ERR_UNSUPPORTED, "tensor 'rope_freqs.weight' is not supported for architecture '%s'",
             hp_.arch.c_str());
    const WeightView ff = weight(f, "rope_freqs.weight", hp_.n_rot / 2, 1, true);
    const float *v = reinterpret_cast<const float *>(ff.data);
    for (int32_t i = 0; i < hp_.n_rot / 2; ++i)
        if (!(std::isfinite(v[i]) && v[i] > 0.0f))
            fail(LCTX_ERR_FORMAT, "rope_freqs.weight[%d] = %g must be a positive finite number", i, v[i]);
    if (reinterpret_cast<uintptr_t>(v) % alignof(float) != 0)
        fail(LCTX_ERR_FORMAT, "rope_freqs.weight is not 4-byte aligned");
    hp_.rope_freq_factors = v;
}

std::unique_ptr<Model> Model::load_file(const std::string &path, bool use_mmap, int32_t n_threads) {
    std::unique_ptr<Model> m(new Model());
    m->init(GgufFile::open(path, use_mmap), n_threads);
    return m;
}

std::unique_ptr<Model> Model::load_memory(const void *data, size_t size, int32_t n_threads) {
    if (!data && size > 0) fail(LCTX_ERR_INVALID_ARG, "model buffer is NULL");
    std::unique_ptr<Model> m(new Model());
    m->init(GgufFile::from_memory(data, size), n_threads);
    return m;
}

void Model::init(std::unique_ptr<GgufFile> file, int32_t n_threads) {
    file_ = std::move(file);
    const GgufFile &f = *file_;
    hp_ = read_hparams(f);

    tokenizer_ = Tokenizer::from_gguf(f);
    hp_.n_vocab = tokenizer_->n_vocab();
    if (hp_.n_vocab <= 0) fail(LCTX_ERR_FORMAT, "the vocabulary is empty");

    const int64_t E = hp_.n_embd, V = hp_.n_vocab, F = hp_.n_ff;
    const int64_t Q = int64_t(hp_.n_head) * hp_.head_dim, KV = int64_t(hp_.n_head_kv) * hp_.head_dim;
    tok_embd_ = weight(f, "token_embd.weight", E, V, false);
    output_norm_ = weight(f, "output_norm.weight", E, 1, true);
    if (f.find_tensor("output.weight"))
        output_ = weight(f, "output.weight", E, V, false);
    else
        output_ = tok_embd_;   // tied embeddings

    read_rope_factors(f);

    layers_.resize(static_cast<size_t>(hp_.n_layer));
    for (int32_t i = 0; i < hp_.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        LayerWeights &L = layers_[static_cast<size_t>(i)];
        L.attn_norm = weight(f, b + "attn_norm.weight", E, 1, true);
        if (hp_.arch_id == Arch::PHI3 && f.find_tensor(b + "attn_qkv.weight")) {
            // one fused projection: rows [0, Q) are q, then k, then v (as llama.cpp splits it)
            const WeightView qkv = weight(f, b + "attn_qkv.weight", E, Q + 2 * KV, false);
            L.wq = row_range(qkv, 0, Q);
            L.wk = row_range(qkv, Q, KV);
            L.wv = row_range(qkv, Q + KV, KV);
        } else {
            L.wq = weight(f, b + "attn_q.weight", E, Q, false);
            L.wk = weight(f, b + "attn_k.weight", E, KV, false);
            L.wv = weight(f, b + "attn_v.weight", E, KV, false);
        }
        if (hp_.qkv_bias) {
            L.bq = weight(f, b + "attn_q.bias", Q, 1, true);
            L.bk = weight(f, b + "attn_k.bias", KV, 1, true);
            L.bv = weight(f, b + "attn_v.bias", KV, 1, true);
        }
        L.wo = weight(f, b + "attn_output.weight", Q, E, false);
        L.ffn_norm = weight(f, b + "ffn_norm.weight", E, 1, true);
        if (hp_.arch_id == Arch::PHI3) {
            // fused gate and up: rows [0, n_ff) are the gate (SiLU), [n_ff, 2 n_ff) the up projection
            const WeightView gate_up = weight(f, b + "ffn_up.weight", E, 2 * F, false);
            L.ffn_gate = row_range(gate_up, 0, F);
            L.ffn_up = row_range(gate_up, F, F);
        } else {
            L.ffn_gate = weight(f, b + "ffn_gate.weight", E, F, false);
            L.ffn_up = weight(f, b + "ffn_up.weight", E, F, false);
        }
        L.ffn_down = weight(f, b + "ffn_down.weight", F, E, false);
        if (hp_.qk_norm) {
            L.q_norm = weight(f, b + "attn_q_norm.weight", hp_.head_dim, 1, true);
            L.k_norm = weight(f, b + "attn_k_norm.weight", hp_.head_dim, 1, true);
        }
        if (hp_.post_norms) {
            L.attn_post_norm = weight(f, b + "post_attention_norm.weight", E, 1, true);
            L.ffn_post_norm = weight(f, b + "post_ffw_norm.weight", E, 1, true);
        }
    }

    n_params_ = 0;
    size_bytes_ = 0;
    for (const GgufTensorInfo &t : f.tensors()) {
        n_params_ += static_cast<uint64_t>(t.n_elements());
        size_bytes_ += t.nbytes;
    }
    chat_template_ = f.get_string_or("tokenizer.chat_template", "");

    if (n_threads <= 0) n_threads = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
}

} // namespace lctx
