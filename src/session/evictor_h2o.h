// H2O eviction for one (layer, KV head) of REFORM's working cache (spec §2.4):
// keep the protected slots (original token index < sink, or one of the last
// `recent` slots) plus the highest-scoring others, up to `budget` in all.
// A pure function over arrays, so it is tested against a brute force.
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

// score[s], orig[s] for slots s < n (orig strictly increasing). Returns the
// slots to keep, ascending: all n when n <= budget, else exactly `budget`.
// Ties in score keep the more recent token (larger orig).
// Requires sink + recent < budget (checked by the caller's params).
std::vector<int64_t> h2o_keep(const float *score, const int64_t *orig, int64_t n, int64_t budget, int64_t sink,
                              int64_t recent);

} // namespace lctx
