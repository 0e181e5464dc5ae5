// matmul / get_row: validation, the three paths (fused GEMV for one token,
// row-at-a-time for a few tokens, packed-panel GEMM for prefill) and how
// their work is split over the pool; the arithmetic is in simd_impl.h.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {
namespace {

constexpr int64_t kKc = 256;          // K chunk: a panel chunk of MR x 256 floats stays in L1
constexpr int64_t kMinGemmTokens = 4; // fewer tokens: dequantize a row once, dot it per token

void check_weight(const WeightView &W, const char *what) {
    const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(W.type));
    if (!info || !info->can_dequantize)
        fail(LCTX_ERR_UNSUPPORTED, "%s: tensor type %u cannot be dequantized", what, static_cast<unsigned>(W.type));
    if (W.empty() || W.n_rows <= 0 || W.n_cols <= 0)
        fail(LCTX_ERR_INVALID_ARG, "%s: empty weight (%lld x %lld)", what, static_cast<long long>(W.n_rows),
             static_cast<long long>(W.n_cols));
    if (W.n_cols % info->block_size != 0)
        fail(LCTX_ERR_FORMAT, "%s: %lld columns is not a multiple of the %s block size %lld", what,
             static_cast<long long>(W.n_cols), info->name, static_cast<long long>(info->block_size));
    if (W.row_bytes < ggml_row_size(W.type, W.n_cols))
        fail(LCTX_ERR_FORMAT, "%s: row of %zu bytes is shorter than %lld %s elements", what, W.row_bytes,
             static_cast<long long>(W.n_cols), info->name);
}

void dequant(const KernelTable &kt, const WeightView &W, int64_t r, float *dst) {
    if (!kt.dequant_row(W.type, W.row(r), dst, W.n_cols)) dequantize_row_ref(W.type, W.row(r), dst, W.n_cols);
}

float *scratch(std::vector<float> &v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

// Rows [r0, r1) of W, one row dequantized at a time, dotted with every token.
void rows_dot(const KernelTable &kt, const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y,
              int64_t r0, int64_t r1) {
    thread_local std::vector<float> buf;
    float *row = scratch(buf, W.n_cols);
    for (int64_t r = r0; r < r1; ++r) {
        dequant(kt, W, r, row);
        for (int64_t t = 0; t < n_tok; ++t) y[t * W.n_rows + r] = kt.dot(row, x + t * ldx, W.n_cols);
    }
}

void gemv(ThreadPool &pool, const KernelTable &kt, const WeightView &W, const float *x, float *y) {
    std::vector<float> xbsum(W.n_cols / 32 + 1);
    if (W.n_cols % 32 == 0)
        for (int64_t b = 0; b < W.n_cols / 32; ++b) {
            float s = 0.0f;
            for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
            xbsum[b] = s;
        }
    const int64_t chunk = 16;   // rows per work unit, so threads stay balanced
    pool.parallel_for((W.n_rows + chunk - 1) / chunk, [&](int64_t b, int64_t e, int) {
        const int64_t r0 = b * chunk, r1 = std::min(W.n_rows, e * chunk);
        if (!kt.gemv(W.type, W.row(r0), W.row_bytes, r1 - r0, W.n_cols, x, xbsum.data(), y + r0))
            rows_dot(kt, W, x, W.n_cols, 1, y, r0, r1);
    });
}

void gemm(ThreadPool &pool, const KernelTable &kt, const WeightView &W, const float *x, int64_t ldx,
          int64_t n_tok, float *y) {
    const int64_t K = W.n_cols, MR = kt.mr, NR = kt.nr;
    const int64_t n_panels = (W.n_rows + MR - 1) / MR, n_tiles = (n_tok + NR - 1) / NR;

    // Tokens packed once per call, tile by tile: xp[tile][k][t] (zero-padded).
    thread_local std::vector<float> xp_buf;
    float *xp = scratch(xp_buf, static_cast<size_t>(n_tiles * K * NR));
    pool.parallel_for(n_tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t tile = b; tile < e; ++tile) {
            float *dst = xp + tile * K * NR;
            for (int64_t t = 0; t < NR; ++t) {
                const int64_t tok = tile * NR + t;
                if (tok < n_tok)
                    for (int64_t k = 0; k < K; ++k) dst[k * NR + t] = x[tok * ldx + k];
                else
                    for (int64_t k = 0; k < K; ++k) dst[k * NR + t] = 0.0f;
            }
        }
    });

    // Work items: (panel, token chunk), consecutive items share a panel. Token
    // chunks only when there are too few panels to keep every thread busy.
    const int64_t want = 2 * pool.size();
    const int64_t n_chunks = n_panels >= want ? 1 : std::min(n_tiles, (want + n_panels - 1) / n_panels);
    pool.parallel_for(n_panels * n_chunks, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> panel_buf, rows_buf;
        float *panel = scratch(panel_buf, static_cast<size_t>(MR * K));
        float *rows = scratch(rows_buf, static_cast<size_t>(MR * K));
        int64_t packed = -1;
        for (int64_t item = b; item < e; ++item) {
            const int64_t p = item / n_chunks, c = item % n_chunks;
            const int64_t r0 = p * MR, n_r = std::min(MR, W.n_rows - r0);
            if (packed != p) {   // dequantize MR rows, then transpose into panel[k][r]
                for (int64_t r = 0; r < n_r; ++r) dequant(kt, W, r0 + r, rows + r * K);
                for (int64_t k0 = 0; k0 < K; k0 += 64) {
                    const int64_t k1 = std::min(K, k0 + 64);
                    for (int64_t r = 0; r < MR; ++r)
                        for (int64_t k = k0; k < k1; ++k) panel[k * MR + r] = r < n_r ? rows[r * K + k] : 0.0f;
                }
                packed = p;
            }
            const int64_t t0 = n_tiles * c / n_chunks, t1 = n_tiles * (c + 1) / n_chunks;
            for (int64_t k0 = 0; k0 < K; k0 += kKc) {
                const int64_t kc = std::min(kKc, K - k0);
                for (int64_t tile = t0; tile < t1; ++tile) {
                    const int nt = static_cast<int>(std::min(NR, n_tok - tile * NR));
                    kt.gemm(panel + k0 * MR, xp + tile * K * NR + k0 * NR, kc, nt, y + tile * NR * W.n_rows + r0,
                            W.n_rows, static_cast<int>(n_r), k0 > 0);
                }
            }
        }
    });
}

} // namespace

