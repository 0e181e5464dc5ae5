// The SIMD kernels, written once over a vector type V and included by
// kernels_scalar.cpp, kernels_avx2.cpp and kernels_avx512.cpp, each of which
// defines V (lanes V::W, float vector V::F, int32 vector V::I) and is compiled
// for its ISA. Everything here has internal linkage so the ISA-specific
// copies never merge at link time. No std templates are instantiated here for
// the same reason (an AVX-512 copy of a shared inline could be picked).
//
// Block layouts (ggml): Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]},
// Q8_0 {f16 d; i8 qs[32]}: element j < 16 is the low nibble of qs[j], element
// j + 16 the high nibble. Q5_0 {f16 d; u32 qh; u8 qs[16]} and Q5_1 {f16 d, m;
// u32 qh; u8 qs[16]}: nibbles as Q4_0/Q4_1, bit j of qh is element j's fifth
// bit (Q5_0 subtracts 16). Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]},
// Q5_K (Q4_K with u8 qh[32] before qs),
// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 256 elements each.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "simd.h"

namespace {

using lctx::GgmlType;
using lctx::cpu::AttentionArgs;
using lctx::cpu::TopkPending;
using lctx::cpu::TopkScreenItem;
using lctx::cpu::TopkScreenRows;
using lctx::cpu::TopkScreenScratch;
using lctx::cpu::kTopkPendingCap;
using lctx::cpu::kTopkScreenMaxAbs;
using lctx::cpu::key_visible;
using lctx::cpu::softcap_score;
using lctx::cpu::kAttnKeyBlock;

inline uint16_t rd16(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
inline float fmaxf_(float a, float b) { return a > b ? a : b; }
inline float fminf_(float a, float b) { return a < b ? a : b; }
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

using F = V::F;
using I = V::I;
constexpr int W = V::W;

// ---- dequantization of one block -------------------------------------------

inline void deq_q4_0(const uint8_t *b, float *y) {
    const F d = V::set1(V::h2f(rd16(b)));
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j += W) {
        const I q = V::u8(qs + j);
        V::store(y + j, V::mul(V::cvt(V::subi(V::andi(q, 15), 8)), d));
        V::store(y + 16 + j, V::mul(V::cvt(V::subi(V::template srl<4>(q), 8)), d));
    }
}

inline void deq_q4_1(const uint8_t *b, float *y) {
    const F d = V::set1(V::h2f(rd16(b))), m = V::set1(V::h2f(rd16(b + 2)));
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j += W) {
        const I q = V::u8(qs + j);
        V::store(y + j, V::fmadd(V::cvt(V::andi(q, 15)), d, m));
        V::store(y + 16 + j, V::fmadd(V::cvt(V::template srl<4>(q)), d, m));
    }
}

// The fifth bits of a Q5 block as 32 bytes, 16 where the bit is set: byte j
// for element j. One table lookup per 8 bits (bit i -> byte i, little-endian).
struct Q5HighBits {
    uint64_t spread[256];
    constexpr Q5HighBits() : spread() {
        for (int b = 0; b < 256; ++b)
            for (int i = 0; i < 8; ++i)
                if ((b >> i) & 1) spread[b] |= uint64_t{16} << (8 * i);
    }
};
constexpr Q5HighBits kQ5HighBits{};

inline void q5_high_bytes(const uint8_t *qh, uint8_t *out /* 32 */) {
    for (int k = 0; k < 4; ++k) std::memcpy(out + 8 * k, &kQ5HighBits.spread[qh[k]], 8);
}

// The 32 quants of a Q5_0 (Q5_1) block, W at a time: lo = elements j.., hi =
// elements 16 + j.. (Q5_0 centred: minus 16).
template <bool Centred>
inline void q5_quants(const uint8_t *qs, const uint8_t *high, int j, I &lo, I &hi) {
    const I q = V::u8(qs + j);
    lo = V::ori(V::andi(q, 15), V::u8(high + j));
    hi = V::ori(V::template srl<4>(q), V::u8(high + 16 + j));
    if constexpr (Centred) {
        lo = V::subi(lo, 16);
        hi = V::subi(hi, 16);
    }
}

inline void deq_q5_0(const uint8_t *b, float *y) {
    const F d = V::set1(V::h2f(rd16(b)));
    uint8_t high[32];
    q5_high_bytes(b + 2, high);
    for (int j = 0; j < 16; j += W) {
        I lo, hi;
        q5_quants<true>(b + 6, high, j, lo, hi);
        V::store(y + j, V::mul(V::cvt(lo), d));
        V::store(y + 16 + j, V::mul(V::cvt(hi), d));
    }
}

inline void deq_q5_1(const uint8_t *b, float *y) {
    const F d = V::set1(V::h2f(rd16(b))), m = V::set1(V::h2f(rd16(b + 2)));
    uint8_t high[32];
    q5_high_bytes(b + 4, high);
    for (int j = 0; j < 16; j += W) {
        I lo, hi;
        q5_quants<false>(b + 8, high, j, lo, hi);
        V::store(y + j, V::fmadd(V::cvt(lo), d, m));
        V::store(y + 16 + j, V::fmadd(V::cvt(hi), d, m));
    }
}

inline void deq_q8_0(const uint8_t *b, float *y) {
    const F d = V::set1(V::h2f(rd16(b)));
    const int8_t *qs = reinterpret_cast<const int8_t *>(b + 2);
    for (int j = 0; j < 32; j += W) V::store(y + j, V::mul(V::cvt(V::i8(qs + j)), d));
}

inline void scale_min_k4(int j, const uint8_t *q, int &sc, int &mn) {
    if (j < 4) {
        sc = q[j] & 63;
        mn = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

inline void deq_q4_k(const uint8_t *b, float *y) {
    const float d = V::h2f(rd16(b)), dmin = V::h2f(rd16(b + 2));
    const uint8_t *scales = b + 4, *qs = b + 16;
    for (int j = 0; j < 4; ++j, qs += 32, y += 64) {
        int sc, mn;
        scale_min_k4(2 * j, scales, sc, mn);
        const F d1 = V::set1(d * sc), m1 = V::set1(-(dmin * mn));
        scale_min_k4(2 * j + 1, scales, sc, mn);
        const F d2 = V::set1(d * sc), m2 = V::set1(-(dmin * mn));
        for (int l = 0; l < 32; l += W) {
            const I q = V::u8(qs + l);
            V::store(y + l, V::fmadd(V::cvt(V::andi(q, 15)), d1, m1));
            V::store(y + 32 + l, V::fmadd(V::cvt(V::template srl<4>(q)), d2, m2));
        }
    }
}

// Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K, and bit
// g of qh[l] is the fifth bit of element l of group g (32 elements a group).
inline void deq_q5_k(const uint8_t *b, float *y) {
    const float d = V::h2f(rd16(b)), dmin = V::h2f(rd16(b + 2));
    const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
    F dg[8], mg[8];
    for (int g = 0; g < 8; ++g) {
        int sc, mn;
        scale_min_k4(g, scales, sc, mn);
        dg[g] = V::set1(d * sc);
        mg[g] = V::set1(-(dmin * mn));
    }
    for (int l = 0; l < 32; l += W) {
        I h = V::u8(qh + l);   // shifted right by 2 per group pair
        for (int j = 0; j < 4; ++j, h = V::template srl<2>(h)) {
            const I q = V::u8(qs + 32 * j + l);
            const I lo = V::ori(V::andi(q, 15), V::template sll<4>(V::andi(h, 1)));
            const I hi = V::ori(V::template srl<4>(q), V::template sll<4>(V::andi(V::template srl<1>(h), 1)));
            V::store(y + 64 * j + l, V::fmadd(V::cvt(lo), dg[2 * j], mg[2 * j]));
            V::store(y + 64 * j + 32 + l, V::fmadd(V::cvt(hi), dg[2 * j + 1], mg[2 * j + 1]));
        }
    }
}

inline void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192);
    const float d = V::h2f(rd16(b + 208));
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; l += W) {
            const int is = l / 16;
            const I a = V::u8(ql + l), c = V::u8(ql + l + 32), h = V::u8(qh + l);
            const I q1 = V::subi(V::ori(V::andi(a, 15), V::template sll<4>(V::andi(h, 3))), 32);
            const I q2 = V::subi(V::ori(V::andi(c, 15), V::template sll<4>(V::andi(V::template srl<2>(h), 3))), 32);
            const I q3 = V::subi(V::ori(V::template srl<4>(a), V::template sll<4>(V::andi(V::template srl<4>(h), 3))), 32);
            const I q4 = V::subi(V::ori(V::template srl<4>(c), V::template sll<4>(V::template srl<6>(h))), 32);
            V::store(y + l, V::mul(V::set1(d * sc[is]), V::cvt(q1)));
            V::store(y + l + 32, V::mul(V::set1(d * sc[is + 2]), V::cvt(q2)));
            V::store(y + l + 64, V::mul(V::set1(d * sc[is + 4]), V::cvt(q3)));
            V::store(y + l + 96, V::mul(V::set1(d * sc[is + 6]), V::cvt(q4)));
        }
    }
}

