// REFORM sizes (defaults scaled from the paper's settings). Every value can be
// set through lctx_reform_params (lctx_session_params.reform); 0 means "derived
// from the model's trained context n_ctx_train" as below, so an 8K model
// (SmolLM2) gets the spec's defaults: C = B = 2048, R = 4096, S0 = Wr = F = T = 256, Wobs = 128.
#pragma once

#include <cstdint>
#include <string>

#include "lctx.h"
#include "backend/backend.h"
#include "session/evictor.h"
#include "model/model.h"

namespace lctx {

struct ReformParams {
    KvType kv_type = KvType::F32;             // element type of the working and decode caches (lctx_session_params.kv_type)
    EvictorKind evictor = EvictorKind::H2O;   // the working cache's keep rule (lctx_reform_params.evictor)
    int64_t chunk = 0;        // C: tokens per encoding step. Default n_ctx_train/4 (pow2, 64..32768)
    int64_t budget = 0;       // B: working-cache entries per layer and KV head, protected included. Default C
    int64_t sink = 0;         // S0: first document tokens the working cache always keeps. Default min(256, B/8)
    int64_t recent = 0;       // Wr: most recent tokens the working cache always keeps. Default min(256, B/8)
    int64_t obs = 0;          // Wobs: last chunk queries whose attention scores eviction. Default min(128, C)
    int64_t recompute = 0;    // R: document tokens gathered for recompute, forced ones included. Default n_ctx_train/2
    int64_t keep_first = 0;   // F: first document tokens always selected. Default min(256, R/8)
    int64_t keep_last = 0;    // T: last document tokens always selected. Default min(256, R/8)
    int64_t pool_half = 0;    // selection max-pool half width (kernel 2*half+1). Default 64 (kernel 129)
    int64_t repeat_window = 0;   // tokens compared to find repeated text (selector.h mark_repeats); 0 = off. Default 16
    int64_t n_ctx = 0;        // decode cache capacity (R + query + answer). Default n_ctx_train
    int32_t n_batch = 512;    // tokens per forward batch in recompute
    bool h2o_accumulate = true;   // H2O scores summed over chunks (false: per-chunk scores)
};

// Fills the zero fields of sp.reform (NULL: all zero) from hp and validates
// the result (LCTX_ERR_INVALID_ARG with the violated rule).
ReformParams reform_params_from(const Hparams &hp, const lctx_session_params &sp);

// The head profile path of sp.reform (lctx_reform_params.heads_path); ""
// when not given.
std::string reform_heads_path(const lctx_session_params &sp);

// Checks the rules of spec §9: B + C <= n_ctx_train is only warned about
// (positions beyond the trained window), the others are refused:
// S0 + Wr < B, F + T < R, R < n_ctx, 1 <= Wobs <= C, all sizes positive.
void reform_params_validate(const ReformParams &p, const Hparams &hp);

} // namespace lctx
