#include "session/infllm_params.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "session/session_params.h"

namespace lctx {

int64_t InfllmParams::cache_slots() const { return sink + memory + window + block - 1 + std::max(chunk, n_ctx); }

InfllmParams infllm_params_from(const Hparams &hp, const lctx_session_params &sp) {
    const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    const int64_t kMax = int64_t(1) << 24;
    auto in_range = [&](const char *name, int64_t v, int64_t lo) {
        if (v < lo || v > kMax)
            fail(LCTX_ERR_INVALID_ARG, "INFLLM: %s = %lld is out of range [%lld, %lld]", name, (long long)v,
                 (long long)lo, (long long)kMax);
    };
    const lctx_kv_params kv = read_kv_params(sp.kv);
    const lctx_infllm_params inf = read_infllm_params(sp.infllm);
    InfllmParams p;
    p.kv_type = kv_type_of(sp);
    p.block = inf.block != 0 ? inf.block : 128;
    in_range("infllm_block", p.block, 1);
    p.repr = inf.repr != 0 ? inf.repr : std::min<int64_t>(4, p.block);
    in_range("infllm_repr", p.repr, 1);
    if (p.repr > p.block)
        fail(LCTX_ERR_INVALID_ARG, "INFLLM: infllm_repr (%lld) exceeds the block size infllm_block (%lld)",
             (long long)p.repr, (long long)p.block);
    const int64_t budget = kv.budget != 0 ? kv.budget : std::max<int64_t>(n_train / 4, p.block);
    in_range("kv_budget", budget, 1);
    p.memory = budget / p.block * p.block;
    if (p.memory == 0)
        fail(LCTX_ERR_INVALID_ARG, "INFLLM: kv_budget (%lld) is smaller than one memory block (infllm_block = %lld)",
             (long long)budget, (long long)p.block);
    p.chunk = kv.chunk != 0 ? kv.chunk : 512;
    in_range("kv_chunk", p.chunk, 1);
    p.sink = kv.sink > 0 ? kv.sink : kv.sink < 0 ? 0 : 128;
    in_range("kv_sink", p.sink, 0);
    p.window = kv.recent > 0 ? kv.recent : kv.recent < 0 ? 0 : std::max<int64_t>(n_train / 4, 1);
    in_range("kv_recent", p.window, 0);
    const int64_t fixed = p.sink + p.memory + p.window + p.block - 1;
    p.n_ctx = sp.n_ctx > 0 ? sp.n_ctx : std::max(p.chunk, n_train - fixed);
    in_range("n_ctx", p.n_ctx, 1);
    p.obs = kv.obs != 0 ? kv.obs : 128;
    in_range("kv_obs", p.obs, 1);
    p.n_batch = sp.n_batch > 0 ? sp.n_batch : 512;
    if (p.n_batch > kMax) fail(LCTX_ERR_INVALID_ARG, "INFLLM: n_batch = %d is too large", p.n_batch);
    if (fixed + std::max(p.chunk, p.n_ctx) > kMax)
        fail(LCTX_ERR_INVALID_ARG, "INFLLM: sink + memory + window + block + max(chunk, n_ctx) = %lld slots is too "
             "large", (long long)(fixed + std::max(p.chunk, p.n_ctx)));
    if (hp.n_ctx_train > 0 && p.sink + p.memory + p.window + p.chunk > hp.n_ctx_train)
        LCTX_LOG_WARN("INFLLM: kv_sink + memory + local window + chunk = %lld exceeds the model's trained context %d: "
                      "encoding uses positions it was not trained on",
                      (long long)(p.sink + p.memory + p.window + p.chunk), hp.n_ctx_train);
    if (budget != p.memory)
        LCTX_LOG_INFO("INFLLM: kv_budget %lld rounded down to %lld (a multiple of infllm_block %lld)",
                      (long long)budget, (long long)p.memory, (long long)p.block);
    return p;
}

} // namespace lctx