template <void (*Deq)(const uint8_t *, float *), int QK, int BYTES>
inline void deq_blocks(const uint8_t *src, float *dst, int64_t n) {
    for (int64_t b = 0; b < n / QK; ++b) Deq(src + b * BYTES, dst + b * QK);
}

bool dequant_row(GgmlType t, const uint8_t *src, float *dst, int64_t n) {
    switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return true;
    case GgmlType::F16: {
        const uint16_t *h = reinterpret_cast<const uint16_t *>(src);
        int64_t i = 0;
        for (; i + W <= n; i += W) V::store(dst + i, V::f16(h + i));
        for (; i < n; ++i) dst[i] = V::h2f(h[i]);
        return true;
    }
    case GgmlType::Q4_0: deq_blocks<deq_q4_0, 32, 18>(src, dst, n); return true;
    case GgmlType::Q4_1: deq_blocks<deq_q4_1, 32, 20>(src, dst, n); return true;
    case GgmlType::Q5_0: deq_blocks<deq_q5_0, 32, 22>(src, dst, n); return true;
    case GgmlType::Q5_1: deq_blocks<deq_q5_1, 32, 24>(src, dst, n); return true;
    case GgmlType::Q8_0: deq_blocks<deq_q8_0, 32, 34>(src, dst, n); return true;
    case GgmlType::Q4_K: deq_blocks<deq_q4_k, 256, 144>(src, dst, n); return true;
    case GgmlType::Q5_K: deq_blocks<deq_q5_k, 256, 176>(src, dst, n); return true;
    case GgmlType::Q6_K: deq_blocks<deq_q6_k, 256, 210>(src, dst, n); return true;
    default: return false;
    }
}

// ---- dot products ------------------------------------------------------------

// Loads of f32 or f16 (IEEE half, widened exactly) elements, so that one
// template reads either KV storage: an f16 row gives the same floats as its
// widened f32 copy, and the same summation order gives the same result.
inline F load_elems(const float *p) { return V::load(p); }
inline F load_elems(const uint16_t *p) { return V::f16(p); }
inline float load_elem(const float *p) { return *p; }
inline float load_elem(const uint16_t *p) { return V::h2f(*p); }
// q8 storage: the int8 codes of a row (its scale is applied by the caller).
inline F load_elems(const int8_t *p) { return V::cvt(V::i8(p)); }
inline float load_elem(const int8_t *p) { return static_cast<float>(*p); }

template <class E>
inline float dot_elems(const float *a, const E *b, int64_t n) {
    F s0 = V::zero(), s1 = V::zero();
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        s0 = V::fmadd(V::load(a + i), load_elems(b + i), s0);
        s1 = V::fmadd(V::load(a + i + W), load_elems(b + i + W), s1);
    }
    for (; i + W <= n; i += W) s0 = V::fmadd(V::load(a + i), load_elems(b + i), s0);
    float s = V::hsum(V::add(s0, s1));
    for (; i < n; ++i) s = __builtin_fmaf(a[i], load_elem(b + i), s);
    return s;
}

float dot(const float *a, const float *b, int64_t n) { return dot_elems(a, b, n); }

// Fused dequantize + dot for one row of the 32-element block types: the dot
// of one block in f32 lanes, scaled by its d; two blocks per iteration into
// separate accumulators so the FMA latency does not limit bandwidth.
template <GgmlType T>
inline F block_dot_q32(const uint8_t *blk, const float *xb) {
    F s = V::zero();
    if constexpr (T == GgmlType::Q8_0) {
        const int8_t *qs = reinterpret_cast<const int8_t *>(blk + 2);
        for (int j = 0; j < 32; j += W) s = V::fmadd(V::cvt(V::i8(qs + j)), V::load(xb + j), s);
    } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
        constexpr int QH = T == GgmlType::Q5_0 ? 2 : 4;
        uint8_t high[32];
        q5_high_bytes(blk + QH, high);
        for (int j = 0; j < 16; j += W) {
            I lo, hi;
            q5_quants<T == GgmlType::Q5_0>(blk + QH + 4, high, j, lo, hi);
            s = V::fmadd(V::cvt(lo), V::load(xb + j), s);
            s = V::fmadd(V::cvt(hi), V::load(xb + 16 + j), s);
        }
    } else {
        const uint8_t *qs = blk + (T == GgmlType::Q4_1 ? 4 : 2);
        for (int j = 0; j < 16; j += W) {
            const I q = V::u8(qs + j);
            I lo = V::andi(q, 15), hi = V::template srl<4>(q);
            if constexpr (T == GgmlType::Q4_0) {
                lo = V::subi(lo, 8);
                hi = V::subi(hi, 8);
            }
            s = V::fmadd(V::cvt(lo), V::load(xb + j), s);
            s = V::fmadd(V::cvt(hi), V::load(xb + 16 + j), s);
        }
    }
    return s;
}

template <GgmlType T>
inline float row_dot_q32(const uint8_t *w, const float *x, const float *xbsum, int64_t n) {
    constexpr int BYTES = T == GgmlType::Q4_0 ? 18 : T == GgmlType::Q4_1 ? 20 : T == GgmlType::Q5_0 ? 22
                        : T == GgmlType::Q5_1 ? 24 : 34;
    constexpr bool has_min = T == GgmlType::Q4_1 || T == GgmlType::Q5_1;   // d * q + m: m * sum(x of the block)
    F acc0 = V::zero(), acc1 = V::zero();
    float m0 = 0.0f, m1 = 0.0f;
    const int64_t nb = n / 32;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *b0 = w + b * BYTES, *b1 = b0 + BYTES;
        __builtin_prefetch(b0 + 2048);   // weights stream from DRAM: see gemv_avx512.h
        acc0 = V::fmadd(V::set1(V::h2f(rd16(b0))), block_dot_q32<T>(b0, x + b * 32), acc0);
        acc1 = V::fmadd(V::set1(V::h2f(rd16(b1))), block_dot_q32<T>(b1, x + b * 32 + 32), acc1);
        if constexpr (has_min) {
            m0 += V::h2f(rd16(b0 + 2)) * xbsum[b];
            m1 += V::h2f(rd16(b1 + 2)) * xbsum[b + 1];
        }
    }
    if (b < nb) {
        const uint8_t *b0 = w + b * BYTES;
        acc0 = V::fmadd(V::set1(V::h2f(rd16(b0))), block_dot_q32<T>(b0, x + b * 32), acc0);
        if constexpr (has_min) m0 += V::h2f(rd16(b0 + 2)) * xbsum[b];
    }
    return V::hsum(V::add(acc0, acc1)) + (m0 + m1);
}

