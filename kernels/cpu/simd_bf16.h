// The bf16 kernels (opt-in, lossy; docs/bf16.md): the GEMM micro-kernel
// (end of this file) and the tiled attention kernel (simd_attn_tiled.h)
// with its dot products in bf16. Attention: q, k, v and the block's probabilities are rounded to bf16 (nearest
// even) and multiplied pairwise by VDPBF16PS, which accumulates in f32 and
// does twice the multiply-adds of an f32 FMA per instruction. The softmax
// (max, exp, sums, rescaling) stays f32 and is the same code as the f32
// kernel's. AttentionArgs::bf16.
//
// Included by kernels_avx512.cpp only (it uses that file's V); the functions
// that execute bf16 instructions carry their own target attribute and run
// only where cpuid reports AVX512_BF16 (make_table_avx512 checks it).
//
// Layouts, as 32-bit words of two bf16 (low half first):
//   q2[r][dp]      = (q[2dp], q[2dp+1]) of row r           (ldq2 words a row)
//   kt2[dp][j]     = (k_j[2dp], k_j[2dp+1]): keys transposed by pair
//   v2[jp][d]      = (v_{2jp}[d], v_{2jp+1}[d]): values interleaved by key pair
//   pb[rr][jp]     = (p[2jp], p[2jp+1]) of a row's probabilities
// so one VDPBF16PS of a broadcast q2 (or pb) word and a vector of kt2 (or v2)
// words adds two products to each of 16 keys' scores (16 head dims' outputs).
#pragma once

#define LCTX_TARGET_BF16 __attribute__((target("avx512bf16")))

namespace {

constexpr int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Words of one bf16 row of n floats (pairs, padded to whole vectors).
constexpr int64_t bf16_row_words(int64_t n) { return round16((n + 1) / 2); }

// y[0..n_pad) = x[0..n) rounded to bf16, zeros past n; n_pad a multiple of 16.
LCTX_TARGET_BF16 inline void to_bf16_row(const float *x, int64_t n, uint16_t *y, int64_t n_pad) {
    for (int64_t i = 0; i < n_pad; i += 16) {
        const int64_t left = n - i;
        const __mmask16 mk = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, x + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), reinterpret_cast<const __m256i &>(h));
    }
}

inline __m512bh as_bh(__m512i x) { return reinterpret_cast<const __m512bh &>(x); }

// st[rr][0..KB) = scale * q_rr . k_j from the pair-transposed keys.
template <int R>
LCTX_TARGET_BF16 inline void tile_scores_bf16(const uint32_t *const *q2, const uint32_t *kt2, int64_t n_pairs,
                                              float scale, float *st) {
    static_assert(KB == 4 * 16, "one score tile of 4 vectors covers the key block");
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 acc[R][4];
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr) acc[rr][0] = acc[rr][1] = acc[rr][2] = acc[rr][3] = _mm512_setzero_ps();
    for (int64_t dp = 0; dp < n_pairs; ++dp) {
        const uint32_t *kd = kt2 + dp * KB;
        const __m512bh k0 = as_bh(_mm512_load_si512(kd)), k1 = as_bh(_mm512_load_si512(kd + 16)),
                       k2 = as_bh(_mm512_load_si512(kd + 32)), k3 = as_bh(_mm512_load_si512(kd + 48));
#pragma GCC unroll 8
        for (int rr = 0; rr < R; ++rr) {
            const __m512bh qb = as_bh(_mm512_set1_epi32(static_cast<int>(q2[rr][dp])));
            acc[rr][0] = _mm512_dpbf16_ps(acc[rr][0], qb, k0);
            acc[rr][1] = _mm512_dpbf16_ps(acc[rr][1], qb, k1);
            acc[rr][2] = _mm512_dpbf16_ps(acc[rr][2], qb, k2);
            acc[rr][3] = _mm512_dpbf16_ps(acc[rr][3], qb, k3);
        }
    }
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(st + rr * KB + c * 16, _mm512_mul_ps(acc[rr][c], vs));
}

