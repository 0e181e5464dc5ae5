// The f32 GEMM of matmul on the AMX tile unit (docs/amx.md). Every f32 operand is split into three bf16 parts,
// a = a1 + a2 + a3, which is exact for a normal float (8 + 8 + 8 significand
// bits; each remainder is exact by Sterbenz's lemma). Of the nine products of
// the parts, the six at least 2^-16 as large as a1 b1 are summed by
// TDPBF16PS, whose products are exact and whose sums are f32:
//   x . w = x1 w1 + (x1 w2 + x2 w1) + (x1 w3 + x2 w2 + x3 w1) + O(2^-24 |x| |w|)
// so the result is an f32 sum with an error of the order of the f32 GEMM's
// own rounding, not a bf16 product: matmul's F32 arithmetic, by another
// summation order. Parts that fall below bf16's normal range are flushed to
// zero (the tile unit flushes denormals), an absolute error below 1e-38 per
// product. An inf or NaN keeps the first part only, so its token's sums are
// inf or NaN (an inf may come out as NaN where the FMA path gives inf).
//
// Included by kernels_avx512.cpp after simd_topk_bf16.h (its AMX target and
// tile configuration); run only where cpu_has_amx_bf16() and the OS granted
// the tile data (matmul_amx_enabled()).
//
// Layouts (words of two bf16, element 2i in the low half; kp pairs a row, a
// multiple of 16, zeros past the K elements), step-major so that each tile
// (16 x 64 bytes) is 1 KiB in a row: for step s (pairs 16s .. 16s+15) and
// part p,
//   token tile of 16 tokens (the A operand):   xa[s][p][t][i % 16]
//   weight panel of 16 rows (the B operand):   wb[s][p][i % 16][r]
// 3 * 16 * kp words each.
#pragma once

namespace {

using lctx::cpu::kAmxTileRows;
// Words of one tile (16 rows of 64 bytes), and of one step's three parts.
constexpr int64_t kAmxTileWords = kAmxTileRows * 16;
constexpr int64_t kAmxStepWords = 3 * kAmxTileWords;

// The three bf16 parts of 16 floats, 16 halves each.
LCTX_TARGET_AMX inline void split_bf16x3(__m512 v, __m256i part[3]) {
    __m512 r = v;
    for (int p = 0; p < 3; ++p) {
        part[p] = (__m256i)_mm512_cvtneps_pbh(r);
        if (p == 2) break;
        const __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(part[p]), 16));
        // inf and NaN (and a float that rounded up to inf) leave no remainder.
        const __mmask16 special = _mm512_fpclass_ps_mask(f, 0x99);   // QNaN, +inf, -inf, SNaN
        r = _mm512_maskz_sub_ps(static_cast<__mmask16>(~special), r, f);
    }
}

// Row t (< 16) of a tile in the A layout: the three parts of x[0..K).
LCTX_TARGET_AMX inline void split_row_bf16x3(const float *x, int64_t K, int64_t kp, int t, uint32_t *dst) {
    for (int64_t k = 0; k < 2 * kp; k += 16) {   // 16 floats: half a step (8 pairs) of each part
        const int64_t n = std::max<int64_t>(0, std::min<int64_t>(16, K - k));
        const __m512 v = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), x + k);
        __m256i part[3];
        split_bf16x3(v, part);
        const int64_t s = k / 32, half = (k / 2) % 16;
        for (int p = 0; p < 3; ++p)
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + ((s * 3 + p) * 16 + t) * 16 + half), part[p]);
    }
}

// The token tile: tokens x + t * ldx, t < n (<= 16), K columns; rows past n zero.
LCTX_TARGET_AMX void amx_pack_tokens(const float *x, int64_t ldx, int n, int64_t K, int64_t kp, uint32_t *dst) {
    for (int t = 0; t < kAmxTileRows; ++t) {
        if (t < n) {
            split_row_bf16x3(x + t * ldx, K, kp, t, dst);
        } else {
            for (int64_t sp = 0; sp < kp / 16 * 3; ++sp) std::fill_n(dst + (sp * 16 + t) * 16, 16, 0u);
        }
    }
}

