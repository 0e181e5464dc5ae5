#include "session/baseline_params.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "session/session_params.h"

namespace lctx {

const char *const kDefaultCatalystPrompt =
    "\n\nRecall the most important facts, names, numbers and keys stated in the text above.";

namespace {

int64_t pick(int32_t user, int64_t derived) { return user > 0 ? user : derived; }

const char *name_of(lctx_method m) {
    switch (m) {
    case LCTX_METHOD_TRUNCATE: return "TRUNCATE";
    case LCTX_METHOD_STREAMING: return "STREAMING";
    case LCTX_METHOD_H2O: return "H2O";
    case LCTX_METHOD_TOVA: return "TOVA";
    case LCTX_METHOD_SNAPKV: return "SNAPKV";
    case LCTX_METHOD_INFINIPOT: return "INFINIPOT";
    default: return "baseline";
    }
}

} // namespace

BaselineParams baseline_params_from(const Hparams &hp, const lctx_session_params &sp) {
    const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    const char *who = name_of(sp.method);
    const lctx_kv_params kv = read_kv_params(sp.kv);
    BaselineParams p;
    p.kv_type = kv_type_of(sp);
    p.method = sp.method;
    const bool truncate = sp.method == LCTX_METHOD_TRUNCATE;
    p.budget = size_knob(who, "lctx_kv_params.budget", kv.budget, std::max<int64_t>(truncate ? n_train / 2 : n_train / 4, 16));
    // SnapKV: budget + chunk = the trained context, so an input that fits it
    // is one full prefill compressed by the question, as SnapKV does.
    p.chunk = size_knob(who, "lctx_kv_params.chunk", kv.chunk, std::max<int64_t>(sp.method == LCTX_METHOD_SNAPKV ? n_train - p.budget : n_train / 4,
                                               16));
    p.sink = kv.sink > 0 ? kv.sink : kv.sink < 0 ? 0 : std::min<int64_t>(256, p.budget / 8);
    p.recent = kv.recent > 0 ? kv.recent : kv.recent < 0 ? 0 : std::min<int64_t>(256, p.budget / 8);
    switch (sp.method) {
    case LCTX_METHOD_H2O: p.obs = size_knob(who, "lctx_kv_params.obs", kv.obs, 128); p.accumulate = true; break;
    case LCTX_METHOD_SNAPKV: p.obs = size_knob(who, "lctx_kv_params.obs", kv.obs, 32); break;
    case LCTX_METHOD_TOVA: p.obs = size_knob(who, "lctx_kv_params.obs", kv.obs, 1); break;
    default: p.obs = 0; break;
    }
    p.obs = std::min(p.obs, p.chunk);
    // SnapKV always keeps its observation window.
    if (sp.method == LCTX_METHOD_SNAPKV) p.recent = std::max(p.recent, p.obs);
    p.snapkv_kernel = sp.method == LCTX_METHOD_SNAPKV ? size_knob(who, "lctx_kv_params.snapkv_kernel", kv.snapkv_kernel, 7)
                                                      : pick(kv.snapkv_kernel, 7);   // not used: ignored
    p.nuc_ratio = kv.infinipot_nuc_ratio > 0 ? kv.infinipot_nuc_ratio : kv.infinipot_nuc_ratio < 0 ? 0.0f : 0.25f;
    p.catalyst = kv.infinipot_catalyst ? kv.infinipot_catalyst : kDefaultCatalystPrompt;
    p.n_ctx = pick(sp.n_ctx, n_train);
    p.n_batch = sp.n_batch > 0 ? sp.n_batch : 512;

    const int64_t kMax = int64_t(1) << 24;
    auto in_range = [&](const char *name, int64_t v, int64_t lo) {
        if (v < lo || v > kMax)
            fail(LCTX_ERR_INVALID_ARG, "%s: %s = %lld is out of range [%lld, %lld]", who, name, (long long)v,
                 (long long)lo, (long long)kMax);
    };
    in_range("kv_budget", p.budget, 2);
    in_range("kv_chunk", p.chunk, 1);
    in_range("kv_sink", p.sink, 0);
    in_range("kv_recent", p.recent, 0);
    in_range("snapkv_kernel", p.snapkv_kernel, 1);
    in_range("n_ctx", p.n_ctx, 2);
    if (p.nuc_ratio > 1.0f)
        fail(LCTX_ERR_INVALID_ARG, "%s: infinipot_nuc_ratio = %g must be in [0, 1]", who, double(p.nuc_ratio));
    if (!truncate && p.sink + p.recent >= p.budget)
        fail(LCTX_ERR_INVALID_ARG, "%s: kv_sink (%lld) + kv_recent (%lld) must be smaller than kv_budget (%lld)", who,
             (long long)p.sink, (long long)p.recent, (long long)p.budget);
    if (p.budget >= p.n_ctx)
        fail(LCTX_ERR_INVALID_ARG, "%s: kv_budget (%lld) leaves no room for the question and answer in n_ctx = %lld",
             who, (long long)p.budget, (long long)p.n_ctx);
    if (!truncate && hp.n_ctx_train > 0 && p.budget + p.chunk > hp.n_ctx_train)
        LCTX_LOG_WARN("%s: kv_budget + kv_chunk = %lld exceeds the model's trained context %d: encoding uses "
                      "positions it was not trained on", who, (long long)(p.budget + p.chunk), hp.n_ctx_train);
    return p;
}

} // namespace lctx
