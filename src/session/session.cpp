#include "session/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "common/error.h"
#include "common/log.h"
#include "session/method_ilre.h"
#include "session/method_reform.h"
#include "session/method_registry.h"
#include "session/refreshkv.h"
#include "session/session_params.h"
#include "backend/budget_backend.h"
#include "backend/op_timing_backend.h"
#include "backend/registry.h"

namespace lctx {

namespace {
std::atomic<uint64_t> g_next_session_id{1};
}

const char *stage_name(lctx_stage stage) {
    switch (stage) {
    case LCTX_STAGE_FEEDING: return "FEEDING";
    case LCTX_STAGE_INDEXED: return "INDEXED";
    case LCTX_STAGE_SELECTED: return "SELECTED";
    case LCTX_STAGE_DECODING: return "DECODING";
    }
    return "UNKNOWN";
}

const char *method_name(lctx_method method) {
    int32_t value = 0;
    std::memcpy(&value, &method, sizeof value);
    const MethodInfo *m = find_method(value);
    return m ? m->name : "unknown";
}

Session::Session(const Model &model, const lctx_session_params &params, const std::string &backend)
    : model_(model), params_(read_session_params(&params)), id_(g_next_session_id.fetch_add(1)),
      budget_(params_.max_memory) {
    // Own full-size copies of the method structs (and their strings): the
    // caller's may be smaller (an older lctx.h) and must not be kept.
    reform_ = read_reform_params(params_.reform);
    kv_ = read_kv_params(params_.kv);
    infllm_ = read_infllm_params(params_.infllm);
    heads_path_ = reform_.heads_path ? reform_.heads_path : "";
    reform_.heads_path = reform_.heads_path ? heads_path_.c_str() : nullptr;
    catalyst_ = kv_.infinipot_catalyst ? kv_.infinipot_catalyst : "";
    kv_.infinipot_catalyst = kv_.infinipot_catalyst ? catalyst_.c_str() : nullptr;
    ilre_ = read_ilre_params(params_.ilre);
    auto own = [](const char *&field, std::string &copy) {
        copy = field ? field : "";
        field = field ? copy.c_str() : nullptr;
    };
    own(ilre_.max_kernels, ilre_max_kernels_);
    own(ilre_.avg_kernels, ilre_avg_kernels_);
    own(ilre_.profile_path, ilre_profile_path_);
    params_.ilre = &ilre_;
    reattention_ = read_reattention_params(params_.reattention);
    own(reattention_.store_dir, reattention_store_dir_);
    params_.reattention = &reattention_;
    refreshkv_ = read_refreshkv_params(params_.refreshkv);
    params_.refreshkv = &refreshkv_;
    params_.reform = &reform_;
    params_.kv = &kv_;
    params_.infllm = &infllm_;

    const Hparams &hp = model.hparams();
    int64_t n_ctx = params_.n_ctx > 0 ? params_.n_ctx : hp.n_ctx_train;
    if (n_ctx <= 0) n_ctx = 4096;
    int32_t n_batch = params_.n_batch > 0 ? params_.n_batch : 512;
    int32_t n_threads = params_.n_threads > 0 ? params_.n_threads : model.n_threads();
    if (n_threads > 1024) fail(LCTX_ERR_INVALID_ARG, "n_threads %d is out of range (1..1024)", n_threads);
    // The method is read as a plain int first: a value outside the enum is
    // the caller's error, not undefined behaviour here.
    int32_t method_value = 0;
    std::memcpy(&method_value, &params_.method, sizeof method_value);
    const MethodInfo *info = find_method(method_value);
    if (!info) fail(LCTX_ERR_INVALID_ARG, "unknown method %d (lctx_method)", method_value);
    if (!info->implemented())
        fail(LCTX_ERR_UNSUPPORTED, "method '%s' is not implemented yet in this version of lctx", info->name);
    const KvType kv_type = kv_type_of(params_);   // validated before anything is allocated
    const bool attn_bf16 = precision_of(params_.attn_precision, "attn_precision", false) == LCTX_PRECISION_BF16;
    const lctx_precision matmul = precision_of(params_.matmul_precision, "matmul_precision", true);
    std::unique_ptr<Backend> be = make_backend(backend, std::max(1, n_threads));
    if (OpTimingBackend::requested()) {   // LCTX_PROFILE_OPS (docs/profiling.md)
        auto timed = std::make_unique<OpTimingBackend>(std::move(be));
        op_timing_ = timed.get();
        be = std::move(timed);
    }
    backend_ = std::make_unique<BudgetBackend>(std::move(be), budget_);
    if (!backend_->supports_kv_type(kv_type))
        fail(LCTX_ERR_UNSUPPORTED, "kv_type %s: the %s backend has no kernels for it (use the cpu backend, or f16)",
             kv_type_name(kv_type), backend_->name());
    if (attn_bf16 && !backend_->set_attention_bf16(true))
        LCTX_LOG_WARN("attn_precision = LCTX_PRECISION_BF16: the %s backend has no bf16 attention on this machine "
                      "(the CPU one needs AVX512_BF16); attention stays exact f32", backend_->name());
    if (matmul == LCTX_PRECISION_BF16 && !backend_->set_matmul_precision(matmul))
        LCTX_LOG_WARN("matmul_precision = LCTX_PRECISION_BF16: the %s backend has no bf16 matmuls on this machine "
                      "(the CPU one needs AVX512_BF16); matmuls stay exact f32", backend_->name());
    if (matmul == LCTX_PRECISION_INT8 && !backend_->set_matmul_precision(matmul))
        LCTX_LOG_WARN("matmul_precision = LCTX_PRECISION_INT8: the %s backend has no int8 matmuls on this machine "
                      "(the CPU one needs AVX2); matmuls stay exact f32", backend_->name());
    method_ = info->make(MethodArgs{model, params_, *backend_, n_ctx, n_batch});
}

Session::~Session() = default;

void Session::expect_stage(const char *call, std::initializer_list<lctx_stage> allowed) const {
    if (std::find(allowed.begin(), allowed.end(), stage_) != allowed.end()) return;
    const char *hint = "";
    switch (stage_) {
    case LCTX_STAGE_FEEDING: hint = "call lctx_build_index after the last lctx_feed_chunk"; break;
    case LCTX_STAGE_INDEXED: hint = "the document is sealed; call lctx_select with a question"; break;
    case LCTX_STAGE_SELECTED: hint = "call lctx_recompute with the selection"; break;
    case LCTX_STAGE_DECODING: hint = "the document is sealed; call lctx_decode, or lctx_select for a new question";
        break;
    }
    fail(LCTX_ERR_STATE, "%s: wrong stage: the session is %s; %s", call, stage_name(stage_), hint);
}

void Session::check_tokens(const char *what, const int32_t *tokens, size_t n) const {
    if (n > 0 && !tokens) fail(LCTX_ERR_INVALID_ARG, "%s: tokens is NULL but n_tokens is %zu", what, n);
    int32_t n_vocab = model_.hparams().n_vocab;
    for (size_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            fail(LCTX_ERR_INVALID_ARG, "%s: token id %d at index %zu is out of range [0, %d)", what, tokens[i], i,
                 n_vocab);
}

template <class Body>
void Session::run_call(const char *call, Body &&body) {
    Progress progress(params_.progress, params_.progress_user_data, cancel_);
    try {
        // A cancel that came before the call (no call was running) stops it
        // before it does anything.
        if (progress.cancelled()) fail(LCTX_ERR_CANCELLED, "%s: cancelled (lctx_session_cancel before the call)", call);
        body(progress);
        if (!progress.finish()) fail(LCTX_ERR_CANCELLED, "%s: cancelled at its end (done = 1.0)", call);
    } catch (const Error &e) {
        if (e.status() == LCTX_ERR_CANCELLED) cancel_.store(false);   // the request is answered
        throw;
    }
}

void Session::feed(const int32_t *tokens, size_t n) {
    expect_stage("lctx_feed_chunk", {LCTX_STAGE_FEEDING});
    check_tokens("lctx_feed_chunk", tokens, n);
    run_call("lctx_feed_chunk", [&](Progress &progress) { method_->feed(tokens, n, progress); });
}

void Session::build_index() {
    expect_stage("lctx_build_index", {LCTX_STAGE_FEEDING});
    // A cancelled build_index may be called again: every method's finish
    // goes on from where the cancelled one stopped.
    run_call("lctx_build_index", [&](Progress &progress) { method_->finish(progress); });
    stage_ = LCTX_STAGE_INDEXED;
}

std::unique_ptr<Selection> Session::select(const int32_t *query, size_t n) {
    expect_stage("lctx_select", {LCTX_STAGE_INDEXED, LCTX_STAGE_SELECTED, LCTX_STAGE_DECODING});
    if (n == 0) fail(LCTX_ERR_INVALID_ARG, "lctx_select: the query is empty (give at least one token)");
    check_tokens("lctx_select", query, n);
    std::unique_ptr<Selection> sel;
    run_call("lctx_select", [&](Progress &progress) {
        sel = std::make_unique<Selection>(method_->select(std::vector<int32_t>(query, query + n), progress));
    });
    sel->session_id = id_;
    // A new question: the previous answer's logits are not what a decode
    // samples from any more (lctx_session_logits is NULL until recompute;
    // found by fuzz_api).
    has_logits_ = false;
    pending_ = -1;
    stage_ = LCTX_STAGE_SELECTED;
    return sel;
}

void Session::set_refreshkv(const lctx_refreshkv_params *params) {
    std::optional<RefreshKvConfig> cfg;
    if (params) cfg = refreshkv_config_from(model_.hparams(), read_refreshkv_params(params));
    if (!method_->set_decoding(opt_ptr(cfg)))
        fail(LCTX_ERR_UNSUPPORTED, "lctx_session_set_refreshkv: method '%s' cannot switch its decoding (refreshkv, "
             "full, reform and ilre can)", method_name(params_.method));
}

void Session::recompute(const Selection &selection) {
    expect_stage("lctx_recompute", {LCTX_STAGE_SELECTED, LCTX_STAGE_DECODING});
    if (selection.session_id != id_)
        fail(LCTX_ERR_INVALID_ARG, "lctx_recompute: the selection was made by another session");
    has_logits_ = false;
    pending_ = -1;
    stage_ = LCTX_STAGE_SELECTED;  // stays here if recompute fails
    run_call("lctx_recompute", [&](Progress &progress) { method_->recompute(selection, progress, logits_); });
    has_logits_ = true;
    rng_seeded_ = false;
    stage_ = LCTX_STAGE_DECODING;
}

void Session::save_index(const std::string &path) {
    auto *reform = dynamic_cast<ReformMethod *>(method_.get());
    auto *ilre = dynamic_cast<IlreMethod *>(method_.get());
    if (!reform && !ilre)
        fail(LCTX_ERR_UNSUPPORTED, "lctx_index_save: only REFORM and ILRe sessions have an index (this one is '%s')",
             method_name(params_.method));
    expect_stage("lctx_index_save", {LCTX_STAGE_INDEXED, LCTX_STAGE_SELECTED, LCTX_STAGE_DECODING});
    if (reform) reform->save_index(path);
    else ilre->save_index(path);
}

void Session::load_index(const std::string &path) {
    auto *reform = dynamic_cast<ReformMethod *>(method_.get());
    auto *ilre = dynamic_cast<IlreMethod *>(method_.get());
    if (!reform && !ilre)
        fail(LCTX_ERR_UNSUPPORTED, "lctx_session_load_index: only REFORM and ILRe sessions have an index");
    if (stage_ != LCTX_STAGE_FEEDING || method_->n_fed() != 0)
        fail(LCTX_ERR_STATE, "lctx_session_load_index: the session has already read tokens");
    if (reform) reform->load_index(path, params_);
    else ilre->load_index(path);
    stage_ = LCTX_STAGE_INDEXED;
}

// The token a decode returned enters the cache only when the next decode (or
// next_logits) needs its logits, so the last decode call of an answer costs
// no forward pass. If the append fails, the token stays pending.
void Session::append_pending() {
    if (pending_ < 0) return;
    has_logits_ = false;
    method_->append(pending_, logits_);
    pending_ = -1;
    has_logits_ = true;
}

const float *Session::next_logits() {
    append_pending();   // a token is pending only while decoding (select and recompute clear it)
    return logits();
}

float Session::decode_token(int32_t token) {
    expect_stage("lctx_decode_token", {LCTX_STAGE_DECODING});
    check_tokens("lctx_decode_token", &token, 1);
    if (cancel_.exchange(false)) fail(LCTX_ERR_CANCELLED, "lctx_decode_token: cancelled by lctx_session_cancel");
    append_pending();
    float surprisal = 0.0f;
    backend_->token_surprisal(logits_.data(), 1, model_.hparams().n_vocab, &token, &surprisal);
    pending_ = token;
    return -surprisal;
}

int32_t Session::decode(const lctx_sampling_params &sampling) {
    expect_stage("lctx_decode", {LCTX_STAGE_DECODING});
    validate_sampling(sampling);
    // A pending lctx_session_cancel stops a generation loop here (decode has
    // no progress callback); the token is not sampled and the request is consumed.
    if (cancel_.exchange(false)) fail(LCTX_ERR_CANCELLED, "lctx_decode: cancelled by lctx_session_cancel");
    append_pending();
    if (!rng_seeded_ || rng_seed_ != sampling.seed) {
        rng_ = Rng(sampling.seed);
        rng_seed_ = sampling.seed;
        rng_seeded_ = true;
    }
    const std::vector<int32_t> &ctx = method_->context_tokens();
    int32_t token = sample_token(logits_.data(), model_.hparams().n_vocab, sampling, ctx.data(), ctx.size(), rng_);
    pending_ = token;
    return token;
}

} // namespace lctx
