// The int8 GEMM micro-kernel (matmul's MatmulArith::INT8; operand layouts in
// matmul_int8.h) in AVX2 integer instructions. Included by kernels_avx2.cpp
// and kernels_avx512.cpp, both compiled with AVX2.
//
// Per group of four codes: two vectors of the 16 rows' codes (unsigned,
// 0..31) and, per token, a broadcast word of its four int8 codes;
// `vpmaddubsw` gives 16 int16 sums of two products, added up in int16 over
// as many groups as cannot overflow (gemm_i8_groups). Then `vpmaddwd` with
// ones gives the rows' int32 sums, which are scaled in f32:
//   acc[t][r] += wd[b][r] * xd[b][t] * isum + wm[b][r] * xs[b][t].
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "matmul_int8.h"

namespace {

static_assert(lctx::cpu::kI8PanelRows == 16 && lctx::cpu::kI8TileTokens == 4 && lctx::cpu::kI8Block == 32,
              "gemm_i8_avx2 is written for 16 rows x 4 tokens and blocks of 32");

// Codes of up to 4 bits (G = 8: a block's 8 groups add up in int16) or 5
// bits (G = 4: each int16 sum of two products reaches 2 x 31 x 127 = 7,874,
// so the block is summed in two halves of 4 groups, 31,496 at most each).
template <int G>
void gemm_i8_groups(const uint8_t *wq, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                    const float *xs, int64_t nb, int n_tok, float *y, int64_t ldy, int rows) {
    // f32 sums of the two row vectors x 4 tokens: kept in memory (L1), as the
    // 8 int16 block sums, the two code vectors and a broadcast fill the registers.
    alignas(32) float acc[4][16] = {};
    const __m256i ones = _mm256_set1_epi16(1);
    auto bcast = [](const int8_t *p) {
        return _mm256_castps_si256(_mm256_broadcast_ss(reinterpret_cast<const float *>(p)));
    };
    for (int64_t b = 0; b < nb; ++b) {
        const float *db = xd + b * 4, *sb = xs + b * 4;
        for (int g0 = 0; g0 < 8; g0 += G) {
            const uint8_t *wb = wq + b * 512 + g0 * 64;   // [8 groups][16 rows][4 codes]
            const int8_t *xb = xq + b * 128 + g0 * 16;    // [8 groups][4 tokens][4 codes]
            __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            // The groups unrolled (no loop exit to mispredict per block); the
            // empty asm keeps each sum a chain, or the compiler reassociates
            // the adds into trees and spills.
#pragma GCC unroll 8
            for (int g = 0; g < G; ++g) {
                const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i *>(wb + g * 64));
                const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i *>(wb + g * 64 + 32));
                const int8_t *xg = xb + g * 16;
                __m256i x = bcast(xg);
                a0 = _mm256_add_epi16(a0, _mm256_maddubs_epi16(w0, x));
                b0 = _mm256_add_epi16(b0, _mm256_maddubs_epi16(w1, x));
                x = bcast(xg + 4);
                a1 = _mm256_add_epi16(a1, _mm256_maddubs_epi16(w0, x));
                b1 = _mm256_add_epi16(b1, _mm256_maddubs_epi16(w1, x));
                x = bcast(xg + 8);
                a2 = _mm256_add_epi16(a2, _mm256_maddubs_epi16(w0, x));
                b2 = _mm256_add_epi16(b2, _mm256_maddubs_epi16(w1, x));
                x = bcast(xg + 12);
                a3 = _mm256_add_epi16(a3, _mm256_maddubs_epi16(w0, x));
                b3 = _mm256_add_epi16(b3, _mm256_maddubs_epi16(w1, x));
                __asm__("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(b0), "+x"(b1), "+x"(b2), "+x"(b3));
            }
            // acc += wd * xd * isum, and once per block + wm * xs.
            const bool with_min = g0 == 0;
            auto scale_add = [&](float *out, __m256i s, int v, int t) {
                const __m256 dw = _mm256_load_ps(wd + b * 16 + 8 * v);
                const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, ones));
                __m256 o = _mm256_fmadd_ps(isum, _mm256_mul_ps(dw, _mm256_broadcast_ss(db + t)), _mm256_load_ps(out));
                if (with_min) o = _mm256_fmadd_ps(_mm256_load_ps(wm + b * 16 + 8 * v), _mm256_broadcast_ss(sb + t), o);
                _mm256_store_ps(out, o);
            };
            scale_add(acc[0], a0, 0, 0);
            scale_add(acc[0] + 8, b0, 1, 0);
            scale_add(acc[1], a1, 0, 1);
            scale_add(acc[1] + 8, b1, 1, 1);
            scale_add(acc[2], a2, 0, 2);
            scale_add(acc[2] + 8, b2, 1, 2);
            scale_add(acc[3], a3, 0, 3);
            scale_add(acc[3] + 8, b3, 1, 3);
        }
    }
    for (int t = 0; t < n_tok; ++t)
        for (int r = 0; r < rows; ++r) y[t * ldy + r] = acc[t][r];
}

