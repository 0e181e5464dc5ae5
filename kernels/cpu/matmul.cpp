// matmul / get_row: validation, the three paths (fused GEMV for one token,
// row-at-a-time for a few tokens, packed-panel GEMM for prefill) and how
// their work is split over the pool; the arithmetic is in simd_impl.h.
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "cpu_kernels.h"
#include "gemm_items.h"
#include "matmul_int8.h"
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

// Block sums of x for the Q4_1 min term (n_cols % 32 == 0 for every 32-block type).
void block_sums(const float *x, int64_t n, float *xbsum) {
    for (int64_t b = 0; b < n / 32; ++b) {
        float s = 0.0f;
        for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
        xbsum[b] = s;
    }
}

// One token: rows of all jobs in chunks of kGemvChunk (a chunk never spans
// two jobs), one pool job for all of them.
constexpr int64_t kGemvChunk = 16;

// int8: the token is rounded to int8 blocks once (xl, in the order
// gemv_i8_token_layout gives, and xds: each block's scale and scaled code
// sum, interleaved), and the weights the table's gemv_i8 takes are
// multiplied in integers; the others stay f32.
void gemv_multi(ThreadPool &pool, const KernelTable &kt, const MatmulJob *jobs, int n_jobs, const float *x,
                bool int8) {
    const int64_t K = jobs[0].W->n_cols;
    thread_local std::vector<float> xbsum_buf;
    float *xbsum = scratch(xbsum_buf, static_cast<size_t>(K / 32 + 1));
    block_sums(x, K % 32 == 0 ? K : 0, xbsum);
    thread_local std::vector<int8_t> xq_buf;
    thread_local std::vector<float> xds_buf;
    int8_t *xl = nullptr;
    float *xds = nullptr;
    if (int8 && kt.gemv_i8 && K % kI8Block == 0) {
        const int64_t nb = K / kI8Block, pairs = (nb + 1) / 2;
        xq_buf.resize(static_cast<size_t>(K + pairs * 2 * kI8Block));
        int8_t *xq = xq_buf.data();
        xl = xq + K;
        // [xd, xs] per block, then a zero pair (read by an unpaired last
        // block), then the quantizer's d and s.
        xds = scratch(xds_buf, static_cast<size_t>(4 * nb + 2));
        float *d = xds + 2 * nb + 2, *s = d + nb;
        kt.quantize_i8(x, K, xq, d, s);
        for (int64_t b = 0; b < nb; ++b) {
            xds[2 * b] = d[b];
            xds[2 * b + 1] = s[b];
        }
        xds[2 * nb] = xds[2 * nb + 1] = 0.0f;
        gemv_i8_token_layout(xq, nb, xl);
    }
    int64_t first[kMaxMatmulJobs + 1];
    first[0] = 0;
    for (int j = 0; j < n_jobs; ++j) first[j + 1] = first[j] + (jobs[j].W->n_rows + kGemvChunk - 1) / kGemvChunk;
    pool.parallel_for(first[n_jobs], [&](int64_t b, int64_t e, int) {
        int j = 0;
        for (int64_t c = b; c < e;) {
            while (c >= first[j + 1]) ++j;
            const WeightView &W = *jobs[j].W;
            const int64_t c1 = std::min(e, first[j + 1]);   // chunks of job j in this range
            const int64_t r0 = (c - first[j]) * kGemvChunk, r1 = std::min(W.n_rows, (c1 - first[j]) * kGemvChunk);
            const bool in_int8 =
                xl && kt.gemv_i8(W.type, W.row(r0), W.row_bytes, r1 - r0, W.n_cols, xl, xds, jobs[j].y + r0);
            if (!in_int8 && !kt.gemv(W.type, W.row(r0), W.row_bytes, r1 - r0, W.n_cols, x, xbsum, jobs[j].y + r0))
                rows_dot(kt, W, x, W.n_cols, 1, jobs[j].y, r0, r1);
            c = c1;
        }
    });
}

// The bf16 GEMM's operands: rows of K floats become K / 2 words of two
// bf16, and the packed layouts hold words where the f32 ones hold floats.
struct Bf16Packing {
    const KernelTable &kt;
    int64_t words;        // per row: K / 2
    int64_t words_pad;    // the conversion's buffer: a multiple of 16
    // dst[w * stride] = word w of row x, w < words.
    void scatter(const float *x, int64_t K, uint32_t *dst, int64_t stride) const {
        thread_local std::vector<uint32_t> buf;
        if (static_cast<int64_t>(buf.size()) < words_pad) buf.resize(static_cast<size_t>(words_pad));
        kt.to_bf16_words(x, K, buf.data(), words_pad);
        for (int64_t w = 0; w < words; ++w) dst[w * stride] = buf[w];
    }
};

