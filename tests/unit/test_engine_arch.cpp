// Architectures qwen2, qwen3, phi3, gemma2 and llama's rope_freqs on tiny
// random-weight models (engine_tiny_model.h): the hyper-parameters the loader
// reads, the views it makes of fused tensors, refusals of incomplete or
// unsupported files, and the q/k/v biases against a brute-force projection.
// The logits against llama.cpp are in tests/reference/test_arch_reference.py.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"

using namespace lctx;

namespace {

std::unique_ptr<Model> load(const engine_test::TinyOptions &o) {
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama(o);
    return Model::load_memory(bytes.data(), bytes.size(), 2);
}

engine_test::TinyOptions arch(const std::string &a) {
    engine_test::TinyOptions o;
    o.arch = a;
    return o;
}

// The status and message a load fails with.
std::pair<lctx_status, std::string> load_error(const engine_test::TinyOptions &o) {
    try {
        load(o);
    } catch (const Error &e) {
        return {e.status(), e.what()};
    }
    return {LCTX_OK, ""};
}

std::vector<float> all_logits(const Model &m, int64_t n, ForwardHooks *hooks = nullptr) {
    auto be = make_cpu_backend(2);
    Forward fwd(m, *be);
    KvStore cache(*be, m.hparams(), n);
    std::vector<int32_t> tok(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        tok[i] = i == 0 ? 1 : static_cast<int32_t>(3 + (i * 37) % 290);
        pos[i] = static_cast<int32_t>(i);
    }
    ForwardOptions opt;
    opt.logits = LogitsMode::ALL;
    opt.hooks = hooks;
    std::vector<float> logits;
    fwd.run(tok.data(), pos.data(), n, cache, opt, logits);
    return logits;
}

const float *f32(const WeightView &w) { return reinterpret_cast<const float *>(w.data); }

} // namespace

TEST(EngineArch, Qwen2ReadsBiasesAndNeoxRope) {
    auto m = load(arch("qwen2"));
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch_id, Arch::QWEN2);
    EXPECT_EQ(hp.rope_layout, RopeLayout::NEOX);
    EXPECT_TRUE(hp.qkv_bias);
    EXPECT_FALSE(hp.qk_norm);
    const LayerWeights &L = m->layers()[1];
    EXPECT_EQ(L.bq.n_cols, engine_test::kHead * engine_test::kHeadDim);
    EXPECT_EQ(L.bk.n_cols, engine_test::kHeadKv * engine_test::kHeadDim);
    EXPECT_EQ(L.bv.n_cols, engine_test::kHeadKv * engine_test::kHeadDim);
}

TEST(EngineArch, Qwen2BiasesAreAddedToTheProjections) {
    // Layer 0's q/k/v of token 0 by brute force: W . rmsnorm(embedding) + b.
    auto m = load(arch("qwen2"));
    const Hparams &hp = m->hparams();
    const LayerWeights &L = m->layers()[0];
    const int64_t E = hp.n_embd;
    const float *emb = f32(m->tok_embd()) + 1 * E;   // token 0 is id 1
    double ss = 0;
    for (int64_t i = 0; i < E; ++i) ss += double(emb[i]) * emb[i];
    const double inv = 1.0 / std::sqrt(ss / E + hp.rms_eps);
    std::vector<double> xn(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) xn[i] = emb[i] * inv * f32(L.attn_norm)[i];
    auto project = [&](const WeightView &W, const WeightView &b, int64_t r) {
        double acc = f32(b)[r];
        for (int64_t c = 0; c < E; ++c) acc += double(f32(W)[r * E + c]) * xn[c];
        return acc;
    };
    int calls = 0;
    ForwardHooks hooks;
    hooks.on_qkv = [&](int32_t layer, const float *q, const float *k, const float *v, int64_t) {
        if (layer != 0) return;
        ++calls;
        for (int64_t r = 0; r < L.wq.n_rows; ++r) EXPECT_NEAR(q[r], project(L.wq, L.bq, r), 1e-4) << "q " << r;
        for (int64_t r = 0; r < L.wk.n_rows; ++r) EXPECT_NEAR(k[r], project(L.wk, L.bk, r), 1e-4) << "k " << r;
        for (int64_t r = 0; r < L.wv.n_rows; ++r) EXPECT_NEAR(v[r], project(L.wv, L.bv, r), 1e-4) << "v " << r;
    };
    all_logits(*m, 3, &hooks);
    EXPECT_EQ(calls, 1);
}

TEST(EngineArch, Qwen3HasQkNormsAndNoBiases) {
    auto m = load(arch("qwen3"));
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch_id, Arch::QWEN3);
    EXPECT_EQ(hp.rope_layout, RopeLayout::NEOX);
    EXPECT_TRUE(hp.qk_norm);
    EXPECT_FALSE(hp.qkv_bias);
    EXPECT_FALSE(hp.post_norms);
    EXPECT_EQ(m->layers()[0].q_norm.n_cols, engine_test::kHeadDim);
    EXPECT_TRUE(m->layers()[0].bq.empty());
}