inline float row_dot_f16(const uint8_t *w, const float *x, int64_t n) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(w);
    F s0 = V::zero(), s1 = V::zero();
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        s0 = V::fmadd(V::f16(h + i), V::load(x + i), s0);
        s1 = V::fmadd(V::f16(h + i + W), V::load(x + i + W), s1);
    }
    float s = V::hsum(V::add(s0, s1));
    for (; i < n; ++i) s += V::h2f(h[i]) * x[i];
    return s;
}

bool gemv(GgmlType t, const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t n, const float *x,
          const float *xbsum, float *y) {
    switch (t) {
    case GgmlType::F32:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = dot(reinterpret_cast<const float *>(w + r * row_bytes), x, n);
        return true;
    case GgmlType::F16:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_f16(w + r * row_bytes, x, n);
        return true;
    case GgmlType::Q4_0:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_q32<GgmlType::Q4_0>(w + r * row_bytes, x, xbsum, n);
        return true;
    case GgmlType::Q4_1:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_q32<GgmlType::Q4_1>(w + r * row_bytes, x, xbsum, n);
        return true;
    case GgmlType::Q5_0:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_q32<GgmlType::Q5_0>(w + r * row_bytes, x, xbsum, n);
        return true;
    case GgmlType::Q5_1:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_q32<GgmlType::Q5_1>(w + r * row_bytes, x, xbsum, n);
        return true;
    case GgmlType::Q8_0:
        for (int64_t r = 0; r < n_rows; ++r) y[r] = row_dot_q32<GgmlType::Q8_0>(w + r * row_bytes, x, xbsum, n);
        return true;
    default: return false;
    }
}

// ---- GEMM micro-kernel -------------------------------------------------------
// MR = MV vectors of weight rows (packed panel[k * MR + r]) times NR tokens
// (packed xp[k * NR + t]): MV * NR accumulators stay in registers; per k, MV
// vector loads and NR broadcasts feed MV * NR FMAs.
constexpr int MV = V::MV;
constexpr int MR = MV * W;
constexpr int NR = V::NR;

// The GEMM tile's epilogue: y[t * ldy + r] (+)= c[t][r / W][r % W] for
// t < n_tok, r < rows (the f32 and bf16 micro-kernels share it).
inline void store_gemm_tile(F (&c)[NR][MV], int n_tok, float *y, int64_t ldy, int rows, bool accumulate) {
#pragma GCC unroll 32
    for (int t = 0; t < NR; ++t) {
        if (t >= n_tok) break;
        float *yt = y + t * ldy;
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) {
            const int n = rows - v * W;
            if (n <= 0) break;
            if (n >= W) {
                if (accumulate) c[t][v] = V::add(c[t][v], V::load(yt + v * W));
                V::store(yt + v * W, c[t][v]);
            } else {
                if (accumulate) c[t][v] = V::add(c[t][v], V::load_n(yt + v * W, n));
                V::store_n(yt + v * W, c[t][v], n);
            }
        }
    }
}

void gemm(const float *panel, const float *xp, int64_t kc, int n_tok, float *y, int64_t ldy, int rows,
          bool accumulate) {
    F c[NR][MV];
#pragma GCC unroll 32
    for (int t = 0; t < NR; ++t)
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) c[t][v] = V::zero();
    for (int64_t k = 0; k < kc; ++k) {
        F a[MV];
#pragma GCC unroll 4
        for (int v = 0; v < MV; ++v) a[v] = V::load(panel + k * MR + v * W);
        const float *xk = xp + k * NR;
#pragma GCC unroll 32
        for (int t = 0; t < NR; ++t) {
            const F b = V::set1(xk[t]);
#pragma GCC unroll 4
            for (int v = 0; v < MV; ++v) c[t][v] = V::fmadd(a[v], b, c[t][v]);
        }
    }
    store_gemm_tile(c, n_tok, y, ldy, rows, accumulate);
}

void transpose(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd) {
    int64_t r = 0;
    for (; r + W <= rows; r += W) {
        int64_t c = 0;
        for (; c + W <= cols; c += W) V::transpose(src + r * lds + c, lds, dst + c * ldd + r, ldd);
        for (; c < cols; ++c)
            for (int64_t rr = r; rr < r + W; ++rr) dst[c * ldd + rr] = src[rr * lds + c];
    }
    for (; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
}

// ---- norms and activations ---------------------------------------------------

void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    F s0 = V::zero(), s1 = V::zero();
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
        const F a = V::load(x + i), b = V::load(x + i + W);
        s0 = V::fmadd(a, a, s0);
        s1 = V::fmadd(b, b, s1);
    }
    for (; i + W <= n; i += W) {
        const F a = V::load(x + i);
        s0 = V::fmadd(a, a, s0);
    }
    double ss = V::hsum(V::add(s0, s1));
    for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = static_cast<float>(1.0 / __builtin_sqrt(ss / static_cast<double>(n) + eps));
    const F vinv = V::set1(inv);
    i = 0;
    if (w) {
        for (; i + W <= n; i += W) V::store(y + i, V::mul(V::mul(V::load(x + i), vinv), V::load(w + i)));
        for (; i < n; ++i) y[i] = x[i] * inv * w[i];
    } else {
        for (; i + W <= n; i += W) V::store(y + i, V::mul(V::load(x + i), vinv));
        for (; i < n; ++i) y[i] = x[i] * inv;
    }
}

void swiglu(const float *gate, const float *up, float *out, int64_t n) {
    const F one = V::set1(1.0f), zero = V::zero();
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        const F g = V::load(gate + i);
        const F silu = V::div(g, V::add(one, V::exp(V::sub(zero, g))));
        V::store(out + i, V::mul(silu, V::load(up + i)));
    }
    for (; i < n; ++i) out[i] = gate[i] / (1.0f + __builtin_expf(-gate[i])) * up[i];
}

// GELU (tanh approximation) of the gate times up, as geglu_ref computes it:
// 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y)), y = sqrt(2/pi) (x + 0.044715 x^3),
// so one exp per element (V::exp saturates: x far below 0 gives x / huge = 0).
void geglu(const float *gate, const float *up, float *out, int64_t n) {
    constexpr float kC = 0.7978845608028654f;   // sqrt(2/pi)
    const F one = V::set1(1.0f), c1 = V::set1(-2.0f * kC), c3 = V::set1(-2.0f * kC * 0.044715f);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
        const F x = V::load(gate + i);
        const F t = V::mul(x, V::fmadd(V::mul(x, x), c3, c1));   // -2y
        V::store(out + i, V::mul(V::div(x, V::add(one, V::exp(t))), V::load(up + i)));
    }
    for (; i < n; ++i) {
        const float x = gate[i];
        out[i] = x / (1.0f + __builtin_expf(x * (x * x * (-2.0f * kC * 0.044715f) + -2.0f * kC))) * up[i];
    }
}

// ---- log-softmax normalizer ------------------------------------------------------

