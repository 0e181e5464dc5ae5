// cuBLAS loaded at run time, when the first GEMM context is made, instead of
// being a link dependency of liblctx-cuda.so: every lctx process that scans
// its backend modules loads that module, and cuBLAS's libraries cost it about
// 150 MiB of resident memory even on a machine without a GPU.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace lctx::cuda {

struct CublasApi {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    // The C entry point (cublas_api.h also declares C++ overloads of the name).
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void *, const void *, cudaDataType, int, const void *, cudaDataType, int,
                                      const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    GemmEx gemm_ex = nullptr;
};

// The three entry points lctx uses, from `library` (a file name searched the
// dlopen way, or a path). Throws LCTX_ERR_UNSUPPORTED naming the library and
// the loader's reason when it or a symbol is missing. The library stays
// loaded for the life of the process.
CublasApi load_cublas(const std::string &library);

// load_cublas of libcublas.so.<the major version built against>, then of the
// same file in the toolkit's directory of the build; loaded once per process.
const CublasApi &cublas();

} // namespace lctx::cuda
