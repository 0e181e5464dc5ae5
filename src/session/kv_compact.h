// Compaction of one (layer, KV head) of the compressed caches of REFORM's
// encoder and of the recurrent baselines, whose survivors are renumbered to
// consecutive positions 0..k-1 (slot = position), together with the
// per-slot bookkeeping those methods keep beside the store.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_store.h"

namespace lctx {

// Keeps slots keep[] (ascending) of (layer, head) at slots and positions
// 0..k-1, and moves the head's document index (orig) and eviction score of
// every slot the same way. Slots >= k of this head are left stale: the
// caller truncates the store once every head is compacted to k slots.
void compact_head_slots(KvStore &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep,
                        std::vector<int64_t> &orig, std::vector<float> &score);

// Keeps slots keep[] of (layer, head) at slots and positions 0..k-1.
void compact_head_renumbered(KvStore &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep);

} // namespace lctx
