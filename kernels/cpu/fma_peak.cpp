// FMA peak of this CPU: independent FMA chains in registers, no memory
// traffic, on every pool thread (lctx bench reports GEMM time as a share of it).
#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_loop_512(int64_t iters) {
    __m512 a[16];
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
    for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], m, c);
    __m512 s = a[0];
    for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
    return _mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) float fma_loop_256(int64_t iters) {
    __m256 a[12];
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(static_cast<float>(i));
    for (int64_t it = 0; it < iters; ++it)
#pragma GCC unroll 12
        for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], m, c);
    __m256 s = a[0];
    for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
    float f[8];
    _mm256_storeu_ps(f, s);
    return f[0] + f[7];
}
#endif

} // namespace

double fma_peak_gflops(ThreadPool &pool) {
#if defined(__x86_64__)
    const SimdVariant v = active_variant();
    if (v == SimdVariant::SCALAR) return 0.0;
    const int lanes = v == SimdVariant::AVX512 ? 16 : 8, chains = v == SimdVariant::AVX512 ? 16 : 12;
    const int64_t iters = 20'000'000;
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(pool.size(), [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i)
                sink = v == SimdVariant::AVX512 ? fma_loop_512(iters) : fma_loop_256(iters);
        });
        const double t = seconds_since(t0);
        best = std::max(best, 2.0 * lanes * chains * static_cast<double>(iters) * pool.size() / t / 1e9);
    }
    return best;
#else
    (void)pool;
    return 0.0;
#endif
}

} // namespace lctx::cpu