void gemm_i8_avx2(const uint8_t *wq, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                  const float *xs, int64_t nb, int n_tok, float *y, int64_t ldy, int rows, int code_bits) {
    if (code_bits <= 4) gemm_i8_groups<8>(wq, wd, wm, xq, xd, xs, nb, n_tok, y, ldy, rows);
    else gemm_i8_groups<4>(wq, wd, wm, xq, xd, xs, nb, n_tok, y, ldy, rows);
}

// One token (decode): Q4_0, Q4_1, Q5_0 and Q5_1 rows (Q4_K below) read as
// stored, no panel, two blocks at a time. The 16 code bytes of blocks b and
// b + 1 fill one vector: its low nibbles are elements 0..15 of each block,
// its high nibbles elements 16..31 (the Q5 types add each element's fifth
// bit as 0x10). The token's codes are laid out to match once per call
// (gemv_i8_token_layout), so `vpmaddubsw` meets them without a shuffle per
// block (two products of codes <= 31 and |x| <= 127, then lo + hi: at most
// 15,748 in int16); `vpmaddwd` with ones leaves four int32 sums per block,
// scaled in f32 by d_w * xd. The four scales of a pair take one f16
// conversion and one product: {d0, m0, d1, m1} (no min: {d0, d0, d1, d1})
// times {xd0, xs0, xd1, xs1}; lanes 0 and 2 are the code terms' factors,
// lanes 1 and 3 the min terms, which a 128-bit accumulator sums (Q4_0's
// min is -8 d_w, Q5_0's -16 d_w: those lanes are multiplied by -8 or -16 at
// the end, exact powers of two). The f32 GEMV spends about 6 cycles a
// block on a Zen 4 and reads its weights from L3 no faster than from DRAM:
// it is bound by its instructions, not by memory (docs/int8.md, "Decode").

// The decode GEMV's types: Q4_0 and Q5_0 (w = d * (code - 8 or 16)), Q4_1
// and Q5_1 (w = d * code + m); the Q5 types keep each element's fifth bit
// in a 32-bit word after the scales.
template <GgmlType T> constexpr bool kGemvI8Min = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;
template <GgmlType T> constexpr bool kGemvI8Q5 = T == GgmlType::Q5_0 || T == GgmlType::Q5_1;
template <GgmlType T> constexpr int kGemvI8Bytes = (kGemvI8Min<T> ? 4 : 2) + (kGemvI8Q5<T> ? 4 : 0) + 16;
template <GgmlType T> constexpr float kGemvI8Offset = T == GgmlType::Q4_0 ? -8.0f : T == GgmlType::Q5_0 ? -16.0f : 1.0f;

// 32 bytes, 0x10 where bit k of `bits` is set (byte k), 0 elsewhere.
inline __m256i gemv_i8_fifth_bits(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                               _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                                  0x0303030303030303LL));
    const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select), _mm256_set1_epi8(0x10));
}

template <GgmlType T>
inline uint32_t gemv_i8_scales(const uint8_t *blk) {   // f16 {d, m} (no min: {d, d}) as one word
    uint32_t dm = 0;
    if constexpr (kGemvI8Min<T>) {
        __builtin_memcpy(&dm, blk, 4);
    } else {
        uint16_t d = 0;
        __builtin_memcpy(&d, blk, 2);
        dm = d | (static_cast<uint32_t>(d) << 16);
    }
    return dm;
}

// One pair of blocks of 32: lo holds elements 0..15 of both blocks, hi
// elements 16..31 (codes <= 31), against the token's codes at xl (its pair
// layout); f = {code factor, min term} of each block, {f0, m0, f1, m1}. The
// int32 sums of each block are scaled by its code factor into acc (lanes
// 0..3: the first block, 4..7: the second); accm sums f (its lanes 1 and 3
// are the min terms).
inline void gemv_i8_accumulate(__m256i lo, __m256i hi, const int8_t *xl, __m128 f, __m256 &acc, __m128 &accm) {
    const __m256i p = _mm256_add_epi16(
        _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xl))),
        _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xl + 32))));
    const __m256i sums = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
    const __m256 scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(f), _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
    accm = _mm_add_ps(accm, f);
}

