// Architecture gemma3 on tiny random-weight models (engine_tiny_model.h):
// what the loader derives from the file, the sliding window's exact reach,
// and refusals of incomplete files. The logits against an independent numpy
// reference and llama.cpp are in tests/reference/test_gemma3_reference.py;
// batch / incremental / sub-batch / reposition consistency runs in
// test_engine_forward.cpp ("tiny_gemma3").
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>

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

engine_test::TinyOptions gemma3(int n_layer, int window) {
    engine_test::TinyOptions o;
    o.arch = "gemma3";
    o.n_layer = n_layer;
    o.window = window;
    o.rope_base = 1e6f;
    return o;
}

std::vector<float> last_logits(const Model &m, const std::vector<int32_t> &tok) {
    auto be = make_cpu_backend(2);
    Forward fwd(m, *be);
    const int64_t n = static_cast<int64_t>(tok.size());
    KvStore cache(*be, m.hparams(), n);
    std::vector<int32_t> pos(tok.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
    ForwardOptions opt;
    opt.logits = LogitsMode::LAST;
    std::vector<float> logits;
    fwd.run(tok.data(), pos.data(), n, cache, opt, logits);
    return logits;
}

double max_abs_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
}

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(3, engine_test::kVocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    t[0] = 1;
    for (int64_t i = 1; i < n; ++i) t[i] = d(rng);
    return t;
}

} // namespace

TEST(EngineGemma3, LoaderDerivesTheLayerKindsAndRope) {
    auto m = load(gemma3(13, 8));
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch_id, Arch::GEMMA3);
    EXPECT_EQ(hp.rope_layout, RopeLayout::NEOX);
    EXPECT_EQ(hp.ffn_act, FfnAct::GELU_TANH);
    EXPECT_TRUE(hp.qk_norm);
    EXPECT_TRUE(hp.post_norms);
    EXPECT_FLOAT_EQ(hp.embd_scale, 8.0f);   // sqrt(64)
    EXPECT_FLOAT_EQ(hp.attn_scale, 0.25f);  // 1/sqrt(head_dim 16)
    EXPECT_EQ(hp.final_softcap, 0.0f);
    for (int32_t l = 0; l < 13; ++l) {
        const bool global = l == 5 || l == 11;   // every 6th layer
        EXPECT_EQ(hp.is_swa(l), !global) << "layer " << l;
        EXPECT_EQ(hp.window_of(l), global ? 0 : 8) << "layer " << l;
        EXPECT_FLOAT_EQ(hp.rope_of(l).rope_base, global ? 1e6f : 10000.0f) << "layer " << l;
    }
    // llama keeps none of it
    auto llama = load(engine_test::TinyOptions{});
    EXPECT_EQ(llama->hparams().rope_layout, RopeLayout::NORMAL);
    EXPECT_FALSE(llama->hparams().is_swa(0));
    EXPECT_EQ(llama->hparams().embd_scale, 1.0f);
}

// With only sliding layers (5 < the first global layer), the last token at
// position p sees position p - (window - 1) per layer at most, so through
// L layers it depends on positions >= p - L * (window - 1) and on no
// earlier one. The boundary pins pos_q - pos_k < window exactly.
TEST(EngineGemma3, SlidingLayersReachExactlyLayersTimesWindowMinusOne) {
    const int n_layer = 5, window = 4;
    auto m = load(gemma3(n_layer, window));
    const int64_t n = 40, p = n - 1, reach = n_layer * (window - 1);   // first seen position: p - reach = 24
    const auto tok = random_tokens(n, 5);
    const auto base = last_logits(*m, tok);
    auto changed = [&](int64_t at) {
        auto t = tok;
        t[at] = t[at] == 40 ? 41 : 40;
        return max_abs_diff(base, last_logits(*m, t));
    };
    // Out of reach the computation is the same, bit for bit; at the far end
    // of the reach the influence passes one window per layer and is small
    // (about 5e-7 here) but not zero.
    EXPECT_EQ(changed(p - reach - 1), 0.0) << "a token just out of reach changed the logits";
    EXPECT_EQ(changed(0), 0.0);
    EXPECT_GT(changed(p - reach), 0.0) << "the farthest token in reach did not matter";
    EXPECT_GT(changed(p - 1), 1e-4);
}

TEST(EngineGemma3, AGlobalLayerSeesTheWholeContext) {
    auto m = load(gemma3(7, 4));   // layer 5 is global
    const auto tok = random_tokens(40, 6);
    auto t = tok;
    t[1] = t[1] == 40 ? 41 : 40;
    EXPECT_GT(max_abs_diff(last_logits(*m, tok), last_logits(*m, t)), 1e-4);
}

TEST(EngineGemma3, MissingGemmaTensorsAreRefused) {
    for (const char *name : {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight",
                             "blk.2.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"}) {
        auto o = gemma3(3, 8);
        o.skip_tensor = name;
        try {
            load(o);
            ADD_FAILURE() << "loaded without " << name;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_FORMAT) << name;
            EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        }
    }
    auto o = gemma3(3, 8);
    o.window = 0;   // attention.sliding_window = 0
    EXPECT_THROW(load(o), Error);
}
