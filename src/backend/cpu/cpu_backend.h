// The CPU backend: today's SIMD kernels (kernels/cpu/) behind the Backend
// interface, with a persistent thread pool. Buffers are host memory.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace lctx {

// n_threads >= 1 (the calling thread included).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// "avx512bf16", "avx512", "avx2" or "scalar": the kernel variant this CPU runs.
const char *cpu_backend_variant();
// Whether the bf16 kernels (lctx_precision) run on this CPU.
bool cpu_backend_bf16_available();
// Whether its matmuls have the int8 arithmetic (LCTX_PRECISION_INT8): the
// active SIMD variant is AVX2 or AVX-512.
bool cpu_backend_int8_available();

// f32 GFLOP/s peak of this CPU's SIMD FMA units on the backend's threads
// (lctx bench); 0 when `backend` is not the CPU backend or runs scalar code.
double cpu_backend_fma_peak_gflops(Backend &backend);

// GB/s the backend's threads read from main memory together (lctx bench);
// 0 when `backend` is not the CPU backend.
double cpu_backend_read_bandwidth_gb_s(Backend &backend);

} // namespace lctx
