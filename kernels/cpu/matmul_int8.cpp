// matmul's int8 arithmetic (matmul_int8.h, docs/int8.md): the weights'
// 4-bit codes unpacked into panels, the activations rounded to int8 blocks,
// and the (job, panel, token chunk) items split over the pool as the f32
// GEMM splits them. The integer dot products are the table's gemm_i8.
#include "matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/error.h"
#include "gemm_items.h"
#include "simd.h"

namespace lctx::cpu {
namespace {

constexpr int kGroups = kI8Block / 4;   // groups of four codes in a block

float half_at(const uint8_t *p) { return fp16_to_fp32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

} // namespace

int int8_code_bits(GgmlType t) {
    switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: return 4;
    case GgmlType::Q5_0: case GgmlType::Q5_1: return 5;
    default: return 0;
    }
}

bool int8_weight_type(GgmlType t) { return int8_code_bits(t) != 0; }

void unpack_codes_row(GgmlType t, const uint8_t *row, int64_t K, uint8_t *codes, float *d, float *m) {
    switch (t) {
    case GgmlType::Q4_0:   // 2 bytes d, 16 bytes: element j low nibble, j + 16 high; w = d * (code - 8)
    case GgmlType::Q4_1: { // 2 bytes d, 2 bytes m, 16 bytes as Q4_0; w = d * code + m
        const bool q41 = t == GgmlType::Q4_1;
        const size_t block_bytes = q41 ? 20 : 18;
        for (int64_t b = 0; b < K / 32; ++b) {
            const uint8_t *blk = row + b * block_bytes, *qs = blk + (q41 ? 4 : 2);
            d[b] = half_at(blk);
            m[b] = q41 ? half_at(blk + 2) : -8.0f * d[b];
            for (int j = 0; j < 16; ++j) {
                codes[b * 32 + j] = qs[j] & 0x0f;
                codes[b * 32 + j + 16] = qs[j] >> 4;
            }
        }
        return;
    }
    case GgmlType::Q5_0:   // 2 bytes d, 4 bytes of 5th bits (bit j: element j), 16 nibble bytes as Q4_0; w = d * (code - 16)
    case GgmlType::Q5_1: { // 2 bytes d, 2 bytes m, then as Q5_0; w = d * code + m
        const bool q51 = t == GgmlType::Q5_1;
        const size_t block_bytes = q51 ? 24 : 22;
        for (int64_t b = 0; b < K / 32; ++b) {
            const uint8_t *blk = row + b * block_bytes, *hb = blk + (q51 ? 4 : 2), *qs = hb + 4;
            const uint32_t qh = static_cast<uint32_t>(hb[0]) | (static_cast<uint32_t>(hb[1]) << 8) |
                                (static_cast<uint32_t>(hb[2]) << 16) | (static_cast<uint32_t>(hb[3]) << 24);
            d[b] = half_at(blk);
            m[b] = q51 ? half_at(blk + 2) : -16.0f * d[b];
            for (int j = 0; j < 16; ++j) {
                codes[b * 32 + j] = static_cast<uint8_t>((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
                codes[b * 32 + j + 16] = static_cast<uint8_t>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
            }
        }
        return;
    }
    case GgmlType::Q4_K: {   // 256-element super blocks: 2 d, 2 dmin, 12 scale bytes, 128 nibble bytes
        for (int64_t sb = 0; sb < K / 256; ++sb) {
            const uint8_t *blk = row + sb * 144, *scales = blk + 4, *qs = blk + 16;
            const float dd = half_at(blk), dmin = half_at(blk + 2);
            for (int g = 0; g < 8; ++g) {   // sub-block g: low nibbles of bytes 32 (g / 2).. for even g, high for odd
                int sc = 0, mn = 0;
                q4k_scale_min(scales, g, sc, mn);
                d[sb * 8 + g] = dd * static_cast<float>(sc);
                m[sb * 8 + g] = -(dmin * static_cast<float>(mn));
                const uint8_t *q = qs + (g / 2) * 32;
                const int shift = (g % 2) * 4;
                for (int l = 0; l < 32; ++l) codes[sb * 256 + g * 32 + l] = (q[l] >> shift) & 0x0f;
            }
        }
        return;
    }
    default:
        fail(LCTX_ERR_INTERNAL, "unpack_codes_row: %s has no int8 path", ggml_type_name(t));
    }
}

void quantize_act_row(const float *x, int64_t K, int8_t *q, float *d, float *s) {
    for (int64_t b = 0; b < K / kI8Block; ++b) {
        const float *xb = x + b * kI8Block;
        float amax = 0.0f;
        bool finite = true;
        for (int j = 0; j < kI8Block; ++j) {
            finite = finite && std::isfinite(xb[j]);
            amax = std::max(amax, std::fabs(xb[j]));
        }
        if (!finite) {   // inf or NaN: a NaN scale makes the block's products NaN, as f32 would make them non-finite
            std::fill(q + b * kI8Block, q + (b + 1) * kI8Block, int8_t{0});
            d[b] = s[b] = std::numeric_limits<float>::quiet_NaN();
            continue;
        }
        const float scale = amax / 127.0f, inv = amax >= kI8TinyBlock ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < kI8Block; ++j) {
            // nearbyint: round to nearest even (the default mode); |x| * inv <= 127 up to rounding.
            const int v = std::clamp(static_cast<int>(std::nearbyint(xb[j] * inv)), -127, 127);
            q[b * kI8Block + j] = static_cast<int8_t>(v);
            sum += v;
        }
        d[b] = scale;
        s[b] = scale * static_cast<float>(sum);
    }
}

void gemv_i8_token_layout(const int8_t *xq, int64_t nb, int8_t *xl) {
    for (int64_t b = 0; b < nb; b += 2) {
        const int8_t *x0 = xq + b * kI8Block, *x1 = x0 + kI8Block;
        int8_t *o = xl + b * kI8Block;
        const bool pair = b + 1 < nb;
        for (int j = 0; j < 16; ++j) {
            o[j] = x0[j];
            o[16 + j] = pair ? x1[j] : int8_t{0};
            o[32 + j] = x0[16 + j];
            o[48 + j] = pair ? x1[16 + j] : int8_t{0};
        }
    }
}

void gemm_int8_multi(ThreadPool &pool, const KernelTable &kt, const MatmulJob *jobs, int n_jobs, const float *x,
                     int64_t ldx, int64_t n_tok) {
    const int64_t K = jobs[0].W->n_cols, nb = K / kI8Block;
    constexpr int64_t NT = kI8TileTokens, MR = kI8PanelRows;
    const int64_t n_tiles = (n_tok + NT - 1) / NT;

    // Tokens quantized and packed tile by tile (tokens past n_tok: zeros).
    thread_local std::vector<int8_t> xq_buf;
    thread_local std::vector<float> xds_buf;
    int8_t *xq = scratch_aligned(xq_buf, static_cast<size_t>(n_tiles * nb * kI8Block * NT));
    float *xd = scratch_aligned(xds_buf, static_cast<size_t>(2 * n_tiles * nb * NT)), *xs = xd + n_tiles * nb * NT;
    pool.parallel_for(n_tiles, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<int8_t> q;
        thread_local std::vector<float> dq;
        q.resize(static_cast<size_t>(K));
        dq.resize(static_cast<size_t>(2 * nb));
        for (int64_t tile = b; tile < e; ++tile) {
            int8_t *tq = xq + tile * nb * kI8Block * NT;
            float *td = xd + tile * nb * NT, *ts = xs + tile * nb * NT;
            for (int64_t t = 0; t < NT; ++t) {
                const int64_t tok = tile * NT + t;
                if (tok < n_tok) kt.quantize_i8(x + tok * ldx, K, q.data(), dq.data(), dq.data() + nb);
                else {
                    std::fill(q.begin(), q.end(), int8_t{0});
                    std::fill(dq.begin(), dq.end(), 0.0f);
                }
                for (int64_t blk = 0; blk < nb; ++blk) {
                    for (int g = 0; g < kGroups; ++g)
                        std::memcpy(tq + ((blk * kGroups + g) * NT + t) * 4, q.data() + blk * kI8Block + g * 4, 4);
                    td[blk * NT + t] = dq[blk];
                    ts[blk * NT + t] = dq[nb + blk];
                }
            }
        }
    });

    const GemmItems items(jobs, n_jobs, MR, n_tiles, pool.size());
    items.claim(pool, jobs, [&](const auto &each_item) {
        thread_local std::vector<uint8_t> codes_buf, wq_buf;
        thread_local std::vector<float> wdm_buf, rows_dm_buf;
        uint8_t *codes = scratch_aligned(codes_buf, static_cast<size_t>(K));
        uint8_t *wq = scratch_aligned(wq_buf, static_cast<size_t>(MR * K));
        float *wd = scratch_aligned(wdm_buf, static_cast<size_t>(2 * MR * nb)), *wm = wd + MR * nb;
        rows_dm_buf.resize(static_cast<size_t>(2 * nb));
        float *rd = rows_dm_buf.data(), *rm = rd + nb;
        int64_t packed = -1;
        each_item([&](int j, int64_t gp, int64_t r0, int64_t n_r, int64_t t0, int64_t t1) {
            const WeightView &W = *jobs[j].W;
            if (packed != gp) {   // unpack MR rows into wq[b][g][r][i], wd[b][r], wm[b][r]
                for (int64_t r = 0; r < MR; ++r) {
                    if (r < n_r) unpack_codes_row(W.type, W.row(r0 + r), K, codes, rd, rm);
                    else {
                        std::memset(codes, 0, static_cast<size_t>(K));
                        std::fill(rd, rd + 2 * nb, 0.0f);
                    }
                    for (int64_t blk = 0; blk < nb; ++blk) {
                        for (int g = 0; g < kGroups; ++g)
                            std::memcpy(wq + ((blk * kGroups + g) * MR + r) * 4, codes + blk * kI8Block + g * 4, 4);
                        wd[blk * MR + r] = rd[blk];
                        wm[blk * MR + r] = rm[blk];
                    }
                }
                packed = gp;
            }
            for (int64_t tile = t0; tile < t1; ++tile) {
                const int nt = static_cast<int>(std::min(NT, n_tok - tile * NT));
                kt.gemm_i8(wq, wd, wm, xq + tile * nb * kI8Block * NT, xd + tile * nb * NT, xs + tile * nb * NT, nb,
                           nt, jobs[j].y + tile * NT * W.n_rows + r0, W.n_rows, static_cast<int>(n_r),
                           int8_code_bits(W.type));
            }
        });
    });
}

} // namespace lctx::cpu
