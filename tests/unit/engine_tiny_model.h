// A tiny random-weight llama model built in memory for the engine tests:
// 2 layers, n_embd 64, 4 heads of 16, 2 KV heads, n_ff 128, a 300-token
// SentencePiece vocab. Options break it in chosen ways for the loader tests.
// arch "gemma3" adds what Gemma 3 has: a sliding window, per-head Q/K norm
// weights and the post-attention / post-FFN norms; "gemma2" the window and
// post-norms; "qwen2" q/k/v biases; "qwen3" Q/K norms; "phi3" the fused
// attn_qkv and gate+up ffn_up. rope_freqs adds llama's frequency factors.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf_test_writer.h"

namespace engine_test {

struct TinyOptions {
    std::string arch = "llama";
    bool tied = false;
    int n_layer = 2;
    int n_ctx = 4096;
    std::string skip_tensor;    // leave this tensor out
    std::string bad_tensor;     // write this tensor with one extra row
    std::string scaling;        // rope.scaling.type if not empty
    float scaling_factor = 0.0f;
    std::string chat_template;
    uint32_t seed = 1;
    int window = 8;             // gemma3: attention.sliding_window
    float rope_base = 10000.0f;
    std::vector<float> rope_freqs;   // written as rope_freqs.weight if not empty
    bool phi3_longrope = false;      // phi3: rope_factors_long/short tensors
    bool q4_1 = false;               // the projection and FFN matrices as Q4_1 (else F32)
};

// f to f16 bits, round to nearest even, for normal values (smaller ones
// flush to zero: the tiny model's scales never are); back: the value kept.
inline uint16_t half_bits(float f, float &back) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int32_t e = static_cast<int32_t>((u >> 23) & 0xffu) - 112;   // rebias 127 -> 15
    uint32_t h = sign;
    if (e > 0) {
        const uint32_t m = u & 0x7fffffu, rest = m & 0x1fffu;
        uint32_t v = (static_cast<uint32_t>(e) << 10) | (m >> 13);
        if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) ++v;   // a carry moves into the exponent
        h |= std::min<uint32_t>(v, 0x7bffu);                         // no infinities: the largest finite
    }
    const uint32_t he = (h >> 10) & 0x1fu, bits = ((h & 0x8000u) << 16) | (he ? ((he + 112) << 23) | ((h & 0x3ffu) << 13) : 0);
    std::memcpy(&back, &bits, 4);
    return static_cast<uint16_t>(h);
}

// Rows of n floats (n % 32 == 0) as Q4_1 blocks: d = (max - min) / 15, m =
// min (both f16), codes round((x - m) / d) clamped to 0..15.
inline std::vector<uint8_t> q4_1_bytes(const std::vector<float> &v) {
    std::vector<uint8_t> out;
    for (size_t b = 0; b + 32 <= v.size(); b += 32) {
        float lo = v[b], hi = v[b];
        for (size_t j = 0; j < 32; ++j) lo = std::min(lo, v[b + j]), hi = std::max(hi, v[b + j]);
        float d = 0.0f, m = 0.0f;
        const uint16_t dh = half_bits((hi - lo) / 15.0f, d), mh = half_bits(lo, m);
        uint8_t q[32];
        for (size_t j = 0; j < 32; ++j)
            q[j] = static_cast<uint8_t>(std::clamp(d > 0 ? static_cast<int>(std::lround((v[b + j] - m) / d)) : 0, 0, 15));
        out.push_back(static_cast<uint8_t>(dh & 0xff));
        out.push_back(static_cast<uint8_t>(dh >> 8));
        out.push_back(static_cast<uint8_t>(mh & 0xff));
        out.push_back(static_cast<uint8_t>(mh >> 8));
        for (int j = 0; j < 16; ++j) out.push_back(static_cast<uint8_t>(q[j] | (q[j + 16] << 4)));
    }
    return out;
}

constexpr int kEmbd = 64, kHead = 4, kHeadKv = 2, kHeadDim = 16, kFf = 128, kVocab = 300;

