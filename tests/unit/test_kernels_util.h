// Helpers shared by the kernel tests: random quantized weights with sane
// fp16 scales, error metrics, a loop over the SIMD variants this CPU runs,
// and topk_dot over keys cut as the ReAttention store cuts them.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd.h"

namespace lctx::test {

// Byte offsets of the fp16 scale fields inside one block of each type.
inline std::vector<size_t> scale_offsets(GgmlType t) {
    switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {0};
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
    }
}

// A random row-major matrix of type t: quantized blocks from random bytes with
// their scales replaced by fp16 values in [0.002, 0.05] (never inf/NaN).
struct RandomWeight {
    std::vector<uint8_t> bytes;
    WeightView view;
    RandomWeight(GgmlType t, int64_t n_rows, int64_t n_cols, std::mt19937 &rng) {
        const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(t));
        const size_t row_bytes = ggml_row_size(t, n_cols);
        bytes.resize(row_bytes * n_rows + 64);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f), sc(0.002f, 0.05f);
        std::uniform_int_distribution<int> byte(0, 255);
        const int64_t n = n_rows * n_cols;
        if (t == GgmlType::F32) {
            for (int64_t i = 0; i < n; ++i) {
                const float v = u(rng);
                std::memcpy(bytes.data() + 4 * i, &v, 4);
            }
        } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = t == GgmlType::F16 ? fp32_to_fp16(u(rng)) : fp32_to_bf16(u(rng));
                std::memcpy(bytes.data() + 2 * i, &h, 2);
            }
        } else {
            for (auto &b : bytes) b = static_cast<uint8_t>(byte(rng));
            const size_t n_blocks = static_cast<size_t>(n / info->block_size);
            for (size_t b = 0; b < n_blocks; ++b)
                for (size_t off : scale_offsets(t)) {
                    const uint16_t h = fp32_to_fp16(sc(rng));
                    std::memcpy(bytes.data() + b * info->type_size + off, &h, 2);
                }
        }
        view.type = t;
        view.n_rows = n_rows;
        view.n_cols = n_cols;
        view.row_bytes = row_bytes;
        view.data = bytes.data();
    }
};

inline std::vector<float> random_floats(size_t n, std::mt19937 &rng, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = u(rng);
    return v;
}

// mag[t * W.n_rows + r] = sum_c |w_rc x_tc| (W dequantized by the reference):
// the scale of a GEMM output's f32 accumulation error.
inline std::vector<double> abs_product_sums(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok) {
    std::vector<float> row(static_cast<size_t>(W.n_cols));
    std::vector<double> mag(static_cast<size_t>(W.n_rows * n_tok), 0.0);
    for (int64_t r = 0; r < W.n_rows; ++r) {
        dequantize_row_ref(W.type, W.row(r), row.data(), W.n_cols);
        for (int64_t t = 0; t < n_tok; ++t) {
            double m = 0.0;
            for (int64_t c = 0; c < W.n_cols; ++c) m += std::fabs(static_cast<double>(row[c]) * x[t * ldx + c]);
            mag[static_cast<size_t>(t * W.n_rows + r)] = m;
        }
    }
    return mag;
}

// Normalised mean squared error sum (a - b)^2 / sum b^2.
inline double nmse(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; ++i) {
        num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        den += static_cast<double>(b[i]) * b[i];
    }
    return den > 0.0 ? num / den : num;
}

inline double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
        if (!(d <= m)) m = d;   // NaN propagates as a failure
    }
    return m;
}

// Runs fn once per SIMD variant this CPU supports, with that variant forced.
inline void for_each_variant(const std::function<void(cpu::SimdVariant, const char *)> &fn) {
    const cpu::SimdVariant saved = cpu::active_variant();
    for (cpu::SimdVariant v : {cpu::SimdVariant::SCALAR, cpu::SimdVariant::AVX2, cpu::SimdVariant::AVX512}) {
        if (v > cpu::best_supported_variant()) continue;
        cpu::set_simd_variant_for_testing(v);
        SCOPED_TRACE(cpu::active_kernels().name);
        fn(v, cpu::active_kernels().name);
    }
    cpu::set_simd_variant_for_testing(saved);
}

// topk_dot over n keys of d dims (f32, or rounded to f16 when f16) with
// indices base .., cut into segments at absolute multiples of seg as the
// ReAttention store's blocks are, merged into the rows' lists bs/bi (rows x k,
// as an earlier call left them).
inline void merge_topk_dot(cpu::ThreadPool &pool, const std::vector<float> &q, int64_t rows,
                           const std::vector<float> &keys, bool f16, int64_t n, int d, int64_t base, int k,
                           bool tile_max, int64_t seg, std::vector<float> &bs, std::vector<int64_t> &bi) {
    std::vector<uint16_t> k16(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) k16[i] = fp32_to_fp16(keys[i]);
    std::vector<cpu::TopkDotArgs::Segment> segs;
    for (int64_t j = 0, m = 0; j < n; j += m) {
        m = std::min(seg - (base + j) % seg, n - j);
        const void *p = f16 ? static_cast<const void *>(k16.data() + j * d) : static_cast<const void *>(keys.data() + j * d);
        segs.push_back({p, m, base + j});
    }
    cpu::TopkDotArgs a;
    a.q = q.data();
    a.ldq = d;
    a.n_rows = rows;
    a.segments = segs.data();
    a.n_segments = int64_t(segs.size());
    a.keys_f16 = f16;
    a.ld_keys = d;
    a.dim = d;
    a.k = k;
    a.tile_max = tile_max;
    a.best_score = bs.data();
    a.best_index = bi.data();
    cpu::topk_dot(pool, a);
}

// The same from empty lists: bs/bi receive the rows' lists.
inline void run_topk_dot(cpu::ThreadPool &pool, const std::vector<float> &q, int64_t rows,
                         const std::vector<float> &keys, bool f16, int64_t n, int d, int64_t base, int k,
                         bool tile_max, int64_t seg, std::vector<float> &bs, std::vector<int64_t> &bi) {
    bs.assign(static_cast<size_t>(rows * k), -INFINITY);
    bi.assign(static_cast<size_t>(rows * k), -1);
    merge_topk_dot(pool, q, rows, keys, f16, n, d, base, k, tile_max, seg, bs, bi);
}

} // namespace lctx::test