// Prefill: tokens packed once for all jobs, then (job, panel, token chunk)
// items in one pool job; consecutive items share a panel. bf16 (the
// caller checked kt.gemm_bf16 and an even K): the same with words.
void gemm_multi(ThreadPool &pool, const KernelTable &kt, const MatmulJob *jobs, int n_jobs, const float *x,
                int64_t ldx, int64_t n_tok, bool bf16) {
    const int64_t K = jobs[0].W->n_cols, MR = kt.mr, NR = kt.nr;
    const int64_t n_tiles = (n_tok + NR - 1) / NR;
    const Bf16Packing pk{kt, K / 2, (K / 2 + 15) / 16 * 16};

    // Tokens packed tile by tile: xp[tile][k][t] (zero-padded); bf16:
    // xp2[tile][k / 2][t].
    thread_local std::vector<float> xp_buf;
    thread_local std::vector<uint32_t> xp2_buf;
    float *xp = bf16 ? nullptr : scratch_aligned(xp_buf, static_cast<size_t>(n_tiles * K * NR));
    uint32_t *xp2 = bf16 ? scratch_aligned(xp2_buf, static_cast<size_t>(n_tiles * pk.words * NR)) : nullptr;
    pool.parallel_for(n_tiles, [&](int64_t b, int64_t e, int) {
        for (int64_t tile = b; tile < e; ++tile) {
            for (int64_t t = 0; t < NR; ++t) {
                const int64_t tok = tile * NR + t;
                if (bf16) {
                    uint32_t *dst = xp2 + tile * pk.words * NR;
                    if (tok < n_tok) pk.scatter(x + tok * ldx, K, dst + t, NR);
                    else
                        for (int64_t w = 0; w < pk.words; ++w) dst[w * NR + t] = 0;
                    continue;
                }
                float *dst = xp + tile * K * NR;
                if (tok < n_tok)
                    for (int64_t k = 0; k < K; ++k) dst[k * NR + t] = x[tok * ldx + k];
                else
                    for (int64_t k = 0; k < K; ++k) dst[k * NR + t] = 0.0f;
            }
        }
    });

    const GemmItems items(jobs, n_jobs, MR, n_tiles, pool.size());
    items.claim(pool, jobs, [&](const auto &each_item) {
        thread_local std::vector<float> panel_buf, rows_buf;
        thread_local std::vector<uint32_t> panel2_buf;
        float *panel = bf16 ? nullptr : scratch_aligned(panel_buf, static_cast<size_t>(MR * K));
        uint32_t *panel2 = bf16 ? scratch_aligned(panel2_buf, static_cast<size_t>(MR * pk.words)) : nullptr;
        float *rows = scratch(rows_buf, static_cast<size_t>(MR * K));
        int64_t packed = -1;
        each_item([&](int j, int64_t gp, int64_t r0, int64_t n_r, int64_t t0, int64_t t1) {
            const WeightView &W = *jobs[j].W;
            float *y = jobs[j].y;
            if (packed != gp) {   // dequantize MR rows, then transpose into panel[k][r]
                for (int64_t r = 0; r < n_r; ++r) dequant(kt, W, r0 + r, rows + r * K);
                // Contiguous writes; the MR rows' current lines stay in L1.
                for (int64_t r = n_r; r < MR; ++r) std::fill(rows + r * K, rows + (r + 1) * K, 0.0f);
                if (bf16) {   // panel2[k / 2][r]
                    for (int64_t r = 0; r < MR; ++r) pk.scatter(rows + r * K, K, panel2 + r, MR);
                } else {
                    kt.transpose(rows, K, MR, K, panel, MR);
                }
                packed = gp;
            }
            for (int64_t k0 = 0; k0 < K; k0 += kKc) {
                const int64_t kc = std::min(kKc, K - k0);
                for (int64_t tile = t0; tile < t1; ++tile) {
                    const int nt = static_cast<int>(std::min(NR, n_tok - tile * NR));
                    float *yt = y + tile * NR * W.n_rows + r0;
                    if (bf16)
                        kt.gemm_bf16(panel2 + k0 / 2 * MR, xp2 + tile * pk.words * NR + k0 / 2 * NR, kc / 2, nt, yt,
                                     W.n_rows, static_cast<int>(n_r), k0 > 0);
                    else
                        kt.gemm(panel + k0 * MR, xp + tile * K * NR + k0 * NR, kc, nt, yt, W.n_rows,
                                static_cast<int>(n_r), k0 > 0);
                }
            }
        });
    });
}