// log(sum exp(x[i])). The lanes sum at most kBlock / W terms of at most 1
// each before their total goes into a double, so the sum of a 262K-entry
// vocabulary is as precise as its float exps (V::exp: ~1 ulp).
double log_sum_exp(const float *x, int64_t n) {
    constexpr int64_t kBlock = 1024;
    F vmx = V::set1(x[0]);
    int64_t i = 0;
    for (; i + W <= n; i += W) vmx = V::max(vmx, V::load(x + i));
    float buf[W];
    V::store(buf, vmx);
    float mx = buf[0];
    for (int j = 1; j < W; ++j) mx = buf[j] > mx ? buf[j] : mx;
    for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    const F vm = V::set1(mx);
    double sum = 0.0;
    i = 0;
    while (i + W <= n) {
        const int64_t end = std::min(n - (n - i) % W, i + kBlock);
        F acc = V::zero();
        for (; i < end; i += W) acc = V::add(acc, V::exp(V::sub(V::load(x + i), vm)));
        sum += static_cast<double>(V::hsum(acc));
    }
    for (; i < n; ++i) sum += static_cast<double>(__builtin_expf(x[i] - mx));
    return static_cast<double>(mx) + __builtin_log(sum);
}

// ---- attention -----------------------------------------------------------------

// p[j] = exp(s[j] - m) for j < nb (s = -inf gives 0); returns the sum.
inline float exp_sum(float *s, int64_t nb, float m) {
    const F vm = V::set1(m);
    F acc = V::zero();
    int64_t j = 0;
    for (; j + W <= nb; j += W) {
        const F p = V::exp(V::sub(V::load(s + j), vm));
        V::store(s + j, p);
        acc = V::add(acc, p);
    }
    float sum = V::hsum(acc);
    for (; j < nb; ++j) {
        s[j] = __builtin_expf(s[j] - m);
        sum += s[j];
    }
    return sum;
}

// o[0..hd) = o * factor + sum_j p[j] * v_j (v: f32 or f16 rows)
template <class E>
inline void acc_values(float *o, float factor, const float *p, int64_t nb, const E *v, int64_t ld, int hd) {
    int d = 0;
    const F vf = V::set1(factor);
    for (; d + 4 * W <= hd; d += 4 * W) {
        F a0 = V::mul(V::load(o + d), vf), a1 = V::mul(V::load(o + d + W), vf);
        F a2 = V::mul(V::load(o + d + 2 * W), vf), a3 = V::mul(V::load(o + d + 3 * W), vf);
        for (int64_t j = 0; j < nb; ++j) {
            if (p[j] == 0.0f) continue;
            const F pj = V::set1(p[j]);
            const E *vj = v + j * ld + d;
            a0 = V::fmadd(pj, load_elems(vj), a0);
            a1 = V::fmadd(pj, load_elems(vj + W), a1);
            a2 = V::fmadd(pj, load_elems(vj + 2 * W), a2);
            a3 = V::fmadd(pj, load_elems(vj + 3 * W), a3);
        }
        V::store(o + d, a0);
        V::store(o + d + W, a1);
        V::store(o + d + 2 * W, a2);
        V::store(o + d + 3 * W, a3);
    }
    for (; d + W <= hd; d += W) {
        F a0 = V::mul(V::load(o + d), vf);
        for (int64_t j = 0; j < nb; ++j)
            if (p[j] != 0.0f) a0 = V::fmadd(V::set1(p[j]), load_elems(v + j * ld + d), a0);
        V::store(o + d, a0);
    }
    for (; d < hd; ++d) {
        float a = o[d] * factor;
        for (int64_t j = 0; j < nb; ++j) a = __builtin_fmaf(p[j], load_elem(v + j * ld + d), a);
        o[d] = a;
    }
}

// The end of block_scores: soft-caps the visible scores, sets the hidden ones
// to -inf and returns the block maximum.
inline float mask_and_max(float *s, int64_t nb, const int32_t *kv_pos, int64_t jb, int32_t qp, int32_t window,
                          float cap, bool all_visible) {
    int64_t j = 0;
    if (all_visible && cap <= 0.0f) {   // decode's usual case: one vector max, no per-key mask
        F vm = V::set1(-INFINITY);
        for (; j + W <= nb; j += W) vm = V::max(vm, V::load(s + j));
        float mx = V::hmax(vm);
        for (; j < nb; ++j) mx = fmaxf_(mx, s[j]);
        return mx;
    }
    float mx = -INFINITY;
    for (; j < nb; ++j) {
        if (key_visible(kv_pos[jb + j], qp, window)) {
            if (cap > 0.0f) s[j] = softcap_score(s[j], cap);
            mx = fmaxf_(mx, s[j]);
        } else {
            s[j] = -INFINITY;
        }
    }
    return mx;
}

// Whether none of the W keys from slot `at` on is visible (then none is scored).
inline bool group_hidden(const int32_t *kv_pos, int64_t at, int32_t qp, int32_t window, bool all_visible) {
    bool any = all_visible;
    for (int u = 0; u < W && !any; ++u) any = key_visible(kv_pos[at + u], qp, window);
    return !any;
}

// q8 decode: software prefetch of the next 64-key block of K or V, one key's
// row at a time, issued from inside the current block's arithmetic. Decode
// reads the cache once per token from DRAM, and each block's first touch
// (the scales are gathered at its start) otherwise stalls on memory before
// any of its arithmetic: the hardware prefetcher restarts at each 4 KB page,
// about once per q8 block. Only q8: a q8 block and the next (2 x 8.7 KB of K
// and V) fit L1 together; f16's (2 x 16 KB) would evict the current block
// and measured slower (docs/kv-storage.md, "Decode reads the cache from DRAM").
struct NextBlockPrefetch {
    const char *row0 = nullptr;   // the next block's first row; null: nothing to prefetch
    int64_t ld_bytes = 0, row_bytes = 0;
    void key(int64_t j) const {   // j < 64, the current block's key
        if (!row0) return;
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row0 + j * ld_bytes + b);
    }
};

// s[j] = q . k_j (soft-capped with cap > 0) for visible keys, -inf
// otherwise; returns the block maximum. k: f32, f16 or q8 rows (q8: the
// codes' dot times kscale[j], the row's scale). W keys at a
// time: one accumulator per key, the W of them reduced together
// (V::reduce_rows) rather than one horizontal sum per key; a group of W keys
// none of which is visible is not computed.
template <class E>
inline float block_scores(const float *q, const E *k, int64_t ld, int64_t jb, int64_t nb, int hd,
                          const int32_t *kv_pos, int32_t qp, int32_t window, float cap, bool all_visible,
                          const float *kscale, float *s, const NextBlockPrefetch &next = {}) {
    int64_t j = 0;
    if (hd % W == 0) {
        for (; j + W <= nb; j += W) {
            if (group_hidden(kv_pos, jb + j, qp, window, all_visible)) {
                V::store(s + j, V::set1(-INFINITY));
                continue;
            }
            F acc[W];
#pragma GCC unroll 16
            for (int u = 0; u < W; ++u) {
                const E *kj = k + (jb + j + u) * ld;
                if constexpr (std::is_same_v<E, int8_t>) next.key(j + u);
                F a = V::mul(V::load(q), load_elems(kj));
                for (int d = W; d < hd; d += W) a = V::fmadd(V::load(q + d), load_elems(kj + d), a);
                acc[u] = a;
            }
            const F dots = V::reduce_rows(acc);
            V::store(s + j, kscale ? V::mul(dots, V::load(kscale + j)) : dots);
        }
    }
    for (; j < nb; ++j) s[j] = dot_elems(q, k + (jb + j) * ld, hd) * (kscale ? kscale[j] : 1.0f);
    return mask_and_max(s, nb, kv_pos, jb, qp, window, cap, all_visible);
}

