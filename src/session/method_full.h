// FULL: the whole document in one KV cache, as plain inference does.
// feed = prefill; select = every position; recompute = roll the cache back
// to the document and prefill the question; decode appends to that cache.
#pragma once

#include <memory>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/method.h"

namespace lctx {

class FullMethod : public Method {
public:
    FullMethod(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type = KvType::F32);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return tokens_; }
    int64_t n_fed() const override { return n_doc_; }
    uint64_t state_digest() const override;

private:
    // Forwards tokens at the next positions in batches of n_batch_.
    void prefill(const int32_t *tokens, size_t n, Progress *progress, double done0, double done1, LogitsMode mode,
                 std::vector<float> &logits);

    const Model &model_;
    Forward forward_;
    KvStore cache_;
    int32_t n_batch_;
    int64_t n_doc_ = 0;
    std::vector<int32_t> tokens_;   // everything in the cache, in order
    std::vector<float> scratch_logits_;
};

} // namespace lctx
