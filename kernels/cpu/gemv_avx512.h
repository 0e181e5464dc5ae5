// AVX-512 matrix x vector rows for Q4_1, Q4_0 and Q8_0 (decode), included by
// kernels_avx512.cpp after simd_impl.h. Same arithmetic as row_dot_q32 (f32
// products, the Q4_1 min folded in as m * sum(x of the block)), fewer
// instructions per block: the two fp16 scales are converted together by one
// vcvtph2ps, the min term is a lane of a 128-bit accumulator instead of a
// scalar chain, and the d broadcast comes from that register. Internal
// linkage; no std templates (see simd_impl.h).
#pragma once

namespace {

// Prefetch distance in bytes (measured: 512 -> 5.8, 1024 -> 6.9, 2048 ->
// 8.2 GB/s single-thread from DRAM; 4096 no better).
constexpr int kGemvPrefetch = 2048;

// {d, m, 0, 0} of a Q4_1 block, {d, 0, 0, 0} of a Q4_0/Q8_0 block.
template <GgmlType T>
inline __m128 block_scales(const uint8_t *b) {
    uint32_t v = 0;
    std::memcpy(&v, b, T == GgmlType::Q4_1 ? 4 : 2);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(v)));
}

// Unscaled dot of one block's quants with x (16 lanes of partial sums).
template <GgmlType T>
inline __m512 block_qdot(const uint8_t *b, const float *x) {
    if constexpr (T == GgmlType::Q8_0) {
        const __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 2))));
        const __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 18))));
        return _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(x)));
    } else {
        const __m512i q = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + (T == GgmlType::Q4_1 ? 4 : 2))));
        __m512i lo = _mm512_and_si512(q, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(q, 4);
        if constexpr (T == GgmlType::Q4_0) {
            lo = _mm512_sub_epi32(lo, _mm512_set1_epi32(8));
            hi = _mm512_sub_epi32(hi, _mm512_set1_epi32(8));
        }
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_loadu_ps(x + 16),
                               _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(x)));
    }
}

template <GgmlType T>
inline void block_acc(const uint8_t *b, const float *x, const float *xbsum, __m512 &acc, __m128 &accm) {
    const __m128 dm = block_scales<T>(b);
    acc = _mm512_fmadd_ps(_mm512_broadcastss_ps(dm), block_qdot<T>(b, x), acc);
    if constexpr (T == GgmlType::Q4_1) accm = _mm_fmadd_ps(dm, _mm_broadcast_ss(xbsum), accm);   // lane 1: m * sum x
}

template <GgmlType T>
inline float row_dot_avx512(const uint8_t *w, const float *x, const float *xbsum, int64_t nb) {
    constexpr int BYTES = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : 34;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m128 accm0 = _mm_setzero_ps(), accm1 = _mm_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        // Weights come from DRAM once per token: prefetch well ahead (rows
        // are contiguous, so this runs into the next rows), the hardware
        // streamer alone leaves the loop latency-bound.
        _mm_prefetch(reinterpret_cast<const char *>(w + b * BYTES) + kGemvPrefetch, _MM_HINT_T0);
        block_acc<T>(w + b * BYTES, x + b * 32, xbsum + b, acc0, accm0);
        block_acc<T>(w + (b + 1) * BYTES, x + b * 32 + 32, xbsum + b + 1, acc1, accm1);
    }
    if (b < nb) block_acc<T>(w + b * BYTES, x + b * 32, xbsum + b, acc0, accm0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    if constexpr (T == GgmlType::Q4_1) s += _mm_cvtss_f32(_mm_movehdup_ps(_mm_add_ps(accm0, accm1)));
    return s;
}

bool gemv_avx512(GgmlType t, const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t n, const float *x,
                 const float *xbsum, float *y) {
    const int64_t nb = n / 32;
    switch (t) {
    case GgmlType::Q4_0:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_avx512<GgmlType::Q4_0>(w + r * row_bytes, x, xbsum, nb);
        return true;
    case GgmlType::Q4_1:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_avx512<GgmlType::Q4_1>(w + r * row_bytes, x, xbsum, nb);
        return true;
    case GgmlType::Q8_0:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_avx512<GgmlType::Q8_0>(w + r * row_bytes, x, xbsum, nb);
        return true;
    default: return gemv(t, w, row_bytes, n_rows, n, x, xbsum, y);
    }
}

lctx::cpu::KernelTable make_table_avx512() {
    lctx::cpu::KernelTable k = kTable;
    k.gemv = gemv_avx512;
    k.gemm_i8 = gemm_i8_avx2;
    k.quantize_i8 = quantize_act_row_avx2;
    k.gemv_i8 = gemv_i8_avx2;
    if (lctx::cpu::cpu_has_avx512_bf16()) {
        k.attn_partial_bf16 = attn_partial_tiled_bf16;
        k.gemm_bf16 = gemm_bf16;
        k.to_bf16_words = to_bf16_words;
        k.topk_item_screened = topk_item_screened;
        if (lctx::cpu::cpu_has_amx_bf16()) {
            k.topk_item_screened_amx = topk_item_screened_amx;
            k.amx_pack_tokens = amx_pack_tokens;
            k.amx_pack_weights = amx_pack_weights;
            k.gemm_amx = gemm_amx;
        }
    }
    return k;
}

} // namespace
