// matmul's int8 arithmetic (MatmulArith::INT8, docs/int8.md) against a brute
// force reference written here: the activations rounded to int8 per block of
// 32 by the rule of the docs, multiplied in double with the weights as the
// scalar reference dequantizer gives them, for one token (decode's GEMV) and
// many (the GEMM). Also: which shapes and types stay exact f32, the 4-bit
// unpacking against the dequantizer, non-finite inputs, and the variant
// without a kernel (scalar) staying exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matmul_int8.h"
#include "test_kernels_util.h"

using namespace lctx;
using lctx::test::RandomWeight;

namespace {

// The activation rounding of docs/int8.md, written out independently:
// per block of 32, scale = max|x| / 127, code = round-half-even(x / scale).
std::vector<double> int8_rounded(const float *x, int64_t K) {
    std::vector<double> out(static_cast<size_t>(K));
    for (int64_t b = 0; b < K; b += 32) {
        double amax = 0.0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[b + j])));
        const float scale = static_cast<float>(amax) / 127.0f;
        for (int j = 0; j < 32; ++j) {
            const double code = amax >= 1e-30 ? std::nearbyint(static_cast<double>(x[b + j] * (127.0f / static_cast<float>(amax))))
                                              : 0.0;
            out[static_cast<size_t>(b + j)] = code * scale;
        }
    }
    return out;
}

// Where the int8 arithmetic applies: two or more tokens (the GEMM) for every
// type with 4- or 5-bit codes, and one token (decode's GEMV) for the same.
bool int8_runs(int64_t n_tok, GgmlType t) {
    return n_tok >= 1 && cpu::matmul_int8_available() && cpu::int8_weight_type(t);
}

// y against the reference: |y - sum w * x_rounded| <= 1e-5 * sum |w * x_rounded|.
void expect_int8_result(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, const float *y,
                        const std::string &what) {
    std::vector<float> row(W.n_cols);
    for (int64_t t = 0; t < n_tok; ++t) {
        const std::vector<double> xr = int8_rounded(x + t * ldx, W.n_cols);
        for (int64_t r = 0; r < W.n_rows; ++r) {
            dequantize_row_ref(W.type, W.row(r), row.data(), W.n_cols);
            double ref = 0.0, mag = 0.0;
            for (int64_t c = 0; c < W.n_cols; ++c) {
                const double p = row[c] * xr[c];
                ref += p;
                mag += std::fabs(p);
            }
            ASSERT_LE(std::fabs(y[t * W.n_rows + r] - ref), 1e-5 * mag + 1e-30) << what << " row " << r << " tok " << t;
        }
    }
}

} // namespace

TEST(KernelsMatmulInt8, MatchesInt8RoundedReference) {
    std::mt19937 rng(1234);
    cpu::ThreadPool pool(2);
    std::vector<RandomWeight> ws;
    ws.emplace_back(GgmlType::Q4_1, 75, 608, rng);   // 75 rows: a last panel of 3
    ws.emplace_back(GgmlType::Q4_0, 64, 576, rng);
    ws.emplace_back(GgmlType::Q4_0, 13, 96, rng);    // 3 blocks: one pair and an unpaired last block (one token)
    ws.emplace_back(GgmlType::Q4_K, 13, 512, rng);   // two super blocks, a last panel of 5
    ws.emplace_back(GgmlType::Q5_0, 21, 576, rng);   // 5-bit codes: block sums in two halves
    ws.emplace_back(GgmlType::Q5_1, 16, 608, rng);
    ws.emplace_back(GgmlType::Q5_0, 7, 96, rng);     // 3 blocks: one pair and an unpaired last block (one token)
    ws.emplace_back(GgmlType::Q8_0, 16, 576, rng);   // no int8 path: exact f32
    ws.emplace_back(GgmlType::F16, 9, 608, rng);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (const RandomWeight &w : ws)
            for (int64_t n_tok : {1, 2, 3, 4, 5, 37}) {
                const WeightView &W = w.view;
                const int64_t ldx = W.n_cols + 3;
                auto x = test::random_floats(static_cast<size_t>(ldx * n_tok), rng);
                std::vector<float> exact(static_cast<size_t>(W.n_rows * n_tok)), y(exact.size(), NAN);
                cpu::matmul(pool, W, x.data(), ldx, n_tok, exact.data());
                cpu::matmul(pool, W, x.data(), ldx, n_tok, y.data(), cpu::MatmulArith::INT8);
                const std::string what = std::string(name) + " " + ggml_type_name(W.type) + " K " +
                                         std::to_string(W.n_cols) + " tok " + std::to_string(n_tok);
                if (!int8_runs(n_tok, W.type)) {
                    EXPECT_EQ(test::max_abs_diff(y.data(), exact.data(), y.size()), 0.0) << what;
                    continue;
                }
                EXPECT_NE(test::max_abs_diff(y.data(), exact.data(), y.size()), 0.0) << what;
                expect_int8_result(W, x.data(), ldx, n_tok, y.data(), what);
            }
    });
}

