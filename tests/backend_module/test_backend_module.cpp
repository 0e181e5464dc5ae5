// A backend module for the tests of run-time loading (src/backend/registry.h):
// it exports the module table of module_abi.h and creates a backend that is
// the CPU backend under another name ("testcpu"), built into the module from
// the same kernels. Compile definitions make broken variants:
//   TEST_MODULE_API_VERSION  the api_version it claims (default: the real one)
//   TEST_MODULE_SCORE        what score() returns (default 5)
//   TEST_MODULE_FAIL_CREATE  create() fails with a message
//   TEST_MODULE_NO_TABLE     the table symbol is missing
#include <cstdio>
#include <memory>

#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "backend/module_abi.h"

#ifndef TEST_MODULE_API_VERSION
#define TEST_MODULE_API_VERSION LCTX_BACKEND_API_VERSION
#endif
#ifndef TEST_MODULE_SCORE
#define TEST_MODULE_SCORE 5
#endif

namespace {

// Everything forwarded to a CPU backend; only the name differs, so a session
// on it must give exactly the CPU's answers.
class Renamed final : public lctx::ForwardingBackend {
public:
    explicit Renamed(int n) : ForwardingBackend(lctx::make_cpu_backend(n).release()) {}
    ~Renamed() override { delete inner(); }
    const char *name() const override { return "testcpu"; }
    std::string description() const override { return "testcpu: " + inner()->description(); }
};

int32_t score() { return TEST_MODULE_SCORE; }

void *create(int32_t n_threads, char *err, size_t err_size) {
#ifdef TEST_MODULE_FAIL_CREATE
    std::snprintf(err, err_size, "test module: refusing to start");
    return nullptr;
#else
    (void)err;
    (void)err_size;
    return static_cast<lctx::Backend *>(new Renamed(n_threads));
#endif
}

void destroy(void *b) { delete static_cast<lctx::Backend *>(b); }

const lctx_backend_module kTable = {TEST_MODULE_API_VERSION, sizeof(lctx_backend_module), "testcpu", score, create,
                                    destroy};

} // namespace

#ifndef TEST_MODULE_NO_TABLE
extern "C" __attribute__((visibility("default"))) const lctx_backend_module *lctx_backend_module_get(void) {
    return &kTable;
}
#endif