// Prefill on the AMX tile unit (simd_gemm_amx.h). The weights' panels are
// cut into bf16 parts group by group (all of a layer's weights are one
// group; a vocabulary-sized output matrix is several, so the parts never
// take more than kAmxWeightBytes). For each group, chunk by chunk of tokens:
// the chunk is cut into parts by all threads, then the threads take pairs of
// panels from a shared counter, so they work through one chunk (kept in
// their L2) while the panels stream past it. Cutting all tokens at once would
// write and read back 6 bytes per activation.
constexpr int64_t kAmxChunkBytes = 1 << 20;     // a chunk's token parts (L2 is 2 MiB a core where AMX runs)
constexpr int64_t kAmxWeightBytes = 32 << 20;   // a group's weight parts

void gemm_amx_multi(ThreadPool &pool, const KernelTable &kt, const MatmulJob *jobs, int n_jobs, const float *x,
                    int64_t ldx, int64_t n_tok) {
    const int64_t K = jobs[0].W->n_cols, kp = (K + 31) / 32 * 16;
    const int64_t tile_words = 3 * kAmxTileRows * kp;   // a token tile or a weight panel
    const int64_t n_tiles = (n_tok + 15) / 16;
    const int n_last = static_cast<int>(n_tok - 16 * (n_tiles - 1));
    const int64_t tiles_per_chunk = std::min(n_tiles, std::max<int64_t>(1, kAmxChunkBytes / (tile_words * 4)));
    const int64_t max_panels = std::max<int64_t>(2, kAmxWeightBytes / (tile_words * 4));

    // Panels of 16 rows and pairs of panels (never across two weights), numbered over all jobs.
    int64_t first_panel[kMaxMatmulJobs + 1], first_pair[kMaxMatmulJobs + 1];
    first_panel[0] = first_pair[0] = 0;
    for (int j = 0; j < n_jobs; ++j) {
        const int64_t panels = (jobs[j].W->n_rows + 15) / 16;
        first_panel[j + 1] = first_panel[j] + panels;
        first_pair[j + 1] = first_pair[j] + (panels + 1) / 2;
    }
    const int64_t n_pairs = first_pair[n_jobs];
    auto job_of_pair = [&](int64_t q) {
        int j = 0;
        while (q >= first_pair[j + 1]) ++j;
        return j;
    };
    auto first_panel_of_pair = [&](int64_t q) {
        const int j = job_of_pair(q);
        return first_panel[j] + 2 * (q - first_pair[j]);
    };
    auto end_panel_of_pair = [&](int64_t q) {
        const int j = job_of_pair(q);
        return std::min(first_panel[j + 1], first_panel_of_pair(q) + 2);
    };

    thread_local std::vector<uint32_t> xa_buf, wb_buf;
    uint32_t *xa = scratch_aligned(xa_buf, static_cast<size_t>(tiles_per_chunk * tile_words));
    for (int64_t q0 = 0, q1; q0 < n_pairs; q0 = q1) {
        const int64_t gp0 = first_panel_of_pair(q0);
        for (q1 = q0 + 1; q1 < n_pairs && end_panel_of_pair(q1) - gp0 <= max_panels; ++q1) {}
        const int64_t n_panels = end_panel_of_pair(q1 - 1) - gp0;
        uint32_t *wb = scratch_aligned(wb_buf, static_cast<size_t>(n_panels * tile_words));

        pool.parallel_for(n_panels, [&](int64_t b, int64_t e, int) {
            thread_local std::vector<float> rows_buf;
            thread_local std::vector<uint32_t> tmp_buf;
            float *rows = scratch(rows_buf, static_cast<size_t>(16 * K));
            uint32_t *tmp = scratch_aligned(tmp_buf, static_cast<size_t>(tile_words));
            int j = 0;
            for (int64_t i = b; i < e; ++i) {
                const int64_t gp = gp0 + i;
                while (gp >= first_panel[j + 1]) ++j;
                const WeightView &W = *jobs[j].W;
                const int64_t r0 = (gp - first_panel[j]) * 16, n_r = std::min<int64_t>(16, W.n_rows - r0);
                for (int64_t r = 0; r < n_r; ++r) dequant(kt, W, r0 + r, rows + r * K);
                kt.amx_pack_weights(rows, K, static_cast<int>(n_r), K, kp, wb + i * tile_words, tmp);
            }
        });

        for (int64_t t0 = 0; t0 < n_tiles; t0 += tiles_per_chunk) {
            const int64_t t1 = std::min(n_tiles, t0 + tiles_per_chunk);
            pool.parallel_for(t1 - t0, [&](int64_t b, int64_t e, int) {
                for (int64_t i = b; i < e; ++i) {
                    const int64_t tok = (t0 + i) * 16;
                    kt.amx_pack_tokens(x + tok * ldx, ldx, static_cast<int>(std::min<int64_t>(16, n_tok - tok)), K,
                                       kp, xa + i * tile_words);
                }
            });
            parallel_claim(pool, q1 - q0, [&](auto &&claim_items) {
                claim_items([&](int64_t i) {
                    const int64_t q = q0 + i;
                    const int j = job_of_pair(q);
                    const WeightView &W = *jobs[j].W;
                    const int64_t gp = first_panel_of_pair(q), r0 = (gp - first_panel[j]) * 16;
                    const int rows = static_cast<int>(std::min<int64_t>(32, W.n_rows - r0));
                    kt.gemm_amx(xa, t1 - t0, t1 == n_tiles ? n_last : 16, wb + (gp - gp0) * tile_words, rows, kp,
                                jobs[j].y + t0 * 16 * W.n_rows + r0, W.n_rows);
                });
            });
        }
    }
}

} // namespace

