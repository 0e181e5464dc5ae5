// The device runtime CudaBackend (cuda_backend.cpp) runs on: memory, copies,
// pointer classification, launch errors and the f16 GEMM. device_cuda.cpp
// implements it with the CUDA runtime and cuBLAS (the module); the tests
// link a host implementation instead (tests/cuda/emulated_device.cpp, with
// the launches of kernels/cuda/launchers.h run by the launch emulator), so
// the backend's own logic (staging, weight lookup, GEMM routing, key
// splits, top-k chunks) runs without a GPU. cuda_backend.cpp includes no
// CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lctx::cuda::dev {

// Selects the device; returns its description, sets *n_sm (multiprocessors).
// Throws lctx::Error when there is none.
std::string init(int *n_sm);
// Number of usable devices (0 without a device or driver).
int device_count();

// Device memory; throws LCTX_ERR_OUT_OF_MEMORY. free(nullptr) is a no-op.
void *alloc(size_t bytes);
void free(void *p);
// Device memory for one op's temporaries, from a cache of freed blocks
// (block_cache.h) that keeps cudaMalloc and cudaFree off the per-op path;
// its contents are undefined. Give it back with free_temp only.
void *alloc_temp(size_t bytes);
void free_temp(void *p);
// Copy between any two places (host or device; regions must not overlap).
void copy(void *dst, const void *src, size_t bytes);
// Whether p points into device memory (else: host memory).
bool is_device(const void *p);
// Throws lctx::Error if the launches since the last check failed.
void check_launch(const char *op);
// Waits for every kernel and copy issued so far (throws if one failed).
void synchronize();

// y (n x m, row-major, f32) = x16 (n x k, row-major, f16 bits) * w16^T
// (w16: m x k, row-major, f16 bits), f32 accumulation.
class Gemm {
public:
    Gemm();
    ~Gemm();
    Gemm(const Gemm &) = delete;
    Gemm &operator=(const Gemm &) = delete;
    void f16(int64_t m, int64_t n, int64_t k, const uint16_t *w16, const uint16_t *x16, float *y);

private:
    void *handle_ = nullptr;
};

} // namespace lctx::cuda::dev
