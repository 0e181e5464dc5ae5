// RoPE: NORMAL and NEOX layouts (with n_rot < head_dim and linear scaling)
// against the textbook formula written here; YaRN against a double-precision
// re-implementation of ggml's rope_yarn / ggml_rope_yarn_corr_dims.
#include <gtest/gtest.h>

#include <cstring>

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

Hparams make_hp(int head_dim, int n_rot, RopeLayout layout, float base) {
    Hparams hp;
    hp.head_dim = head_dim;
    hp.n_rot = n_rot;
    hp.rope_layout = layout;
    hp.rope_base = base;
    return hp;
}

// Rotation of pair (a, b) of head dims by angle theta, scaled by mscale.
void expect_rotated(const Hparams &hp, const std::vector<float> &in, const std::vector<float> &out, int64_t ld,
                    int n_heads, const std::vector<int32_t> &pos,
                    const std::function<void(int pair, int32_t p, double &theta, double &mscale)> &angle,
                    double tol, const char *what) {
    const int half = hp.n_rot / 2;
    for (size_t t = 0; t < pos.size(); ++t)
        for (int h = 0; h < n_heads; ++h) {
            const float *x = in.data() + t * ld + h * hp.head_dim;
            const float *y = out.data() + t * ld + h * hp.head_dim;
            for (int i = 0; i < half; ++i) {
                double theta, ms;
                angle(i, pos[t], theta, ms);
                const int a = hp.rope_layout == RopeLayout::NEOX ? i : 2 * i;
                const int b = hp.rope_layout == RopeLayout::NEOX ? i + half : 2 * i + 1;
                const double ya = (x[a] * std::cos(theta) - x[b] * std::sin(theta)) * ms;
                const double yb = (x[a] * std::sin(theta) + x[b] * std::cos(theta)) * ms;
                ASSERT_NEAR(y[a], ya, tol) << what << " t " << t << " h " << h << " i " << i;
                ASSERT_NEAR(y[b], yb, tol) << what << " t " << t << " h " << h << " i " << i;
            }
            for (int d = hp.n_rot; d < hp.head_dim; ++d) ASSERT_EQ(y[d], x[d]) << what << " tail dim " << d;
        }
    // padding between rows is untouched
    for (size_t t = 0; t < pos.size(); ++t)
        for (int64_t d = static_cast<int64_t>(n_heads) * hp.head_dim; d < ld; ++d)
            ASSERT_EQ(out[t * ld + d], in[t * ld + d]);
}

} // namespace

TEST(KernelsRope, NormalAndNeoxMatchFormula) {
    std::mt19937 rng(11);
    const std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 33, 70000};
    for (RopeLayout layout : {RopeLayout::NORMAL, RopeLayout::NEOX})
        for (auto [hd, nrot] : {std::pair{64, 64}, {64, 32}, {16, 10}, {128, 128}})
            for (float fscale : {1.0f, 0.25f}) {
                Hparams hp = make_hp(hd, nrot, layout, 10000.0f);
                if (fscale != 1.0f) {
                    hp.rope_scaling = RopeScaling::LINEAR;
                    hp.rope_freq_scale = fscale;
                }
                const int n_heads = 3;
                const int64_t ld = n_heads * hd + 5;
                auto in = test::random_floats(ld * pos.size(), rng);
                auto angle = [&](int i, int32_t p, double &theta, double &ms) {
                    theta = fscale * p * std::pow(10000.0, -2.0 * i / nrot);
                    ms = 1.0;
                };
                std::vector<float> out = in, out_ref = in;
                cpu::rope(hp, out.data(), ld, pos.size(), n_heads, pos.data());
                // float cos/sin of angles up to 7e4 rad: ~1e-11 relative in theta -> tiny
                expect_rotated(hp, in, out, ld, n_heads, pos, angle, 2e-6, "rope");
                cpu::rope_ref(hp, out_ref.data(), ld, pos.size(), n_heads, pos.data());
                expect_rotated(hp, in, out_ref, ld, n_heads, pos, angle, 2e-6, "rope_ref");
            }
}

