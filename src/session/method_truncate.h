// TRUNCATE: keep the first kv_budget/2 and the last kv_budget - kv_budget/2
// document tokens, drop the middle (the papers' truncation baseline), then
// plain full attention over what is kept. Feeding holds only those tokens
// (the tail in a ring), so memory stays O(budget) for any input length; the
// kept tokens are prefilled at build_index.
#pragma once

#include <deque>
#include <memory>

#include "session/baseline_params.h"
#include "session/method_full.h"

namespace lctx {

class TruncateMethod : public Method {
public:
    TruncateMethod(const Model &model, Backend &backend, const BaselineParams &params);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return full_.context_tokens(); }
    int64_t n_fed() const override { return n_fed_; }
    uint64_t state_digest() const override;

    // Document positions kept (ascending).
    std::vector<int64_t> kept_positions() const;

private:
    BaselineParams p_;
    int64_t n_head_, n_tail_;
    std::vector<int32_t> head_;
    std::deque<int32_t> tail_;
    int64_t n_fed_ = 0;
    bool sealed_ = false;
    FullMethod full_;
};

} // namespace lctx
