// REFORM's selection scoring kernel (cpu::max_dot_f16): max over query rows of
// dot products with f16 keys, on every SIMD variant this CPU runs, against a
// double-precision brute force, over odd sizes (key tails past a tile or a
// register strip, dims that are not a vector multiple, query counts around
// the register block), padded strides, NaN products, and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/thread_pool.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

struct Case {
    int64_t n, ld;
    int32_t dim;
    int64_t n_q, ldq;
    std::vector<uint16_t> keys;
    std::vector<float> q;
};

Case make_case(int64_t n, int32_t dim, int64_t n_q, int64_t ld_pad, int64_t ldq_pad, std::mt19937 &rng) {
    Case c{n, dim + ld_pad, dim, n_q, dim + ldq_pad, {}, {}};
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    c.keys.resize(static_cast<size_t>(std::max<int64_t>(1, n * c.ld)));
    for (auto &h : c.keys) h = fp32_to_fp16(u(rng));
    c.q.resize(static_cast<size_t>(n_q * c.ldq));
    for (auto &x : c.q) x = u(rng);
    return c;
}

// Brute force in double; also the sum of |products| of the winning row's
// neighbourhood as a scale for the f32 rounding bound.
void reference(const Case &c, std::vector<double> &best, std::vector<double> &scale) {
    best.assign(static_cast<size_t>(c.n), -std::numeric_limits<double>::infinity());
    scale.assign(static_cast<size_t>(c.n), 0.0);
    for (int64_t t = 0; t < c.n; ++t)
        for (int64_t u = 0; u < c.n_q; ++u) {
            double acc = 0.0, abs = 0.0;
            for (int32_t i = 0; i < c.dim; ++i) {
                const double p = double(fp16_to_fp32(c.keys[t * c.ld + i])) * c.q[u * c.ldq + i];
                acc += p;
                abs += std::fabs(p);
            }
            if (std::isnan(acc)) continue;   // a NaN product never wins
            best[t] = std::max(best[t], acc);
            scale[t] = std::max(scale[t], abs);
        }
}

std::vector<float> run(cpu::ThreadPool &pool, const Case &c) {
    std::vector<float> out(static_cast<size_t>(c.n), 12345.0f);
    cpu::MaxDotArgs a;
    a.keys = c.keys.data();
    a.n = c.n;
    a.ld = c.ld;
    a.dim = c.dim;
    a.q = c.q.data();
    a.n_q = c.n_q;
    a.ldq = c.ldq;
    a.out = out.data();
    cpu::max_dot_f16(pool, a);
    return out;
}

void expect_matches(const Case &c, const std::vector<float> &got, const char *variant) {
    std::vector<double> best, scale;
    reference(c, best, scale);
    for (int64_t t = 0; t < c.n; ++t) {
        if (std::isinf(best[t])) {
            ASSERT_TRUE(std::isinf(got[t]) && got[t] < 0) << variant << " t " << t << " got " << got[t];
            continue;
        }
        // f32 accumulation of dim products: a few ulps per product of the sum of |products|.
        const double tol = 4.0 * c.dim * std::numeric_limits<float>::epsilon() * scale[t] + 1e-30;
        ASSERT_NEAR(got[t], best[t], tol) << variant << " n " << c.n << " dim " << c.dim << " n_q " << c.n_q
                                          << " t " << t;
    }
}

} // namespace

TEST(KernelsMaxDot, MatchesDoubleReferenceOnOddSizes) {
    std::mt19937 rng(21);
    cpu::ThreadPool pool(3);
    const int64_t ns[] = {1, 7, 16, 31, 127, 128, 129, 300, 1000};
    const int32_t dims[] = {1, 3, 8, 17, 64, 72, 256};
    const int64_t nqs[] = {1, 2, 5, 6, 7, 13};
    lctx::test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        int k = 0;
        for (int64_t n : ns)
            for (int32_t dim : dims)
                for (int64_t nq : nqs) {
                    if (++k % 3) continue;   // a third of the grid per variant, each size still met
                    const Case c = make_case(n, dim, nq, k % 2 ? 0 : 5, k % 4 == 0 ? 3 : 0, rng);
                    expect_matches(c, run(pool, c), name);
                }
        // The model's shape: 4 heads of 64, 32 query rows, over several tiles with a tail.
        const Case c = make_case(2 * 128 * 8 + 77, 256, 32, 0, 0, rng);
        expect_matches(c, run(pool, c), name);
    });
}

TEST(KernelsMaxDot, ThreadCountDoesNotChangeScores) {
    std::mt19937 rng(5);
    cpu::ThreadPool one(1), four(4);
    lctx::test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        const Case c = make_case(128 * 8 * 5 + 3, 256, 11, 0, 0, rng);
        EXPECT_EQ(run(one, c), run(four, c)) << name;
    });
}

TEST(KernelsMaxDot, NanProductsNeverWin) {
    std::mt19937 rng(9);
    cpu::ThreadPool pool(2);
    lctx::test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        Case c = make_case(200, 64, 7, 0, 0, rng);
        const uint16_t nan16 = 0x7e00;
        for (int32_t i = 0; i < c.dim; i += 9) c.keys[5 * c.ld + i] = nan16;   // key 5: every product NaN
        c.keys[150 * c.ld + 3] = nan16;
        c.q[2 * c.ldq + 10] = std::numeric_limits<float>::quiet_NaN();        // query row 2: NaN for every key
        const std::vector<float> got = run(pool, c);
        EXPECT_TRUE(std::isinf(got[5]) && got[5] < 0) << name;
        EXPECT_TRUE(std::isinf(got[150]) && got[150] < 0) << name;
        expect_matches(c, got, name);
    });
}

TEST(KernelsMaxDot, RefusesBadSizes) {
    cpu::ThreadPool pool(1);
    std::vector<uint16_t> k(64);
    std::vector<float> q(64), out(4);
    cpu::MaxDotArgs a;
    a.keys = k.data();
    a.n = 4;
    a.ld = 16;
    a.dim = 16;
    a.q = q.data();
    a.n_q = 0;   // no query rows
    a.ldq = 16;
    a.out = out.data();
    EXPECT_ANY_THROW(cpu::max_dot_f16(pool, a));
    a.n_q = 1;
    a.ld = 8;   // stride below dim
    EXPECT_ANY_THROW(cpu::max_dot_f16(pool, a));
}
