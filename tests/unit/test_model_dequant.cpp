// fp16/bf16 conversions (known bit patterns, exhaustive round trips, and
// rounding checked against the CPU's F16C instructions and a nearest-value
// search in double), the type table, and hand-computed quant blocks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/error.h"
#include "common/ggml_type.h"

using namespace lctx;

namespace {

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

__attribute__((target("f16c"))) uint16_t hw_fp32_to_fp16(float f) {
    return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

// Nearest representable value among two neighbours, ties to the even code.
uint16_t nearest(double x, uint16_t lo, double vlo, uint16_t hi, double vhi) {
    const double dlo = std::fabs(x - vlo), dhi = std::fabs(x - vhi);
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

// bf16 reference: truncation and the next code up, pick the nearest.
uint16_t ref_fp32_to_bf16(float f) {
    const uint32_t b = bits(f);
    const uint16_t lo = static_cast<uint16_t>(b >> 16);
    const uint16_t hi = static_cast<uint16_t>(lo + 1);  // next magnitude up (same sign)
    const double vhi = (hi & 0x7fff) >= 0x7f80 ? std::copysign(INFINITY, f)
                                               : static_cast<double>(from_bits(static_cast<uint32_t>(hi) << 16));
    if ((hi & 0x7fff) == 0x7f80) {  // rounding up overflows to infinity: midpoint is the next power of two
        const double vlo = from_bits(static_cast<uint32_t>(lo) << 16);
        const double mid = vlo + (std::ldexp(1.0, 128) - std::fabs(vlo)) / 2 * (f < 0 ? -1 : 1);
        if (std::fabs(f) < std::fabs(mid)) return lo;
        if (std::fabs(f) > std::fabs(mid)) return hi;
        return (lo & 1) ? hi : lo;
    }
    return nearest(f, lo, from_bits(static_cast<uint32_t>(lo) << 16), hi, vhi);
}

} // namespace

TEST(Fp16, KnownBitPatterns) {
    EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
    EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
    EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
    EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
    EXPECT_EQ(fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
    EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
    EXPECT_EQ(fp16_to_fp32(0x7c00), INFINITY);
    EXPECT_EQ(fp16_to_fp32(0xfc00), -INFINITY);
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));
    EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);  // -0

    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // tie rounds to even = infinity
    EXPECT_EQ(fp32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(-INFINITY), 0xfc00);
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(1e-8f), 0x0000);                       // below half the smallest subnormal
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);       // exact tie -> even (0)
    EXPECT_EQ(fp32_to_fp16(3e-8f), 0x0001);                       // just above the tie
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -24)), 0x0002);       // tie between 1 and 2 -> 2
    EXPECT_EQ(fp32_to_fp16(std::ldexp(2.5f, -24)), 0x0002);       // tie between 2 and 3 -> 2
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1023.5f, -24)), 0x0400);    // rounds up into the normals
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
    EXPECT_EQ(fp32_to_fp16(2047.5f), 0x6800);  // 2047.5 -> 2048: carry into the exponent
    const uint16_t n = fp32_to_fp16(NAN);
    EXPECT_EQ(n & 0x7c00, 0x7c00);
    EXPECT_NE(n & 0x03ff, 0);
    EXPECT_NE(fp32_to_fp16(from_bits(0x7f800001)) & 0x03ff, 0);  // signalling nan with low payload stays nan
}

TEST(Fp16, ExhaustiveRoundTrip) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) << h;
            EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(f)))) << h;
            continue;
        }
        ASSERT_EQ(fp32_to_fp16(f), h) << "half 0x" << std::hex << h;
    }
}

