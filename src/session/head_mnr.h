// Mean Normalised Rank of one candidate head on one sample (spec §4.4-4.5):
// s[t] = max over question tokens of the cosine to context token t, smoothed
// by a centred (2*half+1)-token mean (truncated at the edges), ranked in
// descending order (ties get their average rank); MNR = mean over gold
// tokens of rank / n. Lower is better; the floor for g contiguous gold
// tokens is (g + 1) / (2n).
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

double head_mnr(const std::vector<float> &s, const std::vector<bool> &gold, int64_t half = 10);

} // namespace lctx
