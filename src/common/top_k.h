// Indices of the k largest values of an array, ascending (ties: the lower
// index first; NaN counts as -inf). Used by block retrieval and by the CPU
// backend's top_k op.
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

std::vector<int64_t> top_k_indices(const float *x, int64_t n, int64_t k);

} // namespace lctx
