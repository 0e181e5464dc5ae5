#include "session/reattention_select.h"

#include <algorithm>

namespace lctx {

std::vector<int64_t> vote_spans(const int64_t *index, const float *score, int64_t n, int64_t middle_begin,
                                int64_t middle_end, int64_t n_spans, int64_t span) {
    struct Cand {
        int64_t index;
        float score;
    };
    std::vector<Cand> c;
    c.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        if (index[i] >= middle_begin && index[i] < middle_end) c.push_back({index[i], score[i]});
    if (c.empty() || n_spans <= 0 || middle_end <= middle_begin) return {};
    std::sort(c.begin(), c.end(), [](const Cand &a, const Cand &b) { return a.index < b.index; });

    struct Vote {
        int64_t index, votes;
        float best;
    };
    std::vector<Vote> v;
    for (const Cand &x : c) {
        if (!v.empty() && v.back().index == x.index) {
            ++v.back().votes;
            v.back().best = std::max(v.back().best, x.score);
        } else {
            v.push_back({x.index, 1, x.score});
        }
    }
    if (static_cast<int64_t>(v.size()) > n_spans) {
        std::partial_sort(v.begin(), v.begin() + n_spans, v.end(), [](const Vote &a, const Vote &b) {
            if (a.votes != b.votes) return a.votes > b.votes;
            if (a.best != b.best) return a.best > b.best;
            return a.index < b.index;
        });
        v.resize(static_cast<size_t>(n_spans));
        std::sort(v.begin(), v.end(), [](const Vote &a, const Vote &b) { return a.index < b.index; });
    }
    // Winners ascending, so their spans' starts ascend too: merge as we go.
    std::vector<int64_t> out;
    int64_t covered = middle_begin;   // everything below is already out
    for (const Vote &w : v) {
        const int64_t lo = std::max(middle_begin, w.index - span / 2);
        const int64_t hi = std::min(middle_end, w.index + span / 2);   // exclusive
        for (int64_t t = std::max(lo, covered); t < hi; ++t) out.push_back(t);
        covered = std::max(covered, hi);
    }
    return out;
}

} // namespace lctx
