// A session: one document read with one method, then any number of
// questions. Owns the stage machine (FEEDING -> INDEXED -> SELECTED ->
// DECODING, with select allowed again after INDEXED), argument checks,
// cancellation and sampling; the method does the work of each stage.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"
#include "common/memory_budget.h"
#include "session/method.h"
#include "session/sampler.h"

namespace lctx {

class OpTimingBackend;

class Session {
public:
    // Reads params by the ABI rule of lctx.h (struct_size), validates them
    // (LCTX_ERR_INVALID_ARG) and builds the method from the registry
    // (LCTX_ERR_UNSUPPORTED for an unimplemented one).
    // backend: a backend name ("cpu", a module's), "" for $LCTX_BACKEND or the best available.
    Session(const Model &model, const lctx_session_params &params, const std::string &backend = "");
    ~Session();

    void feed(const int32_t *tokens, size_t n);
    void build_index();
    std::unique_ptr<Selection> select(const int32_t *query, size_t n);
    void recompute(const Selection &selection);
    int32_t decode(const lctx_sampling_params &sampling);
    // Teacher forcing: `token` is the next token; returns its log probability
    // under the current logits.
    float decode_token(int32_t token);

    // lctx_session_set_refreshkv: the decoding of the next questions (null:
    // dense); LCTX_ERR_INVALID_ARG for bad knobs, LCTX_ERR_UNSUPPORTED for a
    // method that cannot switch. Nothing changes on error.
    void set_refreshkv(const lctx_refreshkv_params *params);

    lctx_stage stage() const { return stage_; }
    // The backend this session runs on ("cpu" after a fallback).
    const char *backend_name() const { return backend_->name(); }
    // The per-op times of this session's backend calls, or nullptr when it
    // was made without LCTX_PROFILE_OPS.
    const OpTimingBackend *op_timing() const { return op_timing_; }
    int64_t n_fed() const { return method_->n_fed(); }
    uint64_t id() const { return id_; }
    // The logits the last decoded (or recomputed) position produced: after
    // decode / decode_token returned token t, those t was drawn or scored from.
    const float *logits() const { return has_logits_ ? logits_.data() : nullptr; }
    // The logits the next decode samples from (lctx_session_logits): runs the
    // forward pass of a token decode returned, which the next decode would
    // otherwise run; null before recompute.
    const float *next_logits();
    // Asks the running long call to stop; a request that finds no call
    // running (or one past its last check) stays pending and stops the next
    // long call or decode: a cancel is never lost. It is consumed by the call
    // that returns LCTX_ERR_CANCELLED for it.
    void cancel() { cancel_.store(true); }
    // REFORM index persistence (LCTX_ERR_UNSUPPORTED for other methods).
    // load_index needs a new session and leaves it INDEXED.
    void save_index(const std::string &path);
    void load_index(const std::string &path);
    Method &method() { return *method_; }
    lctx_method method_id() const { return params_.method; }
    // The session's memory budget: what its caches and stores hold now and at most.
    const MemoryBudget &memory() const { return budget_; }

private:
    void append_pending();
    void expect_stage(const char *call, std::initializer_list<lctx_stage> allowed) const;
    void check_tokens(const char *what, const int32_t *tokens, size_t n) const;
    // Runs one long call: body(progress), then the end-of-call report
    // (Progress::finish); a stop asked for at any point, done = 1.0 included,
    // makes the call fail with LCTX_ERR_CANCELLED before its stage changes.
    // The pending cancel request is consumed when the call is cancelled.
    template <class Body> void run_call(const char *call, Body &&body);

    const Model &model_;
    // The caller's params read by the ABI rule; reform/kv/infllm point at the
    // copies below (strings included), never at the caller's memory.
    lctx_session_params params_;
    lctx_reform_params reform_;
    lctx_kv_params kv_;
    lctx_infllm_params infllm_;
    lctx_ilre_params ilre_;
    lctx_reattention_params reattention_;
    lctx_refreshkv_params refreshkv_;
    std::string heads_path_, catalyst_, ilre_max_kernels_, ilre_avg_kernels_, ilre_profile_path_;
    std::string reattention_store_dir_;
    uint64_t id_;
    MemoryBudget budget_;                // lctx_session_params.max_memory; outlives what is charged to it
    std::unique_ptr<Backend> backend_;   // declared before method_: destroyed after it
    const OpTimingBackend *op_timing_ = nullptr;   // inside backend_, with LCTX_PROFILE_OPS
    std::unique_ptr<Method> method_;
    lctx_stage stage_ = LCTX_STAGE_FEEDING;
    std::atomic<bool> cancel_{false};
    std::vector<float> logits_;
    bool has_logits_ = false;
    int32_t pending_ = -1;   // sampled token not yet appended to the decode cache
    std::vector<int32_t> generated_;
    Rng rng_;
    uint64_t rng_seed_ = 0;
    bool rng_seeded_ = false;
};

const char *stage_name(lctx_stage stage);
// The registry's name of a method ("unknown" for a value it does not know).
const char *method_name(lctx_method method);

} // namespace lctx
