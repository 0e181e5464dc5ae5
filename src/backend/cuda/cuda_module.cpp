// The module table of liblctx-cuda.so (backend/module_abi.h): score() is 0
// when the CUDA runtime finds no device (no GPU, no driver), so the registry
// logs one line and the session runs on the CPU; with a device it is 10
// (preferred over the CPU's 1).
#include <cstdio>
#include <exception>

#include "backend/cuda/cuda_backend.h"
#include "backend/module_abi.h"

namespace {

int32_t score() { return lctx::cuda_device_count() > 0 ? 10 : 0; }

void *create(int32_t n_threads, char *err, size_t err_size) {
    try {
        return static_cast<lctx::Backend *>(lctx::make_cuda_backend(n_threads).release());
    } catch (const std::exception &e) {
        if (err && err_size) std::snprintf(err, err_size, "%s", e.what());
    } catch (...) {
        if (err && err_size) std::snprintf(err, err_size, "unknown error");
    }
    return nullptr;
}

void destroy(void *b) { delete static_cast<lctx::Backend *>(b); }

const lctx_backend_module kTable = {LCTX_BACKEND_API_VERSION, sizeof(lctx_backend_module), "cuda", score, create,
                                    destroy};

} // namespace

extern "C" __attribute__((visibility("default"))) const lctx_backend_module *lctx_backend_module_get(void) {
    return &kTable;
}
