// ReAttention's vote (docs/methods/reattention.md, "Selection"): every
// (query head, query token) of a step has named its top-k middle tokens;
// each naming is one vote. The tokens with the most votes win (ties: the
// higher best score, then the lower index), at most n_spans of them; each
// winner brings the `span` tokens around it ([j - span/2, j + span/2 - 1],
// clipped to the middle), and the union comes out sorted.
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

// candidates: n (index, score) pairs (index < 0: an empty entry, ignored);
// the middle is [middle_begin, middle_end). Returns ascending, distinct indices.
std::vector<int64_t> vote_spans(const int64_t *index, const float *score, int64_t n, int64_t middle_begin,
                                int64_t middle_end, int64_t n_spans, int64_t span);

} // namespace lctx