TEST(KernelsMatmulInt8, MixedJobsSplitByType) {
    // One matmul_multi over a Q4_1 and a Q8_0 weight: the first takes the
    // int8 GEMM, the second stays exact; neither disturbs the other.
    std::mt19937 rng(7);
    cpu::ThreadPool pool(3);
    RandomWeight a(GgmlType::Q4_1, 40, 576, rng), b(GgmlType::Q8_0, 24, 576, rng);
    const int64_t n_tok = 29;
    auto x = test::random_floats(static_cast<size_t>(576 * n_tok), rng);
    std::vector<float> ya(40 * n_tok), yb(24 * n_tok), eb(24 * n_tok);
    const cpu::MatmulJob jobs[2] = {{&a.view, ya.data()}, {&b.view, yb.data()}};
    cpu::matmul_multi(pool, jobs, 2, x.data(), 576, n_tok, cpu::MatmulArith::INT8);
    cpu::matmul(pool, b.view, x.data(), 576, n_tok, eb.data());
    EXPECT_EQ(test::max_abs_diff(yb.data(), eb.data(), yb.size()), 0.0);
    if (cpu::matmul_int8_available()) expect_int8_result(a.view, x.data(), 576, n_tok, ya.data(), "Q4_1 of two jobs");
}

TEST(KernelsMatmulInt8, UnpackedCodesRebuildTheDequantizedRow) {
    std::mt19937 rng(5);
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q5_1}) {
        RandomWeight w(t, 3, 512, rng);
        std::vector<uint8_t> codes(512);
        std::vector<float> d(16), m(16), ref(512);
        const int max_code = (1 << cpu::int8_code_bits(t)) - 1;
        for (int64_t r = 0; r < 3; ++r) {
            cpu::unpack_codes_row(t, w.view.row(r), 512, codes.data(), d.data(), m.data());
            dequantize_row_ref(t, w.view.row(r), ref.data(), 512);
            for (int k = 0; k < 512; ++k) {
                ASSERT_LE(codes[k], max_code) << ggml_type_name(t);
                const float v = d[k / 32] * static_cast<float>(codes[k]) + m[k / 32];
                ASSERT_NEAR(v, ref[k], 1e-6f * (std::fabs(ref[k]) + std::fabs(m[k / 32])) + 1e-12f)
                    << ggml_type_name(t) << " row " << r << " element " << k;
            }
        }
    }
}

TEST(KernelsMatmulInt8, ActivationRoundingRule) {
    std::vector<float> x(64, 0.0f);   // block 0: a ramp with exact halves; block 1: zeros
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16) * 0.5f;   // max |x| = 8: scale 8/127
    std::vector<int8_t> q(64);
    float d[2], s[2];
    cpu::quantize_act_row(x.data(), 64, q.data(), d, s);
    EXPECT_FLOAT_EQ(d[0], 8.0f / 127.0f);
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
        EXPECT_EQ(q[j], static_cast<int8_t>(std::nearbyint(x[j] * (127.0f / 8.0f)))) << j;
        sum += q[j];
    }
    EXPECT_EQ(q[0], -127);
    EXPECT_FLOAT_EQ(s[0], d[0] * static_cast<float>(sum));
    EXPECT_EQ(d[1], 0.0f);
    EXPECT_EQ(s[1], 0.0f);
    for (int j = 32; j < 64; ++j) EXPECT_EQ(q[j], 0);
}

TEST(KernelsMatmulInt8, NonFiniteActivationsGiveNaNNotGarbage) {
    // An inf or NaN activation makes its block's scale NaN: the outputs of
    // that token are NaN (as f32 arithmetic would make them non-finite),
    // the other tokens are untouched, and nothing is undefined behaviour.
    std::mt19937 rng(3);
    cpu::ThreadPool pool(2);
    RandomWeight w(GgmlType::Q4_1, 16, 64, rng);
    auto x = test::random_floats(64 * 6, rng);
    x[64 * 1 + 5] = std::numeric_limits<float>::infinity();
    x[64 * 3 + 40] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> y(16 * 6);
    cpu::matmul(pool, w.view, x.data(), 64, 6, y.data(), cpu::MatmulArith::INT8);
    if (!cpu::matmul_int8_available()) GTEST_SKIP() << "no int8 kernel on this CPU";
    for (int t = 0; t < 6; ++t)
        for (int r = 0; r < 16; ++r) {
            if (t == 1 || t == 3) EXPECT_TRUE(std::isnan(y[t * 16 + r])) << t << " " << r;
            else EXPECT_TRUE(std::isfinite(y[t * 16 + r])) << t << " " << r;
        }
    // One token at a time (decode's GEMV) gives the same verdicts.
    for (int t = 0; t < 6; ++t) {
        std::vector<float> y1(16);
        cpu::matmul(pool, w.view, x.data() + t * 64, 64, 1, y1.data(), cpu::MatmulArith::INT8);
        for (int r = 0; r < 16; ++r) {
            if (t == 1 || t == 3) EXPECT_TRUE(std::isnan(y1[r])) << "one token " << t << " " << r;
            else EXPECT_TRUE(std::isfinite(y1[r])) << "one token " << t << " " << r;
        }
    }
}