// q8 keys scored in integers (VV::kI16Dot: the SIMD variants with a 16-bit
// multiply-add): the query row, already scaled, is quantized once per work
// item to int16 (q16, scale qscale: 2^-15 of its largest magnitude, so it
// adds about 1e-5 relative error to the codes' own), the key codes are
// sign-extended to int16, and pairs of products are summed into int32 lanes,
// the W keys' lanes then reduced in int32 (exact: |sum| <= 32767 * 128 * hd
// < 2^31 for hd <= kQ8I16MaxDim), then s[j] = float(sum) * qscale *
// kscale[j]. Half the instructions per key of the f32 path (widen, convert,
// multiply-add per element); the reduction in int32 instead of one
// conversion per key and a float reduction took one layer's decode
// attention from 0.332 to 0.298 ms (8K keys, from L3, one thread).
// hd % (2W) == 0. simd_attn_q8_vnni.h computes the same sums with VNNI.
constexpr int kQ8I16MaxDim = 512;
template <class VV>
inline float block_scores_q8_i16(const int16_t *q16, float qscale, const int8_t *k, int64_t ld, int64_t jb,
                                 int64_t nb, int hd, const int32_t *kv_pos, int32_t qp, int32_t window, float cap,
                                 bool all_visible, const float *kscale, float *s,
                                 const NextBlockPrefetch &next = {}) {
    int64_t j = 0;
    const F qs = VV::set1(qscale);
    for (; j + W <= nb; j += W) {
        if (group_hidden(kv_pos, jb + j, qp, window, all_visible)) {
            VV::store(s + j, VV::set1(-INFINITY));
            continue;
        }
        typename VV::I acc[W];
#pragma GCC unroll 16
        for (int u = 0; u < W; ++u) {
            const int8_t *kj = k + (jb + j + u) * ld;
            next.key(j + u);
            typename VV::I a = VV::madd16(VV::load_i16(q16), VV::i8_to_i16(kj));
            for (int d = 2 * W; d < hd; d += 2 * W)
                a = VV::addi32(a, VV::madd16(VV::load_i16(q16 + d), VV::i8_to_i16(kj + d)));
            acc[u] = a;
        }
        VV::store(s + j, VV::mul(VV::mul(VV::cvt(VV::reduce_rows_i(acc)), qs), VV::load(kscale + j)));
    }
    for (; j < nb; ++j) {
        const int8_t *kj = k + (jb + j) * ld;
        int32_t sum = 0;
        for (int d = 0; d < hd; ++d) sum += int32_t{q16[d]} * kj[d];
        s[j] = static_cast<float>(sum) * qscale * kscale[j];
    }
    return mask_and_max(s, nb, kv_pos, jb, qp, window, cap, all_visible);
}

// q16[0..hd) = x rounded to int16 at scale 2^-15 of max |x|; returns that
// scale, or 0 when x is all zeros or not finite (then the f32 path scores it).
inline float quantize_i16(const float *x, int hd, int16_t *q16) {
    float amax = 0.0f;
    for (int d = 0; d < hd; ++d) {
        if (!(x[d] - x[d] == 0.0f)) return 0.0f;   // NaN or infinity
        amax = fmaxf_(amax, x[d] < 0.0f ? -x[d] : x[d]);
    }
    if (amax == 0.0f) return 0.0f;
    const float inv = 32767.0f / amax;
    for (int d = 0; d < hd; ++d) q16[d] = static_cast<int16_t>(fminf_(32767.0f, __builtin_nearbyintf(x[d] * inv)));
    return amax / 32767.0f;
}

// Whether every key of [jb, jb + nb) is visible to a query at qp: the
// visible positions form one interval, so the lowest and highest decide.
inline bool block_all_visible(const int32_t *kv_pos, int64_t jb, int64_t nb, int32_t qp, int32_t window) {
    int32_t lo = kv_pos[jb], hi = kv_pos[jb];
    for (int64_t j = 1; j < nb; ++j) {
        lo = kv_pos[jb + j] < lo ? kv_pos[jb + j] : lo;
        hi = kv_pos[jb + j] > hi ? kv_pos[jb + j] : hi;
    }
    return key_visible(lo, qp, window) && key_visible(hi, qp, window);
}

// acc_values for R rows sharing one block of V (the query heads of a KV
// group): o_r = o_r * factor[r] + sum_j p[r][j] * v_j, each v_j loaded (and
// widened) once for all rows, NV * W columns per pass over the block (R * NV
// accumulators and the NV value vectors in registers; acc_rows_of picks NV).
// Per row and column the same operations in the same order as acc_values.
// hd % (NV * W) == 0. checked: some key of the block may be hidden from some
// row (p = 0 there, and its value is then never read into that row);
// unchecked: every key is visible to every row, p = 0 only by underflow, and
// no test is made. next: the next block's V rows to prefetch (q8 only).
template <int R, bool checked, int NV, class E>
inline void acc_values_rows(float *o, const float *factor, const float *p, int64_t ldp, int64_t nb, const E *v,
                            int64_t ld, int hd, const NextBlockPrefetch &next) {
    for (int d = 0; d < hd; d += NV * W) {
        F acc[R][NV];
        for (int r = 0; r < R; ++r) {
            const F f = V::set1(factor[r]);
            for (int c = 0; c < NV; ++c) acc[r][c] = V::mul(V::load(o + r * hd + d + c * W), f);
        }
        for (int64_t j = 0; j < nb; ++j) {
            if constexpr (checked) {
                bool any = false;
                for (int r = 0; r < R; ++r) any |= p[r * ldp + j] != 0.0f;
                if (!any) continue;
            }
            const E *vj = v + j * ld + d;
            if constexpr (std::is_same_v<E, int8_t>)
                if (d == 0) next.key(j);
            F vv[NV];
            for (int c = 0; c < NV; ++c) vv[c] = load_elems(vj + c * W);
            for (int r = 0; r < R; ++r) {
                const float pr = p[r * ldp + j];
                if (checked && pr == 0.0f) continue;   // as acc_values: a hidden key's value is never read into a row
                const F pj = V::set1(pr);
                for (int c = 0; c < NV; ++c) acc[r][c] = V::fmadd(pj, vv[c], acc[r][c]);
            }
        }
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < NV; ++c) V::store(o + r * hd + d + c * W, acc[r][c]);
    }
}

inline void scaled_query(const AttentionArgs &a, int64_t i, int h, float scale, float *qs) {
    const float *q = a.q + i * a.ldq + static_cast<int64_t>(h) * a.head_dim;
    for (int d = 0; d < a.head_dim; ++d) qs[d] = q[d] * scale;
}

} // namespace

#include "simd_attn_tiled.h"