TEST(KernelsRope, YarnMatchesDoubleReimplementation) {
    std::mt19937 rng(12);
    const std::vector<int32_t> pos = {0, 3, 511, 8191, 30000, 131071};
    for (RopeLayout layout : {RopeLayout::NORMAL, RopeLayout::NEOX}) {
        Hparams hp = make_hp(64, 64, layout, 10000.0f);
        hp.rope_scaling = RopeScaling::YARN;
        hp.rope_freq_scale = 0.125f;
        hp.rope_orig_ctx = 4096;
        hp.yarn_ext_factor = 1.0f;
        hp.yarn_attn_factor = 1.0f;
        hp.yarn_beta_fast = 32.0f;
        hp.yarn_beta_slow = 1.0f;
        // corr dims: n_dims * ln(n_orig / (beta * 2 pi)) / (2 ln base), floor/ceil, clamped
        auto corr = [&](double beta) { return 64 * std::log(4096 / (beta * 2 * M_PI)) / (2 * std::log(10000.0)); };
        const double lo = std::max(0.0, std::floor(corr(32.0))), hi = std::min(63.0, std::ceil(corr(1.0)));
        auto angle = [&](int i, int32_t p, double &theta, double &ms) {
            const double extrap = p * std::pow(10000.0, -2.0 * i / 64);
            const double interp = 0.125 * extrap;
            const double y = (i - lo) / std::max(0.001, hi - lo);
            const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));
            theta = interp * (1 - ramp) + extrap * ramp;
            ms = 1.0 + 0.1 * std::log(1.0 / 0.125);
        };
        const int n_heads = 2;
        const int64_t ld = n_heads * 64;
        auto in = test::random_floats(ld * pos.size(), rng);
        std::vector<float> out = in, out_ref = in;
        cpu::rope(hp, out.data(), ld, pos.size(), n_heads, pos.data());
        expect_rotated(hp, in, out, ld, n_heads, pos, angle, 3e-6, "rope yarn");
        cpu::rope_ref(hp, out_ref.data(), ld, pos.size(), n_heads, pos.data());
        expect_rotated(hp, in, out_ref, ld, n_heads, pos, angle, 3e-6, "rope_ref yarn");
    }
}

TEST(KernelsRope, RejectsBadRotDims) {
    Hparams hp = make_hp(64, 65, RopeLayout::NORMAL, 10000.0f);
    std::vector<float> x(64);
    int32_t p = 0;
    EXPECT_THROW(cpu::rope(hp, x.data(), 64, 1, 1, &p), Error);
    hp.n_rot = 128;
    EXPECT_THROW(cpu::rope_ref(hp, x.data(), 64, 1, 1, &p), Error);
}

TEST(KernelsRope, FreqFactorsDivideEachPairsAngle) {
    // llama 3.x rope scaling (rope_freqs): pair i turns at theta_i / factor_i,
    // with and without linear scaling, both layouts.
    std::mt19937 rng(12);
    const std::vector<int32_t> pos = {0, 1, 9, 500, 8191, 131000};
    for (RopeLayout layout : {RopeLayout::NORMAL, RopeLayout::NEOX})
        for (float fscale : {1.0f, 0.5f}) {
            const int hd = 32;
            Hparams hp = make_hp(hd, hd, layout, 500000.0f);
            if (fscale != 1.0f) {
                hp.rope_scaling = RopeScaling::LINEAR;
                hp.rope_freq_scale = fscale;
            }
            std::vector<float> ff(hd / 2);
            for (int i = 0; i < hd / 2; ++i) ff[i] = i < 4 ? 1.0f : (i < 6 ? 2.5f + i : 8.0f);
            hp.rope_freq_factors = ff.data();
            const int n_heads = 2;
            const int64_t ld = n_heads * hd + 3;
            auto in = test::random_floats(ld * pos.size(), rng);
            auto angle = [&](int i, int32_t p, double &theta, double &ms) {
                theta = fscale * p * std::pow(500000.0, -2.0 * i / hd) / ff[i];
                ms = 1.0;
            };
            std::vector<float> out = in, out_ref = in;
            cpu::rope(hp, out.data(), ld, pos.size(), n_heads, pos.data());
            expect_rotated(hp, in, out, ld, n_heads, pos, angle, 2e-6, "rope");
            cpu::rope_ref(hp, out_ref.data(), ld, pos.size(), n_heads, pos.data());
            expect_rotated(hp, in, out_ref, ld, n_heads, pos, angle, 2e-6, "rope_ref");
        }
}

