// Compaction of one (layer, KV head) of a KvCache whose slot index is the
// token's position (the compressed caches of REFORM's encoder and of the
// recurrent baselines): survivors move forward to slots 0..k-1 and their
// keys, cached after RoPE, are rotated by the position delta.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kv_cache.h"
#include "model/model.h"

namespace lctx {

// hp with the YaRN magnitude factor cancelled, for delta rotations of keys
// that already carry it (as KvCache::reposition does).
Hparams delta_rope_hparams(const Hparams &hp);

// Keeps slots keep[] (ascending) of (layer, head), moved to slots 0..k-1;
// `rot` from delta_rope_hparams. Slots >= k of this head are left stale: the
// caller truncates the cache once every head is compacted to k slots.
void compact_head(KvCache &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep, const Hparams &rot);

// compact_head plus the same move of the head's per-slot bookkeeping: the
// document index (orig) and the eviction score of every slot.
void compact_head_slots(KvCache &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep,
                        const Hparams &rot, std::vector<int64_t> &orig, std::vector<float> &score);

} // namespace lctx
