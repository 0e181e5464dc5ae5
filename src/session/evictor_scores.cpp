#include "session/evictor_scores.h"

#include <algorithm>
#include <cmath>

namespace lctx {

namespace {

std::vector<int64_t> all_slots(int64_t n) {
    std::vector<int64_t> keep(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) keep[s] = s;
    return keep;
}

// Moves the best `want` of `from` (by score, ties: larger orig) into `to`;
// `from` keeps the others.
void take_best(std::vector<int64_t> &from, int64_t want, const float *score, const int64_t *orig,
               std::vector<int64_t> &to) {
    want = std::min<int64_t>(want, static_cast<int64_t>(from.size()));
    if (want <= 0) return;
    auto better = [&](int64_t a, int64_t b) {
        if (score[a] != score[b]) return score[a] > score[b];
        return orig[a] > orig[b];
    };
    std::nth_element(from.begin(), from.begin() + (want - 1), from.end(), better);
    // nth_element leaves the best `want` in front (unordered) when want - 1 is the pivot.
    to.insert(to.end(), from.begin(), from.begin() + want);
    from.erase(from.begin(), from.begin() + want);
}

} // namespace

std::vector<int64_t> streaming_keep(const int64_t *orig, int64_t n, int64_t budget, int64_t sink) {
    if (n <= budget) return all_slots(n);
    std::vector<int64_t> keep;
    keep.reserve(static_cast<size_t>(budget));
    int64_t n_sink = 0;
    while (n_sink < n && orig[n_sink] < sink && n_sink < budget) ++n_sink;
    for (int64_t s = 0; s < n_sink; ++s) keep.push_back(s);
    for (int64_t s = n - (budget - n_sink); s < n; ++s) keep.push_back(s);
    return keep;
}

void avg_pool_scores(const float *in, int64_t n, int64_t kernel, float *out) {
    const int64_t pad = kernel / 2;
    for (int64_t i = 0; i < n; ++i) {
        const int64_t lo = std::max<int64_t>(0, i - pad), hi = std::min<int64_t>(n, i - pad + kernel);
        double s = 0.0;
        for (int64_t j = lo; j < hi; ++j) s += in[j];
        out[i] = static_cast<float>(s / double(kernel));
    }
}

std::vector<int64_t> infinipot_keep(const float *cap, const float *nuc, const int64_t *orig, int64_t n,
                                    int64_t budget, int64_t sink, int64_t recent, float nuc_ratio) {
    if (n <= budget) return all_slots(n);
    const int64_t recent_begin = std::max<int64_t>(0, n - recent);
    std::vector<int64_t> keep, rest;
    for (int64_t s = 0; s < n; ++s) {
        if (orig[s] < sink || s >= recent_begin) keep.push_back(s);
        else rest.push_back(s);
    }
    const int64_t free = budget - static_cast<int64_t>(keep.size());
    if (free < 0) {
        keep.resize(static_cast<size_t>(budget));   // sinks first, then the most recent
    } else {
        const int64_t n_nuc = static_cast<int64_t>(std::llround(double(free) * nuc_ratio));
        take_best(rest, n_nuc, nuc, orig, keep);
        take_best(rest, free - n_nuc, cap, orig, keep);
    }
    std::sort(keep.begin(), keep.end());
    return keep;
}

} // namespace lctx