TEST(KernelsMatmulInt8, AvailableWithAvx2AndAboveOnly) {
    const cpu::SimdVariant saved = cpu::active_variant();
    cpu::set_simd_variant_for_testing(cpu::SimdVariant::SCALAR);
    EXPECT_FALSE(cpu::matmul_int8_available());
    if (cpu::best_supported_variant() >= cpu::SimdVariant::AVX2) {
        cpu::set_simd_variant_for_testing(cpu::SimdVariant::AVX2);
        EXPECT_TRUE(cpu::matmul_int8_available());
    }
    cpu::set_simd_variant_for_testing(saved);
}

TEST(KernelsMatmulInt8, SimdQuantizerEqualsTheScalarRule) {
    // The kernel table's quantizer against quantize_act_row, bit for bit:
    // random blocks, exact halves, zeros, a lone maximum, inf and NaN.
    std::mt19937 rng(11);
    const int64_t K = 32 * 40;
    auto x = test::random_floats(static_cast<size_t>(K), rng);
    for (int j = 0; j < 32; ++j) x[32 + j] = static_cast<float>(j - 16) * 0.5f;
    for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;
    x[96 + 7] = 1e30f;
    x[128 + 3] = std::numeric_limits<float>::infinity();
    x[160 + 30] = -std::numeric_limits<float>::quiet_NaN();
    x[192 + 1] = 1e-40f;   // a denormal maximum
    for (int j = 0; j < 32; ++j) x[224 + j] = x[224 + j] * 1e-39f;
    std::vector<int8_t> q0(K), q1(K);
    std::vector<float> d0(K / 32), s0(K / 32), d1(K / 32), s1(K / 32);
    cpu::quantize_act_row(x.data(), K, q0.data(), d0.data(), s0.data());
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        const cpu::KernelTable &kt = cpu::active_kernels();
        if (!kt.quantize_i8) return;
        kt.quantize_i8(x.data(), K, q1.data(), d1.data(), s1.data());
        for (int64_t k = 0; k < K; ++k) ASSERT_EQ(q0[k], q1[k]) << name << " element " << k;
        for (int64_t b = 0; b < K / 32; ++b) {
            if (std::isnan(d0[b])) {
                EXPECT_TRUE(std::isnan(d1[b]) && std::isnan(s1[b])) << name << " block " << b;
                continue;
            }
            EXPECT_EQ(d0[b], d1[b]) << name << " block " << b;
            EXPECT_EQ(s0[b], s1[b]) << name << " block " << b;
        }
    });
}


TEST(KernelsMatmulInt8, LargestCodesAndActivationsDoNotOverflow) {
    // Every code at its maximum (15, or 31 for 5 bits) against activations
    // all at +-127 after rounding: the largest sums the int16 stage can
    // meet (8 x 2 x 15 x 127 = 30,480; 4 x 2 x 31 x 127 = 31,496 per half).
    std::mt19937 rng(17);
    cpu::ThreadPool pool(1);
    for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q4_0, GgmlType::Q5_1, GgmlType::Q5_0}) {
        RandomWeight w(t, 16, 64, rng);
        const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(t));
        // after the f16 scale (and min): the 5th-bit masks and the nibbles
        const size_t first_code_byte = t == GgmlType::Q4_1 || t == GgmlType::Q5_1 ? 4 : 2;
        for (int64_t b = 0; b < 16 * 64 / 32; ++b)
            for (size_t i = first_code_byte; i < info->type_size; ++i) w.bytes[b * info->type_size + i] = 0xff;
        for (float sign : {1.0f, -1.0f})
            for (int64_t n_tok : {1, 4}) {
                std::vector<float> x(64 * n_tok, sign);
                std::vector<float> y(16 * n_tok);
                cpu::matmul(pool, w.view, x.data(), 64, n_tok, y.data(), cpu::MatmulArith::INT8);
                expect_int8_result(w.view, x.data(), 64, n_tok, y.data(),
                                   std::string(ggml_type_name(t)) + " all max, tokens " + std::to_string(n_tok));
            }
    }
}
