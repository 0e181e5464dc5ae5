#include "session/ilre_allocator.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace lctx {

std::vector<float> ilre_block_max(const float *u, int64_t n, int32_t m) {
    const int64_t nb = (n + m - 1) / m;
    std::vector<float> out(static_cast<size_t>(nb));
    for (int64_t b = 0; b < nb; ++b) {
        const int64_t t1 = std::min(n, (b + 1) * m);
        float best = u[b * m];
        for (int64_t t = b * m + 1; t < t1; ++t) best = std::max(best, u[t]);
        out[static_cast<size_t>(b)] = best;
    }
    return out;
}

std::vector<double> ilre_avg_pool(const std::vector<float> &bins, int32_t n_avg) {
    const int64_t nb = static_cast<int64_t>(bins.size()), half = n_avg / 2;
    std::vector<double> out(static_cast<size_t>(nb));
    for (int64_t b = 0; b < nb; ++b) {
        // Summed directly (at most 16 terms by default) so that equal inputs
        // give bit-equal outputs: ties then break by bin index alone.
        const int64_t u0 = std::max<int64_t>(0, b - half), u1 = std::min(nb, b - half + n_avg);
        double s = 0.0;
        for (int64_t u = u0; u < u1; ++u) s += bins[static_cast<size_t>(u)];
        out[static_cast<size_t>(b)] = s / n_avg;
    }
    return out;
}

std::vector<int64_t> ilre_allocate(const float *scores, int64_t n_tokens, int64_t sink, int64_t budget,
                                   const std::vector<int32_t> &max_kernels, const std::vector<int32_t> &avg_kernels) {
    if (n_tokens < 0 || sink < 0 || budget < 0)
        fail(LCTX_ERR_INTERNAL, "ILRe allocator: negative size (%lld tokens, %lld sinks, budget %lld)",
             (long long)n_tokens, (long long)sink, (long long)budget);
    if (max_kernels.empty() || avg_kernels.empty()) fail(LCTX_ERR_INTERNAL, "ILRe allocator: no kernels");
    std::vector<int64_t> chosen;
    const int64_t S = std::min(sink, n_tokens), n = n_tokens - S;
    if (n <= budget) {
        chosen.resize(static_cast<size_t>(n_tokens));
        std::iota(chosen.begin(), chosen.end(), int64_t{0});
        return chosen;
    }
    chosen.reserve(static_cast<size_t>(S + budget));
    for (int64_t t = 0; t < S; ++t) chosen.push_back(t);
    const float *u = scores + S;   // the pooled tokens: everything after the sinks
    std::vector<char> taken(static_cast<size_t>(n), 0);

    const int64_t n_pairs = static_cast<int64_t>(max_kernels.size() * avg_kernels.size());
    const int64_t share = budget / n_pairs, extra = budget % n_pairs;
    int64_t pair = 0;
    std::vector<int64_t> order;
    for (int32_t m : max_kernels) {
        const std::vector<float> bins = ilre_block_max(u, n, m);
        const int64_t nb = static_cast<int64_t>(bins.size());
        const int64_t k_m = std::min(nb, budget / m + 1);   // enough blocks for any pair's share
        for (int32_t avg : avg_kernels) {
            int64_t need = share + (pair < extra ? 1 : 0);
            ++pair;
            if (need == 0) continue;
            const std::vector<double> pooled = ilre_avg_pool(bins, avg);
            auto better = [&](int64_t a, int64_t b) {
                const double pa = pooled[static_cast<size_t>(a)], pb = pooled[static_cast<size_t>(b)];
                return pa != pb ? pa > pb : a < b;   // ties: the earlier block
            };
            order.resize(static_cast<size_t>(nb));
            std::iota(order.begin(), order.end(), int64_t{0});
            std::partial_sort(order.begin(), order.begin() + k_m, order.end(), better);
            int64_t ranked = k_m;
            for (int64_t r = 0; need > 0; ++r) {
                if (r == ranked) {
                    // The top k_m blocks held too few free tokens (only when
                    // the document is barely longer than the budget): rank the rest.
                    if (ranked == nb) break;
                    std::sort(order.begin() + ranked, order.end(), better);
                    ranked = nb;
                }
                const int64_t b = order[static_cast<size_t>(r)];
                for (int64_t t = b * m; t < std::min(n, (b + 1) * m) && need > 0; ++t) {
                    if (taken[static_cast<size_t>(t)]) continue;
                    taken[static_cast<size_t>(t)] = 1;
                    chosen.push_back(S + t);
                    --need;
                }
            }
        }
    }
    std::sort(chosen.begin(), chosen.end());
    return chosen;
}

} // namespace lctx
