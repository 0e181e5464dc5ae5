// ILRe sizes and options (docs/methods/ilre.md). Every value can be set
// through lctx_ilre_params (lctx_session_params.ilre); 0 (-1 for the layer)
// means "derived from the model" as below, so an 8K model (SmolLM2) gets the
// paper's settings: 4 sinks, a 512-token window, 1024-token chunks and a
// 4096-token budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"

namespace lctx {

struct IlreParams {
    int32_t retrieval_layer = -1;   // l_R, 0-based: layers 0..l_R-1 run in full, l_R only projects keys
    std::string layer_origin;       // where l_R came from: "params", the profile's origin, or "fallback"
    int64_t sink = 4;               // S: first tokens every chunk sees, always gathered
    int64_t window = 512;           // W: tokens before a chunk that it sees (layers < l_R)
    int64_t chunk = 1024;           // D_C: tokens per step; the first step takes S + D_C
    int64_t budget = 4096;          // B: gathered tokens besides the sinks; default min(4096, n_ctx/2)
    int64_t query_tokens = 0;       // score with the last N question tokens; 0: all
    bool dca = true;                // bounded distances beyond the trained context (docs/methods/ilre.md, "DCA")
    // >= 0: keys scored position-free at this distance; -1: at their positions;
    // kScoreAuto: -1 within the trained context, kAutoScoreDistance past it
    // (docs/methods/ilre.md, "Scoring at a fixed distance").
    int64_t score_distance = -1;
    static constexpr int64_t kScoreAuto = -2;
    static constexpr int64_t kAutoScoreDistance = 1024;
    int64_t dca_after = 0;          // where DCA starts acting: the model's trained context
    int64_t repeat_window = 16;     // tokens compared to find repeated text (selector.h mark_repeats); 0 = off
    std::vector<int32_t> max_kernels{2, 4, 8};
    std::vector<int32_t> avg_kernels{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    KvType kv_type = KvType::F32;   // element type of the shallow caches and the decode cache
    int64_t n_ctx = 0;              // decode cache capacity (S + B + question + answer); default n_ctx_train
    int32_t n_batch = 512;          // tokens per forward batch in recompute
};

// Fills the zero fields of sp.ilre (NULL: all defaults) from the model and
// validates the result (LCTX_ERR_INVALID_ARG naming the field and the rule).
IlreParams ilre_params_from(const Model &model, const lctx_session_params &sp);

// Parses a kernel list: "2,4,8", "1-16" or a mix ("1-4,8"); positive,
// distinct values, at most 64 of them, each at most 1 << 16
// (LCTX_ERR_INVALID_ARG naming `what` otherwise).
std::vector<int32_t> parse_kernel_list(const char *text, const char *what);

// The retrieval layer of a model: profile_path's "ilre" member if given,
// else the built-in profile of the model's shape, else the documented
// fallback max(1, n_layer / 8) (with a log warning). origin says which.
int32_t ilre_default_layer(const Hparams &hp, const std::string &profile_path, std::string &origin);

} // namespace lctx
