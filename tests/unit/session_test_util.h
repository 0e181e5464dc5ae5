// Helpers shared by the session-level tests: random document tokens for the
// tiny model's vocabulary and feeding a document in given call sizes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "session/session.h"

namespace session_test {

// n ids in [lo, hi), deterministic from seed (the tiny model's vocabulary is 300).
inline std::vector<int32_t> random_tokens(int n, uint32_t seed, int lo = 3, int hi = 299) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t &x : t) x = lo + int32_t(rng() % uint32_t(hi - lo));
    return t;
}

// Feeds doc in calls of sizes[0], sizes[1], ... (cycling), then build_index.
inline void feed_split(lctx::Session &s, const std::vector<int32_t> &doc, const std::vector<size_t> &sizes) {
    size_t at = 0, i = 0;
    while (at < doc.size()) {
        const size_t n = std::min(sizes[i++ % sizes.size()], doc.size() - at);
        s.feed(doc.data() + at, n);
        at += n;
    }
    s.build_index();
}

} // namespace session_test