// o_rr[d] = o_rr[d] * fac[rr] + sum_j p_rr[j] * v_j[d] over the head dims
// [d0, d0 + n), n <= CJ, from n_kp key pairs.
template <int R>
LCTX_TARGET_BF16 inline void tile_pv_bf16(float *const *o, const float *fac, const uint32_t *pb, const uint32_t *v2,
                                          int64_t ldv2, int64_t n_kp, int d0, int n) {
    constexpr int64_t PW = KB / 2;   // words of a row's probabilities
    const int nv = (n + 15) / 16;
    int cnt[4];
    for (int c = 0; c < 4; ++c) cnt[c] = c < nv ? (n - c * 16 < 16 ? n - c * 16 : 16) : 0;
    __m512 acc[R][4];
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr) {
        const __m512 f = _mm512_set1_ps(fac[rr]);
        for (int c = 0; c < 4; ++c) acc[rr][c] = cnt[c] > 0 ? _mm512_mul_ps(load_part(o[rr] + d0 + c * 16, cnt[c]), f)
                                                            : _mm512_setzero_ps();
    }
    if (nv == 4) {
        for (int64_t jp = 0; jp < n_kp; ++jp) {
            const uint32_t *vj = v2 + jp * ldv2 + d0;
            const __m512bh v0 = as_bh(_mm512_load_si512(vj)), v1 = as_bh(_mm512_load_si512(vj + 16)),
                           v2b = as_bh(_mm512_load_si512(vj + 32)), v3 = as_bh(_mm512_load_si512(vj + 48));
#pragma GCC unroll 8
            for (int rr = 0; rr < R; ++rr) {
                const __m512bh p = as_bh(_mm512_set1_epi32(static_cast<int>(pb[rr * PW + jp])));
                acc[rr][0] = _mm512_dpbf16_ps(acc[rr][0], p, v0);
                acc[rr][1] = _mm512_dpbf16_ps(acc[rr][1], p, v1);
                acc[rr][2] = _mm512_dpbf16_ps(acc[rr][2], p, v2b);
                acc[rr][3] = _mm512_dpbf16_ps(acc[rr][3], p, v3);
            }
        }
    } else {   // head-dim tail: the padded words of v2 are zero, so whole vectors are read
        for (int64_t jp = 0; jp < n_kp; ++jp) {
            const uint32_t *vj = v2 + jp * ldv2 + d0;
            for (int c = 0; c < nv; ++c) {
                const __m512bh vv = as_bh(_mm512_load_si512(vj + c * 16));
#pragma GCC unroll 8
                for (int rr = 0; rr < R; ++rr)
                    acc[rr][c] = _mm512_dpbf16_ps(acc[rr][c], as_bh(_mm512_set1_epi32(static_cast<int>(pb[rr * PW + jp]))), vv);
            }
        }
    }
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr)
        for (int c = 0; c < 4; ++c)
            if (cnt[c] > 0) store_part(o[rr] + d0 + c * 16, acc[rr][c], cnt[c]);
}

// The converted operands of one call (all 64-byte aligned words).
struct Bf16Block {
    uint32_t *kt2;   // [pair words of a key row][KB]
    uint32_t *v2;    // [KB / 2][ldv2]
    uint32_t *kb;    // [KB][ldk2]: the block's keys as bf16 rows, before the transpose
    uint32_t *pb;    // [RT][KB / 2]
    uint32_t *q2;    // [rows][ldk2]
    float *st;       // [RT][KB]
    int64_t ldk2, ldv2, n_pairs;
};

// Rows [r0, r0 + R) against one converted key block.
template <int R>
LCTX_TARGET_BF16 void attn_tile_bf16(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t r0, int64_t jb,
                                     int64_t nb, int32_t pmin, int32_t pmax, const Bf16Block &b, float *o, float *m,
                                     float *l) {
    const int hd = a.head_dim;
    const uint32_t *q[R];
    float *orow[R];
    float fac[R];
    for (int rr = 0; rr < R; ++rr) {
        q[rr] = b.q2 + (r0 + rr) * b.ldk2;
        orow[rr] = o + (r0 + rr) * hd;
    }
    tile_scores_bf16<R>(q, b.kt2, b.n_pairs, scale, b.st);
    if (!tile_softmax<R>(a, g, i0, r0, jb, nb, KB, pmin, pmax, m, l, b.st, fac)) return;
    for (int rr = 0; rr < R; ++rr) to_bf16_row(b.st + rr * KB, KB, reinterpret_cast<uint16_t *>(b.pb + rr * (KB / 2)), KB);
    const int64_t n_kp = (nb + 1) / 2;
    for (int d0 = 0; d0 < hd; d0 += CJ) tile_pv_bf16<R>(orow, fac, b.pb, b.v2, b.ldv2, n_kp, d0, hd - d0 < CJ ? hd - d0 : CJ);
}

