#include "session/selector.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "common/ggml_type.h"

namespace lctx {

void score_tokens(const uint16_t *emb, int64_t n, int32_t dim, const float *query, int64_t n_query,
                  int32_t n_heads, float *s, Backend *backend) {
    if (n <= 0) return;
    if (n_query == 0) {
        std::fill(s, s + n, 0.0f);
        return;
    }
    MaxDotArgs a;
    a.keys = emb;
    a.n = n;
    a.ld = dim;
    a.dim = dim;
    a.q = query;
    a.n_q = n_query;
    a.ldq = dim;
    a.out = s;
    // Each token's score depends only on its own row (products added in
    // order): the thread split never changes a score.
    if (backend) backend->max_dot_f16(a);
    else max_dot_f16_portable(a, nullptr);
    const float inv = n_heads > 0 ? 1.0f / static_cast<float>(n_heads) : 1.0f;
    for (int64_t t = 0; t < n; ++t) s[t] *= inv;
}

void max_pool(const float *s, int64_t n, int64_t half, float *p) {
    // Monotonic deque of candidate maxima over the window [t - half, t + half].
    std::deque<int64_t> dq;
    int64_t next = 0;   // next index to push
    for (int64_t t = 0; t < n; ++t) {
        const int64_t hi = std::min(n - 1, t + half);
        for (; next <= hi; ++next) {
            while (!dq.empty() && s[dq.back()] <= s[next]) dq.pop_back();
            dq.push_back(next);
        }
        while (dq.front() < t - half) dq.pop_front();
        p[t] = s[dq.front()];
    }
}

std::vector<uint8_t> mark_repeats(const int32_t *ids, int64_t n, int64_t window) {
    std::vector<uint8_t> out(static_cast<size_t>(std::max<int64_t>(n, 0)), 0);
    if (window < 2 || n < window) return out;
    // hash of the window ending at e (e >= window - 1), polynomial mod 2^64
    // with an odd multiplier, rolled in O(n).
    const uint64_t mul = 0x9E3779B97F4A7C15ull;
    uint64_t top = 1;   // mul^(window - 1)
    for (int64_t i = 1; i < window; ++i) top *= mul;
    const int64_t n_win = n - window + 1;
    std::vector<std::pair<uint64_t, int64_t>> h(static_cast<size_t>(n_win));   // (hash, end)
    uint64_t cur = 0;
    for (int64_t e = 0; e < n; ++e) {
        if (e >= window) cur -= top * static_cast<uint32_t>(ids[e - window]);
        cur = cur * mul + static_cast<uint32_t>(ids[e]);
        if (e >= window - 1) h[static_cast<size_t>(e - window + 1)] = {cur, e};
    }
    std::sort(h.begin(), h.end());
    // seen_before[e]: the window ending at e equals one ending earlier. Within
    // a run of equal hashes the first (earliest) end is the original; a window
    // that differs from it token by token (a hash collision) is left unmarked.
    std::vector<uint8_t> seen_before(static_cast<size_t>(n), 0);
    for (size_t i = 0; i < h.size();) {
        size_t j = i + 1;
        for (; j < h.size() && h[j].first == h[i].first; ++j) {
            const int32_t *a = ids + h[i].second - window + 1, *b = ids + h[j].second - window + 1;
            if (std::equal(a, a + window, b)) seen_before[static_cast<size_t>(h[j].second)] = 1;
        }
        i = j;
    }
    for (int64_t t = 0; t < n; ++t) {
        const bool left = seen_before[static_cast<size_t>(t)];   // window [t - window + 1, t]
        const bool right = t + window - 1 < n && seen_before[static_cast<size_t>(t + window - 1)];   // [t, t + window - 1]
        out[static_cast<size_t>(t)] = left || right;
    }
    return out;
}

std::vector<float> demote_repeats(const std::vector<float> &s, const std::vector<uint8_t> &repeat) {
    std::vector<float> out = s;
    if (repeat.size() == s.size())
        for (size_t t = 0; t < s.size(); ++t)
            if (repeat[t]) out[t] -= 4.0f;
    return out;
}

std::vector<int64_t> select_top(const float *s, const float *p, int64_t n, int64_t budget, int64_t first,
                                int64_t last) {
    std::vector<int64_t> out;
    if (n <= budget) {
        out.resize(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) out[t] = t;
        return out;
    }
    const int64_t f = std::min(first, n), l0 = std::max(f, n - last);
    if (f + (n - l0) > budget) {
        // The forced ranges alone exceed the budget: share it between the two
        // ends (the first tokens hold the sinks, the last ones lead into the
        // question), half each, a short end's unused half going to the other.
        const int64_t n_last = n - l0;
        int64_t keep_first = std::min(f, budget / 2);
        const int64_t keep_last = std::min(n_last, budget - keep_first);
        keep_first = std::min(f, budget - keep_last);
        for (int64_t t = 0; t < keep_first; ++t) out.push_back(t);
        for (int64_t t = n - keep_last; t < n; ++t) out.push_back(t);
        return out;
    }
    std::vector<int64_t> rest;
    rest.reserve(static_cast<size_t>(l0 - f));
    for (int64_t t = 0; t < f; ++t) out.push_back(t);
    for (int64_t t = f; t < l0; ++t) rest.push_back(t);
    for (int64_t t = l0; t < n; ++t) out.push_back(t);
    const int64_t want = std::min<int64_t>(budget - static_cast<int64_t>(out.size()), rest.size());
    if (want > 0) {
        // NaN never wins: it compares as the lowest score.
        auto key = [](float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; };
        auto better = [&](int64_t a, int64_t b) {
            const float pa = key(p[a]), pb = key(p[b]);
            if (pa != pb) return pa > pb;
            const float sa = key(s[a]), sb = key(s[b]);
            if (sa != sb) return sa > sb;
            return a < b;
        };
        std::nth_element(rest.begin(), rest.begin() + want, rest.end(), better);
        out.insert(out.end(), rest.begin(), rest.begin() + want);
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace lctx