// The weight panel: rows src + r * lds, r < rows (<= 16), K columns; rows
// past `rows` zero. tmp: 3 * 16 * kp words of scratch.
LCTX_TARGET_AMX void amx_pack_weights(const float *src, int64_t lds, int rows, int64_t K, int64_t kp, uint32_t *dst,
                                      uint32_t *tmp) {
    amx_pack_tokens(src, lds, rows, K, kp, tmp);   // the rows in the A layout: tmp[s][p][r][i % 16]
    for (int64_t sp = 0; sp < kp / 16 * 3; ++sp)   // each 16 x 16 word block transposed: [r][i] -> [i][r]
        V::transpose(reinterpret_cast<const float *>(tmp + sp * kAmxTileWords), 16,
                     reinterpret_cast<float *>(dst + sp * kAmxTileWords), 16);
}

// y[t * ldy + r] = sum_k x_t[k] w_r[k] for the tokens of n_tiles packed
// token tiles (xa, consecutive; the last holds n_last tokens, the others 16)
// and `rows` (<= 32) weight rows: one panel at wb, a second right after it
// when rows > 16. Tiles: 0-1 the sums of the two panels, 2-4 the token
// parts, 5-7 one panel's parts. Each token tile runs all of K in its two
// sums (measured: parking them between blocks of K costs more than the
// panels' reloads from L2 save).
LCTX_TARGET_AMX void gemm_amx(const uint32_t *xa, int64_t n_tiles, int n_last, const uint32_t *wb, int rows,
                              int64_t kp, float *y, int64_t ldy) {
    AmxTileConfig cfg;
    for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
    _tile_loadconfig(&cfg);
    const int64_t tile_words = 3 * kAmxTileRows * kp, steps = kp / 16;
    const bool two = rows > 16;
    alignas(64) float c[2][16 * 16];
    for (int64_t ti = 0; ti < n_tiles; ++ti) {
        const uint32_t *a = xa + ti * tile_words;
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t s = 0; s < steps; ++s) {
            const uint32_t *as = a + s * kAmxStepWords, *b = wb + s * kAmxStepWords;
            _tile_loadd(2, as, 64);
            _tile_loadd(3, as + kAmxTileWords, 64);
            _tile_loadd(4, as + 2 * kAmxTileWords, 64);
            _tile_loadd(5, b, 64);
            _tile_loadd(6, b + kAmxTileWords, 64);
            _tile_loadd(7, b + 2 * kAmxTileWords, 64);
            // The smaller products first.
            _tile_dpbf16ps(0, 4, 5);   // x3 w1
            _tile_dpbf16ps(0, 3, 6);   // x2 w2
            _tile_dpbf16ps(0, 2, 7);   // x1 w3
            _tile_dpbf16ps(0, 3, 5);   // x2 w1
            _tile_dpbf16ps(0, 2, 6);   // x1 w2
            _tile_dpbf16ps(0, 2, 5);   // x1 w1
            if (two) {
                b += tile_words;
                _tile_loadd(5, b, 64);
                _tile_loadd(6, b + kAmxTileWords, 64);
                _tile_loadd(7, b + 2 * kAmxTileWords, 64);
                _tile_dpbf16ps(1, 4, 5);
                _tile_dpbf16ps(1, 3, 6);
                _tile_dpbf16ps(1, 2, 7);
                _tile_dpbf16ps(1, 3, 5);
                _tile_dpbf16ps(1, 2, 6);
                _tile_dpbf16ps(1, 2, 5);
            }
        }
        // Whole 16 x 16 tiles straight into y, the others through c.
        const int n_tok = ti + 1 < n_tiles ? 16 : n_last;
        float *yt = y + ti * 16 * ldy;
        if (n_tok == 16 && rows >= 16) _tile_stored(0, yt, ldy * 4);
        else _tile_stored(0, c[0], 64);
        if (n_tok == 16 && rows == 32) _tile_stored(1, yt + 16, ldy * 4);
        else if (two) _tile_stored(1, c[1], 64);
        for (int pnl = 0; pnl < (two ? 2 : 1); ++pnl) {
            const int n_r = std::min(16, rows - 16 * pnl);
            if (n_tok == 16 && n_r == 16) continue;
            const __mmask16 m = static_cast<__mmask16>((1u << n_r) - 1);
            for (int t = 0; t < n_tok; ++t)
                _mm512_mask_storeu_ps(yt + 16 * pnl + t * ldy, m, _mm512_load_ps(c[pnl] + t * 16));
        }
    }
    _tile_release();
}

} // namespace
