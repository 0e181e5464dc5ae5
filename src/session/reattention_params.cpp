#include "session/reattention_params.h"

#include <algorithm>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"
#include "session/session_params.h"

namespace lctx {

namespace {

// -1: derived; otherwise at least `min` and at most 2^20.
int64_t knob(int32_t user, int64_t derived, const char *name, int64_t min) {
    if (user == -1) return derived;
    if (user < min)
        fail(LCTX_ERR_INVALID_ARG, "ReAttention: %s = %d is below %lld (-1: derived from the model)", name, user,
             (long long)min);
    if (user > (1 << 20)) fail(LCTX_ERR_INVALID_ARG, "ReAttention: %s = %d exceeds %d", name, user, 1 << 20);
    return user;
}

} // namespace

ReattentionParams reattention_params_from(const Model &model, const lctx_session_params &sp) {
    const Hparams &hp = model.hparams();
    const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    const lctx_reattention_params r = read_reattention_params(sp.reattention);
    ReattentionParams p;
    p.kv_type = kv_type_of(sp);
    // The paper's rule: L is half the trained window and G + k' m + L fills it.
    p.n_local = knob(r.n_local, std::max<int64_t>(n_train / 2, 2), "n_local", 1);
    p.n_global = knob(r.n_global, std::min<int64_t>(32, std::max<int64_t>(n_train / 16, 1)), "n_global", 0);
    p.span = knob(r.span, std::min<int64_t>(32, std::max<int64_t>(n_train / 16, 2)) & ~int64_t{1}, "span", 2);
    if (p.span % 2 != 0) fail(LCTX_ERR_INVALID_ARG, "ReAttention: span = %lld must be even", (long long)p.span);
    p.top_k = knob(r.top_k, 4, "top_k", 1);
    if (p.top_k > 64) fail(LCTX_ERR_INVALID_ARG, "ReAttention: top_k = %lld exceeds 64", (long long)p.top_k);
    p.n_spans = knob(r.n_spans, std::max<int64_t>(0, (n_train - p.n_global - p.n_local) / p.span), "n_spans", 0);
    p.chunk = knob(r.chunk, std::max<int64_t>(1, std::min<int64_t>(512, p.n_local / 2)), "chunk", 1);
    if (p.chunk > 512 || p.chunk > p.n_local)
        fail(LCTX_ERR_INVALID_ARG, "ReAttention: chunk = %lld must be at most 512 and at most n_local = %lld (a "
             "step's own tokens are part of the local window)", (long long)p.chunk, (long long)p.n_local);
    p.reuse_steps = r.reuse_steps == 0 ? 1 : knob(r.reuse_steps, 1, "reuse_steps", 1);
    p.tile_max = r.tile_max;
    p.store_max_ram = r.store_max_ram;
    if (r.store_dir && *r.store_dir) {
        p.store_dir = r.store_dir;
    } else {
        const char *tmp = std::getenv("TMPDIR");
        p.store_dir = tmp && *tmp ? tmp : "/tmp";
    }
    if (p.n_spans * p.span > (int64_t(1) << 22))
        fail(LCTX_ERR_INVALID_ARG, "ReAttention: n_spans x span = %lld exceeds %lld", (long long)(p.n_spans * p.span),
             (long long)(int64_t(1) << 22));
    if (hp.n_ctx_train > 0 && p.max_window() > hp.n_ctx_train)
        LCTX_LOG_WARN("ReAttention: the window n_global + n_spans x span + n_local = %lld exceeds the model's "
                      "trained context %d", (long long)p.max_window(), hp.n_ctx_train);
    return p;
}

} // namespace lctx