TEST(KernelsRope, CachedTableGivesTheSameBitsAndMatchesItsParameters) {
    // rope_cached looks up (cos, sin) for positions inside a RopeTable and
    // computes the rest; both must give exactly what rope() gives, for plain,
    // YaRN and frequency-factor parameters, positions inside, at the edge of,
    // beyond the table and negative (re-positioning rotates by deltas).
    std::mt19937 rng(21);
    std::vector<float> ff(16);
    for (int i = 0; i < 16; ++i) ff[i] = 1.0f + 0.5f * i;
    std::vector<Hparams> hps;
    hps.push_back(make_hp(64, 64, RopeLayout::NORMAL, 10000.0f));
    hps.push_back(make_hp(64, 48, RopeLayout::NEOX, 1000000.0f));
    Hparams yarn = make_hp(64, 64, RopeLayout::NEOX, 10000.0f);
    yarn.rope_scaling = RopeScaling::YARN;
    yarn.rope_freq_scale = 0.25f;
    yarn.rope_orig_ctx = 4096;
    yarn.yarn_ext_factor = 1.0f;
    yarn.yarn_attn_factor = 1.0f;
    yarn.yarn_beta_fast = 32.0f;
    yarn.yarn_beta_slow = 1.0f;
    hps.push_back(yarn);
    Hparams freqs = make_hp(32, 32, RopeLayout::NORMAL, 500000.0f);
    freqs.rope_freq_factors = ff.data();
    hps.push_back(freqs);
    const std::vector<int32_t> pos = {0, 1, 999, 1000, 1001, 4095, 70000, -3, -1000, 17};
    for (const Hparams &hp : hps) {
        const cpu::RopeParams p = cpu::rope_params(hp);
        const cpu::RopeTable table(p, 1001);
        ASSERT_TRUE(table.matches(p));
        const int n_heads = 3;
        const int64_t ld = n_heads * hp.head_dim + 5;
        const auto in = test::random_floats(ld * pos.size(), rng);
        std::vector<float> want = in, got = in;
        cpu::rope(hp, want.data(), ld, pos.size(), n_heads, pos.data());
        cpu::rope_cached(p, &table, got.data(), ld, pos.size(), n_heads, pos.data());
        for (size_t k = 0; k < in.size(); ++k) ASSERT_EQ(got[k], want[k]) << "element " << k;
    }
    // A table answers only for the parameters it was built with.
    const cpu::RopeParams a = cpu::rope_params(hps[0]);
    const cpu::RopeTable ta(a, 8);
    EXPECT_FALSE(ta.matches(cpu::rope_params(hps[1])));
    EXPECT_FALSE(ta.matches(cpu::rope_params(yarn)));
    Hparams other_base = hps[0];
    other_base.rope_base = 10001.0f;
    EXPECT_FALSE(ta.matches(cpu::rope_params(other_base)));
    const cpu::RopeParams f = cpu::rope_params(freqs);
    const cpu::RopeTable tf(f, 8);
    std::vector<float> ff2 = ff;
    ff2[7] += 1.0f;
    Hparams freqs2 = freqs;
    freqs2.rope_freq_factors = ff2.data();
    EXPECT_TRUE(tf.matches(f));
    EXPECT_FALSE(tf.matches(cpu::rope_params(freqs2)));
    Hparams no_freqs = freqs;
    no_freqs.rope_freq_factors = nullptr;
    EXPECT_FALSE(tf.matches(cpu::rope_params(no_freqs)));
}

TEST(KernelsRope, TableCacheGrowsCapsAndKeepsOnePerParameterSet) {
    cpu::RopeTableCache cache;
    const cpu::RopeParams a = cpu::rope_params(make_hp(64, 64, RopeLayout::NORMAL, 10000.0f));
    const cpu::RopeParams b = cpu::rope_params(make_hp(64, 64, RopeLayout::NORMAL, 1000000.0f));
    auto t1 = cache.get(a, 100);
    ASSERT_NE(t1, nullptr);
    EXPECT_EQ(t1->n_pos(), 100);
    EXPECT_EQ(cache.get(a, 50), t1) << "a covering table is reused";
    auto t2 = cache.get(a, 101);
    EXPECT_EQ(t2->n_pos(), 100 + 1024) << "grows by a quarter, at least 1024 positions";
    EXPECT_EQ(cache.get(a, 5000)->n_pos(), 5000) << "or to what is asked";
    auto t3 = cache.get(a, 5001);
    EXPECT_EQ(t3->n_pos(), 5000 + 1250);
    // The grown table keeps the old entries and computes the new ones: the
    // same values, bit for bit, as a table built in one go.
    const cpu::RopeTable fresh(a, t3->n_pos());
    for (int64_t p : {int64_t(0), int64_t(99), int64_t(100), int64_t(4999), int64_t(5000), t3->n_pos() - 1})
        EXPECT_EQ(0, std::memcmp(t3->at(p), fresh.at(p), 64 * sizeof(float))) << "position " << p;
    auto tb = cache.get(b, 10);
    EXPECT_TRUE(tb->matches(b));
    EXPECT_FALSE(tb->matches(a));
    EXPECT_EQ(cache.get(a, 150), t3);
    const int64_t cap = int64_t(cpu::RopeTableCache::kMaxBytes / (sizeof(float) * 64));
    EXPECT_EQ(cache.get(a, 1 << 30)->n_pos(), cap) << "capped at kMaxBytes";
    EXPECT_EQ(cache.get(b, 0), tb) << "nothing needed: the existing table";
    cpu::RopeTableCache empty;
    EXPECT_EQ(empty.get(a, 0), nullptr);
    // The table holder keeps working after the cache replaced it.
    EXPECT_EQ(t1->n_pos(), 100);
    EXPECT_TRUE(t1->matches(a));
}
