// Attention policies: per layer, what a block of queries attends to. The
// forward pass stays one loop; it asks its policy, at each layer,
//   1. before_attention(): a chance to rewrite slots of the KV store from the
//      block's pre-RoPE queries (InfLLM copies the blocks it retrieves into
//      its memory slots; RefreshKV and ReAttention plug in here too), then
//   2. ranges(): which slot ranges of the store the block attends to, each
//      slot at its own stored position, causally by position, or
//   3. plan(): attend over another store the policy owns, and/or keep the
//      per-slot group-max probabilities (RefreshKV decides, attends and
//      refreshes its partial cache inside the layer with these), then
//   4. after_attention().
// DensePolicy (FULL, recompute, the recurrent baselines) attends to every
// filled slot; WindowPolicy to the first `sink` slots and the last `window`
// ones. docs/engine.md describes how to add one.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/kv_store.h"

namespace lctx {

// Half-open slot ranges [first, second), ascending and disjoint.
using SlotRanges = std::vector<std::pair<int64_t, int64_t>>;

// What a layer's attention reads, when a policy wants more than ranges():
// another store of its own (RefreshKV's partial cache) and/or, per KV head,
// the largest probability each attended slot receives from the group's query
// heads and the block's queries i >= obs_begin.
struct AttentionPlan {
    const KvStore *store = nullptr;   // non-null: attend over slots [0, n_kv) of this store, not ranges()
    int64_t n_kv = 0;
    int32_t store_layer = -1;         // the layer of `store` read (-1: the layer attending)
    float *col_max = nullptr;         // non-null: [n_head_kv][attended slots] (host memory), written by the pass
    int64_t obs_begin = 0;
};

class AttentionPolicy {
public:
    virtual ~AttentionPolicy() = default;
    // q: the block's pre-RoPE queries [n_q][n_head * head_dim] (host memory).
    virtual void before_attention(int32_t layer, const float *q, int64_t n_q, KvStore &store) {}
    // Slot ranges of `store` the block attends to, given that slots
    // [0, n_kv) are filled (the block's own slots are the last n_q).
    virtual SlotRanges ranges(int32_t layer, int64_t n_kv, int64_t n_q) const { return {{0, n_kv}}; }
    // 3. plan(): called after the block's keys and values are stored in
    //    `store` (slots [n_kv - n_q, n_kv)); the default reads ranges().
    virtual AttentionPlan plan(int32_t layer, KvStore &store, int64_t n_kv, int64_t n_q) { return {}; }
    // 4. after_attention(): the attention of the layer is done (a plan's
    //    col_max is filled).
    virtual void after_attention(int32_t layer, KvStore &store, int64_t n_kv, int64_t n_q) {}
};

// Every filled slot.
class DensePolicy final : public AttentionPolicy {};

// StreamingLLM-style attention, block-wise as in chunked prefill: a block of
// queries attends to the first `sink` slots, the `window` slots before the
// block, and the block itself (causally). For one query at a time (decode)
// that is exactly sinks + the last `window` tokens.
class WindowPolicy final : public AttentionPolicy {
public:
    WindowPolicy(int64_t sink, int64_t window) : sink_(sink), window_(window) {}
    SlotRanges ranges(int32_t layer, int64_t n_kv, int64_t n_q) const override;

private:
    int64_t sink_, window_;
};

} // namespace lctx
