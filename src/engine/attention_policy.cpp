#include "engine/attention_policy.h"

#include <algorithm>

namespace lctx {

SlotRanges WindowPolicy::ranges(int32_t, int64_t n_kv, int64_t n_q) const {
    const int64_t w0 = std::max<int64_t>(0, n_kv - n_q - window_);
    const int64_t s1 = std::min(sink_, w0);
    SlotRanges r;
    if (s1 > 0) r.emplace_back(0, s1);
    r.emplace_back(w0, n_kv);
    return r;
}

} // namespace lctx
