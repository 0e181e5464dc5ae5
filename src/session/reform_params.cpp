#include "session/reform_params.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/log.h"
#include "session/session_params.h"

namespace lctx {

namespace {

int64_t pick(int32_t user, int64_t derived) { return user > 0 ? user : derived; }   // n_ctx: <= 0 is documented

int64_t knob(const char *field, int32_t user, int64_t derived) { return size_knob("REFORM", field, user, derived); }

} // namespace

ReformParams reform_params_from(const Hparams &hp, const lctx_session_params &sp) {
    const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    const lctx_reform_params r = read_reform_params(sp.reform);
    ReformParams p;
    p.kv_type = kv_type_of(sp);
    p.chunk = knob("lctx_reform_params.chunk", r.chunk, std::clamp<int64_t>(pow2_floor(n_train / 4), 64, 32768));
    p.budget = knob("lctx_reform_params.budget", r.budget, p.chunk);
    p.sink = knob("lctx_reform_params.sink", r.sink, std::min<int64_t>(256, p.budget / 8));
    p.recent = knob("lctx_reform_params.recent", r.recent, std::min<int64_t>(256, p.budget / 8));
    int32_t evictor = 0;   // read as a plain int: a value outside the enum is the caller's error
    std::memcpy(&evictor, &r.evictor, sizeof evictor);
    switch (evictor) {
    case LCTX_EVICTOR_H2O: p.evictor = EvictorKind::H2O; break;
    case LCTX_EVICTOR_TOVA: p.evictor = EvictorKind::TOVA; break;
    case LCTX_EVICTOR_STREAMING: p.evictor = EvictorKind::STREAMING; break;
    case LCTX_EVICTOR_SNAPKV: p.evictor = EvictorKind::SNAPKV; break;
    default: fail(LCTX_ERR_INVALID_ARG, "REFORM: evictor %d is not an lctx_evictor (0..3)", evictor);
    }
    // Each rule's own observation window (evictor.h); H2O's is the paper's 128.
    const int64_t obs_default = p.evictor == EvictorKind::H2O ? 128 : std::max<int64_t>(1, Evictor::make(p.evictor, 0, 0, 0).obs);
    p.obs = knob("lctx_reform_params.obs", r.obs, std::min<int64_t>(obs_default, p.chunk));
    p.recompute = knob("lctx_reform_params.recompute", r.recompute, std::max<int64_t>(n_train / 2, 16));
    p.keep_first = knob("lctx_reform_params.keep_first", r.keep_first, std::min<int64_t>(256, p.recompute / 8));
    p.keep_last = knob("lctx_reform_params.keep_last", r.keep_last, std::min<int64_t>(256, p.recompute / 8));
    p.pool_half = r.pool_half > 0 ? r.pool_half : r.pool_half < 0 ? 0 : 64;
    p.repeat_window = repeat_window_knob("REFORM", r.repeat_window);
    p.n_ctx = pick(sp.n_ctx, n_train);
    p.n_batch = sp.n_batch > 0 ? sp.n_batch : 512;
    p.h2o_accumulate = p.evictor == EvictorKind::H2O && !r.h2o_per_chunk;   // TOVA, SnapKV: fresh per chunk
    reform_params_validate(p, hp);
    return p;
}

std::string reform_heads_path(const lctx_session_params &sp) {
    const lctx_reform_params r = read_reform_params(sp.reform);
    return r.heads_path ? r.heads_path : "";
}

void reform_params_validate(const ReformParams &p, const Hparams &hp) {
    const int64_t kMax = int64_t(1) << 24;
    auto in_range = [&](const char *name, int64_t v, int64_t lo) {
        if (v < lo || v > kMax)
            fail(LCTX_ERR_INVALID_ARG, "REFORM: %s = %lld is out of range [%lld, %lld]", name, (long long)v,
                 (long long)lo, (long long)kMax);
    };
    in_range("chunk size (reform_chunk)", p.chunk, 1);
    in_range("working budget (reform_budget)", p.budget, 2);
    in_range("sink tokens (reform_sink)", p.sink, 0);
    in_range("recent tokens (reform_recent)", p.recent, 0);
    in_range("observation queries (reform_obs)", p.obs, 1);
    in_range("recompute budget (reform_recompute)", p.recompute, 1);
    in_range("first tokens kept (reform_keep_first)", p.keep_first, 0);
    in_range("last tokens kept (reform_keep_last)", p.keep_last, 0);
    in_range("pool half width (reform_pool_half)", p.pool_half, 0);
    in_range("n_ctx", p.n_ctx, 2);
    if (p.sink + p.recent >= p.budget)
        fail(LCTX_ERR_INVALID_ARG, "REFORM: sink (%lld) + recent (%lld) must be smaller than the working budget (%lld)",
             (long long)p.sink, (long long)p.recent, (long long)p.budget);
    if (p.keep_first + p.keep_last >= p.recompute)
        fail(LCTX_ERR_INVALID_ARG, "REFORM: keep_first (%lld) + keep_last (%lld) must be smaller than the recompute "
             "budget (%lld)", (long long)p.keep_first, (long long)p.keep_last, (long long)p.recompute);
    if (p.obs > p.chunk)
        fail(LCTX_ERR_INVALID_ARG, "REFORM: observation queries (%lld) exceed the chunk size (%lld)",
             (long long)p.obs, (long long)p.chunk);
    if (p.recompute >= p.n_ctx)
        fail(LCTX_ERR_INVALID_ARG, "REFORM: the recompute budget (%lld) leaves no room for the question and answer "
             "in n_ctx = %lld", (long long)p.recompute, (long long)p.n_ctx);
    if (hp.n_ctx_train > 0 && p.budget + p.chunk > hp.n_ctx_train)
        LCTX_LOG_WARN("REFORM: working budget + chunk = %lld exceeds the model's trained context %d: encoding uses "
                      "positions it was not trained on", (long long)(p.budget + p.chunk), hp.n_ctx_train);
    if (hp.n_ctx_train > 0 && p.n_ctx > hp.n_ctx_train)
        LCTX_LOG_WARN("REFORM: n_ctx %lld exceeds the model's trained context %d", (long long)p.n_ctx,
                      hp.n_ctx_train);
}

} // namespace lctx
