// Kernel bodies of the KV row moves (launch.h), semantics of
// Backend::gather_rows / store_rows / load_rows (src/backend/backend.h):
// one block per row, threads over the row's elements. f16 conversion rounds
// to nearest even, as lctx::fp32_to_fp16.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace lctx::cuda {

constexpr int kKvThreads = 128;
inline LaunchDims kv_rows_dims(int64_t n_rows) { return {{static_cast<unsigned>(n_rows), 1, 1}, kKvThreads, 0}; }

// dst[i] = src[idx[i]], rows of `row` elements of esize bytes (2 or 4).
// dst and src must not overlap (the backend gathers through a temporary).
struct GatherArgs {
    void *dst;
    const void *src;
    const int64_t *idx;
    int64_t row;
    int esize;
};

template <class Ctx>
LCTX_HD void gather_rows_body(Ctx &c, const GatherArgs &a) {
    const int64_t i = c.bx(), s = a.idx[i];
    if (a.esize == 2) {
        const uint16_t *src = static_cast<const uint16_t *>(a.src) + s * a.row;
        uint16_t *dst = static_cast<uint16_t *>(a.dst) + i * a.row;
        for (int64_t e = c.tid(); e < a.row; e += c.nthreads()) dst[e] = src[e];
    } else {
        const float *src = static_cast<const float *>(a.src) + s * a.row;
        float *dst = static_cast<float *>(a.dst) + i * a.row;
        for (int64_t e = c.tid(); e < a.row; e += c.nthreads()) dst[e] = src[e];
    }
}

// store (f32 -> f32 or f16) and load (f32 or f16 -> f32) of n rows of `row`
// elements; ld_* in elements of each side's type.
struct RowConvertArgs {
    void *dst;
    int64_t ld_dst;
    bool dst_f16;
    const void *src;
    int64_t ld_src;
    bool src_f16;
    int64_t row;
};

template <class Ctx>
LCTX_HD void convert_rows_body(Ctx &c, const RowConvertArgs &a) {
    const int64_t i = c.bx();
    for (int64_t e = c.tid(); e < a.row; e += c.nthreads()) {
        const float v = a.src_f16 ? half_to_float(static_cast<const uint16_t *>(a.src)[i * a.ld_src + e])
                                  : static_cast<const float *>(a.src)[i * a.ld_src + e];
        if (a.dst_f16) static_cast<uint16_t *>(a.dst)[i * a.ld_dst + e] = float_to_half(v);
        else static_cast<float *>(a.dst)[i * a.ld_dst + e] = v;
    }
}

} // namespace lctx::cuda