// Blocks at b0 and b1 (b1 null: a last unpaired block, its codes and scales zero).
template <GgmlType T>
inline void gemv_i8_pair(const uint8_t *b0, const uint8_t *b1, const int8_t *xl, const float *xds, __m256 &acc,
                         __m128 &accm) {
    constexpr int kCodes = kGemvI8Bytes<T> - 16;   // bytes of scales (and fifth bits) before the codes
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b0 + kCodes));
    const __m256i q = b1 ? _mm256_inserti128_si256(_mm256_castsi128_si256(q0),
                                                   _mm_loadu_si128(reinterpret_cast<const __m128i *>(b1 + kCodes)), 1)
                         : _mm256_zextsi128_si256(q0);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kGemvI8Q5<T>) {   // bit j of qh: element j's fifth bit (elements 0..15 in lo, 16..31 in hi)
        uint32_t h0 = 0, h1 = 0;
        __builtin_memcpy(&h0, b0 + kCodes - 4, 4);
        if (b1) __builtin_memcpy(&h1, b1 + kCodes - 4, 4);
        lo = _mm256_or_si256(lo, gemv_i8_fifth_bits((h0 & 0xffffu) | (h1 << 16)));
        hi = _mm256_or_si256(hi, gemv_i8_fifth_bits((h0 >> 16) | (h1 & 0xffff0000u)));
    }
    const __m128i dm = _mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(gemv_i8_scales<T>(b0))),
                                        b1 ? static_cast<int>(gemv_i8_scales<T>(b1)) : 0, 1);
    const __m128 f = _mm_mul_ps(_mm_cvtph_ps(dm), _mm_loadu_ps(xds));   // {d0 xd0, m0 xs0, d1 xd1, m1 xs1}
    gemv_i8_accumulate(lo, hi, xl, f, acc, accm);
}

// A row's total: the 8 lanes of the code terms, plus offset times lanes 1
// and 3 of the min terms.
inline float gemv_i8_sum(__m256 a, __m128 m, float offset) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    m = _mm_add_ss(_mm_movehdup_ps(m), _mm_movehl_ps(m, _mm_movehdup_ps(m)));   // lanes 1 + 3
    return _mm_cvtss_f32(h) + offset * _mm_cvtss_f32(m);
}

template <GgmlType T>
inline float gemv_i8_row(const uint8_t *w, const int8_t *xl, const float *xds, int64_t nb) {
    constexpr int kBytes = kGemvI8Bytes<T>;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    __m128 accm0 = _mm_setzero_ps(), accm1 = accm0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        // Weights stream from DRAM once per token: prefetched 2 KB ahead, as
        // the f32 GEMV does (gemv_avx512.h; 4 and 8 KB measured no better here).
        _mm_prefetch(reinterpret_cast<const char *>(w + b * kBytes) + 2048, _MM_HINT_T0);
        gemv_i8_pair<T>(w + b * kBytes, w + (b + 1) * kBytes, xl + b * 32, xds + 2 * b, acc0, accm0);
        gemv_i8_pair<T>(w + (b + 2) * kBytes, w + (b + 3) * kBytes, xl + b * 32 + 64, xds + 2 * b + 4, acc1, accm1);
    }
    for (; b < nb; b += 2)
        gemv_i8_pair<T>(w + b * kBytes, b + 1 < nb ? w + (b + 1) * kBytes : nullptr, xl + b * 32, xds + 2 * b, acc0,
                        accm0);
    return gemv_i8_sum(_mm256_add_ps(acc0, acc1), _mm_add_ps(accm0, accm1), kGemvI8Offset<T>);
}

