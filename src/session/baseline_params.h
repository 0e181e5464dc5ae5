// Sizes of the baselines (TRUNCATE and the recurrent STREAMING, H2O, TOVA,
// SNAPKV, INFINIPOT). Every value can be set through lctx_kv_params
// (lctx_session_params.kv); 0 means "derived from the model's trained context
// n_ctx_train", scaled as the REFORM paper scales its 32K settings for a 128K
// model, so an 8K model (SmolLM2) gets: budget = chunk = 2048 (REFORM's
// working budget), sink = recent = 256, TRUNCATE keeps 4096 tokens (REFORM's
// recompute budget).
#pragma once

#include <cstdint>
#include <string>

#include "lctx.h"
#include "backend/backend.h"
#include "model/model.h"

namespace lctx {

struct BaselineParams {
    KvType kv_type = KvType::F32;   // element type of the KV caches (lctx_session_params.kv_type)
    lctx_method method = LCTX_METHOD_H2O;
    int64_t budget = 0;       // KV slots per layer and KV head after eviction (TRUNCATE: document tokens kept)
    int64_t chunk = 0;        // tokens forwarded per step
    int64_t sink = 0;         // first document tokens always kept
    int64_t recent = 0;       // most recent slots always kept
    int64_t obs = 0;          // observation queries at the end of a chunk (H2O 128, SNAPKV 32, TOVA 1)
    int64_t snapkv_kernel = 7;
    float nuc_ratio = 0.25f;  // INFINIPOT: share of the free slots chosen by novelty (NuC)
    std::string catalyst;     // INFINIPOT: catalyst prompt text
    int64_t n_ctx = 0;        // decode cache capacity: kept document KV + question + answer
    int32_t n_batch = 512;    // tokens per forward call
    bool accumulate = false;  // scores summed over chunks (H2O) or fresh per chunk
};

// The built-in catalyst prompt of INFINIPOT (a generic request to recall the
// important content, as the InfiniPot paper's CaP).
extern const char *const kDefaultCatalystPrompt;

// Fills the zero fields of sp.kv (NULL: all zero) from hp for sp.method and
// validates the result (LCTX_ERR_INVALID_ARG naming the violated rule).
BaselineParams baseline_params_from(const Hparams &hp, const lctx_session_params &sp);

} // namespace lctx
