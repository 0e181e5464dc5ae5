/* The table a run-time loaded backend module exports (liblctx-NAME.so, e.g.
 * liblctx-cuda.so). The core dlopen()s the module, calls
 * lctx_backend_module_get() and checks the table before using it:
 *   - api_version must equal LCTX_BACKEND_API_VERSION: the backend object
 *     the module creates implements the C++ interface of backend/backend.h,
 *     built with the same header, and the version is bumped whenever that
 *     header changes;
 *   - score() says whether this machine can run the module (0: no GPU, no
 *     driver, ...; higher: preferred over lower scores; the CPU scores 1);
 *   - create() makes a backend (an lctx::Backend*, owned by the caller,
 *     freed with destroy()) or writes why not into err and returns NULL.
 * Any failure (missing file, missing symbol, other version, score 0, create
 * failing) logs one line and the session runs on the CPU. */
#ifndef LCTX_BACKEND_MODULE_ABI_H
#define LCTX_BACKEND_MODULE_ABI_H

#include <stddef.h>
#include <stdint.h>

#define LCTX_BACKEND_API_VERSION 7
#define LCTX_BACKEND_MODULE_SYMBOL "lctx_backend_module_get"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lctx_backend_module {
    uint32_t api_version;   /* LCTX_BACKEND_API_VERSION of the module's build */
    uint32_t struct_size;   /* sizeof(lctx_backend_module) of the module's build */
    const char *name;       /* "cuda": what LCTX_BACKEND selects */
    int32_t (*score)(void);
    void *(*create)(int32_t n_threads, char *err, size_t err_size);
    void (*destroy)(void *backend);
} lctx_backend_module;

typedef const lctx_backend_module *(*lctx_backend_module_get_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* LCTX_BACKEND_MODULE_ABI_H */
