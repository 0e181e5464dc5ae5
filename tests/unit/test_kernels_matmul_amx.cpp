// matmul's f32 GEMM on the AMX tile unit (simd_gemm_amx.h) against matmul_ref
// (double sums) and against the AVX-512 f32 GEMM on the same inputs: weight
// types, K that needs padding to whole steps, panels and token tiles that end
// inside a weight, several weights in one call, several token chunks, pools
// of 1 to 3 threads; and non-finite activations. Skipped where the CPU or the
// OS does not run AMX-BF16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"
#include "test_kernels_util.h"

using namespace lctx;
using lctx::test::RandomWeight;

namespace {

struct AmxOff {   // the AVX-512 f32 GEMM while in scope
    AmxOff() { cpu::set_matmul_amx_for_testing(false); }
    ~AmxOff() { cpu::set_matmul_amx_for_testing(true); }
};

bool amx_runs() {
    return cpu::active_variant() == cpu::SimdVariant::AVX512 && cpu::matmul_amx_enabled();
}

// Largest |y - ref| / sum_c |w_c x_c| over the outputs.
double max_rel_err(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, const float *y,
                   const float *ref) {
    const std::vector<double> mag = test::abs_product_sums(W, x, ldx, n_tok);
    double worst = 0.0;
    for (size_t i = 0; i < mag.size(); ++i) {
        const double e = std::fabs(static_cast<double>(y[i]) - ref[i]) / (mag[i] + 1e-30);
        if (!(e <= worst)) worst = e;   // NaN fails
    }
    return worst;
}

// matmul_multi of the weights ws on n_tok tokens of K columns: one output each.
std::vector<std::vector<float>> matmul_jobs(cpu::ThreadPool &pool, const std::vector<RandomWeight> &ws,
                                           const std::vector<float> &x, int64_t K, int64_t n_tok) {
    std::vector<std::vector<float>> ys(ws.size());
    std::vector<cpu::MatmulJob> jobs;
    for (size_t j = 0; j < ws.size(); ++j) {
        ys[j].assign(static_cast<size_t>(ws[j].view.n_rows * n_tok), NAN);
        jobs.push_back({&ws[j].view, ys[j].data()});
    }
    cpu::matmul_multi(pool, jobs.data(), static_cast<int>(jobs.size()), x.data(), K, n_tok);
    return ys;
}

} // namespace

TEST(KernelsMatmulAmx, F32SumsLikeTheAvx512Gemm) {
    if (!amx_runs()) GTEST_SKIP() << "no AMX-BF16 here";
    std::mt19937 rng(2711);
    cpu::ThreadPool pool1(1), pool2(2), pool3(3);
    cpu::ThreadPool *pools[] = {&pool1, &pool2, &pool3};
    struct Shape {
        GgmlType type;
        int64_t rows, K;
    };
    // SmolLM2's q and gate (576), a 19-block K, ffn_down's 1536 (7 token
    // tiles a chunk: 520 tokens are 5 chunks), K of 40 and 17 (padded to a
    // whole step of 32), one exact panel.
    const Shape shapes[] = {{GgmlType::Q4_1, 75, 576},  {GgmlType::Q8_0, 33, 608}, {GgmlType::Q4_1, 17, 1536},
                            {GgmlType::F16, 41, 40},    {GgmlType::F32, 23, 17},   {GgmlType::Q4_0, 16, 64},
                            {GgmlType::Q4_K, 48, 256}};
    int which = 0;
    for (const Shape &sh : shapes)
        for (int64_t n_tok : {256, 257, 300, 520}) {
            RandomWeight w(sh.type, sh.rows, sh.K, rng);
            const int64_t ldx = sh.K + 3;
            auto x = test::random_floats(static_cast<size_t>(ldx * n_tok), rng);
            const size_t n_y = static_cast<size_t>(sh.rows * n_tok);
            std::vector<float> y(n_y, NAN), y_f32(n_y, NAN), ref(n_y);
            cpu::matmul_ref(w.view, x.data(), ldx, n_tok, ref.data());
            cpu::ThreadPool &pool = *pools[which++ % 3];
            cpu::matmul(pool, w.view, x.data(), ldx, n_tok, y.data());
            {
                AmxOff off;
                cpu::matmul(pool, w.view, x.data(), ldx, n_tok, y_f32.data());
            }
            const std::string what = std::string(ggml_type_info(static_cast<uint32_t>(sh.type))->name) + " " +
                                     std::to_string(sh.rows) + " x " + std::to_string(sh.K) + ", " +
                                     std::to_string(n_tok) + " tokens";
            // Each output within f32 rounding of its magnitude, like the
            // AVX-512 GEMM; a bf16 product (or a missing second part) is off
            // by 2^-9 .. 2^-8 of it.
            EXPECT_LT(max_rel_err(w.view, x.data(), ldx, n_tok, y.data(), ref.data()), 2e-6) << what;
            EXPECT_LT(max_rel_err(w.view, x.data(), ldx, n_tok, y_f32.data(), ref.data()), 2e-6) << what;
            // And as close overall: without the third parts (2^-16 of each
            // product) the squared error would be ~1e-10, against ~1e-14 here.
            const double e_amx = test::nmse(y.data(), ref.data(), n_y), e_f32 = test::nmse(y_f32.data(), ref.data(), n_y);
            EXPECT_LT(e_amx, std::max(8.0 * e_f32, 1e-13)) << what << ": f32 GEMM " << e_f32;
        }
}

