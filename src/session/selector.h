// REFORM's gather step (spec §5.3-5.5) as pure functions over arrays:
// cosine score of every stored token (max over query tokens), centred
// max-pooling, forced first/last tokens and top-k to the budget.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace lctx {

// s[t] = max_u dot(emb[t], query[u]) / n_heads for t < n: emb is fp16
// [n][dim], query f32 [n_query][dim] (rows of unit-norm head blocks, so s is
// the mean per-head cosine). n_query == 0 gives s = 0. backend may be null
// (the portable scalar loop); else its max_dot_f16 (the CPU's SIMD kernel).
void score_tokens(const uint16_t *emb, int64_t n, int32_t dim, const float *query, int64_t n_query,
                  int32_t n_heads, float *s, Backend *backend);

// p[t] = max of s over [t - half, t + half] clipped to [0, n): O(n).
void max_pool(const float *s, int64_t n, int64_t half, float *p);

// Repeated text (docs/methods/reform.md, "Repeated text"): out[t] = 1 when
// the `window` tokens ending at t, or the `window` tokens starting at t, occur
// earlier in ids (compared token by token, not only by hash). The first
// occurrence of any text is never marked, so of a paragraph repeated k times
// the first copy stays and the other k - 1 are marked; text repeated in
// pieces shorter than `window` is never marked. window < 2: nothing marked.
std::vector<uint8_t> mark_repeats(const int32_t *ids, int64_t n, int64_t window);

// The scores select ranks by: s, with every marked token moved below every
// unmarked one (s - 4: cosines lie in [-1, 1]) so that each repeated text
// competes for the budget once. repeat may be empty (s is copied).
std::vector<float> demote_repeats(const std::vector<float> &s, const std::vector<uint8_t> &repeat);

// Positions chosen for a budget of `budget` tokens, ascending: everything
// when n <= budget; else [0, first) and [n - last, n) plus the best others by
// (p desc, s desc, position asc) up to `budget` in all. When the forced
// ranges alone exceed the budget, the budget is split between them: half to
// each end, the part a short end cannot use going to the other.
std::vector<int64_t> select_top(const float *s, const float *p, int64_t n, int64_t budget, int64_t first,
                                int64_t last);

} // namespace lctx
