// Shared by the libFuzzer targets (fuzz/README.md): a micro llama model made
// in memory (tiny enough that a forward pass costs microseconds), loaded once
// per process, and helpers that check the C API's error contract.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf_test_writer.h"
#include "lctx.h"

namespace fuzz {

// A llama model of 2 layers, 16-wide, 4 heads (2 KV heads of 4), a
// SentencePiece vocabulary of 300 (3 specials, 256 byte tokens, pieces) and a
// ChatML template. Deterministic.
inline std::vector<uint8_t> micro_model_gguf(uint32_t n_layer = 2) {
    using namespace gguf_test;
    constexpr int E = 16, H = 4, HKV = 2, D = 4, F = 32, V = 300;
    Writer w;
    w.kv_str("general.architecture", "llama");
    w.kv_str("general.name", "micro");
    w.kv<uint32_t>("llama.block_count", U32, n_layer);
    w.kv<uint32_t>("llama.context_length", U32, 512);
    w.kv<uint32_t>("llama.embedding_length", U32, E);
    w.kv<uint32_t>("llama.feed_forward_length", U32, F);
    w.kv<uint32_t>("llama.attention.head_count", U32, H);
    w.kv<uint32_t>("llama.attention.head_count_kv", U32, HKV);
    w.kv<float>("llama.attention.layer_norm_rms_epsilon", F32, 1e-5f);
    w.kv<float>("llama.rope.freq_base", F32, 10000.0f);
    w.kv_str("tokenizer.chat_template",
             "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
             "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
             "{% endif %}");
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};
    std::vector<float> scores = {0, 0, 0};
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
        tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
        types.push_back(6);
        scores.push_back(0);
    }
    const std::string sp = "\xE2\x96\x81";
    std::vector<std::string> pieces = {sp, "<|im_start|>", "<|im_end|>"};
    for (char c = 'a'; c <= 'z'; ++c) pieces.push_back(std::string(1, c));
    for (const char *p : {"t", "th", "the", "a"}) pieces.push_back(sp + p);
    for (const char *p : {"he", "in", "an", "er"}) pieces.push_back(p);
    for (size_t i = 0; i < pieces.size() && tokens.size() < V; ++i) {
        tokens.push_back(pieces[i]);
        types.push_back(i == 1 || i == 2 ? 3 : 1);
        scores.push_back(static_cast<float>(pieces[i].size()) - 0.01f * static_cast<float>(i));
    }
    while (tokens.size() < V) {
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
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto add = [&](const std::string &name, int64_t cols, int64_t rows, float scale, float offset) {
        std::vector<float> v(static_cast<size_t>(cols * rows));
        for (float &x : v) x = offset + scale * normal(rng);
        TensorSpec t;
        t.name = name;
        t.dims = rows == 1 ? std::vector<int64_t>{cols} : std::vector<int64_t>{cols, rows};
        t.data = f32_bytes(v);
        w.tensor(std::move(t));
    };
    auto mat = [&](const std::string &name, int64_t cols, int64_t rows) {
        add(name, cols, rows, 1.0f / std::sqrt(static_cast<float>(cols)), 0.0f);
    };
    auto norm = [&](const std::string &name) { add(name, E, 1, 0.1f, 1.0f); };
    add("token_embd.weight", E, V, 1.0f, 0.0f);
    norm("output_norm.weight");
    mat("output.weight", E, V);
    for (uint32_t i = 0; i < n_layer; ++i) {
        const std::string b = "blk." + std::to_string(i) + ".";
        norm(b + "attn_norm.weight");
        mat(b + "attn_q.weight", E, H * D);
        mat(b + "attn_k.weight", E, HKV * D);
        mat(b + "attn_v.weight", E, HKV * D);
        mat(b + "attn_output.weight", H * D, E);
        norm(b + "ffn_norm.weight");
        mat(b + "ffn_gate.weight", E, F);
        mat(b + "ffn_up.weight", E, F);
        mat(b + "ffn_down.weight", F, E);
    }
    return w.build();
}

// The micro model, loaded once per process (one thread: fuzzing is serial).
inline const lctx_model *micro_model() {
    static const lctx_model *m = [] {
        const std::vector<uint8_t> bytes = micro_model_gguf();
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 1;
        mp.backend = "cpu";
        lctx_model *out = nullptr;
        if (lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &out) != LCTX_OK) {
            std::fprintf(stderr, "fuzz: the micro model does not load: %s\n", lctx_last_error());
            std::abort();
        }
        return out;
    }();
    return m;
}

// The error contract of every fallible call: a known status, and a message
// for every failure. LCTX_ERR_INTERNAL is a bug in lctx by definition.
inline lctx_status check(lctx_status st, const char *call) {
    if (st > 0 || st < LCTX_ERR_INTERNAL) {
        std::fprintf(stderr, "fuzz: %s returned unknown status %d\n", call, int(st));
        std::abort();
    }
    if (st != LCTX_OK && lctx_last_error()[0] == '\0') {
        std::fprintf(stderr, "fuzz: %s failed (%s) without a message\n", call, lctx_status_string(st));
        std::abort();
    }
    if (st == LCTX_ERR_INTERNAL) {
        std::fprintf(stderr, "fuzz: %s: internal error: %s\n", call, lctx_last_error());
        std::abort();
    }
    return st;
}

// Reads the fuzzer input as a stream of small integers.
struct Bytes {
    const uint8_t *p;
    size_t n;
    bool empty() const { return n == 0; }
    uint8_t u8() {
        if (!n) return 0;
        --n;
        return *p++;
    }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    int32_t i32() { return static_cast<int32_t>(u16() | (uint32_t(u16()) << 16)); }
    std::string str(size_t max) {
        const size_t len = std::min<size_t>(u8() % (max + 1), n);
        std::string s(reinterpret_cast<const char *>(p), len);
        p += len;
        n -= len;
        return s;
    }
};

} // namespace fuzz
