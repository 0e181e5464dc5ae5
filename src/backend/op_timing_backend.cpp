#include "backend/op_timing_backend.h"

#include <cstdlib>
#include <cstring>

namespace lctx {

namespace {

// Timed calls under way on this thread: only the outermost one is recorded.
thread_local int t_depth = 0;

struct Nested {
    Nested() { ++t_depth; }
    ~Nested() { --t_depth; }
    Nested(const Nested &) = delete;
    Nested &operator=(const Nested &) = delete;
};

constexpr const char *kNames[OpTimingBackend::N_OPS] = {
    "alloc", "to_host", "from_host", "copy", "prepare", "parallel_for", "get_rows", "rms_norm", "matmul",
    "matmul_multi", "rope", "swiglu", "geglu", "scale", "add", "add_bias", "attention", "gather_rows", "store_rows",
    "load_rows", "top_k", "topk_dot", "max_dot_f16", "token_surprisal"};

} // namespace

OpTimingBackend::OpTimingBackend(std::unique_ptr<Backend> inner)
    : ForwardingBackend(inner.get()), owned_(std::move(inner)), born_(std::chrono::steady_clock::now()) {}

bool OpTimingBackend::requested() {
    const char *v = std::getenv("LCTX_PROFILE_OPS");
    return v && *v && std::strcmp(v, "0") != 0;
}

double OpTimingBackend::lifetime_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - born_).count();
}

std::vector<OpTimingBackend::Entry> OpTimingBackend::entries() const {
    std::vector<Entry> out;
    for (int i = 0; i < N_OPS; ++i) {
        const int64_t calls = calls_[i].load(std::memory_order_relaxed);
        if (calls == 0) continue;
        out.push_back({kNames[i], calls, static_cast<double>(ns_[i].load(std::memory_order_relaxed)) * 1e-9,
                       bytes_[i].load(std::memory_order_relaxed)});
    }
    return out;
}

template <class F>
auto OpTimingBackend::timed(Op op, size_t bytes, F &&f) -> decltype(f()) {
    if (t_depth > 0) return f();   // inside another timed call: counted there
    Nested nested;
    // Recorded also when the op throws: the time was spent.
    struct Record {
        OpTimingBackend &self;
        Op op;
        size_t bytes;
        std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
        ~Record() {
            const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
            self.calls_[op].fetch_add(1, std::memory_order_relaxed);
            self.ns_[op].fetch_add(static_cast<int64_t>(ns.count()), std::memory_order_relaxed);
            self.bytes_[op].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
        }
    } record{*this, op, bytes};
    if constexpr (std::is_void_v<decltype(f())>) {
        f();
        inner()->synchronize();
    } else {
        auto r = f();
        inner()->synchronize();
        return r;
    }
}

std::unique_ptr<Buffer> OpTimingBackend::alloc(size_t bytes) {
    return timed(ALLOC, bytes, [&] { return inner()->alloc(bytes); });
}
void OpTimingBackend::to_host(void *d, const void *s, size_t n) {
    timed(TO_HOST, n, [&] { inner()->to_host(d, s, n); });
}
void OpTimingBackend::from_host(void *d, const void *s, size_t n) {
    timed(FROM_HOST, n, [&] { inner()->from_host(d, s, n); });
}
void OpTimingBackend::copy(void *d, const void *s, size_t n) {
    timed(COPY, n, [&] { inner()->copy(d, s, n); });
}
void OpTimingBackend::prepare(const Model &model) {
    timed(PREPARE, 0, [&] { inner()->prepare(model); });
}
void OpTimingBackend::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) {
    timed(PARALLEL_FOR, 0, [&] {
        // Workers run the body as part of this call: ops it issues count here.
        inner()->parallel_for(n, [&fn](int64_t b, int64_t e, int t) {
            Nested nested;
            fn(b, e, t);
        });
    });
}
void OpTimingBackend::get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) {
    timed(GET_ROWS, 0, [&] { inner()->get_rows(W, ids, n, out); });
}
void OpTimingBackend::rms_norm(const float *x, const WeightView &w, float *y, int64_t rows, int64_t n, float eps) {
    timed(RMS_NORM, 0, [&] { inner()->rms_norm(x, w, y, rows, n, eps); });
}
void OpTimingBackend::matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) {
    timed(MATMUL, 0, [&] { inner()->matmul(W, x, ldx, n_tok, y); });
}
void OpTimingBackend::matmul_multi(const MatmulJob *jobs, int n, const float *x, int64_t ldx, int64_t n_tok) {
    timed(MATMUL_MULTI, 0, [&] { inner()->matmul_multi(jobs, n, x, ldx, n_tok); });
}
void OpTimingBackend::rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t heads, const int32_t *pos) {
    timed(ROPE, 0, [&] { inner()->rope(hp, x, ld, n_tok, heads, pos); });
}
void OpTimingBackend::swiglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) {
    timed(SWIGLU, 0, [&] { inner()->swiglu(g, u, o, rows, n); });
}
void OpTimingBackend::geglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) {
    timed(GEGLU, 0, [&] { inner()->geglu(g, u, o, rows, n); });
}
void OpTimingBackend::scale(float *x, float s, int64_t n) {
    timed(SCALE, 0, [&] { inner()->scale(x, s, n); });
}
void OpTimingBackend::add(float *x, const float *y, int64_t n) {
    timed(ADD, 0, [&] { inner()->add(x, y, n); });
}
void OpTimingBackend::add_bias(float *x, const WeightView &b, int64_t n_rows) {
    timed(ADD_BIAS, 0, [&] { inner()->add_bias(x, b, n_rows); });
}
void OpTimingBackend::attention(const AttentionArgs &a) {
    timed(ATTENTION, 0, [&] { inner()->attention(a); });
}
void OpTimingBackend::gather_rows(KvType t, void *d, const void *s, const int64_t *idx, int64_t n, int64_t row) {
    timed(GATHER_ROWS, 0, [&] { inner()->gather_rows(t, d, s, idx, n, row); });
}
void OpTimingBackend::store_rows(KvType t, void *d, int64_t ldd, const float *s, int64_t lds, int64_t n, int64_t row) {
    timed(STORE_ROWS, 0, [&] { inner()->store_rows(t, d, ldd, s, lds, n, row); });
}
void OpTimingBackend::load_rows(KvType t, float *d, int64_t ldd, const void *s, int64_t lds, int64_t n, int64_t row) {
    timed(LOAD_ROWS, 0, [&] { inner()->load_rows(t, d, ldd, s, lds, n, row); });
}
std::vector<int64_t> OpTimingBackend::top_k(const float *x, int64_t n, int64_t k) {
    return timed(TOP_K, 0, [&] { return inner()->top_k(x, n, k); });
}
void OpTimingBackend::topk_dot(const TopkDotArgs &a) {
    timed(TOPK_DOT, 0, [&] { inner()->topk_dot(a); });
}
void OpTimingBackend::max_dot_f16(const MaxDotArgs &a) {
    timed(MAX_DOT_F16, 0, [&] { inner()->max_dot_f16(a); });
}

void OpTimingBackend::token_surprisal(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens,
                                      float *out) {
    timed(TOKEN_SURPRISAL, 0, [&] { inner()->token_surprisal(logits, n_rows, n_vocab, tokens, out); });
}

} // namespace lctx
