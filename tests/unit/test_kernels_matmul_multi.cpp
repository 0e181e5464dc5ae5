// matmul_multi (several weights sharing one input, one pool job) against
// matmul_ref per weight, for every SIMD variant: mixed types and row counts
// (chunks and panels that end inside a weight), the GEMV (1 token), row-dot
// (2) and GEMM (5, 37) paths, pools of 1 to 3 threads; and its input checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;
using lctx::test::RandomWeight;

namespace {

// Per-element bound relative to sum |w_c x_c| (f32 accumulation), as in test_kernels_matmul.
void expect_close(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, const float *y, const float *ref,
                  const std::string &what) {
    std::vector<float> row(W.n_cols);
    for (int64_t r = 0; r < W.n_rows; ++r) {
        dequantize_row_ref(W.type, W.row(r), row.data(), W.n_cols);
        for (int64_t t = 0; t < n_tok; ++t) {
            double mag = 0.0;
            for (int64_t c = 0; c < W.n_cols; ++c) mag += std::fabs(static_cast<double>(row[c]) * x[t * ldx + c]);
            const double err = std::fabs(static_cast<double>(y[t * W.n_rows + r]) - ref[t * W.n_rows + r]);
            ASSERT_LE(err, 1e-5 * mag + 1e-30) << what << " row " << r << " tok " << t;
        }
    }
    EXPECT_LT(test::nmse(y, ref, static_cast<size_t>(W.n_rows * n_tok)), 1e-10) << what;
}

} // namespace

TEST(KernelsMatmulMulti, MatchesOneReferencePerWeight) {
    std::mt19937 rng(4321);
    cpu::ThreadPool pool1(1), pool2(2), pool3(3);
    cpu::ThreadPool *pools[] = {&pool1, &pool2, &pool3};
    const int64_t K = 608;   // 19 blocks: odd, and more than one 256-wide K chunk
    // q/k/v-like: 3 weights of different heights and types (Q8_0 and Q4_0 too).
    std::vector<RandomWeight> ws;
    ws.emplace_back(GgmlType::Q4_1, 75, K, rng);
    ws.emplace_back(GgmlType::Q8_0, 33, K, rng);
    ws.emplace_back(GgmlType::Q4_0, 17, K, rng);
    ws.emplace_back(GgmlType::F16, 9, K, rng);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        int which = 0;
        for (int n_jobs : {1, 2, 3, 4})
            for (int64_t n_tok : {1, 2, 5, 37}) {
                const int64_t ldx = K + 5;
                auto x = test::random_floats(static_cast<size_t>(ldx * n_tok), rng);
                std::vector<std::vector<float>> ys(n_jobs), refs(n_jobs);
                std::vector<cpu::MatmulJob> jobs;
                for (int j = 0; j < n_jobs; ++j) {
                    ys[j].assign(static_cast<size_t>(ws[j].view.n_rows * n_tok), NAN);
                    refs[j].resize(ys[j].size());
                    cpu::matmul_ref(ws[j].view, x.data(), ldx, n_tok, refs[j].data());
                    jobs.push_back({&ws[j].view, ys[j].data()});
                }
                cpu::matmul_multi(*pools[which++ % 3], jobs.data(), n_jobs, x.data(), ldx, n_tok);
                for (int j = 0; j < n_jobs; ++j) {
                    const std::string what = std::string(name) + " jobs " + std::to_string(n_jobs) + " weight " +
                                             std::to_string(j) + " tok " + std::to_string(n_tok);
                    expect_close(ws[j].view, x.data(), ldx, n_tok, ys[j].data(), refs[j].data(), what);
                    if (HasFatalFailure()) return;
                }
            }
    });
}

TEST(KernelsMatmulMulti, SmolLM2GateUpManyThreads) {
    // gate/up shapes of SmolLM2 (1536 x 576 Q4_1): 96 GEMV chunks per weight.
    std::mt19937 rng(5);
    cpu::ThreadPool pool(4);
    RandomWeight gate(GgmlType::Q4_1, 1536, 576, rng), up(GgmlType::Q4_1, 1536, 576, rng);
    for (int64_t n_tok : {1, 64}) {
        auto x = test::random_floats(static_cast<size_t>(576 * n_tok), rng);
        std::vector<float> g(1536 * n_tok, NAN), u(1536 * n_tok, NAN), rg(g.size()), ru(u.size());
        cpu::matmul_ref(gate.view, x.data(), 576, n_tok, rg.data());
        cpu::matmul_ref(up.view, x.data(), 576, n_tok, ru.data());
        const cpu::MatmulJob jobs[2] = {{&gate.view, g.data()}, {&up.view, u.data()}};
        cpu::matmul_multi(pool, jobs, 2, x.data(), 576, n_tok);
        expect_close(gate.view, x.data(), 576, n_tok, g.data(), rg.data(), "gate");
        expect_close(up.view, x.data(), 576, n_tok, u.data(), ru.data(), "up");
    }
}

