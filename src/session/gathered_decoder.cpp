#include "session/gathered_decoder.h"

#include "common/error.h"
#include "session/batched_forward.h"

namespace lctx {

GatheredDecoder::GatheredDecoder(const Model &model, Backend &backend, int64_t n_ctx, int32_t n_batch, KvType kv_type,
                                 const char *who, const RefreshKvConfig *refreshkv)
    : model_(model), backend_(backend), forward_(model, backend), n_ctx_(n_ctx), n_batch_(n_batch),
      kv_type_(kv_type), who_(who) {
    if (refreshkv) refreshkv_ = std::make_unique<RefreshKvPolicy>(backend, model.hparams(), kv_type, *refreshkv);
}

void GatheredDecoder::forward(const int32_t *tokens, size_t n, Progress *progress, std::vector<float> &logits,
                              AttentionPolicy *policy) {
    forward_in_batches(forward_, *cache_, cache_->capacity(), tokens, n, n_batch_, progress, logits, tokens_, who_,
                       policy);
}

void GatheredDecoder::set_decoding(const RefreshKvConfig *cfg) {
    next_decoding_.set(backend_, model_.hparams(), kv_type_, cfg);
}

void GatheredDecoder::recompute(const std::vector<int32_t> &doc_ids, const Selection &selection, Progress &progress,
                                std::vector<float> &logits) {
    const int64_t N = static_cast<int64_t>(doc_ids.size());
    std::vector<int32_t> ids;
    ids.reserve(selection.positions.size() + selection.query.size());
    int64_t prev = -1;
    for (int64_t t : selection.positions) {
        if (t <= prev || t >= N)
            fail(LCTX_ERR_INVALID_ARG, "%s recompute: selected position %lld is out of range or not ascending", who_,
                 (long long)t);
        ids.push_back(doc_ids[static_cast<size_t>(t)]);
        prev = t;
    }
    ids.insert(ids.end(), selection.query.begin(), selection.query.end());
    if (ids.empty()) fail(LCTX_ERR_INVALID_ARG, "%s recompute: nothing to compute (empty selection and query)", who_);
    if (static_cast<int64_t>(ids.size()) > n_ctx_)
        fail(LCTX_ERR_CONTEXT_FULL, "%s recompute: %zu tokens do not fit n_ctx = %lld", who_, ids.size(),
             (long long)n_ctx_);
    next_decoding_.apply(refreshkv_);
    // Positions only grow from 0 until the next recompute clears the cache,
    // so the sliding layers release their slots out of the window, under
    // dense decoding and RefreshKV alike (its sliding layers are dense).
    if (!cache_)
        cache_ = std::make_unique<KvStore>(backend_, model_.hparams(), n_ctx_, -1, kv_type_,
                                           std::max<int64_t>(1, n_batch_));
    cache_->clear();
    tokens_.clear();
    try {
        if (refreshkv_) refreshkv_->begin_prompt(static_cast<int64_t>(ids.size()));
        forward(ids.data(), ids.size(), &progress, logits, refreshkv_.get());
    } catch (...) {
        cache_->clear();
        tokens_.clear();
        throw;
    }
    progress.keep_going(1.0);
}

Selection GatheredDecoder::make_selection(std::vector<int64_t> positions, const std::vector<float> &scores,
                                          const std::vector<int32_t> &query, const char *knob) const {
    if (static_cast<int64_t>(positions.size() + query.size()) >= n_ctx_)
        fail(LCTX_ERR_CONTEXT_FULL, "%s: %zu gathered tokens + a %zu-token question leave no room for an answer in "
             "n_ctx = %lld: lower %s or raise n_ctx", who_, positions.size(), query.size(), (long long)n_ctx_, knob);
    Selection sel;
    sel.positions = std::move(positions);
    sel.scores.reserve(sel.positions.size());
    for (int64_t t : sel.positions) sel.scores.push_back(scores[static_cast<size_t>(t)]);
    sel.query = query;
    return sel;
}

void GatheredDecoder::append(int32_t token, std::vector<float> &logits) {
    if (!cache_) fail(LCTX_ERR_STATE, "%s: decode before recompute", who_);
    if (!refreshkv_) return forward(&token, 1, nullptr, logits, nullptr);
    refreshkv_->begin_step();
    try {
        forward(&token, 1, nullptr, logits, refreshkv_.get());
    } catch (...) {
        refreshkv_->cancel_step();
        throw;
    }
}

} // namespace lctx
