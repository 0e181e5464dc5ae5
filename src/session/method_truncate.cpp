#include "session/method_truncate.h"

#include "common/error.h"
#include "session/state_digest.h"

namespace lctx {

TruncateMethod::TruncateMethod(const Model &model, Backend &backend, const BaselineParams &params)
    : p_(params), n_head_(params.budget / 2), n_tail_(params.budget - params.budget / 2),
      full_(model, backend, params.n_ctx, params.n_batch, params.kv_type) {}

void TruncateMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    if (sealed_) fail(LCTX_ERR_STATE, "TRUNCATE: the document is sealed");
    for (size_t i = 0; i < n; ++i) {
        if (static_cast<int64_t>(head_.size()) < n_head_) {
            head_.push_back(tokens[i]);
        } else {
            tail_.push_back(tokens[i]);
            if (static_cast<int64_t>(tail_.size()) > n_tail_) tail_.pop_front();
        }
    }
    n_fed_ += static_cast<int64_t>(n);
    progress.keep_going(1.0);
}

void TruncateMethod::finish(Progress &progress) {
    if (sealed_) return;
    std::vector<int32_t> kept(head_);
    kept.insert(kept.end(), tail_.begin(), tail_.end());
    // A cancelled build_index keeps the batches that completed in full_; a
    // retry forwards only the kept tokens after them.
    const size_t done = static_cast<size_t>(full_.n_fed());
    if (done > kept.size()) fail(LCTX_ERR_INTERNAL, "TRUNCATE: %zu tokens cached, only %zu kept", done, kept.size());
    full_.feed(kept.data() + done, kept.size() - done, progress);   // throws with the tokens that completed kept
    full_.finish(progress);
    sealed_ = true;
}

uint64_t TruncateMethod::state_digest() const {
    Hash64 h;
    h.add(n_fed_);
    digest_vec(h, head_);
    digest_vec(h, std::vector<int32_t>(tail_.begin(), tail_.end()));
    h.add(full_.state_digest());
    return h.digest();
}

std::vector<int64_t> TruncateMethod::kept_positions() const {
    std::vector<int64_t> pos;
    for (int64_t i = 0; i < static_cast<int64_t>(head_.size()); ++i) pos.push_back(i);
    const int64_t t0 = n_fed_ - static_cast<int64_t>(tail_.size());
    for (int64_t i = 0; i < static_cast<int64_t>(tail_.size()); ++i) pos.push_back(t0 + i);
    return pos;
}

Selection TruncateMethod::select(const std::vector<int32_t> &query, Progress &progress) {
    if (!sealed_) fail(LCTX_ERR_STATE, "TRUNCATE: select before build_index");
    Selection sel = full_.select(query, progress);
    sel.positions = kept_positions();
    sel.scores.assign(sel.positions.size(), 1.0f);
    return sel;
}

void TruncateMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    full_.recompute(selection, progress, logits);
}

void TruncateMethod::append(int32_t token, std::vector<float> &logits) { full_.append(token, logits); }

} // namespace lctx
