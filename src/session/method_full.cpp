#include "session/method_full.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "common/error.h"
#include "session/state_digest.h"

namespace lctx {

FullMethod::FullMethod(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type,
                       std::unique_ptr<RefreshKvPolicy> refreshkv)
    // The sliding layers release their slots out of the window (the floor:
    // each document batch's first position, then the document's end, where
    // every question restarts). RefreshKV reads them densely too, so either
    // decoding works on this cache.
    : model_(model), forward_(model, backend),
      cache_(backend, model.hparams(), n_ctx, -1, kv_type, std::max<int64_t>(1, n_batch)),
      n_batch_(n_batch), refreshkv_(std::move(refreshkv)) {}

void FullMethod::prefill(const int32_t *tokens, size_t n, Progress *progress, double done0, double done1,
                         LogitsMode mode, std::vector<float> &logits, AttentionPolicy *policy, int64_t floor_limit) {
    if (static_cast<int64_t>(n) > cache_.capacity() - cache_.size())
        fail(LCTX_ERR_CONTEXT_FULL, "the KV cache holds %lld of %lld tokens and cannot take %zu more: create the "
             "session with a larger n_ctx", static_cast<long long>(cache_.size()),
             static_cast<long long>(cache_.capacity()), n);
    std::vector<int32_t> pos;
    for (size_t done = 0; done < n;) {
        size_t b = std::min(n - done, static_cast<size_t>(n_batch_));
        if (progress && !progress->keep_going(done0 + (done1 - done0) * double(done) / double(n)))
            fail(LCTX_ERR_CANCELLED, "cancelled after %zu of %zu tokens", done, n);
        pos.resize(b);
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cache_.size()));
        cache_.raise_floor(static_cast<int32_t>(std::min<int64_t>(pos[0], floor_limit)));
        ForwardOptions opt;
        opt.logits = done + b == n ? mode : LogitsMode::NONE;
        opt.policy = policy;
        forward_.run(tokens + done, pos.data(), static_cast<int64_t>(b), cache_, opt, logits);
        tokens_.insert(tokens_.end(), tokens + done, tokens + done + b);
        done += b;
    }
    if (progress) progress->keep_going(done1);
}

void FullMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    // Batches that completed stay in the cache even if a later one fails or
    // is cancelled: n_doc_ always counts exactly the tokens cached.
    struct Sync {
        FullMethod &m;
        ~Sync() { m.n_doc_ = static_cast<int64_t>(m.tokens_.size()); }
    } sync{*this};
    prefill(tokens, n, &progress, 0.0, 1.0, LogitsMode::NONE, scratch_logits_, nullptr, INT32_MAX);
}

void FullMethod::finish(Progress &) {}

uint64_t FullMethod::state_digest() const {
    Hash64 h;
    h.add(n_doc_);
    digest_vec(h, tokens_);
    digest_kv(h, cache_);
    return h.digest();
}

Selection FullMethod::select(const std::vector<int32_t> &query, Progress &) {
    Selection s;
    s.positions.resize(static_cast<size_t>(n_doc_));
    std::iota(s.positions.begin(), s.positions.end(), int64_t{0});
    s.scores.assign(s.positions.size(), 1.0f);
    s.query = query;
    return s;
}

bool FullMethod::set_decoding(const RefreshKvConfig *cfg) {
    next_decoding_.set(cache_.backend(), model_.hparams(), cache_.type(), cfg);
    return true;
}

void FullMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    next_decoding_.apply(refreshkv_);
    // FULL keeps the document's cache: drop the previous question and answer.
    cache_.truncate(n_doc_);
    tokens_.resize(static_cast<size_t>(n_doc_));
    if (!refreshkv_) {
        prefill(selection.query.data(), selection.query.size(), &progress, 0.0, 1.0, LogitsMode::LAST, logits, nullptr,
                n_doc_);
        return;
    }
    // The question ends the prompt; its last token builds the partial caches.
    if (selection.query.empty()) fail(LCTX_ERR_INVALID_ARG, "RefreshKV: the question is empty");
    refreshkv_->begin_prompt(n_doc_ + static_cast<int64_t>(selection.query.size()));
    try {
        prefill(selection.query.data(), selection.query.size(), &progress, 0.0, 1.0, LogitsMode::LAST, logits,
                refreshkv_.get(), n_doc_);
    } catch (...) {
        cache_.truncate(n_doc_);
        tokens_.resize(static_cast<size_t>(n_doc_));
        throw;
    }
}

void FullMethod::append(int32_t token, std::vector<float> &logits) {
    if (!refreshkv_) {
        prefill(&token, 1, nullptr, 0.0, 1.0, LogitsMode::LAST, logits, nullptr, n_doc_);
        return;
    }
    refreshkv_->begin_step();
    try {
        prefill(&token, 1, nullptr, 0.0, 1.0, LogitsMode::LAST, logits, refreshkv_.get(), n_doc_);
    } catch (...) {
        refreshkv_->cancel_step();
        throw;
    }
}

} // namespace lctx