TEST(Fp16, RoundingMatchesHardware) {
    if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C";
    // Every fp16 value, the midpoints between neighbours and one ulp around
    // them, plus random floats of every magnitude.
    for (uint32_t h = 0; h < 0x7c00; ++h) {
        const float a = fp16_to_fp32(static_cast<uint16_t>(h)), b = fp16_to_fp32(static_cast<uint16_t>(h + 1));
        const float mid = (h + 1 == 0x7c00) ? 65520.0f : static_cast<float>((static_cast<double>(a) + b) / 2);
        for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
            ASSERT_EQ(fp32_to_fp16(x), hw_fp32_to_fp16(x)) << x;
            ASSERT_EQ(fp32_to_fp16(-x), hw_fp32_to_fp16(-x)) << -x;
        }
    }
    std::mt19937 rng(7);
    for (int k = 0; k < 2000000; ++k) {
        const float x = from_bits(rng());
        if (std::isnan(x)) continue;
        ASSERT_EQ(fp32_to_fp16(x), hw_fp32_to_fp16(x)) << x;
    }
}

TEST(Bf16, KnownBitPatterns) {
    EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
    EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
    EXPECT_EQ(bf16_to_fp32(0x7f80), INFINITY);
    EXPECT_EQ(bf16_to_fp32(0x0001), from_bits(0x00010000));  // subnormal
    EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7fc0)));
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
    EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
    EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001)), 0x3f81);            // above the tie
    EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
    EXPECT_EQ(fp32_to_bf16(-INFINITY), 0xff80);
    EXPECT_EQ(fp32_to_bf16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_bf16(from_bits(0x7f800001)), 0x7fc0);  // signalling nan with low payload -> quiet nan
    EXPECT_EQ(fp32_to_bf16(from_bits(0xffc00000)), 0xffc0);
}

TEST(Bf16, RoundTripAndNearest) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_fp32(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
            continue;
        }
        ASSERT_EQ(fp32_to_bf16(f), h);
    }
    std::mt19937 rng(11);
    for (int k = 0; k < 2000000; ++k) {
        // random floats, and exact ties (low 16 bits = 0x8000) half the time
        uint32_t b = rng();
        if (k % 2) b = (b & 0xffff0000u) | 0x8000u;
        const float x = from_bits(b);
        if (std::isnan(x) || std::isinf(x)) continue;
        ASSERT_EQ(fp32_to_bf16(x), ref_fp32_to_bf16(x)) << std::hex << b;
    }
}

TEST(GgmlType, TableMatchesGgmlBlockSizes) {
    struct Row { GgmlType t; const char *name; int64_t block; size_t size; };
    // sizeof(block_*) from ggml's static_asserts.
    const Row rows[] = {
        {GgmlType::F32, "F32", 1, 4},     {GgmlType::F16, "F16", 1, 2},     {GgmlType::BF16, "BF16", 1, 2},
        {GgmlType::Q4_0, "Q4_0", 32, 18}, {GgmlType::Q4_1, "Q4_1", 32, 20}, {GgmlType::Q5_0, "Q5_0", 32, 22},
        {GgmlType::Q5_1, "Q5_1", 32, 24}, {GgmlType::Q8_0, "Q8_0", 32, 34}, {GgmlType::Q8_1, "Q8_1", 32, 36},
        {GgmlType::Q2_K, "Q2_K", 256, 84}, {GgmlType::Q3_K, "Q3_K", 256, 110}, {GgmlType::Q4_K, "Q4_K", 256, 144},
        {GgmlType::Q5_K, "Q5_K", 256, 176}, {GgmlType::Q6_K, "Q6_K", 256, 210}, {GgmlType::Q8_K, "Q8_K", 256, 292},
        {GgmlType::I8, "I8", 1, 1},       {GgmlType::I16, "I16", 1, 2},     {GgmlType::I32, "I32", 1, 4},
        {GgmlType::I64, "I64", 1, 8},     {GgmlType::F64, "F64", 1, 8},
    };
    for (const Row &r : rows) {
        const GgmlTypeInfo *info = ggml_type_info(static_cast<uint32_t>(r.t));
        ASSERT_NE(info, nullptr) << r.name;
        EXPECT_STREQ(info->name, r.name);
        EXPECT_STREQ(ggml_type_name(r.t), r.name);
        EXPECT_EQ(info->block_size, r.block) << r.name;
        EXPECT_EQ(info->type_size, r.size) << r.name;
        EXPECT_EQ(ggml_row_size(r.t, r.block * 3), r.size * 3) << r.name;
    }
    for (uint32_t unknown : {4u, 5u, 16u, 23u, 29u, 31u, 1000u}) EXPECT_EQ(ggml_type_info(unknown), nullptr) << unknown;
    EXPECT_THROW(ggml_row_size(GgmlType::Q4_0, 33), lctx::Error);
}

