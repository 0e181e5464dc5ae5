// AVX2 + FMA + F16C instantiation of the kernels in simd_impl.h.
#include <immintrin.h>

#include <cstdint>

namespace {
struct V {
    static constexpr int W = 8;
    static constexpr int MV = 2;   // GEMM: panel vectors x NR tokens (12 accumulators + 2 panel vectors + broadcast)
    static constexpr int NR = 6;
    static constexpr int kAttnTileVectors = 2;   // tiled attention: 6 rows x 2 vectors (12 of the 16 registers)
    static constexpr const char *name = "avx2";
    using F = __m256;
    using I = __m256i;
    static __m256i lane_mask(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static F zero() { return _mm256_setzero_ps(); }
    static F set1(float a) { return _mm256_set1_ps(a); }
    static F load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, F v) { _mm256_storeu_ps(p, v); }
    static F load_n(const float *p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
    static void store_n(float *p, F v, int n) { _mm256_maskstore_ps(p, lane_mask(n), v); }
    static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F div(F a, F b) { return _mm256_div_ps(a, b); }
    static F max(F a, F b) { return _mm256_max_ps(a, b); }
    // Bit i set where a[i] > b[i] (false for NaN).
    static unsigned gt_mask(F a, F b) { return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ))); }
    // dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 tile: pairs of rows
    // interleaved, then 4 x 4 blocks within 128-bit lanes, then the lanes.
    static void transpose(const float *src, int64_t lds, float *dst, int64_t ldd) {
        __m256 r[8], t[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 8; i += 4) {   // r[i + m]: column 4L + m of rows i..i+3, in lane L
            r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
            r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
            r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
        }
        for (int m = 0; m < 4; ++m) {
            _mm256_storeu_ps(dst + m * ldd, _mm256_permute2f128_ps(r[m], r[4 + m], 0x20));
            _mm256_storeu_ps(dst + (4 + m) * ldd, _mm256_permute2f128_ps(r[m], r[4 + m], 0x31));
        }
    }
    static float hmax(F a) {
        __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
    }
    // Lane j = hsum(acc[j]) for the 8 vectors acc[0..8).
    static F reduce_rows(const F *acc) {
        const F h0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
        const F h1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
        return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    }
    static float hsum(F a) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
    }
    static I u8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))); }
    static I i8(const int8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))); }
    static I andi(I a, int m) { return _mm256_and_si256(a, _mm256_set1_epi32(m)); }
    static I ori(I a, I b) { return _mm256_or_si256(a, b); }
    static I subi(I a, int m) { return _mm256_sub_epi32(a, _mm256_set1_epi32(m)); }
    template <int S> static I srl(I a) { return _mm256_srli_epi32(a, S); }
    template <int S> static I sll(I a) { return _mm256_slli_epi32(a, S); }
    static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
    // q8 keys scored in int16 (simd_impl.h, block_scores_q8_i16): 2W values per vector.
    static constexpr bool kI16Dot = true;
    static I i8_to_i16(const int8_t *p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static I load_i16(const int16_t *p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)); }
    static I madd16(I a, I b) { return _mm256_madd_epi16(a, b); }
    static I addi32(I a, I b) { return _mm256_add_epi32(a, b); }
    // reduce_rows in int32 (exact, wrapping): lane j = the sum of acc[j]'s lanes.
    static I reduce_rows_i(const I *acc) {
        I t[4], u[2];
        for (int i = 0; i < 4; ++i)
            t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(acc[2 * i], acc[2 * i + 1]),
                                    _mm256_unpackhi_epi32(acc[2 * i], acc[2 * i + 1]));
        for (int i = 0; i < 2; ++i)
            u[i] = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                                    _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
        return _mm256_add_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                                _mm256_permute2x128_si256(u[0], u[1], 0x31));
    }
    static constexpr bool kQ8Vnni = false;
    static F f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
    static float h2f(uint16_t h) { return _cvtsh_ss(h); }
    // exp with ~1 ulp-level relative error (Cephes polynomial); 0 below -87.3.
    static F exp(F x) {
        const F keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654f), _CMP_GE_OQ);
        x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
        x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654f));
        const __m256i n = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
        const F nf = _mm256_cvtepi32_ps(n);
        F r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), x);
        r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(-2.12194440e-4f), r);
        F p = _mm256_set1_ps(1.9875691500E-4f);
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
        p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
        const F scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
        return _mm256_and_ps(_mm256_mul_ps(p, scale), keep);
    }
};
} // namespace

#include "simd_impl.h"
#include "simd_gemm_i8.h"

namespace lctx::cpu {
const KernelTable &kernel_table_avx2() {
    static const KernelTable table = [] {
        KernelTable k = kTable;
        k.gemm_i8 = gemm_i8_avx2;
        k.quantize_i8 = quantize_act_row_avx2;
        k.gemv_i8 = gemv_i8_avx2;
        return k;
    }();
    return table;
}
} // namespace lctx::cpu