bool matmul_bf16_available() { return active_kernels().gemm_bf16 != nullptr; }
bool matmul_int8_available() { return active_kernels().gemm_i8 != nullptr; }

void matmul_multi(ThreadPool &pool, const MatmulJob *jobs, int n_jobs, const float *x, int64_t ldx, int64_t n_tok,
                  MatmulArith arith) {
    if (n_jobs < 1 || n_jobs > kMaxMatmulJobs || !jobs)
        fail(LCTX_ERR_INVALID_ARG, "matmul: %d weights in one call (1 to %d)", n_jobs, kMaxMatmulJobs);
    for (int j = 0; j < n_jobs; ++j) {
        if (!jobs[j].W) fail(LCTX_ERR_INVALID_ARG, "matmul: null weight");
        check_weight(*jobs[j].W, "matmul");
        if (jobs[j].W->n_cols != jobs[0].W->n_cols)
            fail(LCTX_ERR_INVALID_ARG, "matmul: weights of %lld and %lld columns share one input",
                 static_cast<long long>(jobs[0].W->n_cols), static_cast<long long>(jobs[j].W->n_cols));
    }
    if (n_tok <= 0) return;
    for (int j = 0; j < n_jobs; ++j)
        if (!jobs[j].y) fail(LCTX_ERR_INVALID_ARG, "matmul: null output");
    if (!x || ldx < jobs[0].W->n_cols)
        fail(LCTX_ERR_INVALID_ARG, "matmul: bad activations (ldx %lld < %lld columns or null pointer)",
             static_cast<long long>(ldx), static_cast<long long>(jobs[0].W->n_cols));
    const KernelTable &kt = active_kernels();
    const bool int8 = arith == MatmulArith::INT8 && kt.gemm_i8;
    auto few_tokens = [&](const MatmulJob *js, int n) {
        for (int j = 0; j < n; ++j) {
            const WeightView &W = *js[j].W;
            pool.parallel_for((W.n_rows + 15) / 16, [&](int64_t b, int64_t e, int) {
                rows_dot(kt, W, x, ldx, n_tok, js[j].y, b * 16, std::min(W.n_rows, e * 16));
            });
        }
    };
    if (n_tok == 1) {
        gemv_multi(pool, kt, jobs, n_jobs, x, int8);
    } else if (n_tok < kMinGemmTokens && !int8) {
        few_tokens(jobs, n_jobs);
    } else if (int8) {
        // The jobs whose weights have 4- or 5-bit codes take the int8 GEMM
        // (also for 2 or 3 tokens: one padded tile), the others (q8_0, f16,
        // q5_k, q6_k...) the f32 path of their token count.
        MatmulJob i8[kMaxMatmulJobs], f32[kMaxMatmulJobs];
        int n_i8 = 0, n_f32 = 0;
        for (int j = 0; j < n_jobs; ++j) (int8_weight_type(jobs[j].W->type) ? i8[n_i8++] : f32[n_f32++]) = jobs[j];
        if (n_i8) gemm_int8_multi(pool, kt, i8, n_i8, x, ldx, n_tok);
        if (n_f32 && n_tok < kMinGemmTokens) few_tokens(f32, n_f32);
        else if (n_f32) gemm_multi(pool, kt, f32, n_f32, x, ldx, n_tok, false);
    } else {
        const bool bf16 = arith == MatmulArith::BF16 && kt.gemm_bf16 && jobs[0].W->n_cols % 2 == 0;
        if (!bf16 && n_tok >= kMinAmxGemmTokens && matmul_amx_enabled()) gemm_amx_multi(pool, kt, jobs, n_jobs, x, ldx, n_tok);
        else gemm_multi(pool, kt, jobs, n_jobs, x, ldx, n_tok, bf16);
    }
}

void matmul(ThreadPool &pool, const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y,
            MatmulArith arith) {
    const MatmulJob job{&W, y};
    matmul_multi(pool, &job, 1, x, ldx, n_tok, arith);
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