namespace {
std::vector<float> deq(GgmlType t, const std::vector<uint8_t> &b, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row_ref(t, b.data(), y.data(), n);
    return y;
}
} // namespace

// Blocks worked out by hand from the block layouts.
TEST(Dequant, HandComputedBlocks) {
    std::vector<uint8_t> q8(34);
    q8[0] = 0x00, q8[1] = 0x38;  // d = 0.5
    for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(j * 8 - 128);
    auto y = deq(GgmlType::Q8_0, q8, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * static_cast<float>(j * 8 - 128));

    std::vector<uint8_t> q4(18, 0);
    q4[0] = 0x00, q4[1] = 0x40;  // d = 2
    q4[2] = 0x1f;                // element 0 = 15, element 16 = 1
    q4[17] = 0x80;               // element 15 = 0, element 31 = 8
    y = deq(GgmlType::Q4_0, q4, 32);
    EXPECT_EQ(y[0], 14.0f);
    EXPECT_EQ(y[16], -14.0f);
    EXPECT_EQ(y[15], -16.0f);
    EXPECT_EQ(y[31], 0.0f);
    EXPECT_EQ(y[1], -16.0f);

    std::vector<uint8_t> q41(20, 0);
    q41[0] = 0x00, q41[1] = 0x3c;  // d = 1
    q41[2] = 0x00, q41[3] = 0xbc;  // m = -1
    q41[4] = 0xa3;                 // element 0 = 3, element 16 = 10
    y = deq(GgmlType::Q4_1, q41, 32);
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(y[16], 9.0f);
    EXPECT_EQ(y[5], -1.0f);

    std::vector<uint8_t> q5(22, 0);
    q5[0] = 0x00, q5[1] = 0x3c;  // d = 1
    q5[2] = 0x01;                // 5th bit of element 0
    q5[5] = 0x80;                // 5th bit of element 31
    q5[6] = 0x02;                // element 0 low = 2, element 16 low = 0
    y = deq(GgmlType::Q5_0, q5, 32);
    EXPECT_EQ(y[0], 2.0f);    // 18 - 16
    EXPECT_EQ(y[16], -16.0f);  // 0 - 16
    EXPECT_EQ(y[31], 0.0f);    // 16 - 16

    std::vector<uint8_t> q8k(292, 0);
    const float d = 0.25f;
    std::memcpy(q8k.data(), &d, 4);
    q8k[4 + 255] = static_cast<uint8_t>(-7);
    y = deq(GgmlType::Q8_K, q8k, 256);
    EXPECT_EQ(y[255], -1.75f);
    EXPECT_EQ(y[0], 0.0f);

    std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0};
    EXPECT_EQ(deq(GgmlType::F16, f16, 2), (std::vector<float>{1.0f, -2.0f}));
    std::vector<uint8_t> bf = {0x80, 0x3f, 0x40, 0xc0};
    EXPECT_EQ(deq(GgmlType::BF16, bf, 2), (std::vector<float>{1.0f, -3.0f}));
}

TEST(Dequant, Refusals) {
    float y[32];
    const uint8_t buf[64] = {};
    try {
        dequantize_row_ref(GgmlType::I32, buf, y, 4);
        FAIL() << "no error";
    } catch (const lctx::Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_UNSUPPORTED);
        EXPECT_THAT(e.what(), testing::HasSubstr("cannot dequantize tensor type I32"));
    }
    EXPECT_THROW(dequantize_row_ref(GgmlType::Q8_0, buf, y, 16), lctx::Error);
    EXPECT_THROW(dequantize_row_ref(static_cast<GgmlType>(4), buf, y, 32), lctx::Error);
}
