#include "session/head_mnr.h"

#include <algorithm>
#include <numeric>

namespace lctx {

double head_mnr(const std::vector<float> &s, const std::vector<bool> &gold, int64_t half) {
    const int64_t n = static_cast<int64_t>(s.size());
    if (n == 0) return 0.0;
    // Centred mean through prefix sums (double, so long inputs stay exact enough).
    std::vector<double> pre(static_cast<size_t>(n) + 1, 0.0);
    for (int64_t t = 0; t < n; ++t) pre[t + 1] = pre[t] + s[t];
    std::vector<double> sm(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        const int64_t lo = std::max<int64_t>(0, t - half), hi = std::min(n - 1, t + half);
        sm[t] = (pre[hi + 1] - pre[lo]) / double(hi - lo + 1);
    }
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sm[a] > sm[b]; });
    std::vector<double> rank(static_cast<size_t>(n));
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && sm[order[j + 1]] == sm[order[i]]) ++j;
        const double avg = (double(i + 1) + double(j + 1)) / 2.0;   // 1-based average rank of the tie group
        for (int64_t k = i; k <= j; ++k) rank[order[k]] = avg;
        i = j + 1;
    }
    double sum = 0.0;
    int64_t g = 0;
    for (int64_t t = 0; t < n; ++t)
        if (gold[t]) {
            sum += rank[t] / double(n);
            ++g;
        }
    return g ? sum / double(g) : 0.0;
}

} // namespace lctx