namespace {

// Few rows (decode: one query, the heads of a group): key-at-a-time dots,
// no transposed copy of K, reading f32 or f16 storage in place (decode is
// bound by the bytes of K/V read per token). Many rows (kAttnTiledMinRows):
// the tiled kernel, f32 only (the driver widens f16 storage for it).

// acc_values_rows for R rows, four vectors of dimensions per pass where hd
// and the registers allow (32 vector registers with AVX-512, 16 with AVX2;
// R * 4 + 4 + 1 of them live), two otherwise. Measured on one layer's decode
// attention at 8K keys from L3 (3 rows, AVX-512, one thread): four instead
// of two took f32 storage from 0.42-0.43 to 0.37 ms (q8: 0.330 -> 0.327),
// the same bits.
template <int R, bool checked, class E>
inline void acc_rows_of(float *o, const float *factor, const float *p, int64_t nb, const E *v, int64_t ld, int hd,
                        const NextBlockPrefetch &next) {
    constexpr int kRegs = W >= 16 ? 32 : 16;
    if constexpr (R * 4 + 5 <= kRegs)
        if (hd % (4 * W) == 0) return acc_values_rows<R, checked, 4>(o, factor, p, kAttnKeyBlock, nb, v, ld, hd, next);
    acc_values_rows<R, checked, 2>(o, factor, p, kAttnKeyBlock, nb, v, ld, hd, next);
}

// acc_values_rows for a run-time row count (1..7).
template <bool checked, class E>
inline void acc_rows(int64_t rows, float *o, const float *factor, const float *p, int64_t nb, const E *v, int64_t ld,
                     int hd, const NextBlockPrefetch &next) {
    switch (rows) {
    case 1: acc_rows_of<1, checked>(o, factor, p, nb, v, ld, hd, next); break;
    case 2: acc_rows_of<2, checked>(o, factor, p, nb, v, ld, hd, next); break;
    case 3: acc_rows_of<3, checked>(o, factor, p, nb, v, ld, hd, next); break;
    case 4: acc_rows_of<4, checked>(o, factor, p, nb, v, ld, hd, next); break;
    case 5: acc_rows_of<5, checked>(o, factor, p, nb, v, ld, hd, next); break;
    case 6: acc_rows_of<6, checked>(o, factor, p, nb, v, ld, hd, next); break;
    default: acc_rows_of<7, checked>(o, factor, p, nb, v, ld, hd, next); break;
    }
}

// The query bytes simd_attn_q8_vnni.h scores with: parts[0..hd) = the low
// bytes of q16[0..hd), parts[hd..2hd) = the high bytes + 128.
inline void q8_vnni_query_parts(const int16_t *q16, int hd, uint8_t *parts) {
    for (int d = 0; d < hd; ++d) {
        parts[d] = static_cast<uint8_t>(q16[d] & 0xFF);
        parts[hd + d] = static_cast<uint8_t>((q16[d] >> 8) + 128);
    }
}

// VV::q8_block_scores_vnni where the variant has it (a dependent call, so
// the variants without it never instantiate it).
template <class VV>
inline void block_scores_q8_vnni(const uint8_t *qparts, const float *qscale, int rows, const int8_t *k, int64_t ld,
                                 int64_t nb, int hd, const float *kscale, unsigned hidden_groups, float *s,
                                 const NextBlockPrefetch &next) {
    VV::q8_block_scores_vnni(qparts, qscale, rows, k, ld, nb, hd, kscale, hidden_groups, s,
                             reinterpret_cast<const int8_t *>(next.row0), next.row_bytes);
}

template <class E>
void attn_partial_rows(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                       const E *kg, const E *vg, float *o, float *m, float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    static_assert(lctx::cpu::kAttnTiledMinRows <= 8, "acc_values_rows is instantiated for up to 7 rows");
    const int64_t rows = (i1 - i0) * ng;   // < kAttnTiledMinRows
    for (int64_t r = 0; r < rows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int d = 0; d < hd; ++d) o[r * hd + d] = 0.0f;
    }
    // Scratch: each row's scores of a block, the scaled queries, the rows' factors.
    float *s = scratch, *qs = scratch + rows * kAttnKeyBlock;
    for (int64_t i = i0; i < i1; ++i)
        for (int u = 0; u < ng; ++u) scaled_query(a, i, g * ng + u, scale, qs + ((i - i0) * ng + u) * hd);
    // Key blocks outer so a block of K and V stays in L1 for all the rows;
    // each row's scores and softmax first, then one pass over the block's V
    // for all rows (acc_values_rows), which loads each value once.
    // (Scoring all rows of a group per key row read, so each key is loaded
    // and widened once, measured no faster in decode.)
    float *factor = qs + rows * hd;
    const bool shared_v = hd % (2 * W) == 0 && rows <= 7;
    const int32_t *kv_pos = a.kv_pos + g * a.kv_pos_head_stride;
    // q8 rows: the block's key and value scales; a key's score is scaled
    // once, and each row's probabilities are scaled by the value's scale
    // (after their sum is taken) before the values' codes are accumulated.
    constexpr bool q8 = std::is_same_v<E, int8_t>;
    alignas(64) float kscale[kAttnKeyBlock], vscale[kAttnKeyBlock];
    const NextBlockPrefetch no_prefetch;
    // q8 keys in integers where the variant can (block_scores_q8_i16): each
    // row's query in int16 after the factors (qscale[r] 0: that row in f32).
    constexpr bool i16_variant = q8 && V::kI16Dot;
    const bool i16 = i16_variant && hd % (2 * W) == 0 && hd <= kQ8I16MaxDim;
    int16_t *q16 = reinterpret_cast<int16_t *>(factor + 8);
    float qscale[8] = {};
    if (i16)
        for (int64_t r = 0; r < rows; ++r) qscale[r] = quantize_i16(qs + r * hd, hd, q16 + r * hd);
    // With VNNI every row's keys are scored at once (simd_attn_q8_vnni.h),
    // from each row's query bytes; a row left in f32 (qscale 0) keeps the
    // row-at-a-time path for all.
    constexpr bool vnni_variant = i16_variant && V::kQ8Vnni;
    bool vnni = vnni_variant && i16 && hd % 64 == 0 && lctx::cpu::q8_vnni_enabled();
    for (int64_t r = 0; r < rows && vnni; ++r) vnni = qscale[r] != 0.0f;
    uint8_t *qparts = reinterpret_cast<uint8_t *>(q16 + rows * hd);
    if constexpr (vnni_variant)
        if (vnni)
            for (int64_t r = 0; r < rows; ++r) q8_vnni_query_parts(q16 + r * hd, hd, qparts + r * 2 * hd);
    auto scale_by_values = [&](float *p, int64_t nb) {
        if constexpr (q8)
            for (int64_t j = 0; j < nb; ++j) p[j] *= vscale[j];
    };
    for (int64_t jb = j0; jb < j1; jb += kAttnKeyBlock) {
        const int64_t nb = min64(kAttnKeyBlock, j1 - jb);
        if constexpr (q8)
            for (int64_t j = 0; j < nb; ++j) {
                kscale[j] = lctx::q8_row_scale(reinterpret_cast<const uint8_t *>(kg + (jb + j) * a.ld_kv), hd);
                vscale[j] = lctx::q8_row_scale(reinterpret_cast<const uint8_t *>(vg + (jb + j) * a.ld_kv), hd);
            }
        // q8: the next block's K rows are prefetched while the first row
        // scores this one, its V rows while this one's values are summed.
        // Only a whole next block (key() indexes it by this block's keys);
        // a short last one is read unprefetched.
        NextBlockPrefetch next_k, next_v;
        if (q8 && jb + 2 * kAttnKeyBlock <= j1) {
            const int64_t row_bytes = lctx::q8_row_bytes(hd);
            next_k = {reinterpret_cast<const char *>(kg + (jb + nb) * a.ld_kv), a.ld_kv, row_bytes};
            next_v = {reinterpret_cast<const char *>(vg + (jb + nb) * a.ld_kv), a.ld_kv, row_bytes};
        }
        bool any = false, all_visible = true;
        bool visible_q[lctx::cpu::kAttnTiledMinRows];   // per query of the item: every key of the block visible
        for (int64_t i = i0; i < i1; ++i) visible_q[i - i0] = block_all_visible(kv_pos, jb, nb, a.q_pos[i], a.window);
        if constexpr (vnni_variant)
            if (vnni) {
                unsigned hidden = (1u << (nb / W)) - 1;   // whole groups of W keys no query sees
                for (int64_t i = i0; i < i1 && hidden; ++i) {
                    if (visible_q[i - i0]) hidden = 0;
                    for (int64_t j = 0; j + W <= nb && hidden; j += W)
                        if (!group_hidden(kv_pos, jb + j, a.q_pos[i], a.window, false)) hidden &= ~(1u << (j / W));
                }
                block_scores_q8_vnni<V>(qparts, qscale, static_cast<int>(rows), kg + jb * a.ld_kv, a.ld_kv, nb, hd,
                                        kscale, hidden, s, next_k);
            }
        for (int64_t i = i0; i < i1; ++i) {
            const int32_t qp = a.q_pos[i];
            const bool visible = visible_q[i - i0];
            all_visible = all_visible && visible;
            for (int u = 0; u < ng; ++u) {
                const int64_t r = (i - i0) * ng + u;
                float *sr = s + r * kAttnKeyBlock;
                const NextBlockPrefetch &pf = r == 0 ? next_k : no_prefetch;   // the first row fetches for all
                float bmax;
                if constexpr (i16_variant) {
                    bmax = vnni ? mask_and_max(sr, nb, kv_pos, jb, qp, a.window, a.softcap, visible)
                           : i16 && qscale[r] != 0.0f
                               ? block_scores_q8_i16<V>(q16 + r * hd, qscale[r], kg, a.ld_kv, jb, nb, hd, kv_pos, qp,
                                                        a.window, a.softcap, visible, kscale, sr, pf)
                               : block_scores(qs + r * hd, kg, a.ld_kv, jb, nb, hd, kv_pos, qp, a.window, a.softcap,
                                              visible, kscale, sr, pf);
                } else {
                    bmax = block_scores(qs + r * hd, kg, a.ld_kv, jb, nb, hd, kv_pos, qp, a.window, a.softcap, visible,
                                        q8 ? kscale : nullptr, sr, pf);
                }
                if (a.row_scores)
                    std::memcpy(a.row_scores + (i * a.n_head + g * ng + u) * a.n_kv + jb, sr,
                                static_cast<size_t>(nb) * sizeof(float));
                if (bmax == -INFINITY) {   // nothing visible: the row is left as it is
                    factor[r] = 1.0f;
                    for (int64_t j = 0; j < nb; ++j) sr[j] = 0.0f;
                    continue;
                }
                any = true;
                const float mnew = fmaxf_(m[r], bmax);
                factor[r] = m[r] == -INFINITY ? 0.0f : __builtin_expf(m[r] - mnew);
                const float sum = exp_sum(sr, nb, mnew);
                l[r] = l[r] * factor[r] + sum;
                m[r] = mnew;
                if (!shared_v) {
                    scale_by_values(sr, nb);
                    acc_values(o + r * hd, factor[r], sr, nb, vg + jb * a.ld_kv, a.ld_kv, hd);
                }
            }
        }
        if (!shared_v || !any) continue;
        for (int64_t r = 0; r < rows; ++r) scale_by_values(s + r * kAttnKeyBlock, nb);
        const E *vb = vg + jb * a.ld_kv;
        if (all_visible) acc_rows<false>(rows, o, factor, s, nb, vb, a.ld_kv, hd, next_v);
        else acc_rows<true>(rows, o, factor, s, nb, vb, a.ld_kv, hd, next_v);
    }
}

