// The device runtime of CudaBackend (device.h) on the CUDA runtime and
// cuBLAS (loaded at run time: cublas_loader.h). Everything uses the legacy
// default stream: the synchronous copies order themselves after the kernels.
#include "backend/cuda/device.h"

#include <cuda_runtime.h>

#include "backend/cuda/block_cache.h"
#include "backend/cuda/cublas_loader.h"
#include "common/error.h"

namespace lctx::cuda::dev {

namespace {

void check(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    cudaGetLastError();   // clear a non-sticky error so the next call starts clean
    fail(e == cudaErrorMemoryAllocation ? LCTX_ERR_OUT_OF_MEMORY : LCTX_ERR_INTERNAL, "cuda: %s: %s", what,
         cudaGetErrorString(e));
}

} // namespace

std::string init(int *n_sm) {
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    *n_sm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    return format("%s, sm_%d%d, %.0f GiB", prop.name, prop.major, prop.minor,
                  double(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

void *alloc(size_t bytes) {
    void *p = nullptr;
    if (bytes == 0) return nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fail(LCTX_ERR_OUT_OF_MEMORY, "cuda: cannot allocate %.1f MiB of device memory: %s",
             double(bytes) / (1024.0 * 1024.0), cudaGetErrorString(e));
    }
    return p;
}

void free(void *p) {
    if (p) cudaFree(p);
}

namespace {
// Never destroyed: at exit the CUDA runtime may be gone before static
// destructors run, and the driver releases the memory anyway.
BlockCache &temp_cache() {
    static BlockCache *cache = new BlockCache(alloc, free, kTempCacheBytes, kTempBlockMax);
    return *cache;
}
} // namespace

void *alloc_temp(size_t bytes) { return temp_cache().alloc(bytes); }
void free_temp(void *p) { temp_cache().free(p); }

void copy(void *dst, const void *src, size_t bytes) {
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

bool is_device(const void *p) {
    if (!p) return false;
    cudaPointerAttributes at{};
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

void check_launch(const char *op) { check(cudaGetLastError(), op); }
void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

Gemm::Gemm() {
    cublasHandle_t h = nullptr;
    const cublasStatus_t s = cublas().create(&h);
    if (s != CUBLAS_STATUS_SUCCESS) fail(LCTX_ERR_INTERNAL, "cublas: cublasCreate failed (status %d)", static_cast<int>(s));
    handle_ = h;
}

Gemm::~Gemm() {
    if (handle_) cublas().destroy(static_cast<cublasHandle_t>(handle_));
}

void Gemm::f16(int64_t m, int64_t n, int64_t k, const uint16_t *w16, const uint16_t *x16, float *y) {
    const float one = 1.0f, zero = 0.0f;
    // column-major: C (m x n, ldc m) = A^T (A: k x m, lda k) * B (k x n, ldb k)
    const cublasStatus_t s = cublas().gemm_ex(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N,
                                          static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, w16,
                                          CUDA_R_16F, static_cast<int>(k), x16, CUDA_R_16F, static_cast<int>(k), &zero,
                                          y, CUDA_R_32F, static_cast<int>(m), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) fail(LCTX_ERR_INTERNAL, "cublas: cublasGemmEx failed (status %d)", static_cast<int>(s));
}

} // namespace lctx::cuda::dev
