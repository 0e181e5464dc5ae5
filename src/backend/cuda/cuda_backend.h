// The CUDA backend (docs/backends/cuda.md): device memory for buffers, the
// kernels of kernels/cuda/ for the ops, cuBLAS for the prefill GEMM. Built
// only into the run-time loaded module liblctx-cuda.so (cuda_module.cpp);
// the core library never links the CUDA libraries.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace lctx {

// Number of CUDA devices this process can use (0 without a device or driver).
int cuda_device_count();

// A backend on device 0. Throws lctx::Error when the device cannot be set up.
std::unique_ptr<Backend> make_cuda_backend(int n_threads);

} // namespace lctx