// Q4_K: super blocks of 256 elements, 8 sub-blocks of 32 with their own
// 6-bit scale and min (w = dd * sc * code - dmin * mn). Sub-blocks 2j and
// 2j + 1 share 32 code bytes, low and high nibbles, each in element order;
// a 128-bit lane swap puts them in the pair order of the token layout. Their
// scales are unpacked per pair, as the GEMM's unpack_codes_row does.
template <>
inline float gemv_i8_row<GgmlType::Q4_K>(const uint8_t *w, const int8_t *xl, const float *xds, int64_t nb) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const uint8_t *blk = w + sb * 144, *scales = blk + 4, *qs = blk + 16;
        _mm_prefetch(reinterpret_cast<const char *>(blk) + 2048, _MM_HINT_T0);
        uint16_t hd = 0, hm = 0;
        __builtin_memcpy(&hd, blk, 2);
        __builtin_memcpy(&hm, blk + 2, 2);
        const float dd = _cvtsh_ss(hd), dmin = _cvtsh_ss(hm);
        for (int j = 0; j < 4; ++j) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * j));
            const __m256i c0 = _mm256_and_si256(q, m4), c1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const int64_t b = sb * 8 + 2 * j;   // the pair's first block of 32
            int sc0 = 0, mn0 = 0, sc1 = 0, mn1 = 0;
            scale_min_k4(2 * j, scales, sc0, mn0);
            scale_min_k4(2 * j + 1, scales, sc1, mn1);
            const __m128 f = _mm_mul_ps(_mm_setr_ps(dd * static_cast<float>(sc0), -(dmin * static_cast<float>(mn0)),
                                                    dd * static_cast<float>(sc1), -(dmin * static_cast<float>(mn1))),
                                        _mm_loadu_ps(xds + 2 * b));
            gemv_i8_accumulate(_mm256_permute2x128_si256(c0, c1, 0x20), _mm256_permute2x128_si256(c0, c1, 0x31),
                               xl + b * 32, f, acc, accm);
        }
    }
    return gemv_i8_sum(acc, accm, 1.0f);
}

template <GgmlType T>
bool gemv_i8_rows(const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t nb, const int8_t *xl, const float *xds,
                  float *y) {
    for (int64_t r = 0; r < n_rows; ++r) y[r] = gemv_i8_row<T>(w + r * row_bytes, xl, xds, nb);
    return true;
}

bool gemv_i8_avx2(GgmlType t, const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t K, const int8_t *xl,
                  const float *xds, float *y) {
    const int64_t nb = K / 32;
    switch (t) {
    case GgmlType::Q4_0: return gemv_i8_rows<GgmlType::Q4_0>(w, row_bytes, n_rows, nb, xl, xds, y);
    case GgmlType::Q4_1: return gemv_i8_rows<GgmlType::Q4_1>(w, row_bytes, n_rows, nb, xl, xds, y);
    case GgmlType::Q5_0: return gemv_i8_rows<GgmlType::Q5_0>(w, row_bytes, n_rows, nb, xl, xds, y);
    case GgmlType::Q5_1: return gemv_i8_rows<GgmlType::Q5_1>(w, row_bytes, n_rows, nb, xl, xds, y);
    case GgmlType::Q4_K: return gemv_i8_rows<GgmlType::Q4_K>(w, row_bytes, n_rows, nb, xl, xds, y);
    default: return false;
    }
}

// quantize_act_row (matmul_int8.cpp, the scalar rule) in AVX2: the same
// codes, scales and sums bit for bit (cvtps_epi32 rounds to nearest even in
// the default MXCSR mode, as nearbyint does).
void quantize_act_row_avx2(const float *x, int64_t K, int8_t *q, float *d, float *s) {
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(__builtin_inff());
    for (int64_t b = 0; b < K / 32; ++b) {
        const float *xb = x + b * 32;
        __m256 v[4], amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            const __m256 a = _mm256_andnot_ps(sign, v[i]);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));   // inf or NaN
            amax = _mm256_max_ps(amax, a);
        }
        if (_mm256_movemask_ps(bad)) {
            __builtin_memset(q + b * 32, 0, 32);
            d[b] = s[b] = __builtin_nanf("");
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float am = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const __m256 inv = _mm256_set1_ps(am >= lctx::cpu::kI8TinyBlock ? 127.0f / am : 0.0f);
        __m256i c[4], sum = _mm256_setzero_si256();
        for (int i = 0; i < 4; ++i) {
            c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
            c[i] = _mm256_max_epi32(_mm256_min_epi32(c[i], _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
            sum = _mm256_add_epi32(sum, c[i]);
        }
        // int32 -> int8 in order: packs work within 128-bit lanes, the permute restores the order.
        const __m256i w01 = _mm256_packs_epi32(c[0], c[1]), w23 = _mm256_packs_epi32(c[2], c[3]);
        const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23),
                                                          _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(q + b * 32), bytes);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
        const float scale = am / 127.0f;
        d[b] = scale;
        s[b] = scale * static_cast<float>(_mm_cvtsi128_si32(s4));
    }
}

} // namespace
