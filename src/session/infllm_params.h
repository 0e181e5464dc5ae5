// Sizes of the InfLLM baseline, from lctx_session_params.kv (lctx_kv_params)
// and .infllm (lctx_infllm_params) (0 = derived from
// the model's trained context n_ctx_train; values given for an 8K model).
#pragma once

#include <cstdint>

#include "lctx.h"
#include "backend/backend.h"
#include "model/model.h"

namespace lctx {

struct InfllmParams {
    KvType kv_type = KvType::F32;   // element type of the working cache (lctx_session_params.kv_type)
    int64_t block = 128;    // tokens per memory block (infllm_block)
    int64_t repr = 4;       // representative tokens per block (infllm_repr)
    int64_t memory = 2048;  // retrieved memory tokens per layer and KV head (kv_budget, rounded down to blocks)
    int64_t chunk = 512;    // document tokens per encoding step (kv_chunk)
    int64_t sink = 128;     // first document tokens always attended (kv_sink; < 0: none)
    int64_t window = 2048;  // local window (kv_recent; < 0: none), n_ctx_train/4
    // Room for the question and answer on top of sinks + memory + window.
    // <= 0: what n_ctx_train leaves after sink + memory + window + block
    // (so question positions stay in the trained range), at least kv_chunk.
    int64_t n_ctx = 0;
    int32_t n_batch = 512;  // tokens per forward call
    // Last queries of each forward call of a chunk whose attention mass picks
    // the representative tokens (kv_obs; 128). All queries would double the
    // cost of attention (the column sums take a second, scalar pass); tokens
    // stay in the local window for several chunks, so each is still observed
    // by window / chunk observation windows before its block forms.
    int64_t obs = 128;
    // Working cache slots: sinks + memory + window (up to window + block - 1
    // tokens, see method_infllm.h) + max(chunk, n_ctx).
    int64_t cache_slots() const;
};

// Fills the zero fields from hp and validates (LCTX_ERR_INVALID_ARG naming
// the violated rule); warns when the working context exceeds n_ctx_train.
InfllmParams infllm_params_from(const Hparams &hp, const lctx_session_params &sp);

} // namespace lctx