// Keys [jb, jb + nb) of one head into kt2 (via bf16 rows in kb) and their
// values into v2; missing keys and padding are zeros.
LCTX_TARGET_BF16 void convert_kv_block_bf16(const float *kg, const float *vg, int64_t ld, int64_t jb, int64_t nb, int hd,
                                            const Bf16Block &b) {
    for (int64_t j = 0; j < KB; ++j) {
        uint16_t *row = reinterpret_cast<uint16_t *>(b.kb + j * b.ldk2);
        if (j < nb) to_bf16_row(kg + (jb + j) * ld, hd, row, 2 * b.ldk2);
        else std::memset(row, 0, sizeof(uint32_t) * static_cast<size_t>(b.ldk2));
    }
    for (int64_t j = 0; j < KB; j += 16)   // 16 x 16 word transposes (the float transpose moves the bits)
        for (int64_t dp = 0; dp < b.ldk2; dp += 16)
            V::transpose(reinterpret_cast<const float *>(b.kb + j * b.ldk2 + dp), b.ldk2,
                         reinterpret_cast<float *>(b.kt2 + dp * KB + j), KB);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int64_t jp = 0; jp < KB / 2; ++jp) {
        const int64_t j = 2 * jp;
        const float *v0 = j < nb ? vg + (jb + j) * ld : nullptr, *v1 = j + 1 < nb ? vg + (jb + j + 1) * ld : nullptr;
        for (int64_t d = 0; d < b.ldv2; d += 16) {
            const int64_t left = hd - d;
            const __mmask16 mk = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
            const __m512 x0 = v0 ? _mm512_maskz_loadu_ps(mk, v0 + d) : _mm512_setzero_ps();
            const __m512 x1 = v1 ? _mm512_maskz_loadu_ps(mk, v1 + d) : _mm512_setzero_ps();
            const __m256bh h0 = _mm512_cvtneps_pbh(x0), h1 = _mm512_cvtneps_pbh(x1);
            const __m512i w0 = _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i &>(h0));
            const __m512i w1 = _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i &>(h1));
            _mm512_store_si512(b.v2 + jp * b.ldv2 + d, _mm512_or_si512(_mm512_and_si512(w0, lo16), _mm512_slli_epi32(w1, 16)));
        }
    }
}

// Same contract as attn_partial (see simd.h), f32 K/V; scratch:
// attn_scratch_floats (which counts this kernel's buffers).
LCTX_TARGET_BF16 void attn_partial_tiled_bf16(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1,
                                              int64_t j0, int64_t j1, float *o, float *m, float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    const float *kg = a.k + g * a.kv_head_stride, *vg = a.v + g * a.kv_head_stride;
    const int64_t rows = (i1 - i0) * ng;
    Bf16Block b;
    b.ldk2 = bf16_row_words(hd);
    b.ldv2 = round16(hd);
    b.n_pairs = (hd + 1) / 2;
    uint32_t *w = align64<uint32_t>(scratch);
    b.kt2 = w;
    b.v2 = b.kt2 + b.ldk2 * KB;
    b.kb = b.v2 + (KB / 2) * b.ldv2;
    b.pb = b.kb + KB * b.ldk2;
    b.st = reinterpret_cast<float *>(b.pb + RT * (KB / 2));
    b.q2 = reinterpret_cast<uint32_t *>(b.st + RT * KB);
    for (int64_t r = 0; r < rows; ++r) {
        const float *qr = a.q + (i0 + r / ng) * a.ldq + static_cast<int64_t>(g * ng + r % ng) * hd;
        to_bf16_row(qr, hd, reinterpret_cast<uint16_t *>(b.q2 + r * b.ldk2), 2 * b.ldk2);
    }
    for_visible_key_blocks(a, g, i0, i1, j0, j1, o, m, l, [&](int64_t jb, int64_t nb, int32_t pmin, int32_t pmax) {
        convert_kv_block_bf16(kg, vg, a.ld_kv, jb, nb, hd, b);
        for_row_tiles(rows, [&]<int R>(int64_t r0) { attn_tile_bf16<R>(a, scale, g, i0, r0, jb, nb, pmin, pmax, b, o, m, l); });
    });
}

// ---- GEMM ------------------------------------------------------------------

LCTX_TARGET_BF16 void to_bf16_words(const float *x, int64_t n, uint32_t *dst, int64_t n_words) {
    to_bf16_row(x, n, reinterpret_cast<uint16_t *>(dst), 2 * n_words);
}

// gemm (simd_impl.h) with VDPBF16PS: each panel word holds two weights of a
// row (k = 2kp, 2kp + 1), each token word the same two activations, so one
// instruction adds both products to each of 16 rows.
LCTX_TARGET_BF16 void gemm_bf16(const uint32_t *panel2, const uint32_t *xp2, int64_t kpc, int n_tok, float *y,
                                int64_t ldy, int rows, bool accumulate) {
    static_assert(MV == 4 && W == 16, "the AVX-512 GEMM tile: 4 vectors of 16 rows");
    __m512 c[NR][MV];
#pragma GCC unroll 32
    for (int t = 0; t < NR; ++t)
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) c[t][v] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kpc; ++kp) {
        __m512bh a[MV];
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) a[v] = as_bh(_mm512_load_si512(panel2 + kp * MR + v * W));
        const uint32_t *xk = xp2 + kp * NR;
#pragma GCC unroll 32
        for (int t = 0; t < NR; ++t) {
            const __m512bh b = as_bh(_mm512_set1_epi32(static_cast<int>(xk[t])));
#pragma GCC unroll 4
            for (int v = 0; v < MV; ++v) c[t][v] = _mm512_dpbf16_ps(c[t][v], a[v], b);
        }
    }
    store_gemm_tile(c, n_tok, y, ldy, rows, accumulate);
}

} // namespace
