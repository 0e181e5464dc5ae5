// Scalar reference dequantizers, one per block layout. Written for clarity,
// not speed: the kernels layer has the fast paths and is tested against these.
#include <cstring>

#include "common/error.h"
#include "common/ggml_type.h"

// No fused multiply-add (e.g. with LCTX_NATIVE): the reference must round
// like ggml's scalar code and gguf-py, i.e. d*q and the +/- min separately.
#pragma GCC optimize("fp-contract=off")

namespace lctx {

namespace {

float half_at(const uint8_t *p) {
    return fp16_to_fp32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}

uint32_t u32_at(const uint8_t *p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Q4_0: half d, 16 bytes of nibbles; low nibbles are elements 0..15, high 16..31.
void q4_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < QK / 2; ++j) {
        y[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
        y[j + QK / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
    }
}

// Q4_1: half d, half m, 16 bytes of nibbles; x = d*q + m.
void q4_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < QK / 2; ++j) {
        y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
        y[j + QK / 2] = d * static_cast<float>(qs[j] >> 4) + m;
    }
}

// Q5_0: half d, 32-bit mask of 5th bits (bit j for element j), nibbles as Q4_0.
void q5_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < QK / 2; ++j) {
        const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * static_cast<float>(lo - 16);
        y[j + QK / 2] = d * static_cast<float>(hi - 16);
    }
}

// Q5_1: half d, half m, 5th-bit mask, nibbles; x = d*q + m.
void q5_1(const uint8_t *b, float *y) {
    const float d = half_at(b), m = half_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < QK / 2; ++j) {
        const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = d * static_cast<float>(lo) + m;
        y[j + QK / 2] = d * static_cast<float>(hi) + m;
    }
}

// Q8_0: half d, 32 int8.
void q8_0(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < QK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
}

// Q8_1: half d, half s (= d * sum, unused here), 32 int8.
void q8_1(const uint8_t *b, float *y) {
    const float d = half_at(b);
    for (int j = 0; j < QK; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

// Q2_K: 16 bytes of (scale | min << 4) for 16 groups of 16, 64 bytes of 2-bit
// quants, half d, half dmin. Each 32-byte run of quants holds four groups of
// 32 elements at bit shifts 0, 2, 4, 6.
void q2_k(const uint8_t *b, float *y) {
    const uint8_t *scales = b, *qs = b + 16;
    const float d = half_at(b + 80), dmin = half_at(b + 82);
    for (int e = 0; e < QK_K; ++e) {
        const int half = e / 128, shift = ((e % 128) / 32) * 2, l = e % 32;
        const int q = (qs[half * 32 + l] >> shift) & 3;
        const uint8_t sc = scales[e / 16];
        const float dl = d * static_cast<float>(sc & 0x0f);
        const float ml = dmin * static_cast<float>(sc >> 4);
        y[e] = dl * static_cast<float>(q) - ml;
    }
}

// Q3_K: 32 bytes of high-bit mask, 64 bytes of 2-bit quants, 12 bytes of
// sixteen 6-bit scales (biased by 32), half d. A clear high bit subtracts 4.
void q3_k(const uint8_t *b, float *y) {
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    const float d = half_at(b + 108);
    int scale[16];
    for (int i = 0; i < 16; ++i) {
        const int lo = (sc[i % 8] >> (4 * (i / 8))) & 0x0f;
        const int hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        scale[i] = (lo | (hi << 4)) - 32;
    }
    for (int e = 0; e < QK_K; ++e) {
        const int half = e / 128, group = (e % 128) / 32, l = e % 32;
        const int q = (qs[half * 32 + l] >> (2 * group)) & 3;
        const bool high = (hmask[l] >> (half * 4 + group)) & 1;
        const float dl = d * static_cast<float>(scale[e / 16]);
        y[e] = dl * static_cast<float>(q - (high ? 0 : 4));
    }
}

// Q4_K: half d, half dmin, 12 scale bytes, 128 bytes of nibbles. Each 64
// elements use 32 bytes: low nibbles (group 2c) then high nibbles (2c+1).
void q4_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *s = b + 4, *qs = b + 16;
    for (int g = 0; g < 8; ++g) {
        int sc, m;
        q4k_scale_min(s, g, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        const uint8_t *q = qs + (g / 2) * 32;
        const int shift = (g % 2) * 4;
        for (int l = 0; l < 32; ++l) y[g * 32 + l] = d1 * static_cast<float>((q[l] >> shift) & 0x0f) - m1;
    }
}

// Q5_K: as Q4_K plus 32 bytes of 5th bits (bit g of qh[l] for group g).
void q5_k(const uint8_t *b, float *y) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
    for (int g = 0; g < 8; ++g) {
        int sc, m;
        q4k_scale_min(s, g, sc, m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        const uint8_t *q = qs + (g / 2) * 32;
        const int shift = (g % 2) * 4;
        for (int l = 0; l < 32; ++l) {
            const int v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> g) & 1) << 4);
            y[g * 32 + l] = d1 * static_cast<float>(v) - m1;
        }
    }
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2 bits, 16 int8 scales,
// half d. Per 128 elements: 64 ql bytes and 32 qh bytes; quarter t of 32
// elements takes nibble (t/2) of ql[(t%2)*32 + l] and bits 2t of qh[l].
void q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *scales = reinterpret_cast<const int8_t *>(b + 192);
    const float d = half_at(b + 208);
    for (int e = 0; e < QK_K; ++e) {
        const int half = e / 128, t = (e % 128) / 32, l = e % 32;
        const int lo = (ql[half * 64 + (t % 2) * 32 + l] >> (4 * (t / 2))) & 0x0f;
        const int hi = (qh[half * 32 + l] >> (2 * t)) & 0x03;
        const float dl = d * static_cast<float>(scales[e / 16]);
        y[e] = dl * static_cast<float>((lo | (hi << 4)) - 32);
    }
}