void matmul(ThreadPool &pool, const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) {
    check_weight(W, "matmul");
    if (n_tok <= 0) return;
    if (!x || !y || ldx < W.n_cols)
        fail(LCTX_ERR_INVALID_ARG, "matmul: bad activations (ldx %lld < %lld columns or null pointer)",
             static_cast<long long>(ldx), static_cast<long long>(W.n_cols));
    const KernelTable &kt = active_kernels();
    if (n_tok == 1) {
        gemv(pool, kt, W, x, y);
    } else if (n_tok < kMinGemmTokens) {
        pool.parallel_for((W.n_rows + 15) / 16, [&](int64_t b, int64_t e, int) {
            rows_dot(kt, W, x, ldx, n_tok, y, b * 16, std::min(W.n_rows, e * 16));
        });
    } else {
        gemm(pool, kt, W, x, ldx, n_tok, y);
    }
}

void matmul_ref(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) {
    check_weight(W, "matmul_ref");
    std::vector<float> row(W.n_cols);
    for (int64_t r = 0; r < W.n_rows; ++r) {
        dequantize_row_ref(W.type, W.row(r), row.data(), W.n_cols);
        for (int64_t t = 0; t < n_tok; ++t) {
            double s = 0.0;
            for (int64_t c = 0; c < W.n_cols; ++c) s += static_cast<double>(row[c]) * x[t * ldx + c];
            y[t * W.n_rows + r] = static_cast<float>(s);
        }
    }
}

void get_row(const WeightView &W, int64_t r, float *out) {
    check_weight(W, "get_row");
    if (r < 0 || r >= W.n_rows)
        fail(LCTX_ERR_INVALID_ARG, "get_row: row %lld out of range [0, %lld)", static_cast<long long>(r),
             static_cast<long long>(W.n_rows));
    dequant(active_kernels(), W, r, out);
}

} // namespace lctx::cpu