void attn_partial(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                  float *o, float *m, float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv;
    if (lctx::cpu::attn_item_is_tiled((i1 - i0) * ng)) {
        attn_partial_tiled(a, scale, g, i0, i1, j0, j1, o, m, l, scratch);
        return;
    }
    if (a.k16)
        attn_partial_rows(a, scale, g, i0, i1, j0, j1, a.k16 + g * a.kv_head_stride, a.v16 + g * a.kv_head_stride, o, m,
                          l, scratch);
    else if (a.k8)
        attn_partial_rows(a, scale, g, i0, i1, j0, j1, reinterpret_cast<const int8_t *>(a.k8 + g * a.kv_head_stride),
                          reinterpret_cast<const int8_t *>(a.v8 + g * a.kv_head_stride), o, m, l, scratch);
    else
        attn_partial_rows(a, scale, g, i0, i1, j0, j1, a.k + g * a.kv_head_stride, a.v + g * a.kv_head_stride, o, m, l,
                          scratch);
}

void attn_colsum(const AttentionArgs &a, float scale, int g, int64_t j0, int64_t j1, const float *m,
                 const float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    if (!a.row_scores && lctx::cpu::attn_item_is_tiled((a.n_q - (a.obs_begin < 0 ? 0 : a.obs_begin)) * ng)) {
        attn_colsum_tiled(a, scale, g, j0, j1, m, l, scratch);   // many observation rows (prefill, encoding)
        return;
    }
    // With row_scores the keys are not read (f16 storage is not widened for it).
    const float *kg = a.row_scores ? nullptr : a.k + g * a.kv_head_stride;
    float *s = scratch, *cs = scratch + kAttnKeyBlock, *qs = scratch + 2 * kAttnKeyBlock;
    float *col = a.col_sums + g * a.n_kv;
    const int64_t ib = a.obs_begin < 0 ? 0 : a.obs_begin;
    for (int64_t jb = j0; jb < j1; jb += kAttnKeyBlock) {
        const int64_t nb = min64(kAttnKeyBlock, j1 - jb);
        for (int64_t j = 0; j < nb; ++j) cs[j] = 0.0f;
        for (int64_t i = ib; i < a.n_q; ++i) {
            for (int u = 0; u < ng; ++u) {
                const int h = g * ng + u;
                const float L = l[i * a.n_head + h];
                if (!(L > 0.0f)) continue;
                if (a.row_scores) {
                    // The first pass's scores of this row: the same values
                    // block_scores would compute again.
                    const float *saved = a.row_scores + (i * a.n_head + h) * a.n_kv + jb;
                    float bmax = -INFINITY;
                    for (int64_t j = 0; j < nb; ++j) bmax = fmaxf_(bmax, s[j] = saved[j]);
                    if (bmax == -INFINITY) continue;
                } else {
                    scaled_query(a, i, h, scale, qs);
                    if (block_scores(qs, kg, a.ld_kv, jb, nb, hd, a.kv_pos + g * a.kv_pos_head_stride, a.q_pos[i],
                                     a.window, a.softcap, false, nullptr, s) == -INFINITY)
                        continue;
                }
                exp_sum(s, nb, m[i * a.n_head + h]);
                add_row_to_columns(s, nb, L, a.col_max, cs);
            }
        }
        flush_columns(cs, nb, a.col_max, col + jb);
    }
}

// ---- per-row top-k of dot products (ReAttention's selection) ---------------------

// kt[c * T + t] = element c of key t as f32 for t < n (<= T), 0 for n <= t < T.
// keys: n rows of d elements (f16 when f16, else f32), ld elements apart.
// tmp: T * d floats of scratch.
void keys_transposed(const void *keys, bool f16, int64_t ld, int64_t n, int d, float *kt, int64_t T, float *tmp) {
    if (d % W == 0 && T % W == 0) {
        for (int64_t t = 0; t < T; ++t) {
            float *row = tmp + t * d;
            if (t >= n) {
                for (int c = 0; c < d; c += W) V::store(row + c, V::zero());
            } else if (f16) {
                const uint16_t *src = static_cast<const uint16_t *>(keys) + t * ld;
                for (int c = 0; c < d; c += W) V::store(row + c, V::f16(src + c));
            } else {
                std::memcpy(row, static_cast<const float *>(keys) + t * ld, static_cast<size_t>(d) * sizeof(float));
            }
        }
        transpose(tmp, d, T, d, kt, T);   // whole W x W tiles: d and T are multiples of W
        return;
    }
    for (int64_t t = 0; t < T; ++t)
        for (int c = 0; c < d; ++c) {
            float x = 0.0f;
            if (t < n) {
                x = f16 ? V::h2f(static_cast<const uint16_t *>(keys)[t * ld + c]) : static_cast<const float *>(keys)[t * ld + c];
            }
            kt[c * T + t] = x;
        }
}

