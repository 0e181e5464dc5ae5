// REFRESHKV (docs/methods/refreshkv.md): FULL's prefill of the whole input
// into one KV cache C_f, then decoding through RefreshKvPolicy: most layer
// steps attend over a small partial cache per (layer, KV head), refreshed
// from a full-attention step when the layer's query drifts.
#pragma once

#include <memory>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/method.h"
#include "session/refreshkv.h"

namespace lctx {

class RefreshKvMethod : public Method {
public:
    RefreshKvMethod(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type,
                    const RefreshKvConfig &cfg);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return tokens_; }
    int64_t n_fed() const override { return n_doc_; }
    uint64_t state_digest() const override;

    const RefreshKvPolicy *refreshkv() const override { return &policy_; }

private:
    // Forwards tokens at the next positions in batches of n_batch_ (policy:
    // RefreshKV's, or none for the document).
    void prefill(const int32_t *tokens, size_t n, Progress *progress, LogitsMode mode, AttentionPolicy *policy,
                 std::vector<float> &logits);

    const Model &model_;
    Forward forward_;
    KvStore cache_;
    RefreshKvPolicy policy_;
    int32_t n_batch_;
    int64_t n_doc_ = 0;
    std::vector<int32_t> tokens_;   // everything in the cache, in order
    std::vector<float> scratch_logits_;
};

} // namespace lctx