TEST(KernelsMatmulAmx, SeveralWeightsShareTheTokens) {
    if (!amx_runs()) GTEST_SKIP() << "no AMX-BF16 here";
    std::mt19937 rng(99);
    cpu::ThreadPool pool(2);
    const int64_t K = 576, n_tok = 300;
    std::vector<RandomWeight> ws;
    ws.emplace_back(GgmlType::Q4_1, 576, K, rng);
    ws.emplace_back(GgmlType::Q4_1, 192, K, rng);
    ws.emplace_back(GgmlType::Q8_0, 31, K, rng);
    auto x = test::random_floats(static_cast<size_t>(K * n_tok), rng);
    const auto ys = matmul_jobs(pool, ws, x, K, n_tok);
    for (size_t j = 0; j < ws.size(); ++j) {
        std::vector<float> ref(ys[j].size());
        cpu::matmul_ref(ws[j].view, x.data(), K, n_tok, ref.data());
        EXPECT_LT(max_rel_err(ws[j].view, x.data(), K, n_tok, ys[j].data(), ref.data()), 2e-6) << "weight " << j;
    }
}

TEST(KernelsMatmulAmx, NonFiniteActivationsStayInTheirToken) {
    if (!amx_runs()) GTEST_SKIP() << "no AMX-BF16 here";
    std::mt19937 rng(7);
    cpu::ThreadPool pool(2);
    const int64_t K = 96, n_tok = 280, rows = 20;
    RandomWeight w(GgmlType::Q4_1, rows, K, rng);
    auto x = test::random_floats(static_cast<size_t>(K * n_tok), rng);
    x[5 * K + 7] = NAN;
    x[17 * K + 60] = INFINITY;
    x[40 * K + 0] = -INFINITY;
    // Large but finite: their first parts alone are close to them.
    x[50 * K + 3] = 3.0e38f;
    x[51 * K + 9] = -1.0e30f;
    std::vector<float> y(static_cast<size_t>(rows * n_tok), 0.0f), ref(y.size());
    cpu::matmul(pool, w.view, x.data(), K, n_tok, y.data());
    cpu::matmul_ref(w.view, x.data(), K, n_tok, ref.data());
    const std::vector<double> mag = test::abs_product_sums(w.view, x.data(), K, n_tok);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t t = 0; t < n_tok; ++t) {
            const float v = y[t * rows + r];
            if (t == 5 || t == 17 || t == 40) {
                EXPECT_FALSE(std::isfinite(v)) << "token " << t << " row " << r;
                continue;
            }
            EXPECT_LE(std::fabs(v - static_cast<double>(ref[t * rows + r])), 2e-6 * mag[t * rows + r])
                << "token " << t << " row " << r;
        }
}

TEST(KernelsMatmulAmx, LargeWeightsGoInGroups) {
    // The weight parts are cut at most 32 MiB at a time: at K = 4096 that is
    // 85 panels (1360 rows), so these two weights take three groups, one of
    // them across the two.
    if (!amx_runs()) GTEST_SKIP() << "no AMX-BF16 here";
    std::mt19937 rng(31);
    cpu::ThreadPool pool(2);
    const int64_t K = 4096, n_tok = 260;
    std::vector<RandomWeight> ws;
    ws.emplace_back(GgmlType::Q4_1, 1400, K, rng);
    ws.emplace_back(GgmlType::Q8_0, 1390, K, rng);
    auto x = test::random_floats(static_cast<size_t>(K * n_tok), rng);
    const auto ys = matmul_jobs(pool, ws, x, K, n_tok);
    // Every row, for three of the tokens (the groups split the rows, not the tokens).
    for (size_t j = 0; j < ws.size(); ++j)
        for (int64_t t : {0, 131, 259}) {
            const int64_t rows = ws[j].view.n_rows;
            std::vector<float> ref(static_cast<size_t>(rows));
            cpu::matmul_ref(ws[j].view, x.data() + t * K, K, 1, ref.data());
            EXPECT_LT(max_rel_err(ws[j].view, x.data() + t * K, K, 1, ys[j].data() + t * rows, ref.data()), 2e-6)
                << "weight " << j << " token " << t;
        }
}
