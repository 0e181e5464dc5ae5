// FULL: the whole document in one KV cache, as plain inference does.
// feed = prefill; select = every position; recompute = roll the cache back
// to the document and prefill the question; decode appends to that cache.
// With a RefreshKV policy (LCTX_METHOD_REFRESHKV, docs/methods/refreshkv.md)
// the question and the answer go through it: the question's last token
// builds the partial caches, each decoded token attends over them or, on
// query drift, over the whole cache. set_decoding switches between the two
// for the next question: one document prefill answers it both ways.
#pragma once

#include <memory>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/method.h"
#include "session/refreshkv.h"

namespace lctx {

class FullMethod : public Method {
public:
    // refreshkv: decode with RefreshKV (LCTX_METHOD_REFRESHKV); null: dense.
    FullMethod(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type = KvType::F32,
               std::unique_ptr<RefreshKvPolicy> refreshkv = nullptr);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return tokens_; }
    int64_t n_fed() const override { return n_doc_; }
    uint64_t state_digest() const override;
    const RefreshKvPolicy *refreshkv() const override { return refreshkv_.get(); }
    bool set_decoding(const RefreshKvConfig *cfg) override;

private:
    // Forwards tokens at the next positions in batches of n_batch_, through
    // `policy` (null: dense). floor_limit: the lowest position a later query
    // may have (the document's end once questions start: each question is
    // computed again from there); the cache's floor rises to each batch's
    // first position up to it.
    void prefill(const int32_t *tokens, size_t n, Progress *progress, double done0, double done1, LogitsMode mode,
                 std::vector<float> &logits, AttentionPolicy *policy, int64_t floor_limit);

    const Model &model_;
    Forward forward_;
    KvStore cache_;
    int32_t n_batch_;
    int64_t n_doc_ = 0;
    std::vector<int32_t> tokens_;   // everything in the cache, in order
    std::vector<float> scratch_logits_;
    std::unique_ptr<RefreshKvPolicy> refreshkv_;
    PendingDecoding next_decoding_;   // set_decoding's choice, applied by the next recompute
};

} // namespace lctx
