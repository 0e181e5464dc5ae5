// See cublas_loader.h.
#include "backend/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>

#include "common/error.h"

namespace lctx::cuda {

namespace {

template <class Fn>
void resolve(void *lib, const char *name, const std::string &library, Fn &out) {
    void *sym = dlsym(lib, name);
    if (!sym) fail(LCTX_ERR_UNSUPPORTED, "cuda: %s has no symbol %s", library.c_str(), name);
    out = reinterpret_cast<Fn>(sym);
}

} // namespace

CublasApi load_cublas(const std::string &library) {
    void *lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        fail(LCTX_ERR_UNSUPPORTED, "cuda: cannot load cuBLAS (%s): %s", library.c_str(), why ? why : "unknown reason");
    }
    CublasApi api;
    resolve(lib, "cublasCreate_v2", library, api.create);
    resolve(lib, "cublasDestroy_v2", library, api.destroy);
    resolve(lib, "cublasGemmEx", library, api.gemm_ex);
    return api;
}

const CublasApi &cublas() {
    static std::once_flag once;
    static CublasApi api;
    std::call_once(once, [] {
        const std::string name = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
        try {
            api = load_cublas(name);
        } catch (const Error &) {
#ifdef LCTX_CUDA_LIBRARY_DIR
            api = load_cublas(std::string(LCTX_CUDA_LIBRARY_DIR) + "/" + name);
#else
            throw;
#endif
        }
    });
    return api;
}

} // namespace lctx::cuda
