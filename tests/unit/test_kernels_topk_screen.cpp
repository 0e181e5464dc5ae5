// The bf16 screen of exact top-k (kernels/cpu/simd_topk_bf16.h): with the
// screen, topk_dot must return the same lists bit for bit as without it (the
// f32 kernel, itself checked against brute force in test_reattention.cpp),
// on data built to break it: keys whose exact order lives in bits bf16
// cannot see, outlier channels, ties, tiny values, and values out of the
// screen's range that send a tile or a whole call the exact way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

struct Lists {
    std::vector<float> score;
    std::vector<int64_t> index;
};

// topk_dot over keys in store-like blocks of 1024 (indices from 5000), with
// the screen on or off, its products by VDPBF16PS or (amx) on the AMX tile
// unit where the CPU has one.
Lists run_topk(cpu::ThreadPool &pool, const std::vector<float> &q, int64_t rows, const std::vector<float> &keys,
               int64_t n, int d, int k, bool f16, bool screen, bool amx = false) {
    Lists out;
    cpu::set_topk_screen_for_testing(screen);
    cpu::set_topk_amx_for_testing(amx);
    test::run_topk_dot(pool, q, rows, keys, f16, n, d, 5000, k, false, 1024, out.score, out.index);
    cpu::set_topk_screen_for_testing(true);
    cpu::set_topk_amx_for_testing(true);
    return out;
}

uint32_t bits(float x) {
    uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    return b;
}

void expect_same_lists(const Lists &got, const Lists &want) {
    ASSERT_EQ(got.index.size(), want.index.size());
    for (size_t i = 0; i < got.index.size(); ++i) {
        ASSERT_EQ(got.index[i], want.index[i]) << "entry " << i;
        ASSERT_EQ(bits(got.score[i]), bits(want.score[i])) << "entry " << i << ": " << got.score[i] << " vs "
                                                            << want.score[i];
    }
}

enum class Data { Gaussian, NearDuplicates, Clustered, Adversarial, Outliers, SmallIntegers, Tiny, OutOfRange };

const char *name(Data d) {
    switch (d) {
    case Data::Gaussian: return "gaussian";
    case Data::NearDuplicates: return "near duplicates";
    case Data::Clustered: return "clustered";
    case Data::Adversarial: return "adversarial pairs";
    case Data::Outliers: return "outlier channels";
    case Data::SmallIntegers: return "small integers";
    case Data::Tiny: return "tiny values";
    case Data::OutOfRange: return "out of range";
    }
    return "?";
}

// Queries and keys of one kind. NearDuplicates: every key is one of 8 base
// keys with a relative perturbation of about 1e-6 in a few channels, so the
// exact ranking depends on bits that bf16 rounds away and almost every key
// passes the screen (the pending lists overflow and are flushed early).
// Clustered: every key is one base key with each value moved by up to 2^-9
// of itself, about bf16's rounding step, so the bf16 scores misorder the
// keys by about the screen's bound: a bound too small drops the true best.
// Adversarial: queries exact in bf16 and pairs of keys A, B at 1 + 0.499
// and 1 + 0.501 of bf16's step in [1, 2) (A rounds down, B up), but B's
// last value is 0.2 of a step lower, so B scores below A exactly and
// (d - 1) steps above it in bf16: close to the 2u sum|q_e k_e| the bound
// allows for the keys' rounding. Pair 0 (one step higher) holds the best
// key A0; a bound below about 0.97 of 2u's key half (rel < 2^-8.05) lets
// B0's bf16 score push A0 out, which this case detects (k = 1). Their
// negatives make the keys' mean (the screen's shift) exactly zero.
void make_data(Data kind, std::mt19937 &rng, int64_t rows, int64_t n, int d, std::vector<float> &q,
               std::vector<float> &keys) {
    std::normal_distribution<float> nd;
    q.assign(size_t(rows * d), 0.0f);
    keys.assign(size_t(n * d), 0.0f);
    for (float &x : q) x = nd(rng);
    for (float &x : keys) x = nd(rng);
    switch (kind) {
    case Data::Gaussian: break;
    case Data::NearDuplicates: {
        std::vector<float> base(size_t(8 * d));
        for (float &x : base) x = nd(rng);
        for (int64_t j = 0; j < n; ++j)
            for (int c = 0; c < d; ++c) {
                const float b = base[size_t((j % 8) * d + c)];
                keys[size_t(j * d + c)] = c % 16 == 3 ? b * (1.0f + 1e-6f * nd(rng)) : b;
            }
        break;
    }
    case Data::Clustered: {
        std::vector<float> base(static_cast<size_t>(d), 0.0f);
        for (float &x : base) x = nd(rng);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (int64_t j = 0; j < n; ++j)
            for (int c = 0; c < d; ++c) keys[size_t(j * d + c)] = base[size_t(c)] * (1.0f + 0x1p-9f * u(rng));
        break;
    }
    case Data::Adversarial: {
        const float step = 0x1p-7f;   // bf16's spacing in [1, 2)
        for (int64_t r = 0; r < rows; ++r)
            for (int c = 0; c < d; ++c) q[size_t(r * d + c)] = float(1 + r % 3);
        // A, B, -A, -B: the keys' mean is exactly 0, so the screen scores
        // the keys as they are.
        for (int64_t j = 0; j < n; ++j) {
            const float v = j < 4 ? 1.0f + step : 1.0f;   // keys 0, 1 (A0, B0) score best
            const float sign = j % 4 < 2 ? 1.0f : -1.0f;
            for (int c = 0; c < d; ++c)
                keys[size_t(j * d + c)] = sign * (v + (j % 2 == 0 ? 0.499f : c + 1 < d ? 0.501f : 0.301f) * step);
        }
        // Channel c of the queries times 2^(c % 4), of the keys divided by
        // it: the same products and the same rounding, but the screen's
        // channel weights are no longer all equal.
        for (int64_t r = 0; r < rows; ++r)
            for (int c = 0; c < d; ++c) q[size_t(r * d + c)] *= float(1 << (c % 4));
        for (int64_t j = 0; j < n; ++j)
            for (int c = 0; c < d; ++c) keys[size_t(j * d + c)] /= float(1 << (c % 4));
        break;
    }
    case Data::Outliers:   // a few channels 300-1000x the rest, as small models have
        for (int64_t r = 0; r < rows; ++r) q[size_t(r * d + 5 % d)] *= 300.0f;
        for (int64_t j = 0; j < n; ++j) {
            keys[size_t(j * d + 5 % d)] *= 1000.0f;
            keys[size_t(j * d + (d - 1))] *= 300.0f;
        }
        break;
    case Data::SmallIntegers: {
        std::uniform_int_distribution<int> u(-2, 2);
        for (float &x : q) x = float(u(rng));
        for (float &x : keys) x = float(u(rng));
        break;
    }
    case Data::Tiny:   // products and sums in the denormal range
        for (float &x : q) x *= 1e-20f;
        for (float &x : keys) x *= 1e-19f;
        break;
    case Data::OutOfRange:   // a few keys beyond the screen's range, one NaN, one inf
        for (int64_t j = 0; j < n; j += 997) keys[size_t(j * d + 1 % d)] = 1e18f;
        if (n > 300) keys[size_t(300 * d)] = NAN;
        if (n > 2100) keys[size_t(2100 * d + 2 % d)] = INFINITY;
        break;
    }
}

} // namespace

