// What a CUDA kernel body may use, so that one body compiles both as device
// code (nvcc, through DeviceCtx and a thin __global__ wrapper in kernels.cu)
// and as host C++ run by the launch emulator (emulate.h, HostCtx), which is
// how the kernels are tested on machines without a GPU (docs/backends/cuda.md).
//
// A body is `template <class Ctx> LCTX_HD void body(Ctx &c, const Args &a)`
// and reaches the launch only through c:
//   c.tid(), c.nthreads()          thread index in the (1-D) block, block size
//   c.bx(), c.by(), c.bz()         block index; c.gx(), c.gy(), c.gz() grid size
//   c.shared()                     the block's dynamic shared memory (char *)
//   c.sync()                       __syncthreads()
//   c.atomic_add(p, v)             float atomic add on global memory
//   c.atomic_max_nonneg(p, v)      float atomic max, both sides >= 0
// No warp intrinsics: reductions go through shared memory (block_sum below).
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define LCTX_HD __host__ __device__
#define LCTX_DEV __device__
#else
#define LCTX_HD
#define LCTX_DEV
#endif

namespace lctx::cuda {

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
};

// Geometry of one launch: the GPU wrapper (kernels.cu) and the emulated
// tests take it from the same *_dims() function of each kernel header.
struct LaunchDims {
    Dim3 grid;
    int block = 1;
    size_t shmem = 0;
};

#ifdef __CUDACC__
// The real launch: indices from the hardware registers.
struct DeviceCtx {
    __device__ int tid() const { return static_cast<int>(threadIdx.x); }
    __device__ int nthreads() const { return static_cast<int>(blockDim.x); }
    __device__ int64_t bx() const { return blockIdx.x; }
    __device__ int64_t by() const { return blockIdx.y; }
    __device__ int64_t bz() const { return blockIdx.z; }
    __device__ int64_t gx() const { return gridDim.x; }
    __device__ int64_t gy() const { return gridDim.y; }
    __device__ int64_t gz() const { return gridDim.z; }
    __device__ char *shared() const {
        extern __shared__ __align__(16) char lctx_dyn_shared[];
        return lctx_dyn_shared;
    }
    __device__ void sync() const { __syncthreads(); }
    __device__ void atomic_add(float *p, float v) const { atomicAdd(p, v); }
    // Non-negative floats order like their bit patterns as signed ints.
    __device__ void atomic_max_nonneg(float *p, float v) const {
        atomicMax(reinterpret_cast<int *>(p), __float_as_int(v));
    }
};
#endif

// IEEE half <-> float by bit manipulation: the same results in device code,
// in the emulator and as lctx::fp16_to_fp32 / fp32_to_fp16 (round to nearest
// even), without depending on cuda_fp16.h in host code.
LCTX_HD inline float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {   // subnormal: normalise
            int e = -1;
            do {
                man <<= 1;
                ++e;
            } while (!(man & 0x400u));
            bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    union {
        uint32_t u;
        float f;
    } cv{bits};
    return cv.f;
}

LCTX_HD inline uint16_t float_to_half(float f) {
    union {
        float f;
        uint32_t u;
    } cv{f};
    const uint32_t x = cv.u;
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u);   // NaN, inf
    if (ax >= 0x477ff000u) return sign | 0x7c00u;                                     // rounds past 65504
    if (ax < 0x38800000u) {   // below the smallest normal half: subnormal or zero
        if (ax < 0x33000000u) return sign;   // below half the smallest subnormal
        const uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        const int shift = 126 - static_cast<int>(ax >> 23);   // 14 .. 24
        const uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        return sign | static_cast<uint16_t>(q + (rem > halfway || (rem == halfway && (q & 1u))));
    }
    const uint32_t q = ((ax >> 13) - (112u << 10)), rem = ax & 0x1fffu;
    return sign | static_cast<uint16_t>(q + (rem > 0x1000u || (rem == 0x1000u && (q & 1u))));
}

// Sum over the block of every thread's v; every thread gets the result.
// Uses nthreads() floats of shared memory at red (and syncs before reuse).
// nthreads() must be a power of two.
template <class Ctx>
LCTX_HD float block_sum(Ctx &c, float *red, float v) {
    red[c.tid()] = v;
    c.sync();
    for (int s = c.nthreads() / 2; s > 0; s >>= 1) {
        if (c.tid() < s) red[c.tid()] += red[c.tid() + s];
        c.sync();
    }
    const float r = red[0];
    c.sync();
    return r;
}

template <class Ctx>
LCTX_HD float block_max(Ctx &c, float *red, float v) {
    red[c.tid()] = v;
    c.sync();
    for (int s = c.nthreads() / 2; s > 0; s >>= 1) {
        if (c.tid() < s && red[c.tid() + s] > red[c.tid()]) red[c.tid()] = red[c.tid() + s];
        c.sync();
    }
    const float r = red[0];
    c.sync();
    return r;
}

LCTX_HD inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

} // namespace lctx::cuda
