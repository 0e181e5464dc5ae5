// Run-time choice of the SIMD variant: cpuid feature bits plus XGETBV (the OS
// must save the wide registers), optionally lowered by LCTX_SIMD.
#include <atomic>
#include <cpuid.h>
#include <cstdlib>
#include <cstring>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/error.h"
#include "common/log.h"
#include "simd.h"

namespace lctx::cpu {
namespace {

uint64_t xgetbv0() {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

SimdVariant detect() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return SimdVariant::SCALAR;
    const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave) return SimdVariant::SCALAR;
    const uint64_t xcr0 = xgetbv0();
    const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM + YMM state
    const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;       // + opmask, ZMM_Hi256, Hi16_ZMM
    if (__get_cpuid_max(0, nullptr) < 7) return SimdVariant::SCALAR;
    __cpuid_count(7, 0, a, b, c, d);
    const bool avx2 = b & (1u << 5);
    const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31)); // F DQ BW VL
    if (os_avx512 && avx512 && avx2 && fma && f16c) return SimdVariant::AVX512;
    if (os_avx && avx2 && fma && f16c) return SimdVariant::AVX2;
#endif
    return SimdVariant::SCALAR;
}

const KernelTable &table_for(SimdVariant v) {
    switch (v) {
    case SimdVariant::AVX512: return kernel_table_avx512();
    case SimdVariant::AVX2: return kernel_table_avx2();
    default: return kernel_table_scalar();
    }
}

SimdVariant initial_variant() {
    SimdVariant v = best_supported_variant();
    if (const char *env = std::getenv("LCTX_SIMD"); env && *env) {
        SimdVariant want = v;
        if (!std::strcmp(env, "scalar")) want = SimdVariant::SCALAR;
        else if (!std::strcmp(env, "avx2")) want = SimdVariant::AVX2;
        else if (!std::strcmp(env, "avx512")) want = SimdVariant::AVX512;
        else LCTX_LOG_WARN("LCTX_SIMD=%s not recognised (scalar, avx2, avx512); using %s", env, table_for(v).name);
        if (want > v) LCTX_LOG_WARN("LCTX_SIMD=%s not supported by this CPU; using %s", env, table_for(v).name);
        else v = want;
    }
    return v;
}

std::atomic<int> g_variant{-1};
std::atomic<bool> g_q8_vnni_off{false};   // set_q8_vnni_for_testing(false)
std::atomic<bool> g_topk_screen_off{false};   // set_topk_screen_for_testing(false)
std::atomic<bool> g_topk_amx_off{false};      // set_topk_amx_for_testing(false)
std::atomic<bool> g_matmul_amx_off{false};    // set_matmul_amx_for_testing(false)

// An AVX-512 extension's bit of cpuid leaf 7 (subleaf, register eax or ecx),
// false where the AVX-512 variant cannot run at all.
bool avx512_leaf7_bit(unsigned subleaf, bool in_eax, unsigned bit) {
#if defined(__x86_64__) || defined(__i386__)
    if (best_supported_variant() != SimdVariant::AVX512 || __get_cpuid_max(0, nullptr) < 7) return false;
    unsigned a, b, c, d;
    __cpuid_count(7, subleaf, a, b, c, d);
    return ((in_eax ? a : c) & (1u << bit)) != 0;
#else
    (void)subleaf, (void)in_eax, (void)bit;
    return false;
#endif
}

} // namespace

bool cpu_has_avx512_bf16() {
    static const bool has = avx512_leaf7_bit(1, true, 5);   // AVX512_BF16: leaf 7.1, eax bit 5
    return has;
}

bool cpu_has_avx512_vnni() {
    static const bool has = avx512_leaf7_bit(0, false, 11);   // AVX512_VNNI: leaf 7.0, ecx bit 11
    return has;
}

bool cpu_has_amx_bf16() {
    static const bool has = [] {
#if defined(__x86_64__) && defined(__linux__)
        if (const char *e = std::getenv("LCTX_AMX"); e && std::strcmp(e, "0") == 0) return false;
        if (best_supported_variant() != SimdVariant::AVX512 || __get_cpuid_max(0, nullptr) < 7) return false;
        unsigned a, b, c, d;
        __cpuid_count(7, 0, a, b, c, d);
        if (!(d & (1u << 22)) || !(d & (1u << 24))) return false;   // AMX-BF16, AMX-TILE: leaf 7.0, edx
        return (xgetbv0() & (3u << 17)) == (3u << 17);             // the OS saves XTILECFG and XTILEDATA
#else
        return false;
#endif
    }();
    return has;
}

namespace {

// Linux hands a process the tile data only on request (kernel 5.16+). Asked
// once, at the first use, so a process that never needs AMX (no prefill of 256
// tokens or more, no ReAttention) keeps the smaller signal frames.
bool amx_permitted() {
    static const bool ok = [] {
#if defined(__x86_64__) && defined(__linux__)
        constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
        if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
            LCTX_LOG_INFO("the f32 GEMM and the top-k screen run their products on the AMX tile unit "
                          "(LCTX_AMX=0: AVX-512)");
            return true;
        }
        LCTX_LOG_WARN("the OS refused AMX tile data to this process; the f32 GEMM and the top-k screen use AVX-512");
#endif
        return false;
    }();
    return ok;
}

} // namespace

bool topk_amx_enabled() {
    return active_kernels().topk_item_screened_amx != nullptr && !g_topk_amx_off.load(std::memory_order_relaxed) &&
           amx_permitted();
}

void set_topk_amx_for_testing(bool on) { g_topk_amx_off.store(!on, std::memory_order_relaxed); }

bool matmul_amx_enabled() {
    return active_kernels().gemm_amx != nullptr && !g_matmul_amx_off.load(std::memory_order_relaxed) &&
           amx_permitted();
}

void set_matmul_amx_for_testing(bool on) { g_matmul_amx_off.store(!on, std::memory_order_relaxed); }

bool q8_vnni_enabled() { return cpu_has_avx512_vnni() && !g_q8_vnni_off.load(std::memory_order_relaxed); }

void set_q8_vnni_for_testing(bool on) { g_q8_vnni_off.store(!on, std::memory_order_relaxed); }

bool topk_screen_enabled() {
    return active_kernels().topk_item_screened != nullptr && !g_topk_screen_off.load(std::memory_order_relaxed);
}

void set_topk_screen_for_testing(bool on) { g_topk_screen_off.store(!on, std::memory_order_relaxed); }

SimdVariant best_supported_variant() {
    static const SimdVariant best = detect();
    return best;
}

SimdVariant active_variant() {
    int v = g_variant.load(std::memory_order_acquire);
    if (v < 0) {
        int expected = -1;
        g_variant.compare_exchange_strong(expected, static_cast<int>(initial_variant()));
        v = g_variant.load(std::memory_order_acquire);
    }
    return static_cast<SimdVariant>(v);
}

const KernelTable &active_kernels() { return table_for(active_variant()); }

void set_simd_variant_for_testing(SimdVariant v) {
    if (v > best_supported_variant())
        fail(LCTX_ERR_UNSUPPORTED, "SIMD variant %s is not supported by this CPU", table_for(v).name);
    g_variant.store(static_cast<int>(v), std::memory_order_release);
}

const char *simd_variant() { return active_kernels().name; }

} // namespace lctx::cpu
