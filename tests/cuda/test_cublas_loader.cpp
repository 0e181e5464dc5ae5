// cuBLAS is loaded at run time by the CUDA module (cublas_loader.h), not
// linked: the entry points resolve from the toolkit's library without a GPU,
// and a missing library or symbol is a clear LCTX_ERR_UNSUPPORTED.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cublas_loader.h"
#include "common/error.h"

using namespace lctx;
using ::testing::HasSubstr;

TEST(CublasLoader, ResolvesTheEntryPointsWithoutADevice) {
    const cuda::CublasApi api = cuda::load_cublas(std::string(LCTX_CUDA_LIBRARY_DIR) + "/libcublas.so." +
                                                  std::to_string(CUBLAS_VER_MAJOR));
    EXPECT_NE(api.create, nullptr);
    EXPECT_NE(api.destroy, nullptr);
    EXPECT_NE(api.gemm_ex, nullptr);
    const cuda::CublasApi &once = cuda::cublas();   // by soname, else the toolkit's directory
    EXPECT_NE(once.gemm_ex, nullptr);
    EXPECT_EQ(&once, &cuda::cublas());
}

TEST(CublasLoader, MissingLibraryOrSymbolIsUnsupportedWithTheReason) {
    try {
        cuda::load_cublas("/nonexistent/libcublas.so.99");
        FAIL() << "loaded a library that does not exist";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_UNSUPPORTED);
        EXPECT_THAT(e.what(), HasSubstr("/nonexistent/libcublas.so.99"));
    }
    try {
        cuda::load_cublas("libm.so.6");   // loads, but is not cuBLAS
        FAIL() << "libm.so.6 passed for cuBLAS";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_UNSUPPORTED);
        EXPECT_THAT(e.what(), HasSubstr("no symbol cublasCreate_v2"));
    }
}
