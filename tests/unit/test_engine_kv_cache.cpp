// KvCache: slot bookkeeping, compaction, re-positioning and allocation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error.h"
#include "engine/kv_cache.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace lctx;

namespace {

Hparams tiny_hp() {
    Hparams hp;
    hp.arch = "llama";
    hp.n_layer = 3;
    hp.n_embd = 64;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_rot = 16;
    hp.n_ff = 128;
    hp.n_vocab = 300;
    hp.n_ctx_train = 4096;
    return hp;
}

// Fills every slot with a value that encodes (layer, head, slot, dim).
void fill(KvCache &c) {
    for (int32_t l = 0; l < c.n_layers(); ++l)
        for (int32_t h = 0; h < c.n_head_kv(); ++h)
            for (int64_t s = 0; s < c.size(); ++s)
                for (int32_t d = 0; d < c.head_dim(); ++d) {
                    const float v = static_cast<float>(l * 1000000 + h * 100000 + s * 100 + d);
                    c.keys(l)[h * c.head_stride() + s * c.head_dim() + d] = v;
                    c.values(l)[h * c.head_stride() + s * c.head_dim() + d] = -v;
                }
}

} // namespace

TEST(EngineKvCache, AppendTruncateFull) {
    const Hparams hp = tiny_hp();
    KvCache c(hp, 10);
    EXPECT_EQ(c.capacity(), 10);
    EXPECT_EQ(c.size(), 0);
    EXPECT_EQ(c.n_layers(), 3);
    EXPECT_EQ(c.n_head_kv(), 2);
    EXPECT_EQ(c.head_dim(), 16);
    EXPECT_EQ(c.head_stride(), 160);
    EXPECT_EQ(c.append(4), 0);
    EXPECT_EQ(c.append(6), 4);
    EXPECT_EQ(c.size(), 10);
    try {
        c.append(1);
        FAIL() << "appended past the capacity";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CONTEXT_FULL);
    }
    EXPECT_EQ(c.size(), 10);
    c.truncate(3);
    EXPECT_EQ(c.size(), 3);
    c.truncate(7);  // never grows
    EXPECT_EQ(c.size(), 3);
    EXPECT_THROW(c.append(-1), Error);
    c.clear();
    EXPECT_EQ(c.size(), 0);

    KvCache early(hp, 5, 1);
    EXPECT_EQ(early.n_layers(), 1);
    EXPECT_THROW(KvCache(hp, 5, 4), Error);
    EXPECT_THROW(KvCache(hp, -1), Error);
}

TEST(EngineKvCache, OutOfMemory) {
    const Hparams hp = tiny_hp();
    for (int64_t cap : {int64_t(1) << 40, int64_t(1) << 60}) {
        try {
            KvCache c(hp, cap);
            FAIL() << "allocated " << cap << " slots";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY) << e.what();
        }
    }
}

TEST(EngineKvCache, Compact) {
    const Hparams hp = tiny_hp();
    KvCache c(hp, 8);
    c.append(8);
    for (int s = 0; s < 8; ++s) c.positions()[s] = 10 + s;
    fill(c);
    const std::vector<int64_t> keep = {0, 2, 3, 7};
    c.compact(keep);
    ASSERT_EQ(c.size(), 4);
    for (size_t i = 0; i < keep.size(); ++i) {
        EXPECT_EQ(c.positions()[i], 10 + keep[i]);
        for (int32_t l = 0; l < 3; ++l)
            for (int32_t h = 0; h < 2; ++h)
                for (int32_t d = 0; d < 16; ++d) {
                    const float v = static_cast<float>(l * 1000000 + h * 100000 + keep[i] * 100 + d);
                    ASSERT_EQ(c.keys(l)[h * c.head_stride() + i * 16 + d], v);
                    ASSERT_EQ(c.values(l)[h * c.head_stride() + i * 16 + d], -v);
                }
    }
    EXPECT_THROW(c.compact({1, 1}), Error);   // not ascending
    EXPECT_THROW(c.compact({0, 4}), Error);   // out of range
    EXPECT_EQ(c.size(), 4);
    c.compact({});
    EXPECT_EQ(c.size(), 0);
}

// Keys rotated at p and re-positioned to q equal keys rotated at q directly.
static void check_reposition(const Hparams &hp) {
    KvCache c(hp, 6);
    c.append(6);
    const std::vector<int32_t> from = {0, 1, 2, 50, 51, 1000};
    const std::vector<int32_t> to = {0, 7, 3, 10, 2000, 999};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> raw(static_cast<size_t>(3 * 2 * 6 * 16));
    for (float &x : raw) x = nd(rng);
    // keys(l) + h * stride + s * D: for a fixed (l, h) the slots are a
    // [6][16] block, rotated with one head per "token".
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            float *k = c.keys(l) + h * c.head_stride();
            std::copy_n(raw.data() + (l * 2 + h) * 96, 96, k);
            cpu::rope_ref(hp, k, 16, 6, 1, from.data());
        }
    for (int s = 0; s < 6; ++s) c.positions()[s] = from[s];
    c.reposition(to, hp);
    for (int s = 0; s < 6; ++s) EXPECT_EQ(c.positions()[s], to[s]);
    double max_err = 0;
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            std::vector<float> want(raw.begin() + (l * 2 + h) * 96, raw.begin() + (l * 2 + h + 1) * 96);
            cpu::rope_ref(hp, want.data(), 16, 6, 1, to.data());
            const float *k = c.keys(l) + h * c.head_stride();
            for (int i = 0; i < 96; ++i) max_err = std::max(max_err, double(std::fabs(k[i] - want[i])));
        }
    EXPECT_LT(max_err, 2e-5) << "max abs diff";
    EXPECT_THROW(c.reposition({1, 2}, hp), Error);
}

TEST(EngineKvCache, RepositionPlain) { check_reposition(tiny_hp()); }

TEST(EngineKvCache, RepositionLinear) {
    Hparams hp = tiny_hp();
    hp.rope_scaling = RopeScaling::LINEAR;
    hp.rope_freq_scale = 0.25f;
    check_reposition(hp);
}

TEST(EngineKvCache, RepositionYarn) {
    Hparams hp = tiny_hp();
    hp.rope_scaling = RopeScaling::YARN;
    hp.rope_freq_scale = 0.25f;
    hp.rope_orig_ctx = 256;
    hp.yarn_ext_factor = 1.0f;
    check_reposition(hp);
}
