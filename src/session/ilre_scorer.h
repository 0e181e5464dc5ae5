// ILRe's token scores (docs/methods/ilre.md, "Scoring"): for every document
// token t, the largest attention probability any query head gives it from
// any question token, the softmax running over all document keys:
//   a[t] = max over (head h, question token j) of softmax_t(q[h,j] . k[g(h),t] / sqrt(d)).
// Two passes over the key index (the first finds every row's log-sum-exp,
// the second the maxima), so a million keys never need a million-wide row of
// probabilities. The key products run as backend matmuls over fp16 tiles;
// the reductions are in a fixed order, so the result does not depend on the
// thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "session/embedding_store.h"

namespace lctx {

// Keys [begin, end) are scored with the queries rotated back by `shift`
// positions (DCA: the same as rotating those keys forward by `shift`).
struct KeySegment {
    int64_t begin = 0, end = 0;
    int64_t shift = 0;
};

struct IlreScoreArgs {
    std::vector<const EmbeddingStore *> keys;   // one store per KV head, rows = rotated keys
    int64_t n_keys = 0;                         // rows scored: [0, n_keys)
    const float *queries = nullptr;             // [n_q][n_head * head_dim], rotated at their positions
    int64_t n_q = 0;
    std::vector<KeySegment> segments;           // cover [0, n_keys) in order; empty: one, shift 0
    // >= 0: position-free scoring (docs/methods/ilre.md, "Scoring at a fixed
    // distance"): every key is scored as if it sat this many positions before
    // every question token. Each tile of keys is rotated back from its
    // position, and question token j from query_pos0 + j; segments must be
    // empty. -1: the keys' own positions (with the segments' shifts).
    int64_t fixed_distance = -1;
    int64_t query_pos0 = 0;                     // position the queries' first token was rotated at
};

// Writes a[0..n_keys) into out. keep_going() is polled between tiles
// (false: LCTX_ERR_CANCELLED).
void ilre_scores(Backend &backend, const Hparams &hp, const IlreScoreArgs &args, float *out,
                 const std::function<bool()> &keep_going = {});

// The DCA segments of a document of n tokens read in chunks (first sink +
// chunk tokens, then chunk each): chunk i < n_chunks - 2 is shifted by
// (n_chunks - 2 - i) * chunk, the last two are not, so that every key lands
// within about two chunks of the question.
std::vector<KeySegment> ilre_dca_segments(int64_t n, int64_t sink, int64_t chunk);

} // namespace lctx
