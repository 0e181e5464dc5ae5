// q8 keys scored with AVX512-VNNI (VPDPBUSD) where cpuid reports it: the
// same integer dot products as block_scores_q8_i16 (simd_impl.h), so the
// same scores bit for bit, in about half the instructions. Used by the
// few-row (decode) attention kernel for q8 KV storage with head_dim % 64 == 0.
//
// VPDPBUSD multiplies unsigned bytes by signed bytes and adds each group of
// four products into an int32 lane. The key codes are the signed operand, as
// stored. The int16 query q16 is split into bytes, q16 = 256 * hi + lo with
// lo = q16 & 255 (unsigned) and hi = q16 >> 8 (signed, kept as hi + 128 so
// that it is unsigned too). Then
//   q16 . k = 256 * ((hi + 128) . k) + lo . k - 32768 * sum(k),
// with sum(k) from one more VPDPBUSD against bytes of 1. The arithmetic
// wraps mod 2^32, but the result fits int32 (|q16 . k| <= 32767 * 128 * hd
// < 2^31 for hd <= 512), so it comes out exact.
//
// Lanes are keys: 16 keys' rows are transposed as dwords (a 16 x 16 tile per
// 64 dims), so one VPDPBUSD of a broadcast query dword adds 4 dims to 16
// keys' sums. There is no per-key horizontal reduction (block_scores_q8_i16's
// main cost), and a key's codes are loaded and transposed once for all the
// rows of a group (up to kQ8VnniRows per pass).
//
// Included by kernels_avx512.cpp only, after its V; the functions carry
// their own target attribute and run only where q8_vnni_enabled() says so.
#pragma once

#include <cmath>
#include <cstring>

#include "simd.h"

#define LCTX_TARGET_VNNI __attribute__((target("avx512vnni")))

namespace {

constexpr int kQ8VnniRows = 4;   // rows per pass: 16 tile + 2 x 4 sums + 1 key-sum registers

// In place: afterwards t[c] lane r holds what t[r] lane c held (dwords).
// Pairs of rows interleaved, 4 x 4 blocks within 128-bit lanes, then a 4 x 4
// transpose of the lanes (as V::transpose does for floats).
inline void transpose16_epi32(__m512i *t) {
    __m512i a[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(t[i], t[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(t[i], t[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {   // t[i + m] lane L: dword 4L + m of rows i..i+3
        t[i] = _mm512_unpacklo_epi64(a[i], a[i + 2]);
        t[i + 1] = _mm512_unpackhi_epi64(a[i], a[i + 2]);
        t[i + 2] = _mm512_unpacklo_epi64(a[i + 1], a[i + 3]);
        t[i + 3] = _mm512_unpackhi_epi64(a[i + 1], a[i + 3]);
    }
    for (int m = 0; m < 4; ++m) {
        const __m512i v0 = _mm512_shuffle_i32x4(t[m], t[4 + m], 0x44), v1 = _mm512_shuffle_i32x4(t[m], t[4 + m], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(t[8 + m], t[12 + m], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(t[8 + m], t[12 + m], 0xEE);
        a[m] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        a[4 + m] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        a[8 + m] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        a[12 + m] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
    for (int i = 0; i < 16; ++i) t[i] = a[i];
}

// Scores of NR rows (parts: each row's 2 * hd query bytes, q8_vnni_query_parts) against the n <= 16
// keys from k (row stride ld); keys past n score as zero codes.
template <int NR>
LCTX_TARGET_VNNI inline void q8_vnni_group(const uint8_t *parts, const float *qscale, const int8_t *k, int64_t ld,
                                           int n, int hd, const float *kscale, float *s, int64_t lds) {
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    __m512i lo[NR], hi[NR], ksum = zero;
    for (int r = 0; r < NR; ++r) lo[r] = hi[r] = zero;
    for (int c = 0; c < hd; c += 64) {
        __m512i t[16];
        for (int u = 0; u < 16; ++u) t[u] = u < n ? _mm512_loadu_si512(k + u * ld + c) : zero;
        transpose16_epi32(t);
        for (int i = 0; i < 16; ++i) ksum = _mm512_dpbusd_epi32(ksum, ones, t[i]);
        for (int r = 0; r < NR; ++r) {
            const uint8_t *q = parts + r * 2 * hd + c;
            for (int i = 0; i < 16; ++i) {
                int32_t wl, wh;
                std::memcpy(&wl, q + 4 * i, 4);
                std::memcpy(&wh, q + hd + 4 * i, 4);
                lo[r] = _mm512_dpbusd_epi32(lo[r], _mm512_set1_epi32(wl), t[i]);
                hi[r] = _mm512_dpbusd_epi32(hi[r], _mm512_set1_epi32(wh), t[i]);
            }
        }
    }
    const __mmask16 valid = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __m512 ks = _mm512_maskz_loadu_ps(valid, kscale);
    const __m512i bias = _mm512_slli_epi32(ksum, 15);
    for (int r = 0; r < NR; ++r) {
        const __m512i dot = _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi[r], 8), lo[r]), bias);
        const __m512 sc = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(qscale[r])), ks);
        _mm512_mask_storeu_ps(s + r * lds, valid, sc);
    }
}

} // namespace

// s[r * lds + j] = (q16_r . k_j) * qscale[r] * kscale[j] for r < rows, j < nb
// (lds = kAttnKeyBlock), as block_scores_q8_i16 computes them; the whole
// groups of 16 keys whose bit is set in hidden_groups are -inf instead (not
// computed). next: the next block's K rows (null: none), prefetched a group at
// a time; row_bytes: the bytes of a row to prefetch.
LCTX_TARGET_VNNI void V::q8_block_scores_vnni(const uint8_t *qparts, const float *qscale, int rows, const int8_t *k,
                                              int64_t ld, int64_t nb, int hd, const float *kscale,
                                              unsigned hidden_groups, float *s, const int8_t *next,
                                              int64_t row_bytes) {
    constexpr int64_t lds = lctx::cpu::kAttnKeyBlock;
    for (int64_t j0 = 0; j0 < nb; j0 += 16) {
        const int n = static_cast<int>(nb - j0 < 16 ? nb - j0 : 16);
        if (next)
            for (int u = 0; u < 16; ++u)
                for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(next + (j0 + u) * ld + b);
        if ((hidden_groups >> (j0 / 16)) & 1u) {
            const __mmask16 valid = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
            for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(s + r * lds + j0, valid, _mm512_set1_ps(-INFINITY));
            continue;
        }
        for (int r0 = 0; r0 < rows; r0 += kQ8VnniRows) {
            const uint8_t *p = qparts + r0 * 2 * hd;
            const int8_t *kj = k + j0 * ld;
            float *sr = s + r0 * lds + j0;
            switch (rows - r0 < kQ8VnniRows ? rows - r0 : kQ8VnniRows) {
            case 1: q8_vnni_group<1>(p, qscale + r0, kj, ld, n, hd, kscale + j0, sr, lds); break;
            case 2: q8_vnni_group<2>(p, qscale + r0, kj, ld, n, hd, kscale + j0, sr, lds); break;
            case 3: q8_vnni_group<3>(p, qscale + r0, kj, ld, n, hd, kscale + j0, sr, lds); break;
            default: q8_vnni_group<4>(p, qscale + r0, kj, ld, n, hd, kscale + j0, sr, lds); break;
            }
        }
    }
}
