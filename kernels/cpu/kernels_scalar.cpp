// Portable instantiation of the kernels in simd_impl.h: a "vector" of one
// float, so the scalar variant runs exactly the same algorithms.
#include <cmath>
#include <cstdint>

#include "common/ggml_type.h"

namespace {
struct V {
    static constexpr int W = 1;
    static constexpr int MV = 2;   // GEMM: panel vectors x NR tokens
    static constexpr int NR = 4;
    static constexpr int kAttnTileVectors = 4;   // tiled attention: 6 rows x 4 keys (plain floats)
    static constexpr const char *name = "scalar";
    using F = float;
    using I = int32_t;
    static F zero() { return 0.0f; }
    static F set1(float a) { return a; }
    static F load(const float *p) { return *p; }
    static void store(float *p, F v) { *p = v; }
    static F load_n(const float *p, int n) { return n > 0 ? *p : 0.0f; }
    static void store_n(float *p, F v, int n) { if (n > 0) *p = v; }
    static F fmadd(F a, F b, F c) { return a * b + c; }
    static F add(F a, F b) { return a + b; }
    static F sub(F a, F b) { return a - b; }
    static F mul(F a, F b) { return a * b; }
    static F div(F a, F b) { return a / b; }
    static F max(F a, F b) { return a > b ? a : b; }
    static unsigned gt_mask(F a, F b) { return a > b ? 1u : 0u; }
    static float hsum(F a) { return a; }
    static F reduce_rows(const F *acc) { return acc[0]; }
    static float hmax(F a) { return a; }
    // dst[c * ldd + r] = src[r * lds + c] for a W x W tile.
    static void transpose(const float *src, int64_t lds, float *dst, int64_t ldd) { (void)lds, (void)ldd, *dst = *src; }
    static I u8(const uint8_t *p) { return *p; }
    static I i8(const int8_t *p) { return *p; }
    static I andi(I a, int m) { return a & m; }
    static I ori(I a, I b) { return a | b; }
    static I subi(I a, int m) { return a - m; }
    template <int S> static I srl(I a) { return static_cast<I>(static_cast<uint32_t>(a) >> S); }
    template <int S> static I sll(I a) { return static_cast<I>(static_cast<uint32_t>(a) << S); }
    static F cvt(I a) { return static_cast<float>(a); }
    static constexpr bool kI16Dot = false;   // q8 keys take the f32 path (one lane has no pairs to add)
    static constexpr bool kQ8Vnni = false;
    static F f16(const uint16_t *p) { return lctx::fp16_to_fp32(*p); }
    static float h2f(uint16_t h) { return lctx::fp16_to_fp32(h); }
    static F exp(F x) { return std::exp(x); }
};
} // namespace

#include "simd_impl.h"

namespace lctx::cpu {
const KernelTable &kernel_table_scalar() { return kTable; }
} // namespace lctx::cpu
