// matmul and get_row of every SIMD variant against matmul_ref (rows
// dequantized by the scalar dequantize_row_ref, double dot products), for
// every dequantizable type, odd shapes and the token counts that select the
// GEMV (1), row-dot (2, 3) and GEMM (17, 64, 130) paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"
#include "common/error.h"
#include "test_kernels_util.h"

using namespace lctx;
using lctx::test::RandomWeight;

namespace {

const GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1,
                           GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// Column counts per block size: odd numbers of blocks, more than one 256-wide K chunk.
std::vector<int64_t> col_counts(int64_t block) {
    if (block == 1) return {7, 45, 300};
    if (block == 32) return {32, 96, 608};
    return {256, 768};
}

// |y - ref| bound: f32 accumulation error relative to sum |w_c x_c|.
void check_close(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, const float *y,
                 const float *ref, const char *what) {
    const std::vector<double> mag = test::abs_product_sums(W, x, ldx, n_tok);
    double worst = 0.0;
    for (int64_t r = 0; r < W.n_rows; ++r) {
        for (int64_t t = 0; t < n_tok; ++t) {
            const double err = std::fabs(static_cast<double>(y[t * W.n_rows + r]) - ref[t * W.n_rows + r]);
            ASSERT_LE(err, 1e-5 * mag[t * W.n_rows + r] + 1e-30) << what << " row " << r << " tok " << t;
            worst = std::max(worst, err);
        }
    }
    const size_t n = static_cast<size_t>(W.n_rows * n_tok);
    EXPECT_LT(test::nmse(y, ref, n), 1e-10) << what;
}

} // namespace

TEST(KernelsMatmul, AllVariantsTypesAndShapes) {
    std::mt19937 rng(1234);
    cpu::ThreadPool pool1(1), pool3(3);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (GgmlType t : kTypes) {
            const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(t));
            ASSERT_NE(info, nullptr);
            if (!info->can_dequantize) continue;
            for (int64_t n_cols : col_counts(info->block_size)) {
                for (int64_t n_rows : {1, 7, 33, 70}) {
                    RandomWeight w(t, n_rows, n_cols, rng);
                    for (int64_t n_tok : {1, 2, 3, 17, 64, 130}) {
                        const int64_t ldx = n_cols + 3;
                        auto x = test::random_floats(static_cast<size_t>(ldx * n_tok), rng);
                        std::vector<float> ref(n_rows * n_tok), y(n_rows * n_tok, NAN);
                        cpu::matmul_ref(w.view, x.data(), ldx, n_tok, ref.data());
                        std::string what = std::string(name) + " " + info->name + " rows " + std::to_string(n_rows) +
                                           " cols " + std::to_string(n_cols) + " tok " + std::to_string(n_tok);
                        cpu::matmul(n_rows * n_tok % 2 ? pool1 : pool3, w.view, x.data(), ldx, n_tok, y.data());
                        check_close(w.view, x.data(), ldx, n_tok, y.data(), ref.data(), what.c_str());
                        if (HasFatalFailure()) return;
                    }
                }
            }
        }
    });
}

TEST(KernelsMatmul, SmolLM2ShapesBothPools) {
    std::mt19937 rng(7);
    cpu::ThreadPool pool2(2);
    for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q8_0}) {
        RandomWeight w(t, 192, 576, rng);
        for (int64_t n_tok : {1, 5, 130}) {
            auto x = test::random_floats(static_cast<size_t>(576 * n_tok), rng);
            std::vector<float> ref(192 * n_tok), y(192 * n_tok);
            cpu::matmul_ref(w.view, x.data(), 576, n_tok, ref.data());
            test::for_each_variant([&](cpu::SimdVariant, const char *name) {
                std::fill(y.begin(), y.end(), NAN);
                cpu::matmul(pool2, w.view, x.data(), 576, n_tok, y.data());
                check_close(w.view, x.data(), 576, n_tok, y.data(), ref.data(), name);
            });
        }
    }
}

TEST(KernelsMatmul, GetRowMatchesReference) {
    std::mt19937 rng(99);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (GgmlType t : kTypes) {
            const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(t));
            if (!info->can_dequantize) continue;
            const int64_t n_cols = col_counts(info->block_size).back();
            RandomWeight w(t, 5, n_cols, rng);
            std::vector<float> ref(n_cols), got(n_cols);
            for (int64_t r = 0; r < 5; ++r) {
                dequantize_row_ref(t, w.view.row(r), ref.data(), n_cols);
                cpu::get_row(w.view, r, got.data());
                // Q4_1/Q4_K use an FMA (d*q+m), one rounding less than the reference.
                EXPECT_LE(test::max_abs_diff(got.data(), ref.data(), n_cols), 1e-6) << name << " " << info->name;
            }
        }
    });
}

// The GEMM's panel packing: every variant's transpose against the
// definition, for shapes with and without whole W x W tiles and strides
// wider than the block.
TEST(KernelsMatmul, TransposeMatchesDefinition) {
    std::mt19937 rng(7);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        const cpu::KernelTable &kt = cpu::active_kernels();
        for (int64_t rows : {1, 7, 8, 16, 19})
            for (int64_t cols : {1, 5, 8, 32, 37}) {
                const int64_t lds = cols + 3, ldd = rows + 2;
                auto src = test::random_floats(static_cast<size_t>(rows * lds), rng);
                std::vector<float> dst(static_cast<size_t>(cols * ldd), -7.0f);
                kt.transpose(src.data(), lds, rows, cols, dst.data(), ldd);
                for (int64_t c = 0; c < cols; ++c)
                    for (int64_t r = 0; r < ldd; ++r) {
                        const float want = r < rows ? src[r * lds + c] : -7.0f;   // padding untouched
                        ASSERT_EQ(dst[c * ldd + r], want) << name << " " << rows << "x" << cols << " at " << r << "," << c;
                    }
            }
    });
}

TEST(KernelsMatmul, RejectsBadInput) {
    std::mt19937 rng(1);
    cpu::ThreadPool pool(2);
    RandomWeight w(GgmlType::Q4_0, 4, 64, rng);
    std::vector<float> x(64 * 2), y(8);
    EXPECT_THROW(cpu::matmul(pool, w.view, x.data(), 63, 1, y.data()), Error);       // ldx < n_cols
    EXPECT_THROW(cpu::get_row(w.view, 4, y.data()), Error);                          // row out of range
    WeightView bad = w.view;
    bad.n_cols = 48;                                                                 // not a block multiple
    EXPECT_THROW(cpu::matmul(pool, bad, x.data(), 64, 1, y.data()), Error);
    bad = w.view;
    bad.type = static_cast<GgmlType>(99);
    EXPECT_THROW(cpu::matmul(pool, bad, x.data(), 64, 1, y.data()), Error);
    bad = w.view;
    bad.data = nullptr;
    EXPECT_THROW(cpu::matmul(pool, bad, x.data(), 64, 1, y.data()), Error);
}

TEST(KernelsMatmul, VariantNameAndForcing) {
    const std::string name = cpu::simd_variant();
    EXPECT_TRUE(name == "scalar" || name == "avx2" || name == "avx512") << name;
    cpu::set_simd_variant_for_testing(cpu::SimdVariant::SCALAR);
    EXPECT_STREQ(cpu::simd_variant(), "scalar");
    cpu::set_simd_variant_for_testing(cpu::best_supported_variant());
}