// Inserts (s, idx) into the descending list bs/bi of k entries; the caller
// checked s > bs[k - 1]. Equal scores keep the earlier (lower) index first.
inline void topk_insert(float *bs, int64_t *bi, int k, float s, int64_t idx) {
    int p = k - 1;
    while (p > 0 && bs[p - 1] < s) {
        bs[p] = bs[p - 1];
        bi[p] = bi[p - 1];
        --p;
    }
    bs[p] = s;
    bi[p] = idx;
}

// Lanes of a strip starting at key t that hold one of the n_valid keys.
inline unsigned valid_lanes(int64_t t, int64_t n_valid) {
    const int64_t left = n_valid - t;
    if (left >= W) return W >= 32 ? ~0u : (1u << W) - 1u;
    return left <= 0 ? 0u : (1u << left) - 1u;
}

// c[r][0..1] = the dot products of query row r (q + r * ldq) with the 2W keys
// of a transposed tile from key t, each adding its d products in order.
template <int RB>
inline void dot_rows_strip(const float *q, int64_t ldq, const float *kt, int64_t T, int64_t t, int d, F (&c)[RB][2]) {
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) c[r][0] = c[r][1] = V::zero();
    for (int e = 0; e < d; ++e) {
        const F b0 = V::load(kt + e * T + t), b1 = V::load(kt + e * T + t + W);
#pragma GCC unroll 8
        for (int r = 0; r < RB; ++r) {
            const F a = V::set1(q[r * ldq + e]);
            c[r][0] = V::fmadd(b0, a, c[r][0]);
            c[r][1] = V::fmadd(b1, a, c[r][1]);
        }
    }
}

// RB query rows against one transposed key tile, 2W keys per register strip.
template <int RB>
inline void topk_rows(const float *q, int64_t ldq, const float *kt, int64_t T, int64_t n_valid, int d, int64_t idx0,
                      int k, bool tile_max, float *bs, int64_t *bi, float *sbuf) {
    float best_tile[RB];
    int64_t arg_tile[RB];
    for (int r = 0; r < RB; ++r) {
        best_tile[r] = -INFINITY;
        arg_tile[r] = -1;
    }
    for (int64_t t = 0; t < n_valid; t += 2 * W) {
        F c[RB][2];
        dot_rows_strip<RB>(q, ldq, kt, T, t, d, c);
        for (int r = 0; r < RB; ++r) {
            float *rs = bs + r * k;
            int64_t *ri = bi + r * k;
            for (int v = 0; v < 2; ++v) {
                const int64_t t0 = t + v * W;
                const unsigned lanes = valid_lanes(t0, n_valid);
                if (!lanes) continue;
                if (tile_max) {
                    V::store(sbuf, c[r][v]);
                    for (int j = 0; j < W; ++j)
                        if ((lanes >> j & 1u) && sbuf[j] > best_tile[r]) {
                            best_tile[r] = sbuf[j];
                            arg_tile[r] = t0 + j;
                        }
                    continue;
                }
                unsigned m = V::gt_mask(c[r][v], V::set1(rs[k - 1])) & lanes;
                if (!m) continue;
                V::store(sbuf, c[r][v]);
                for (int j = 0; m; ++j, m >>= 1)
                    if ((m & 1u) && sbuf[j] > rs[k - 1]) topk_insert(rs, ri, k, sbuf[j], idx0 + t0 + j);
            }
        }
    }
    if (tile_max)
        for (int r = 0; r < RB; ++r)
            if (arg_tile[r] >= 0 && best_tile[r] > bs[r * k + k - 1])
                topk_insert(bs + r * k, bi + r * k, k, best_tile[r], idx0 + arg_tile[r]);
}

// Updates the top-k lists of `rows` query rows (row r: q + r * ldq, list
// bs/bi + r * k) with the keys of one transposed tile (n_valid <= T keys,
// T a multiple of 2W, key t has index idx0 + t). tile_max: the tile adds at
// most its best key per row (the reference kernel's approximation).
void topk_tile(const float *q, int64_t ldq, int rows, const float *kt, int64_t T, int64_t n_valid, int d,
               int64_t idx0, int k, bool tile_max, float *bs, int64_t *bi) {
    alignas(64) float sbuf[W];
    constexpr int RB = 6;
    int r = 0;
    for (; r + RB <= rows; r += RB)
        topk_rows<RB>(q + r * ldq, ldq, kt, T, n_valid, d, idx0, k, tile_max, bs + r * k, bi + r * k, sbuf);
    const float *qr = q + r * ldq;
    float *br = bs + r * k;
    int64_t *ir = bi + r * k;
    switch (rows - r) {
    case 5: topk_rows<5>(qr, ldq, kt, T, n_valid, d, idx0, k, tile_max, br, ir, sbuf); break;
    case 4: topk_rows<4>(qr, ldq, kt, T, n_valid, d, idx0, k, tile_max, br, ir, sbuf); break;
    case 3: topk_rows<3>(qr, ldq, kt, T, n_valid, d, idx0, k, tile_max, br, ir, sbuf); break;
    case 2: topk_rows<2>(qr, ldq, kt, T, n_valid, d, idx0, k, tile_max, br, ir, sbuf); break;
    case 1: topk_rows<1>(qr, ldq, kt, T, n_valid, d, idx0, k, tile_max, br, ir, sbuf); break;
    default: break;
    }
}

// ---- max over query rows of dot products (REFORM's selection scores) -------------

// Running maxima m0, m1 (2W keys from key t of the transposed tile) over RB
// query rows. Each key's dot product adds its d products in order.
template <int RB>
inline void max_dot_rows(const float *q, int64_t ldq, const float *kt, int64_t T, int64_t t, int d, F &m0, F &m1) {
    F c[RB][2];
    dot_rows_strip<RB>(q, ldq, kt, T, t, d, c);
    // A NaN product never wins (max(c, m) keeps m), as std::max(best, c) does.
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
        m0 = V::max(c[r][0], m0);
        m1 = V::max(c[r][1], m1);
    }
}

// best[t] = max over the `rows` query rows (q + r * ldq) of their dot product
// with key t of one transposed tile, for t < n_valid (T a multiple of 2W).
void max_dot_tile(const float *q, int64_t ldq, int rows, const float *kt, int64_t T, int64_t n_valid, int d,
                  float *best) {
    alignas(64) float buf[2 * W];
    constexpr int RB = 6;
    for (int64_t t = 0; t < n_valid; t += 2 * W) {
        F m0 = V::set1(-INFINITY), m1 = m0;
        int r = 0;
        for (; r + RB <= rows; r += RB) max_dot_rows<RB>(q + r * ldq, ldq, kt, T, t, d, m0, m1);
        const float *qr = q + r * ldq;
        switch (rows - r) {
        case 5: max_dot_rows<5>(qr, ldq, kt, T, t, d, m0, m1); break;
        case 4: max_dot_rows<4>(qr, ldq, kt, T, t, d, m0, m1); break;
        case 3: max_dot_rows<3>(qr, ldq, kt, T, t, d, m0, m1); break;
        case 2: max_dot_rows<2>(qr, ldq, kt, T, t, d, m0, m1); break;
        case 1: max_dot_rows<1>(qr, ldq, kt, T, t, d, m0, m1); break;
        default: break;
        }
        V::store(buf, m0);
        V::store(buf + W, m1);
        const int64_t nv = std::min<int64_t>(2 * W, n_valid - t);
        for (int64_t j = 0; j < nv; ++j) best[t + j] = buf[j];
    }
}

const lctx::cpu::KernelTable kTable = {
    V::name, MR, NR, dequant_row, gemv, dot, gemm, transpose, rms_norm, swiglu, geglu, attn_partial, attn_colsum,
    keys_transposed, topk_tile, max_dot_tile, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
    nullptr, nullptr, nullptr, nullptr, log_sum_exp,
};

} // namespace
