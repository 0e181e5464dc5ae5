// AVX-512 (F/BW/DQ/VL) instantiation of the kernels in simd_impl.h.
// GCC 12 warns about _mm512_undefined_* inside its own intrinsic headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace {
struct V {
    static constexpr int W = 16;
    static constexpr int MV = 4;   // GEMM: panel vectors x NR tokens (24 accumulators + 4 panel vectors + broadcast)
    static constexpr int NR = 6;
    static constexpr int kAttnTileVectors = 4;   // tiled attention: 6 rows x 4 vectors (24 of the 32 registers)
    static constexpr const char *name = "avx512";
    using F = __m512;
    using I = __m512i;
    static F zero() { return _mm512_setzero_ps(); }
    static F set1(float a) { return _mm512_set1_ps(a); }
    static F load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, F v) { _mm512_storeu_ps(p, v); }
    static F load_n(const float *p, int n) { return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p); }
    static void store_n(float *p, F v, int n) { _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v); }
    static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F div(F a, F b) { return _mm512_div_ps(a, b); }
    static float hsum(F a) { return _mm512_reduce_add_ps(a); }
    // Lane j = hsum(acc[j]) for the 16 vectors acc[0..16): a tree of
    // unpacks and 128-bit shuffles, 45 operations instead of 16 reductions.
    static F reduce_rows(const F *acc) {
        F t[8], u[4], w[2];
        for (int i = 0; i < 8; ++i)   // per 128-bit lane: [k0 k1 k0 k1] of keys 2i, 2i+1
            t[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                                 _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
        for (int i = 0; i < 4; ++i) {   // per 128-bit lane: keys 4i .. 4i+3
            const __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
            u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
        }
        for (int i = 0; i < 2; ++i)   // 128-bit lanes: keys 8i..8i+3 twice, then 8i+4..8i+7 twice
            w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x44),
                                 _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xEE));
        return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
    }
    static F max(F a, F b) { return _mm512_max_ps(a, b); }
    // Bit i set where a[i] > b[i] (false for NaN).
    static unsigned gt_mask(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
    // dst[c * ldd + r] = src[r * lds + c] for a 16 x 16 tile: pairs of rows
    // interleaved, 4 x 4 blocks within 128-bit lanes, then a 4 x 4 transpose
    // of the lanes.
    static void transpose(const float *src, int64_t lds, float *dst, int64_t ldd) {
        __m512 r[16], t[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4) {   // r[i + m]: column 4L + m of rows i..i+3, in lane L
            r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
            r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int m = 0; m < 4; ++m) {   // column 4L + m = lanes L of r[m], r[4 + m], r[8 + m], r[12 + m]
            const __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], _MM_SHUFFLE(1, 0, 1, 0));
            const __m512 v1 = _mm512_shuffle_f32x4(r[m], r[4 + m], _MM_SHUFFLE(3, 2, 3, 2));
            const __m512 v2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], _MM_SHUFFLE(1, 0, 1, 0));
            const __m512 v3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], _MM_SHUFFLE(3, 2, 3, 2));
            _mm512_storeu_ps(dst + m * ldd, _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0)));
            _mm512_storeu_ps(dst + (4 + m) * ldd, _mm512_shuffle_f32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1)));
            _mm512_storeu_ps(dst + (8 + m) * ldd, _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0)));
            _mm512_storeu_ps(dst + (12 + m) * ldd, _mm512_shuffle_f32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1)));
        }
    }
    static float hmax(F a) { return _mm512_reduce_max_ps(a); }
    static I u8(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static I i8(const int8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static I andi(I a, int m) { return _mm512_and_si512(a, _mm512_set1_epi32(m)); }
    static I ori(I a, I b) { return _mm512_or_si512(a, b); }
    static I subi(I a, int m) { return _mm512_sub_epi32(a, _mm512_set1_epi32(m)); }
    template <int S> static I srl(I a) { return _mm512_srli_epi32(a, S); }
    template <int S> static I sll(I a) { return _mm512_slli_epi32(a, S); }
    static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
    // q8 keys scored in int16 (simd_impl.h, block_scores_q8_i16): 2W values per vector.
    static constexpr bool kI16Dot = true;
    static I i8_to_i16(const int8_t *p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
    static I load_i16(const int16_t *p) { return _mm512_loadu_si512(p); }
    static I madd16(I a, I b) { return _mm512_madd_epi16(a, b); }
    static I addi32(I a, I b) { return _mm512_add_epi32(a, b); }
    // reduce_rows in int32 (exact, wrapping): lane j = the sum of acc[j]'s lanes.
    static I reduce_rows_i(const I *acc) {
        I t[8], u[4], w[2];
        for (int i = 0; i < 8; ++i)
            t[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2 * i], acc[2 * i + 1]),
                                    _mm512_unpackhi_epi32(acc[2 * i], acc[2 * i + 1]));
        for (int i = 0; i < 4; ++i)
            u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                                    _mm512_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
        for (int i = 0; i < 2; ++i)
            w[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0x44),
                                    _mm512_shuffle_i32x4(u[2 * i], u[2 * i + 1], 0xEE));
        return _mm512_add_epi32(_mm512_shuffle_i32x4(w[0], w[1], 0x88), _mm512_shuffle_i32x4(w[0], w[1], 0xDD));
    }
    // q8 keys scored with AVX512-VNNI where the CPU has it (simd_attn_q8_vnni.h).
    static constexpr bool kQ8Vnni = true;
    static void q8_block_scores_vnni(const uint8_t *qparts, const float *qscale, int rows, const int8_t *k, int64_t ld,
                                     int64_t nb, int hd, const float *kscale, unsigned hidden_groups, float *s,
                                     const int8_t *next, int64_t row_bytes);
    static F f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
    static float h2f(uint16_t h) { return _cvtsh_ss(h); }
    // exp with ~1 ulp-level relative error (Cephes polynomial); 0 below -87.3.
    static F exp(F x) {
        const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_GE_OQ);
        x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
        x = _mm512_max_ps(x, _mm512_set1_ps(-87.33654f));
        const __m512i n = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)));
        const F nf = _mm512_cvtepi32_ps(n);
        F r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f), r);
        F p = _mm512_set1_ps(1.9875691500E-4f);
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
        p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
        const F scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
        return _mm512_maskz_mul_ps(keep, p, scale);
    }
};
} // namespace

#include "simd_attn_q8_vnni.h"
#include "simd_impl.h"
#include "simd_bf16.h"
#include "simd_topk_bf16.h"
#include "simd_gemm_amx.h"
#include "simd_gemm_i8.h"
#include "gemv_avx512.h"

namespace lctx::cpu {
const KernelTable &kernel_table_avx512() {
    static const KernelTable table = make_table_avx512();
    return table;
}
} // namespace lctx::cpu
