#include "session/method_refreshkv.h"

#include <numeric>

#include "common/error.h"
#include "session/state_digest.h"

namespace lctx {

RefreshKvMethod::RefreshKvMethod(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type,
                                 const RefreshKvConfig &cfg)
    : model_(model), forward_(model, backend), cache_(backend, model.hparams(), n_ctx, -1, kv_type),
      policy_(backend, model.hparams(), kv_type, cfg), n_batch_(n_batch) {}

void RefreshKvMethod::prefill(const int32_t *tokens, size_t n, Progress *progress, LogitsMode mode,
                              AttentionPolicy *policy, std::vector<float> &logits) {
    if (static_cast<int64_t>(n) > cache_.capacity() - cache_.size())
        fail(LCTX_ERR_CONTEXT_FULL, "the KV cache holds %lld of %lld tokens and cannot take %zu more: create the "
             "session with a larger n_ctx", static_cast<long long>(cache_.size()),
             static_cast<long long>(cache_.capacity()), n);
    std::vector<int32_t> pos;
    for (size_t done = 0; done < n;) {
        size_t b = std::min(n - done, static_cast<size_t>(n_batch_));
        if (progress && !progress->keep_going(double(done) / double(n)))
            fail(LCTX_ERR_CANCELLED, "cancelled after %zu of %zu tokens", done, n);
        pos.resize(b);
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cache_.size()));
        ForwardOptions opt;
        opt.logits = done + b == n ? mode : LogitsMode::NONE;
        opt.policy = policy;
        forward_.run(tokens + done, pos.data(), static_cast<int64_t>(b), cache_, opt, logits);
        tokens_.insert(tokens_.end(), tokens + done, tokens + done + b);
        done += b;
    }
    if (progress) progress->keep_going(1.0);
}

void RefreshKvMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    struct Sync {
        RefreshKvMethod &m;
        ~Sync() { m.n_doc_ = static_cast<int64_t>(m.tokens_.size()); }
    } sync{*this};
    prefill(tokens, n, &progress, LogitsMode::NONE, nullptr, scratch_logits_);
}

void RefreshKvMethod::finish(Progress &) {}

uint64_t RefreshKvMethod::state_digest() const {
    Hash64 h;
    h.add(n_doc_);
    digest_vec(h, tokens_);
    digest_kv(h, cache_);
    return h.digest();
}

Selection RefreshKvMethod::select(const std::vector<int32_t> &query, Progress &) {
    Selection s;
    s.positions.resize(static_cast<size_t>(n_doc_));
    std::iota(s.positions.begin(), s.positions.end(), int64_t{0});
    s.scores.assign(s.positions.size(), 1.0f);
    s.query = query;
    return s;
}

void RefreshKvMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    // The document's cache stays; the question is the end of the prompt,
    // and its last token initialises the partial caches.
    cache_.truncate(n_doc_);
    tokens_.resize(static_cast<size_t>(n_doc_));
    // (Session refuses an empty question.)
    if (selection.query.empty()) fail(LCTX_ERR_INVALID_ARG, "RefreshKV: the question is empty");
    const int64_t end = n_doc_ + static_cast<int64_t>(selection.query.size());
    policy_.begin_prompt(end);
    try {
        prefill(selection.query.data(), selection.query.size(), &progress, LogitsMode::LAST, &policy_, logits);
    } catch (...) {
        cache_.truncate(n_doc_);
        tokens_.resize(static_cast<size_t>(n_doc_));
        throw;
    }
}

void RefreshKvMethod::append(int32_t token, std::vector<float> &logits) {
    policy_.begin_step();
    try {
        prefill(&token, 1, nullptr, LogitsMode::LAST, &policy_, logits);
    } catch (...) {
        policy_.cancel_step();
        throw;
    }
}

} // namespace lctx
