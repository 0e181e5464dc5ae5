// ILRe's multi-kernel pooling allocator (docs/methods/ilre.md, "Gathering").
// From one score per document token it picks the sinks plus exactly `budget`
// other tokens: every (max kernel m, average kernel n) pair, m outer and n
// inner in the given order, adds an equal share of the budget, taken as
// whole m-token blocks ranked by the average-pooled block maxima, skipping
// tokens an earlier pair already took.
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

// scores[0..n_tokens): one score per document token (the sinks' are not
// read). Returns the chosen token indices, ascending: [0, sink) plus
// `budget` others, or every token when n_tokens - sink <= budget.
std::vector<int64_t> ilre_allocate(const float *scores, int64_t n_tokens, int64_t sink, int64_t budget,
                                   const std::vector<int32_t> &max_kernels, const std::vector<int32_t> &avg_kernels);

// The two pooling steps, exposed for tests: block maxima of u[0..n) with
// kernel m (stride m, the last block may be partial) into ceil(n/m) bins;
// then the average over n_avg bins around each bin (bins b - n_avg/2 ..
// b - n_avg/2 + n_avg - 1, zeros outside, divided by n_avg).
std::vector<float> ilre_block_max(const float *u, int64_t n, int32_t m);
std::vector<double> ilre_avg_pool(const std::vector<float> &bins, int32_t n_avg);

} // namespace lctx
