// Recompute and decode of the retrieve-then-recompute methods (REFORM,
// ILRe): the selected document tokens (by id, in document order) and the
// question run through the full model as a fresh prompt at positions 0..n-1
// into a decode cache of n_ctx slots; generated tokens are appended to it,
// densely or with RefreshKV (session/refreshkv.h: C_f is the recomputed cache
// plus the generated tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/method.h"
#include "session/refreshkv.h"

namespace lctx {

class GatheredDecoder {
public:
    // who: the method's name for messages ("REFORM").
    // refreshkv: decode with RefreshKV (null: dense).
    GatheredDecoder(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type,
                    const char *who, const RefreshKvConfig *refreshkv = nullptr);

    // Builds the decode cache from doc_ids[selection.positions] ++
    // selection.query and writes the last token's logits. Positions must be
    // ascending and inside the document (LCTX_ERR_INVALID_ARG); on any
    // failure the decode cache is left empty.
    void recompute(const std::vector<int32_t> &doc_ids, const Selection &selection, Progress &progress,
                   std::vector<float> &logits);
    // The selection of `positions` (ascending) for `query`, each with its
    // score scores[t]. LCTX_ERR_CONTEXT_FULL when the gathered tokens and the
    // question leave no room for an answer in n_ctx (the message names
    // `knob`, the size to lower).
    Selection make_selection(std::vector<int64_t> positions, const std::vector<float> &scores,
                             const std::vector<int32_t> &query, const char *knob) const;
    // Appends one token and writes the logits that follow it.
    void append(int32_t token, std::vector<float> &logits);

    const std::vector<int32_t> &tokens() const { return tokens_; }   // what the cache holds, in order
    int64_t n_ctx() const { return n_ctx_; }
    const KvStore *cache() const { return cache_.get(); }
    const RefreshKvPolicy *refreshkv() const { return refreshkv_.get(); }
    // The decoding of the next recompute on: cfg null = dense, else RefreshKV.
    void set_decoding(const RefreshKvConfig *cfg);

private:
    void forward(const int32_t *tokens, size_t n, Progress *progress, std::vector<float> &logits,
                 AttentionPolicy *policy);

    const Model &model_;
    Backend &backend_;
    Forward forward_;
    int64_t n_ctx_;
    int32_t n_batch_;
    KvType kv_type_;
    const char *who_;
    std::unique_ptr<RefreshKvPolicy> refreshkv_;   // null: dense decoding
    PendingDecoding next_decoding_;                // set_decoding's choice, applied by the next recompute
    std::unique_ptr<KvStore> cache_;   // made on the first recompute
    std::vector<int32_t> tokens_;
};

} // namespace lctx
