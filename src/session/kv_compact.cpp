#include "session/kv_compact.h"

#include <numeric>

namespace lctx {

void compact_head_renumbered(KvStore &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep) {
    std::vector<int32_t> pos(keep.size());
    std::iota(pos.begin(), pos.end(), 0);
    cache.compact_head(layer, head, keep, pos.data());
}

void compact_head_slots(KvStore &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep,
                        std::vector<int64_t> &orig, std::vector<float> &score) {
    compact_head_renumbered(cache, layer, head, keep);
    for (size_t i = 0; i < keep.size(); ++i) {   // ascending: moving forward is safe
        orig[i] = orig[static_cast<size_t>(keep[i])];
        score[i] = score[static_cast<size_t>(keep[i])];
    }
    orig.resize(keep.size());
    score.resize(keep.size());
}

} // namespace lctx
