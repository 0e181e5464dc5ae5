#include "session/evictor_h2o.h"

#include <algorithm>

namespace lctx {

std::vector<int64_t> h2o_keep(const float *score, const int64_t *orig, int64_t n, int64_t budget, int64_t sink,
                              int64_t recent) {
    std::vector<int64_t> keep;
    if (n <= budget) {
        keep.resize(static_cast<size_t>(n));
        for (int64_t s = 0; s < n; ++s) keep[s] = s;
        return keep;
    }
    const int64_t recent_begin = std::max<int64_t>(0, n - recent);
    std::vector<int64_t> rest;
    rest.reserve(static_cast<size_t>(n));
    for (int64_t s = 0; s < n; ++s) {
        if (orig[s] < sink || s >= recent_begin) keep.push_back(s);
        else rest.push_back(s);
    }
    const int64_t want = budget - static_cast<int64_t>(keep.size());
    if (want > 0) {
        auto better = [&](int64_t a, int64_t b) {
            if (score[a] != score[b]) return score[a] > score[b];
            return orig[a] > orig[b];
        };
        if (want < static_cast<int64_t>(rest.size()))
            std::nth_element(rest.begin(), rest.begin() + want, rest.end(), better);
        keep.insert(keep.end(), rest.begin(), rest.begin() + std::min<int64_t>(want, rest.size()));
    } else if (want < 0) {
        // More protected slots than the budget (only with sink + recent >=
        // budget): keep the sinks first, then the most recent.
        keep.resize(static_cast<size_t>(budget));
    }
    std::sort(keep.begin(), keep.end());
    return keep;
}

} // namespace lctx
