// ReAttention sizes and options (docs/methods/reattention.md). Every value
// can be set through lctx_reattention_params (lctx_session_params.reattention);
// -1 means "derived from the model's trained context", so an 8K model
// (SmolLM2) gets the paper's settings: G 32, L 4096, m 32, k 4, k' 127, chunk
// 512, a window of at most 8192 positions.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"

namespace lctx {

struct ReattentionParams {
    int64_t n_global = 32;      // G
    int64_t n_local = 4096;     // L, the step's own tokens included
    int64_t span = 32;          // m, even
    int64_t top_k = 4;          // k per (query head, query token)
    int64_t n_spans = 127;      // k' winners of the vote; 0: no middle
    int64_t chunk = 512;        // tokens per prefill step after the first (G + L)
    int64_t reuse_steps = 1;    // decode: steps a layer's selection is kept
    bool tile_max = false;      // the reference kernel's tile-max approximation
    uint64_t store_max_ram = 0; // bytes of the K/V store in RAM before it spills to a file; 0: no spill
    std::string store_dir;      // the spill file's directory
    KvType kv_type = KvType::F32;   // the K/V store and the attention window

    // Largest window: G + k' m + L positions (8192 with the defaults).
    int64_t max_window() const { return n_global + n_spans * span + n_local; }
    // Slots below the local tokens reserved for global + spans.
    int64_t selected_slots() const { return n_global + n_spans * span; }
    // Tokens the local region may grow past L before it is moved back down.
    int64_t slack() const {
        int64_t s = chunk > 1024 ? chunk : 1024;
        return n_global > s ? n_global : s;
    }
    int64_t window_capacity() const { return max_window() + slack(); }
};

// Fills the -1 fields of sp.reattention (NULL: all defaults) from the model
// and validates the result (LCTX_ERR_INVALID_ARG naming the field and rule).
ReattentionParams reattention_params_from(const Model &model, const lctx_session_params &sp);

} // namespace lctx
