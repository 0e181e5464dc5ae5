// Type table (block layouts as in ggml) and fp16/bf16 conversions.
#include "common/ggml_type.h"

#include <cstring>

#include "common/error.h"

namespace lctx {

namespace {

struct Entry {
    uint32_t id;
    GgmlTypeInfo info;
};

// Sizes are those of ggml's block structs (ggml-common.h); gguf-py's table
// still lists 40 bytes for Q8_1, ggml's struct is 2 halves + 32 int8 = 36.
constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4, true}},
    {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", QK, 2 + QK / 2, true}},
    {3, {"Q4_1", QK, 2 + 2 + QK / 2, true}},
    {6, {"Q5_0", QK, 2 + 4 + QK / 2, true}},
    {7, {"Q5_1", QK, 2 + 2 + 4 + QK / 2, true}},
    {8, {"Q8_0", QK, 2 + QK, true}},
    {9, {"Q8_1", QK, 2 + 2 + QK, true}},
    {10, {"Q2_K", QK_K, QK_K / 16 + QK_K / 4 + 2 + 2, true}},
    {11, {"Q3_K", QK_K, QK_K / 8 + QK_K / 4 + 12 + 2, true}},
    {12, {"Q4_K", QK_K, 2 + 2 + 12 + QK_K / 2, true}},
    {13, {"Q5_K", QK_K, 2 + 2 + 12 + QK_K / 8 + QK_K / 2, true}},
    {14, {"Q6_K", QK_K, QK_K / 2 + QK_K / 4 + QK_K / 16 + 2, true}},
    {15, {"Q8_K", QK_K, 4 + QK_K + QK_K / 16 * 2, true}},
    {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},
    {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},
    {30, {"BF16", 1, 2, true}},
};

uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

} // namespace

const GgmlTypeInfo *ggml_type_info(uint32_t type) {
    for (const Entry &e : kTypes)
        if (e.id == type) return &e.info;
    return nullptr;
}

const char *ggml_type_name(GgmlType type) {
    const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(type));
    return info ? info->name : "UNKNOWN";
}

size_t ggml_row_size(GgmlType type, int64_t n) {
    const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(type));
    if (!info) fail(LCTX_ERR_UNSUPPORTED, "unknown ggml type %u", static_cast<unsigned>(type));
    if (n < 0 || n % info->block_size != 0)
        fail(LCTX_ERR_INVALID_ARG, "row of %lld elements is not a multiple of the %s block size %lld",
             static_cast<long long>(n), info->name, static_cast<long long>(info->block_size));
    return static_cast<size_t>(n / info->block_size) * info->type_size;
}

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        // zero or subnormal: mant * 2^-24, exact in float
        const float v = static_cast<float>(mant) * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / nan
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t bits = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u)  // nan: keep the top payload bits, force quiet
        return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u)  // >= 65520 rounds (ties to even) to infinity
        return static_cast<uint16_t>(sign | 0x7c00u);
    const uint32_t e = abs >> 23;
    if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        if (e < 102) return sign;  // < 2^-25: rounds to zero
        const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;  // value in units of 2^-24 is mant >> shift
        uint32_t q = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t q = ((e - 112) << 10) | ((abs & 0x7fffffu) >> 13);
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1))) ++q;  // a carry moves into the exponent
    return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    const uint32_t bits = f32_bits(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet nan
    return static_cast<uint16_t>((static_cast<uint64_t>(bits) + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

} // namespace lctx