// Q8_K: float d, 256 int8, 16 int16 block sums (not needed to dequantize).
void q8_k(const uint8_t *b, float *y) {
    float d;
    std::memcpy(&d, b, 4);
    for (int j = 0; j < QK_K; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

} // namespace

void q4k_scale_min(const uint8_t *s, int j, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

void dequantize_row_ref(GgmlType type, const void *src, float *dst, int64_t n) {
    const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(type));
    if (!info || !info->can_dequantize)
        fail(LCTX_ERR_UNSUPPORTED, "cannot dequantize tensor type %s", ggml_type_name(type));
    if (n < 0 || n % info->block_size != 0)
        fail(LCTX_ERR_INVALID_ARG, "cannot dequantize %lld elements of %s: not a multiple of the block size %lld",
             static_cast<long long>(n), info->name, static_cast<long long>(info->block_size));
    const uint8_t *p = static_cast<const uint8_t *>(src);
    switch (type) {
    case GgmlType::F32:
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    case GgmlType::F16:
        for (int64_t i = 0; i < n; ++i) dst[i] = half_at(p + 2 * i);
        return;
    case GgmlType::BF16:
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
        return;
    default:
        break;
    }
    void (*block_fn)(const uint8_t *, float *) = nullptr;
    switch (type) {
    case GgmlType::Q4_0: block_fn = q4_0; break;
    case GgmlType::Q4_1: block_fn = q4_1; break;
    case GgmlType::Q5_0: block_fn = q5_0; break;
    case GgmlType::Q5_1: block_fn = q5_1; break;
    case GgmlType::Q8_0: block_fn = q8_0; break;
    case GgmlType::Q8_1: block_fn = q8_1; break;
    case GgmlType::Q2_K: block_fn = q2_k; break;
    case GgmlType::Q3_K: block_fn = q3_k; break;
    case GgmlType::Q4_K: block_fn = q4_k; break;
    case GgmlType::Q5_K: block_fn = q5_k; break;
    case GgmlType::Q6_K: block_fn = q6_k; break;
    case GgmlType::Q8_K: block_fn = q8_k; break;
    default:
        fail(LCTX_ERR_UNSUPPORTED, "cannot dequantize tensor type %s", info->name);
    }
    const int64_t nb = n / info->block_size;
    for (int64_t i = 0; i < nb; ++i) block_fn(p + i * info->type_size, dst + i * info->block_size);
}

} // namespace lctx