TEST(EngineArch, Phi3SplitsTheFusedTensorsIntoRowRanges) {
    auto m = load(arch("phi3"));
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch_id, Arch::PHI3);
    EXPECT_EQ(hp.rope_layout, RopeLayout::NEOX);
    const int64_t Q = engine_test::kHead * engine_test::kHeadDim, KV = engine_test::kHeadKv * engine_test::kHeadDim;
    for (const LayerWeights &L : m->layers()) {
        EXPECT_EQ(L.wq.n_rows, Q);
        EXPECT_EQ(L.wk.n_rows, KV);
        EXPECT_EQ(L.wv.n_rows, KV);
        EXPECT_EQ(L.wk.data, L.wq.data + Q * L.wq.row_bytes);
        EXPECT_EQ(L.wv.data, L.wk.data + KV * L.wk.row_bytes);
        EXPECT_EQ(L.ffn_gate.n_rows, engine_test::kFf);
        EXPECT_EQ(L.ffn_up.data, L.ffn_gate.data + engine_test::kFf * L.ffn_gate.row_bytes);
    }
    const std::vector<float> logits = all_logits(*m, 5);
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(EngineArch, Gemma2AlternatesLayersAndSoftCaps) {
    engine_test::TinyOptions o = arch("gemma2");
    o.n_layer = 4;
    auto m = load(o);
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch_id, Arch::GEMMA2);
    EXPECT_EQ(hp.ffn_act, FfnAct::GELU_TANH);
    EXPECT_TRUE(hp.post_norms);
    EXPECT_FALSE(hp.qk_norm);
    EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);
    EXPECT_FLOAT_EQ(hp.attn_scale, 0.25f);
    EXPECT_FLOAT_EQ(hp.attn_softcap, 50.0f);   // llama.cpp's defaults when the keys are absent
    EXPECT_FLOAT_EQ(hp.final_softcap, 30.0f);
    for (int32_t l = 0; l < 4; ++l) EXPECT_EQ(hp.window_of(l), l % 2 == 0 ? o.window : 0) << "layer " << l;
    EXPECT_EQ(hp.rope_of(0).rope_base, hp.rope_of(1).rope_base);
    const std::vector<float> logits = all_logits(*m, 20);
    for (float x : logits) ASSERT_LE(std::fabs(x), 30.0f);
}

TEST(EngineArch, MissingTensorsAreNamed) {
    const struct {
        const char *arch, *tensor;
    } cases[] = {{"qwen2", "blk.1.attn_k.bias"},
                 {"qwen3", "blk.0.attn_q_norm.weight"},
                 {"phi3", "blk.1.attn_qkv.weight"},
                 {"gemma2", "blk.0.post_ffw_norm.weight"}};
    for (const auto &c : cases) {
        engine_test::TinyOptions o = arch(c.arch);
        o.skip_tensor = c.tensor;
        const auto [status, msg] = load_error(o);
        EXPECT_EQ(status, LCTX_ERR_FORMAT) << c.arch;
        // phi3 without the fused tensor looks for the separate ones
        const std::string want = std::string(c.arch) == "phi3" ? "blk.1.attn_q.weight" : c.tensor;
        EXPECT_NE(msg.find("missing tensor '" + want + "'"), std::string::npos) << msg;
    }
}

TEST(EngineArch, UnsupportedFilesAreRefusedClearly) {
    engine_test::TinyOptions o = arch("phi3");
    o.phi3_longrope = true;
    auto [status, msg] = load_error(o);
    EXPECT_EQ(status, LCTX_ERR_UNSUPPORTED);
    EXPECT_NE(msg.find("long-rope"), std::string::npos) << msg;

    o = arch("qwen2");
    o.rope_freqs.assign(engine_test::kHeadDim / 2, 2.0f);
    std::tie(status, msg) = load_error(o);
    EXPECT_EQ(status, LCTX_ERR_UNSUPPORTED);
    EXPECT_NE(msg.find("rope_freqs"), std::string::npos) << msg;

    o = arch("mamba");
    std::tie(status, msg) = load_error(o);
    EXPECT_EQ(status, LCTX_ERR_UNSUPPORTED);
    EXPECT_NE(msg.find("'mamba' is not supported (llama, gemma2, gemma3, qwen2, qwen3, phi3)"), std::string::npos)
        << msg;
}

TEST(EngineArch, RopeFreqsAreCheckedAndApplied) {
    engine_test::TinyOptions o;
    o.rope_freqs.assign(engine_test::kHeadDim / 2 + 1, 1.0f);   // one too many
    EXPECT_EQ(load_error(o).first, LCTX_ERR_FORMAT);
    o.rope_freqs.assign(engine_test::kHeadDim / 2, 1.0f);
    o.rope_freqs[3] = 0.0f;
    EXPECT_EQ(load_error(o).first, LCTX_ERR_FORMAT);

    // factors of 1 rotate as no factors; others change every row but the first
    const std::vector<float> plain = all_logits(*load(engine_test::TinyOptions{}), 12);
    o.rope_freqs.assign(engine_test::kHeadDim / 2, 1.0f);
    auto ones = load(o);
    ASSERT_NE(ones->hparams().rope_freq_factors, nullptr);
    EXPECT_EQ(all_logits(*ones, 12), plain);
    for (size_t i = 4; i < o.rope_freqs.size(); ++i) o.rope_freqs[i] = 8.0f;
    const std::vector<float> scaled = all_logits(*load(o), 12);
    const size_t V = engine_test::kVocab;
    for (size_t i = 0; i < V; ++i) EXPECT_EQ(scaled[i], plain[i]);   // position 0 does not rotate
    double d = 0;
    for (size_t i = V; i < plain.size(); ++i) d = std::max(d, double(std::fabs(scaled[i] - plain[i])));
    EXPECT_GT(d, 1e-3);
}