// The bf16 option (docs/bf16.md). Where the CPU has AVX512_BF16, the GEMM
// (4 or more tokens) is checked against a brute-force sum, in double, of the
// bf16-rounded dequantized weights times the bf16-rounded activations: the
// products are then exact, so the bound is f32 accumulation's, as for the
// f32 path. One to three tokens, an odd K, other variants and CPUs without
// the instructions must give the f32 path's output bit for bit.
TEST(KernelsMatmulMulti, Bf16GemmMatchesRoundedReference) {
    std::mt19937 rng(99);
    cpu::ThreadPool pool(2);
    auto bf = [](float f) { return bf16_to_fp32(fp32_to_bf16(f)); };
    std::vector<RandomWeight> ws;
    ws.emplace_back(GgmlType::Q4_1, 75, 608, rng);   // 304 words a row: not a whole number of vectors
    ws.emplace_back(GgmlType::Q8_0, 64, 576, rng);
    ws.emplace_back(GgmlType::F16, 9, 608, rng);
    ws.emplace_back(GgmlType::F32, 7, 33, rng);      // odd K: the f32 path
    test::for_each_variant([&](cpu::SimdVariant variant, const char *name) {
        const bool lossy = variant == cpu::SimdVariant::AVX512 && cpu::matmul_bf16_available();
        for (const RandomWeight &w : ws)
            for (int64_t n_tok : {1, 3, 5, 37}) {
                const WeightView &W = w.view;
                const int64_t ldx = W.n_cols + 3;
                auto x = test::random_floats(static_cast<size_t>(ldx * n_tok), rng);
                std::vector<float> exact(static_cast<size_t>(W.n_rows * n_tok)), y(exact.size(), NAN);
                cpu::matmul(pool, W, x.data(), ldx, n_tok, exact.data());
                cpu::matmul(pool, W, x.data(), ldx, n_tok, y.data(), cpu::MatmulArith::BF16);
                const std::string what = std::string(name) + " " + ggml_type_name(W.type) + " K " +
                                         std::to_string(W.n_cols) + " tok " + std::to_string(n_tok);
                if (!lossy || n_tok < 4 || W.n_cols % 2 != 0) {
                    EXPECT_EQ(test::max_abs_diff(y.data(), exact.data(), y.size()), 0.0) << what;
                    continue;
                }
                EXPECT_NE(test::max_abs_diff(y.data(), exact.data(), y.size()), 0.0) << what;
                std::vector<float> row(W.n_cols);
                for (int64_t r = 0; r < W.n_rows; ++r) {
                    dequantize_row_ref(W.type, W.row(r), row.data(), W.n_cols);
                    for (int64_t t = 0; t < n_tok; ++t) {
                        double ref = 0.0, mag = 0.0;
                        for (int64_t c = 0; c < W.n_cols; ++c) {
                            const double p = static_cast<double>(bf(row[c])) * bf(x[t * ldx + c]);
                            ref += p;
                            mag += std::fabs(p);
                        }
                        ASSERT_LE(std::fabs(y[t * W.n_rows + r] - ref), 1e-5 * mag + 1e-30)
                            << what << " row " << r << " tok " << t;
                    }
                }
            }
    });
}

TEST(KernelsMatmulMulti, RejectsBadInput) {
    std::mt19937 rng(2);
    cpu::ThreadPool pool(2);
    RandomWeight a(GgmlType::Q4_1, 4, 64, rng), b(GgmlType::Q4_1, 4, 96, rng);
    std::vector<float> x(96), y1(4), y2(4);
    const cpu::MatmulJob mixed[2] = {{&a.view, y1.data()}, {&b.view, y2.data()}};
    EXPECT_THROW(cpu::matmul_multi(pool, mixed, 2, x.data(), 96, 1), Error);   // different n_cols
    const cpu::MatmulJob null_out[2] = {{&a.view, y1.data()}, {&a.view, nullptr}};
    EXPECT_THROW(cpu::matmul_multi(pool, null_out, 2, x.data(), 64, 1), Error);
    const cpu::MatmulJob null_w[1] = {{nullptr, y1.data()}};
    EXPECT_THROW(cpu::matmul_multi(pool, null_w, 1, x.data(), 64, 1), Error);
    EXPECT_THROW(cpu::matmul_multi(pool, mixed, 0, x.data(), 64, 1), Error);
    EXPECT_THROW(cpu::matmul_multi(pool, mixed, cpu::kMaxMatmulJobs + 1, x.data(), 64, 1), Error);
}
