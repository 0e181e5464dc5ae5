// Forwarding a run of tokens onto the end of a decode cache in batches, with
// progress and cancellation between batches: what recompute and decode of
// REFORM and the recurrent baselines share.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/progress.h"

namespace lctx {

// Runs tokens[0..n) at positions cache.size().. in batches of n_batch; the
// logits of the last token into `logits`; appends each batch's tokens to
// `cached_tokens` once it is in the cache. Throws LCTX_ERR_CONTEXT_FULL
// (naming `who`) when more than `limit` slots would be used, and
// LCTX_ERR_CANCELLED; batches that completed stay in the cache. policy:
// the forward passes' attention policy (null: dense). A cache that releases
// sliding-window slots (KvStore::releases_window) gets its floor raised to
// each batch's first position: its owner only ever clears it, never rolls
// it back to an earlier position.
void forward_in_batches(Forward &forward, KvStore &cache, int64_t limit, const int32_t *tokens, size_t n,
                        int32_t n_batch, Progress *progress, std::vector<float> &logits,
                        std::vector<int32_t> &cached_tokens, const char *who, AttentionPolicy *policy = nullptr);

} // namespace lctx
