// Tensor element types of GGUF files (numbering as in ggml), their block
// layouts, and the scalar reference dequantizers.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lctx {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

// Elements per block of the legacy quants (Q4_0 .. Q8_1) and per super-block
// of the k-quants (Q2_K .. Q8_K), as in ggml.
inline constexpr int64_t QK = 32;
inline constexpr int64_t QK_K = 256;

struct GgmlTypeInfo {
    const char *name;     // "Q4_1"
    int64_t block_size;   // elements per block (1 for plain types)
    size_t type_size;     // bytes per block
    bool can_dequantize;  // dequantize_row supports it
};

// nullptr for a number that is not a known ggml type.
const GgmlTypeInfo *ggml_type_info(uint32_t type);
const char *ggml_type_name(GgmlType type);

// Bytes of a row of n elements; n must be a multiple of the block size.
size_t ggml_row_size(GgmlType type, int64_t n);

// Scalar reference: dst[0..n) = values of the n elements at src. n must be a
// multiple of the block size. Throws lctx::Error(LCTX_ERR_UNSUPPORTED) for a
// type it cannot dequantize.
void dequantize_row_ref(GgmlType type, const void *src, float *dst, int64_t n);

// Scale and min codes (6 bits each) of sub-block j < 8 of a Q4_K/Q5_K super
// block, from its 12 scale bytes s.
void q4k_scale_min(const uint8_t *s, int j, int &sc, int &m);

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);   // round to nearest even
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);   // round to nearest even

} // namespace lctx
