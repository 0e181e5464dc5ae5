// rms_norm, swiglu, geglu and log_sum_exp of every SIMD variant against formulas written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;

TEST(KernelsNorm, RmsNormMatchesFormula) {
    std::mt19937 rng(5);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (int64_t n : {1, 7, 16, 33, 576, 1001}) {
            auto x = test::random_floats(n, rng, -3.0f, 3.0f), w = test::random_floats(n, rng);
            std::vector<float> want(n), want_nw(n), got(n), ref(n);
            double ss = 0.0;
            for (float v : x) ss += static_cast<double>(v) * v;
            const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
            for (int64_t i = 0; i < n; ++i) {
                want[i] = static_cast<float>(x[i] * inv * w[i]);
                want_nw[i] = static_cast<float>(x[i] * inv);
            }
            cpu::rms_norm(x.data(), w.data(), got.data(), n, 1e-5f);
            EXPECT_LT(test::nmse(got.data(), want.data(), n), 1e-12) << name << " n " << n;
            EXPECT_LE(test::max_abs_diff(got.data(), want.data(), n), 2e-6) << name << " n " << n;
            cpu::rms_norm(x.data(), nullptr, got.data(), n, 1e-5f);
            EXPECT_LE(test::max_abs_diff(got.data(), want_nw.data(), n), 2e-6) << name << " n " << n;
            cpu::rms_norm_ref(x.data(), w.data(), ref.data(), n, 1e-5f);
            EXPECT_LE(test::max_abs_diff(ref.data(), want.data(), n), 1e-6) << "ref n " << n;
            // in place
            std::vector<float> inplace = x;
            cpu::rms_norm(inplace.data(), w.data(), inplace.data(), n, 1e-5f);
            EXPECT_LE(test::max_abs_diff(inplace.data(), want.data(), n), 2e-6);
        }
    });
}

TEST(KernelsNorm, SwigluMatchesFormula) {
    std::mt19937 rng(6);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (int64_t n : {1, 5, 16, 31, 1536, 1537}) {
            auto g = test::random_floats(n, rng, -12.0f, 12.0f), u = test::random_floats(n, rng, -2.0f, 2.0f);
            if (n > 2) {
                g[0] = -100.0f;   // exp(-g) overflows
                g[1] = 100.0f;
            }
            std::vector<float> want(n), got(n);
            for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i]);
            cpu::swiglu(g.data(), u.data(), got.data(), n);
            EXPECT_LT(test::nmse(got.data(), want.data(), n), 1e-12) << name << " n " << n;
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(got[i], want[i], 1e-6 * (1.0 + std::fabs(want[i]))) << name << " i " << i << " g " << g[i];
        }
    });
}

// GELU with the tanh approximation, in double, here; and the scalar
// reference the engine used before the SIMD path (std::tanh in float).
TEST(KernelsNorm, GegluMatchesFormulaAndTheScalarReference) {
    std::mt19937 rng(7);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (int64_t n : {1, 5, 16, 31, 2048, 2049}) {
            auto g = test::random_floats(n, rng, -12.0f, 12.0f), u = test::random_floats(n, rng, -2.0f, 2.0f);
            if (n > 3) {
                g[0] = -100.0f;   // exp(-2y) overflows: gelu -> -0
                g[1] = 100.0f;    // exp(-2y) underflows: gelu -> x
                g[2] = 0.0f;
            }
            std::vector<float> want(n), got(n), ref(n);
            for (int64_t i = 0; i < n; ++i) {
                const double x = g[i];
                want[i] = static_cast<float>(0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))) * u[i]);
            }
            cpu::geglu(g.data(), u.data(), got.data(), n);
            cpu::geglu_ref(g.data(), u.data(), ref.data(), n);
            EXPECT_LT(test::nmse(got.data(), want.data(), n), 1e-12) << name << " n " << n;
            for (int64_t i = 0; i < n; ++i) {
                ASSERT_NEAR(got[i], want[i], 2e-6 * (1.0 + std::fabs(want[i]))) << name << " i " << i << " g " << g[i];
                ASSERT_NEAR(ref[i], want[i], 2e-6 * (1.0 + std::fabs(want[i]))) << "ref i " << i << " g " << g[i];
            }
        }
    });
}

// log(sum exp(x)) in long double, shifted by the max, here.
static double lse_formula(const std::vector<float> &x) {
    long double mx = x[0];
    for (float v : x) mx = std::max(mx, static_cast<long double>(v));
    long double sum = 0;
    for (float v : x) sum += std::exp(static_cast<long double>(v) - mx);
    return static_cast<double>(mx + std::log(sum));
}

// Logits-like rows (a vocabulary's worth, a few dominant entries, long
// tails far below the max) and edge sizes around the vector width and the
// 1024-element blocks whose lane sums go into a double.
TEST(KernelsNorm, LogSumExpMatchesLongDoubleFormula) {
    std::mt19937 rng(9);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (int64_t n : {1, 2, 15, 16, 17, 1023, 1024, 1025, 4111, 49152, 262144 + 5}) {
            std::normal_distribution<float> d(0.0f, 3.0f);
            std::vector<float> x(static_cast<size_t>(n));
            for (auto &v : x) v = d(rng);
            if (n > 20) {
                x[size_t(n / 3)] = 25.0f;    // a confident prediction
                x[size_t(n - 1)] = -200.0f;  // exp underflows to 0 after the shift
            }
            const double want = lse_formula(x);
            const double got = cpu::log_sum_exp(x.data(), n);
            EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want))) << name << " n " << n;
            EXPECT_NEAR(cpu::log_sum_exp_ref(x.data(), n), want, 1e-9 * std::max(1.0, std::fabs(want))) << "ref n " << n;
            // Shift invariance far from 0 (logits of a soft-capped model sit near +-30).
            std::vector<float> y(x);
            for (auto &v : y) v -= 1000.0f;
            EXPECT_NEAR(cpu::log_sum_exp(y.data(), n), lse_formula(y), 1e-6 * 1000.0) << name << " shifted n " << n;
        }
        // Equal entries: log(n) + x exactly enough to see a lost block or lane.
        for (int64_t n : {3, 16, 1000, 1024, 3000, 70001}) {
            std::vector<float> x(static_cast<size_t>(n), -7.25f);
            EXPECT_NEAR(cpu::log_sum_exp(x.data(), n), std::log(double(n)) - 7.25, 1e-6) << name << " equal n " << n;
        }
    });
}

