// A session's backend wrapped so that every call is timed: calls, seconds
// and bytes moved per op, from the session's creation on. A session gets it
// when LCTX_PROFILE_OPS is set (docs/profiling.md); lctx_session_op_times
// reads it.
//
// Each call is timed on the calling thread and ends with the backend's
// synchronize(), so a device backend's kernels count in the op that launched
// them, not in the next op that waits for them. A call made from inside
// another timed call, on its thread or on a worker of its parallel_for,
// counts in the outer call only, so the ops' seconds add up to at most the
// session's lifetime when one host thread drives it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <type_traits>
#include <vector>

#include "backend/forwarding_backend.h"

namespace lctx {

class OpTimingBackend final : public ForwardingBackend {
public:
    enum Op : int {
        ALLOC, TO_HOST, FROM_HOST, COPY, PREPARE, PARALLEL_FOR, GET_ROWS, RMS_NORM, MATMUL, MATMUL_MULTI, ROPE,
        SWIGLU, GEGLU, SCALE, ADD, ADD_BIAS, ATTENTION, GATHER_ROWS, STORE_ROWS, LOAD_ROWS, TOP_K, TOPK_DOT,
        MAX_DOT_F16, TOKEN_SURPRISAL, N_OPS
    };
    struct Entry {
        const char *op;    // static name, as the Backend method is called
        int64_t calls;
        double seconds;
        int64_t bytes;     // to_host, from_host, copy, alloc: bytes; other ops 0
    };

    explicit OpTimingBackend(std::unique_ptr<Backend> inner);

    // The ops called at least once, in Op order.
    std::vector<Entry> entries() const;
    // Seconds since this backend was made (the session's creation).
    double lifetime_s() const;
    // Whether LCTX_PROFILE_OPS asks for timing (set, not empty, not "0").
    static bool requested();

    std::unique_ptr<Buffer> alloc(size_t bytes) override;
    void to_host(void *d, const void *s, size_t n) override;
    void from_host(void *d, const void *s, size_t n) override;
    void copy(void *d, const void *s, size_t n) override;
    void prepare(const Model &model) override;
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override;
    void get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) override;
    void rms_norm(const float *x, const WeightView &w, float *y, int64_t rows, int64_t n, float eps) override;
    void matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) override;
    void matmul_multi(const MatmulJob *jobs, int n, const float *x, int64_t ldx, int64_t n_tok) override;
    void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t heads, const int32_t *pos) override;
    void swiglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) override;
    void geglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) override;
    void scale(float *x, float s, int64_t n) override;
    void add(float *x, const float *y, int64_t n) override;
    void add_bias(float *x, const WeightView &b, int64_t n_rows) override;
    void attention(const AttentionArgs &a) override;
    void gather_rows(KvType t, void *d, const void *s, const int64_t *idx, int64_t n, int64_t row) override;
    void store_rows(KvType t, void *d, int64_t ldd, const float *s, int64_t lds, int64_t n, int64_t row) override;
    void load_rows(KvType t, float *d, int64_t ldd, const void *s, int64_t lds, int64_t n, int64_t row) override;
    std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) override;
    void topk_dot(const TopkDotArgs &a) override;
    void max_dot_f16(const MaxDotArgs &a) override;
    void token_surprisal(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens,
                         float *out) override;

private:
    template <class F>
    auto timed(Op op, size_t bytes, F &&f) -> decltype(f());

    std::unique_ptr<Backend> owned_;
    std::chrono::steady_clock::time_point born_;
    std::atomic<int64_t> calls_[N_OPS] = {};
    std::atomic<int64_t> ns_[N_OPS] = {};
    std::atomic<int64_t> bytes_[N_OPS] = {};
};

} // namespace lctx