inline std::vector<uint8_t> make_tiny_llama(const TinyOptions &o = {}) {
    using namespace gguf_test;
    Writer w;
    const std::string a = o.arch;
    w.kv_str("general.architecture", a);
    w.kv_str("general.name", "tiny");
    w.kv<uint32_t>(a + ".block_count", U32, static_cast<uint32_t>(o.n_layer));
    w.kv<uint32_t>(a + ".context_length", U32, static_cast<uint32_t>(o.n_ctx));
    w.kv<uint32_t>(a + ".embedding_length", U32, kEmbd);
    w.kv<uint32_t>(a + ".feed_forward_length", U32, kFf);
    w.kv<uint32_t>(a + ".attention.head_count", U32, kHead);
    w.kv<uint32_t>(a + ".attention.head_count_kv", U32, kHeadKv);
    w.kv<float>(a + ".attention.layer_norm_rms_epsilon", F32, 1e-5f);
    w.kv<float>(a + ".rope.freq_base", F32, o.rope_base);
    const bool gemma3 = a == "gemma3", gemma2 = a == "gemma2", phi3 = a == "phi3";
    if (gemma3 || gemma2) w.kv<uint32_t>(a + ".attention.sliding_window", U32, static_cast<uint32_t>(o.window));
    if (!o.scaling.empty()) {
        w.kv_str(a + ".rope.scaling.type", o.scaling);
        w.kv<float>(a + ".rope.scaling.factor", F32, o.scaling_factor);
        w.kv<uint32_t>(a + ".rope.scaling.original_context_length", U32, 256);
    }
    if (!o.chat_template.empty()) w.kv_str("tokenizer.chat_template", o.chat_template);

    // SentencePiece vocab: <unk>, <s>, </s>, 256 byte tokens, 41 pieces.
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    std::vector<float> scores = {0, 0, 0};
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
        types.push_back(6);
        scores.push_back(0);
    }
    const std::string sp = "\xE2\x96\x81";  // U+2581
    std::vector<std::string> pieces = {sp};
    for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
    for (const char *p : {"t", "th", "the", "a", "s", "o"}) pieces.push_back(sp + p);
    for (const char *p : {"he", "in", "an", "er", "on", "en", "at", "re"}) pieces.push_back(p);
    for (size_t i = 0; i < pieces.size(); ++i) {
        tokens.push_back(pieces[i]);
        types.push_back(1);
        scores.push_back(static_cast<float>(pieces[i].size()) - 0.01f * static_cast<float>(i));
    }
    while (tokens.size() < kVocab) {  // pad with unused tokens to a fixed size
        tokens.push_back("<unused" + std::to_string(tokens.size()) + ">");
        types.push_back(5);
        scores.push_back(-1000);
    }
    w.kv_str("tokenizer.ggml.model", "llama");
    w.kv_arr_str("tokenizer.ggml.tokens", tokens);
    w.kv_arr<float>("tokenizer.ggml.scores", F32, scores);
    w.kv_arr<int32_t>("tokenizer.ggml.token_type", I32, types);
    w.kv<uint32_t>("tokenizer.ggml.unknown_token_id", U32, 0);
    w.kv<uint32_t>("tokenizer.ggml.bos_token_id", U32, 1);
    w.kv<uint32_t>("tokenizer.ggml.eos_token_id", U32, 2);

    std::mt19937 rng(o.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string &name, int64_t cols, int64_t rows, float scale, float offset, bool q4 = false) {
        if (name == o.skip_tensor) return;
        if (name == o.bad_tensor) rows += 1;
        std::vector<float> v(static_cast<size_t>(cols * rows));
        for (float &x : v) x = offset + scale * normal(rng);
        TensorSpec t;
        t.name = name;
        t.dims = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
        t.type = q4 ? 3 : 0;   // Q4_1 : F32
        t.data = q4 ? q4_1_bytes(v) : f32_bytes(v);
        w.tensor(std::move(t));
    };
    auto mat = [&](const std::string &name, int64_t cols, int64_t rows) {
        add(name, cols, rows, 1.0f / std::sqrt(static_cast<float>(cols)), 0.0f, o.q4_1 && name.rfind("blk.", 0) == 0);
    };
    auto norm = [&](const std::string &name, int64_t n = kEmbd) { add(name, n, 1, 0.1f, 1.0f); };
    add("token_embd.weight", kEmbd, kVocab, 1.0f, 0.0f);
    norm("output_norm.weight");
    if (!o.tied) mat("output.weight", kEmbd, kVocab);
    if (!o.rope_freqs.empty()) {
        TensorSpec t;
        t.name = "rope_freqs.weight";
        t.dims = {static_cast<int64_t>(o.rope_freqs.size())};
        t.data = f32_bytes(o.rope_freqs);
        w.tensor(std::move(t));
    }
    if (o.phi3_longrope) {
        add("rope_factors_long.weight", kHeadDim / 2, 1, 0.0f, 2.0f);
        add("rope_factors_short.weight", kHeadDim / 2, 1, 0.0f, 1.0f);
    }
    for (int i = 0; i < o.n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        norm(b + "attn_norm.weight");
        if (phi3) {
            mat(b + "attn_qkv.weight", kEmbd, (kHead + 2 * kHeadKv) * kHeadDim);
        } else {
            mat(b + "attn_q.weight", kEmbd, kHead * kHeadDim);
            mat(b + "attn_k.weight", kEmbd, kHeadKv * kHeadDim);
            mat(b + "attn_v.weight", kEmbd, kHeadKv * kHeadDim);
        }
        if (a == "qwen2") {
            add(b + "attn_q.bias", kHead * kHeadDim, 1, 0.5f, 0.0f);
            add(b + "attn_k.bias", kHeadKv * kHeadDim, 1, 0.5f, 0.0f);
            add(b + "attn_v.bias", kHeadKv * kHeadDim, 1, 0.5f, 0.0f);
        }
        mat(b + "attn_output.weight", kHead * kHeadDim, kEmbd);
        norm(b + "ffn_norm.weight");
        if (phi3) {
            mat(b + "ffn_up.weight", kEmbd, 2 * kFf);
        } else {
            mat(b + "ffn_gate.weight", kEmbd, kFf);
            mat(b + "ffn_up.weight", kEmbd, kFf);
        }
        mat(b + "ffn_down.weight", kFf, kEmbd);
        if (gemma3 || a == "qwen3") {
            norm(b + "attn_q_norm.weight", kHeadDim);
            norm(b + "attn_k_norm.weight", kHeadDim);
        }
        if (gemma3 || gemma2) {
            norm(b + "post_attention_norm.weight");
            norm(b + "post_ffw_norm.weight");
        }
    }
    return w.build();
}

// Path of the stories260K model committed under tests/data/. Throws when the
// file is not there, so a test that needs it fails (naming the path) instead
// of skipping.
inline std::string stories260k_path() {
#ifdef LCTX_TEST_DATA_DIR
    const std::string p = std::string(LCTX_TEST_DATA_DIR) + "/stories260K.gguf";
#else
    const std::string p = std::string(LCTX_SOURCE_DIR) + "/tests/data/stories260K.gguf";
#endif
    if (FILE *f = std::fopen(p.c_str(), "rb")) {
        std::fclose(f);
        return p;
    }
    throw std::runtime_error("test model missing: " + p + " (stories260K.gguf is committed under tests/data/)");
}

} // namespace engine_test
