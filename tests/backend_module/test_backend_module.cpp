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
class Renamed final : public lctx::Backend {
public:
    explicit Renamed(int n) : cpu_(lctx::make_cpu_backend(n)) {}
    const char *name() const override { return "testcpu"; }
    std::string description() const override { return "testcpu: " + cpu_->description(); }
    int n_threads() const override { return cpu_->n_threads(); }
    std::unique_ptr<lctx::Buffer> alloc(size_t b) override { return cpu_->alloc(b); }
    bool host_memory() const override { return true; }
    void to_host(void *d, const void *s, size_t n) override { cpu_->to_host(d, s, n); }
    void from_host(void *d, const void *s, size_t n) override { cpu_->from_host(d, s, n); }
    void copy(void *d, const void *s, size_t n) override { cpu_->copy(d, s, n); }
    void prepare(const lctx::Model &m) override { cpu_->prepare(m); }
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override {
        cpu_->parallel_for(n, fn);
    }
    void get_rows(const lctx::WeightView &W, const int32_t *ids, int64_t n, float *out) override {
        cpu_->get_rows(W, ids, n, out);
    }
    void rms_norm(const float *x, const lctx::WeightView &w, float *y, int64_t r, int64_t n, float eps) override {
        cpu_->rms_norm(x, w, y, r, n, eps);
    }
    void matmul(const lctx::WeightView &W, const float *x, int64_t ldx, int64_t t, float *y) override {
        cpu_->matmul(W, x, ldx, t, y);
    }
    void matmul_multi(const lctx::MatmulJob *j, int n, const float *x, int64_t ldx, int64_t t) override {
        cpu_->matmul_multi(j, n, x, ldx, t);
    }
    void rope(const lctx::Hparams &hp, float *x, int64_t ld, int64_t t, int32_t nh, const int32_t *p) override {
        cpu_->rope(hp, x, ld, t, nh, p);
    }
    void swiglu(const float *g, const float *u, float *o, int64_t r, int64_t n) override { cpu_->swiglu(g, u, o, r, n); }
    void add(float *x, const float *y, int64_t n) override { cpu_->add(x, y, n); }
    void attention(const lctx::AttentionArgs &a) override { cpu_->attention(a); }
    void gather_rows(lctx::KvType t, void *d, const void *s, const int64_t *i, int64_t n, int64_t r) override {
        cpu_->gather_rows(t, d, s, i, n, r);
    }
    void store_rows(lctx::KvType t, void *d, int64_t ldd, const float *s, int64_t lds, int64_t n, int64_t r) override {
        cpu_->store_rows(t, d, ldd, s, lds, n, r);
    }
    void load_rows(lctx::KvType t, float *d, int64_t ldd, const void *s, int64_t lds, int64_t n, int64_t r) override {
        cpu_->load_rows(t, d, ldd, s, lds, n, r);
    }
    std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) override { return cpu_->top_k(x, n, k); }

private:
    std::unique_ptr<lctx::Backend> cpu_;
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