TEST(TopkScreen, SameListsBitForBitAsTheExactKernel) {
    if (!cpu::cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    ASSERT_TRUE(cpu::topk_screen_enabled());
    // Where the CPU and OS run AMX-BF16 the screen uses it, and each case runs both ways.
    const bool amx = cpu::topk_amx_enabled();
    if (cpu::cpu_has_amx_bf16()) EXPECT_TRUE(amx) << "the CPU has AMX-BF16, the screen does not use it";
    if (!amx) std::printf("note: no AMX-BF16 here; the AMX screen is not exercised\n");
    std::mt19937 rng(11);
    struct Case {
        int threads;
        int64_t rows, n;
        int d, k;
    };
    const Case cases[] = {{2, 300, 6000, 64, 4}, {2, 400, 8000, 64, 1},  {1, 7, 3000, 64, 1},   {3, 1, 9000, 64, 64},
                          {2, 200, 2500, 128, 4}, {2, 50, 1500, 256, 7}, {2, 13, 700, 2, 4},
                          {2, 40, 800, 30, 3}};
    for (Data kind : {Data::Gaussian, Data::NearDuplicates, Data::Clustered, Data::Adversarial, Data::Outliers, Data::SmallIntegers, Data::Tiny,
                      Data::OutOfRange}) {
        for (const Case &c : cases) {
            cpu::ThreadPool pool(c.threads);
            std::vector<float> q, keys;
            make_data(kind, rng, c.rows, c.n, c.d, q, keys);
            for (bool f16 : {false, true}) {
                SCOPED_TRACE(testing::Message() << name(kind) << ", threads " << c.threads << ", rows " << c.rows
                                                << ", keys " << c.n << ", d " << c.d << ", k " << c.k << ", f16 " << f16);
                const Lists exact = run_topk(pool, q, c.rows, keys, c.n, c.d, c.k, f16, false);
                const Lists screened = run_topk(pool, q, c.rows, keys, c.n, c.d, c.k, f16, true);
                expect_same_lists(screened, exact);
                if (HasFatalFailure()) return;
                if (!amx) continue;
                SCOPED_TRACE("AMX");
                expect_same_lists(run_topk(pool, q, c.rows, keys, c.n, c.d, c.k, f16, true, true), exact);
                if (HasFatalFailure()) return;
            }
        }
    }
}

// A query value out of the screen's range (or NaN) sends the whole call the
// exact way; the lists still match, and NaN is never selected.
TEST(TopkScreen, QueriesOutOfRangeFallBackToTheExactKernel) {
    if (!cpu::cpu_has_avx512_bf16()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    std::mt19937 rng(12);
    cpu::ThreadPool pool(2);
    const int d = 64, k = 4;
    const int64_t rows = 100, n = 4000;
    std::vector<float> q, keys;
    make_data(Data::Gaussian, rng, rows, n, d, q, keys);
    for (float bad : {1e18f, NAN, -INFINITY}) {
        std::vector<float> qb = q;
        qb[size_t(37 * d + 9)] = bad;
        const Lists exact = run_topk(pool, qb, rows, keys, n, d, k, false, false);
        const Lists screened = run_topk(pool, qb, rows, keys, n, d, k, false, true);
        expect_same_lists(screened, exact);
        if (cpu::topk_amx_enabled()) expect_same_lists(run_topk(pool, qb, rows, keys, n, d, k, false, true, true), exact);
    }
}
