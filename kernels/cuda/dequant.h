// Kernel bodies that read weights in their GGUF block layouts (launch.h):
// dequantizing rows (get_rows; the f16 copies for the cuBLAS GEMM) and the
// quantized GEMV of decode. The layouts are those of the scalar reference
// dequantizers in src/common/ggml_dequant.cpp, which the tests compare with.
// A weight row is read in sub-blocks of 32 elements: a Q4_0/Q4_1/Q8_0 block,
// or an eighth of a K-quant super-block (one scale/min pair in Q4_K, two
// scales in Q6_K), or 32 plain F32/F16 values (the last one may be partial).
#pragma once

#include <cstdint>

#include "common/ggml_type.h"
#include "kernels/cuda/launch.h"

namespace lctx::cuda {

constexpr int kSub = 32;            // elements per sub-block
constexpr int kGemvThreads = 128;   // threads per block of the GEMV (split over rows)
constexpr int kGemvMaxTok = 8;      // GEMV for up to this many tokens; more: the GEMM
constexpr int kRowsThreads = 64;    // threads per row of the dequantizing row copy

// Types the kernels read.
inline bool weight_type_supported(GgmlType t) {
    switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q6_K: return true;
    default: return false;
    }
}

LCTX_HD inline float half_at(const uint8_t *p) {
    return half_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

// out[0..nv) = elements sb*32 .. sb*32 + nv - 1 of the row at `row`.
LCTX_HD inline void dequant_sub(uint32_t type, const uint8_t *row, int64_t sb, float *out, int nv) {
    switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: {
        const float *r = reinterpret_cast<const float *>(row) + sb * kSub;
        for (int e = 0; e < nv; ++e) out[e] = r[e];
        break;
    }
    case GgmlType::F16: {
        const uint16_t *r = reinterpret_cast<const uint16_t *>(row) + sb * kSub;
        for (int e = 0; e < nv; ++e) out[e] = half_to_float(r[e]);
        break;
    }
    case GgmlType::Q4_0: {   // half d, 16 bytes: low nibbles 0..15, high 16..31
        const uint8_t *b = row + sb * 18;
        const float d = half_at(b);
        for (int j = 0; j < 16; ++j) {
            out[j] = d * static_cast<float>((b[2 + j] & 0x0f) - 8);
            out[j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
        }
        break;
    }
    case GgmlType::Q4_1: {   // half d, half m, 16 bytes of nibbles; d*q + m
        const uint8_t *b = row + sb * 20;
        const float d = half_at(b), m = half_at(b + 2);
        for (int j = 0; j < 16; ++j) {
            out[j] = d * static_cast<float>(b[4 + j] & 0x0f) + m;
            out[j + 16] = d * static_cast<float>(b[4 + j] >> 4) + m;
        }
        break;
    }
    case GgmlType::Q8_0: {   // half d, 32 int8
        const uint8_t *b = row + sb * 34;
        const float d = half_at(b);
        for (int j = 0; j < 32; ++j) out[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
        break;
    }
    case GgmlType::Q4_K: {   // 144-byte super-block: d, dmin, 12 bytes of 6-bit scales/mins, 128 of nibbles
        const uint8_t *b = row + (sb / 8) * 144;
        const int g = static_cast<int>(sb % 8);
        const float d = half_at(b), dmin = half_at(b + 2);
        const uint8_t *s = b + 4;
        int sc, mn;
        if (g < 4) {
            sc = s[g] & 63;
            mn = s[g + 4] & 63;
        } else {
            sc = (s[g + 4] & 0x0f) | ((s[g - 4] >> 6) << 4);
            mn = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
        }
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
        const uint8_t *q = b + 16 + (g / 2) * 32;
        const int shift = (g % 2) * 4;
        for (int l = 0; l < 32; ++l) out[l] = d1 * static_cast<float>((q[l] >> shift) & 0x0f) - m1;
        break;
    }
    case GgmlType::Q6_K: {   // 210-byte super-block: ql[128], qh[64], 16 int8 scales, d
        const uint8_t *b = row + (sb / 8) * 210;
        const int g = static_cast<int>(sb % 8), half = g / 4, t = g % 4;
        const uint8_t *ql = b + half * 64 + (t % 2) * 32, *qh = b + 128 + half * 32;
        const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192);
        const float d = half_at(b + 208);
        for (int l = 0; l < 32; ++l) {
            const int lo = (ql[l] >> (4 * (t / 2))) & 0x0f;
            const int hi = (qh[l] >> (2 * t)) & 0x03;
            const float dl = d * static_cast<float>(scales[(g * 32 + l) / 16]);
            out[l] = dl * static_cast<float>((lo | (hi << 4)) - 32);
        }
        break;
    }
    default:
        for (int e = 0; e < nv; ++e) out[e] = 0.0f;   // refused on the host before any launch
        break;
    }
}

// --- rows as f32 or f16: grid.x = rows; threads over sub-blocks.
struct DequantRowsArgs {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_cols;
    const int32_t *ids;   // null: block b reads row b
    void *out;            // row b at out + b * n_cols (f32, or f16 bits with out_f16)
    bool out_f16;
};

inline LaunchDims dequant_rows_dims(int64_t n_rows) { return {{static_cast<unsigned>(n_rows), 1, 1}, kRowsThreads, 0}; }

template <class Ctx>
LCTX_HD void dequant_rows_body(Ctx &c, const DequantRowsArgs &a) {
    const int64_t b = c.bx();
    const int64_t r = a.ids ? a.ids[b] : b;
    const uint8_t *row = a.w + static_cast<size_t>(r) * a.row_bytes;
    const int64_t n_sub = ceil_div(a.n_cols, kSub);
    float buf[kSub];
    for (int64_t sb = c.tid(); sb < n_sub; sb += c.nthreads()) {
        const int64_t c0 = sb * kSub;
        const int nv = static_cast<int>(a.n_cols - c0 < kSub ? a.n_cols - c0 : kSub);
        dequant_sub(a.type, row, sb, buf, nv);
        if (a.out_f16) {
            uint16_t *o = static_cast<uint16_t *>(a.out) + b * a.n_cols + c0;
            for (int e = 0; e < nv; ++e) o[e] = float_to_half(buf[e]);
        } else {
            float *o = static_cast<float *>(a.out) + b * a.n_cols + c0;
            for (int e = 0; e < nv; ++e) o[e] = buf[e];
        }
    }
}

// --- GEMV: y[t * n_rows + r] = sum_c W[r, c] * x[t * ldx + c] for t < n_tok
// (<= kGemvMaxTok). A block computes kGemvThreads / threads_per_row rows,
// each with threads_per_row threads striding over its sub-blocks (a power of
// two chosen by gemv_dims from the row length, so short rows do not leave
// most threads idle). shared: nthreads floats.
struct GemvArgs {
    uint32_t type;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n_rows, n_cols;
    const float *x;
    int64_t ldx, n_tok;
    float *y;
    int threads_per_row;   // set from gemv_threads_per_row(n_cols)
};

inline int gemv_threads_per_row(int64_t n_cols) {
    const int64_t n_sub = ceil_div(n_cols, kSub);
    int t = 16;
    while (t < kGemvThreads && t < n_sub) t *= 2;
    return t;
}

inline LaunchDims gemv_dims(int64_t n_rows, int threads_per_row) {
    const int64_t rows_per_block = kGemvThreads / threads_per_row;
    return {{static_cast<unsigned>(ceil_div(n_rows, rows_per_block)), 1, 1}, kGemvThreads,
            kGemvThreads * sizeof(float)};
}

template <class Ctx>
LCTX_HD void gemv_body(Ctx &c, const GemvArgs &a) {
    const int tpr = a.threads_per_row, lane = c.tid() % tpr;
    const int64_t r = c.bx() * (c.nthreads() / tpr) + c.tid() / tpr;
    const bool live = r < a.n_rows;   // dead threads still take part in the barriers
    const uint8_t *row = a.w + static_cast<size_t>(live ? r : 0) * a.row_bytes;
    const int64_t n_sub = live ? ceil_div(a.n_cols, kSub) : 0;
    float acc[kGemvMaxTok];
    for (int t = 0; t < kGemvMaxTok; ++t) acc[t] = 0.0f;
    float buf[kSub];
    for (int64_t sb = lane; sb < n_sub; sb += tpr) {
        const int64_t c0 = sb * kSub;
        const int nv = static_cast<int>(a.n_cols - c0 < kSub ? a.n_cols - c0 : kSub);
        dequant_sub(a.type, row, sb, buf, nv);
        for (int t = 0; t < a.n_tok; ++t) {
            const float *x = a.x + t * a.ldx + c0;
            float s = 0.0f;
            for (int e = 0; e < nv; ++e) s += buf[e] * x[e];
            acc[t] += s;
        }
    }
    // per-row sums: a tree within each segment of tpr threads
    float *red = reinterpret_cast<float *>(c.shared());
    for (int t = 0; t < a.n_tok; ++t) {
        red[c.tid()] = acc[t];
        c.sync();
        for (int s = tpr / 2; s > 0; s >>= 1) {
            if (lane < s) red[c.tid()] += red[c.tid() + s];
            c.sync();
        }
        if (lane == 0 && live) a.y[t * a.n_rows + r] = red[c.tid()];
        c.sync();
    }
}

} // namespace lctx::cuda
