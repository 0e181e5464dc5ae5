#include "common/top_k.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lctx {

std::vector<int64_t> top_k_indices(const float *x, int64_t n, int64_t k) {
    k = std::clamp<int64_t>(k, 0, std::max<int64_t>(n, 0));
    std::vector<int64_t> idx(static_cast<size_t>(std::max<int64_t>(n, 0)));
    std::iota(idx.begin(), idx.end(), int64_t{0});
    auto key = [&](int64_t i) { return std::isnan(x[i]) ? -INFINITY : x[i]; };
    auto better = [&](int64_t a, int64_t b) {
        const float sa = key(a), sb = key(b);
        return sa > sb || (sa == sb && a < b);
    };
    if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), better);
    idx.resize(static_cast<size_t>(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

} // namespace lctx
