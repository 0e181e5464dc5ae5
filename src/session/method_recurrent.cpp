#include "session/method_recurrent.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/error.h"
#include "session/state_digest.h"
#include "session/evictor.h"
#include "session/evictor_h2o.h"
#include "session/evictor_scores.h"
#include "session/batched_forward.h"
#include "session/kv_compact.h"
#include "session/session.h"

namespace lctx {

namespace {

int64_t cache_capacity(const BaselineParams &p, int64_t n_catalyst) {
    return std::max(p.budget + p.chunk + n_catalyst, p.n_ctx);
}

} // namespace

RecurrentMethod::RecurrentMethod(const Model &model, Backend &backend, const BaselineParams &params)
    : model_(model), backend_(backend), p_(params), n_layer_(model.hparams().n_layer), n_kv_(model.hparams().n_head_kv),
      forward_(model, backend),
      cache_(backend, model.hparams(), cache_capacity(params, params.method == LCTX_METHOD_INFINIPOT
                                                         ? static_cast<int64_t>(params.catalyst.size()) + 8
                                                         : 0),
             -1, params.kv_type),
      catalyst_(params.method == LCTX_METHOD_INFINIPOT
                    ? model.tokenizer().tokenize(params.catalyst, false, false)
                    : std::vector<int32_t>{}) {
    if (p_.method == LCTX_METHOD_INFINIPOT && catalyst_.empty())
        fail(LCTX_ERR_INVALID_ARG, "INFINIPOT: the catalyst prompt is empty");
    orig_.resize(static_cast<size_t>(n_layer_) * n_kv_);
    score_.resize(orig_.size());
    EvictorKind kind = EvictorKind::H2O;
    switch (p_.method) {
    case LCTX_METHOD_STREAMING: kind = EvictorKind::STREAMING; break;
    case LCTX_METHOD_TOVA: kind = EvictorKind::TOVA; break;
    case LCTX_METHOD_SNAPKV: kind = EvictorKind::SNAPKV; break;
    default: break;
    }
    evictor_ = Evictor::make(kind, p_.budget, p_.sink, p_.recent);
    evictor_.obs = p_.obs;
    evictor_.accumulate = p_.accumulate;
    evictor_.snapkv_kernel = p_.snapkv_kernel;
    feeder_.chunk = p_.chunk;
    feeder_.who = method_name(p_.method);
    feeder_.n_encoded = [this] { return n_encoded_; };
}

void RecurrentMethod::run_collect(KvStore &cache, const int32_t *tokens, int64_t n, int64_t obs_begin,
                                  std::vector<std::vector<float>> *cols, std::vector<float> *nuc, float *first_nuc,
                                  const std::function<bool()> &keep_going) {
    const int64_t V = model_.hparams().n_vocab;
    const int64_t n0 = cache.size(), total = n0 + n;
    if (cols) {
        cols->assign(static_cast<size_t>(n_layer_), {});
        for (auto &c : *cols) c.assign(static_cast<size_t>(n_kv_ * total), 0.0f);
    }
    if (nuc) nuc->assign(static_cast<size_t>(n), 0.0f);
    std::vector<int32_t> pos;
    std::vector<float> logits;
    std::vector<std::vector<float>> part;
    const int64_t nb = p_.n_batch;
    try {
        for (int64_t done = 0; done < n;) {
            const int64_t b = std::min(n - done, nb), base = cache.size();
            pos.resize(static_cast<size_t>(b));
            std::iota(pos.begin(), pos.end(), static_cast<int32_t>(base));
            ForwardHooks hooks;
            const bool want_cols = cols && obs_begin < done + b;
            if (want_cols) {
                hooks.col_sums = &part;
                hooks.obs_begin = std::max<int64_t>(0, obs_begin - done);
            }
            ForwardOptions opt;
            opt.logits = nuc ? LogitsMode::ALL : LogitsMode::NONE;
            opt.hooks = want_cols ? &hooks : nullptr;
            opt.keep_going = keep_going;
            forward_.run(tokens + done, pos.data(), b, cache, opt, logits);
            if (want_cols) {
                const int64_t stride = base + b;
                for (int32_t l = 0; l < n_layer_; ++l)
                    for (int32_t g = 0; g < n_kv_; ++g) {
                        float *dst = (*cols)[l].data() + g * total;
                        const float *src = part[l].data() + g * stride;
                        for (int64_t s = 0; s < stride; ++s) dst[s] += src[s];
                    }
            }
            if (nuc) {
                // Row i predicts token done+i+1; the first token of the call
                // is predicted by the last row of the previous call.
                if (done == 0) (*nuc)[0] = first_nuc ? *first_nuc : 0.0f;
                const int64_t rows = std::min(b, n - 1 - done);   // rows with a next token in this call
                if (rows > 0)
                    backend_.token_surprisal(logits.data(), rows, V, tokens + done + 1, nuc->data() + done + 1);
                last_logits_.assign(logits.end() - V, logits.end());
            }
            done += b;
        }
    } catch (...) {
        cache.truncate(n0);
        throw;
    }
}

void RecurrentMethod::step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
    const bool snap = p_.method == LCTX_METHOD_SNAPKV, pot = p_.method == LCTX_METHOD_INFINIPOT;
    // SnapKV evicts lazily, only when the pot (budget + chunk) has no room
    // for this step, with the scores of the previous step's window.
    if (snap && cache_.size() + m > p_.budget + p_.chunk) evict(nullptr);
    const int64_t n0 = cache_.size(), base = n_encoded_;
    const int64_t obs_begin = p_.obs > 0 ? m - std::min(p_.obs, m) : m;
    std::vector<std::vector<float>> cols;
    std::vector<float> nuc;
    float first = 0.0f;
    if (base > 0 && !last_logits_.empty())
        backend_.token_surprisal(last_logits_.data(), 1, model_.hparams().n_vocab, tokens, &first);
    run_collect(cache_, tokens, m, obs_begin, p_.obs > 0 ? &cols : nullptr, pot ? &nuc : nullptr, &first,
                keep_going);   // throws with the cache unchanged

    // From here on nothing throws except allocation failures.
    const int64_t n = n0 + m;
    for (int32_t l = 0; l < n_layer_; ++l)
        for (int32_t g = 0; g < n_kv_; ++g) {
            std::vector<int64_t> &o = orig_[index(l, g)];
            std::vector<float> &s = score_[index(l, g)];
            o.resize(static_cast<size_t>(n));
            for (int64_t i = 0; i < m; ++i) o[n0 + i] = base + i;
            if (!p_.accumulate) std::fill(s.begin(), s.end(), 0.0f);
            s.resize(static_cast<size_t>(n), 0.0f);
            if (pot) {
                for (int64_t i = 0; i < m; ++i) s[n0 + i] = nuc[i];
            } else if (!cols.empty()) {
                const float *a = cols[l].data() + g * n;
                for (int64_t i = 0; i < n; ++i) s[i] += a[i];
            }
        }
    n_encoded_ = base + m;
    max_slots_ = std::max(max_slots_, n);
    if (snap || n <= p_.budget) return;
    if (pot) {
        // Catalyst prompt on top of the full pot; its attention scores the slots.
        std::vector<std::vector<float>> cap;
        run_collect(cache_, catalyst_.data(), static_cast<int64_t>(catalyst_.size()), 0, &cap, nullptr, nullptr,
                    nullptr);
        max_slots_ = std::max(max_slots_, cache_.size());
        cache_.truncate(n);
        // Re-stride [g][n + c] to [g][n].
        const int64_t c = static_cast<int64_t>(catalyst_.size());
        for (auto &layer : cap) {
            for (int32_t g = 1; g < n_kv_; ++g)
                std::memmove(layer.data() + g * n, layer.data() + g * (n + c), static_cast<size_t>(n) * sizeof(float));
            layer.resize(static_cast<size_t>(n_kv_ * n));
        }
        evict(&cap);
    } else {
        evict(nullptr);
    }
}

std::vector<int64_t> RecurrentMethod::keep_list(int32_t l, int32_t g, int64_t n,
                                                const std::vector<std::vector<float>> *cap) const {
    const std::vector<int64_t> &o = orig_[index(l, g)];
    const std::vector<float> &s = score_[index(l, g)];
    if (p_.method == LCTX_METHOD_INFINIPOT)
        return infinipot_keep((*cap)[l].data() + g * n, s.data(), o.data(), n, p_.budget, p_.sink, p_.recent,
                              p_.nuc_ratio);
    return evictor_.keep(s.data(), o.data(), n);
}

void RecurrentMethod::evict(const std::vector<std::vector<float>> *cap) {
    const int64_t n = cache_.size();
    if (n <= p_.budget) return;
    for (int32_t l = 0; l < n_layer_; ++l)
        for (int32_t g = 0; g < n_kv_; ++g) {
            compact_head_slots(cache_, l, g, keep_list(l, g, n, cap), orig_[index(l, g)], score_[index(l, g)]);
        }
    cache_.truncate(p_.budget);   // every head now holds budget slots at positions 0..budget-1
}

ChunkStep RecurrentMethod::encode_step() {
    return [this](const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
        step(tokens, m, keep_going);
    };
}

void RecurrentMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    if (sealed_) fail(LCTX_ERR_STATE, "%s: the document is sealed", feeder_.who);
    feeder_.feed(tokens, n, progress, encode_step());
}

uint64_t RecurrentMethod::state_digest() const {
    Hash64 h;
    digest_vec(h, feeder_.ids);
    h.add(feeder_.n_encoded());
    digest_kv(h, cache_);
    digest_vecs(h, orig_);
    digest_vecs(h, score_);
    return h.digest();
}

void RecurrentMethod::finish(Progress &progress) {
    feeder_.finish(progress, encode_step());
    sealed_ = true;
    n_doc_slots_ = cache_.size();
}

Selection RecurrentMethod::select(const std::vector<int32_t> &query, Progress &progress) {
    if (!sealed_) fail(LCTX_ERR_STATE, "select before build_index");
    // Non-SnapKV methods decode in cache_ after its n_doc_slots_ document slots.
    const int64_t q = static_cast<int64_t>(query.size()), n = n_doc_slots_;
    std::vector<std::vector<int64_t>> keeps(orig_.size());
    if (p_.method == LCTX_METHOD_SNAPKV) {
        // The question is the observation window: its attention, pooled,
        // picks the document slots (on a copy: cache_ is left as it was).
        if (q > cache_.capacity() - n)
            fail(LCTX_ERR_CONTEXT_FULL, "SNAPKV: a %lld-token question does not fit on top of the %lld-slot cache "
                 "(capacity %lld): raise n_ctx", (long long)q, (long long)n, (long long)cache_.capacity());
        std::vector<std::vector<float>> cols;
        if (q > 0) {
            run_collect(cache_, query.data(), q, 0, &cols, nullptr, nullptr,
                        [&] { return progress.keep_going(0.5); });
            cache_.truncate(n);
        }
        std::vector<float> win(static_cast<size_t>(n)), pooled(static_cast<size_t>(n));
        for (int32_t l = 0; l < n_layer_; ++l)
            for (int32_t g = 0; g < n_kv_; ++g) {
                const std::vector<int64_t> &o = orig_[index(l, g)];
                if (q > 0) std::copy_n(cols[l].data() + g * (n + q), n, win.data());
                else std::copy_n(score_[index(l, g)].data(), n, win.data());
                avg_pool_scores(win.data(), n, p_.snapkv_kernel, pooled.data());
                // The question replaces the window: only the sinks stay protected.
                keeps[index(l, g)] = h2o_keep(pooled.data(), o.data(), n, p_.budget, p_.sink, 0);
            }
        snap_keep_ = keeps;
    } else {
        for (size_t i = 0; i < keeps.size(); ++i) {
            keeps[i].resize(static_cast<size_t>(n));
            std::iota(keeps[i].begin(), keeps[i].end(), int64_t{0});
        }
    }
    const int64_t kept = static_cast<int64_t>(keeps[0].size());
    if (kept + q >= p_.n_ctx)
        fail(LCTX_ERR_CONTEXT_FULL, "%lld cached tokens + a %lld-token question leave no room for an answer in "
             "n_ctx = %lld: raise n_ctx", (long long)kept, (long long)q, (long long)p_.n_ctx);
    // Positions: every document token some (layer, head) keeps; score: the
    // share of (layer, head) pairs that keep it.
    std::vector<std::pair<int64_t, int32_t>> hits;
    for (size_t i = 0; i < keeps.size(); ++i)
        for (int64_t s : keeps[i]) hits.emplace_back(orig_[i][static_cast<size_t>(s)], 1);
    std::sort(hits.begin(), hits.end());
    Selection sel;
    for (const auto &[t, c] : hits) {
        if (!sel.positions.empty() && sel.positions.back() == t) sel.scores.back() += 1.0f;
        else {
            sel.positions.push_back(t);
            sel.scores.push_back(1.0f);
        }
    }
    for (float &s : sel.scores) s /= static_cast<float>(keeps.size());
    sel.query = query;
    snap_query_ = query;
    progress.keep_going(1.0);
    return sel;
}

void RecurrentMethod::forward_decode(const int32_t *tokens, size_t n, Progress *progress, std::vector<float> &logits) {
    forward_in_batches(forward_, *decode_, p_.n_ctx, tokens, n, p_.n_batch, progress, logits, ctx_tokens_,
                       method_name(p_.method));
}

void RecurrentMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    if (!sealed_) fail(LCTX_ERR_STATE, "recompute before build_index");
    if (selection.query != snap_query_)
        fail(LCTX_ERR_INVALID_ARG, "recompute: pass the selection of the latest lctx_select of this session");
    if (selection.query.empty()) fail(LCTX_ERR_INVALID_ARG, "recompute: the question is empty");
    const std::vector<int64_t> *first = &orig_[0];
    if (p_.method == LCTX_METHOD_SNAPKV) {
        // Copy the document cache and compact every head to its keep list.
        const int64_t n = n_doc_slots_;
        if (!snap_) snap_ = std::make_unique<KvStore>(backend_, model_.hparams(), std::max(p_.n_ctx, n), -1, p_.kv_type);
        snap_->copy_from(cache_, n);
        for (int32_t l = 0; l < n_layer_; ++l)
            for (int32_t g = 0; g < n_kv_; ++g) compact_head_renumbered(*snap_, l, g, snap_keep_[index(l, g)]);
        snap_->truncate(static_cast<int64_t>(snap_keep_[0].size()));
        decode_ = snap_.get();
        ctx_tokens_.clear();
        for (int64_t s : snap_keep_[0]) ctx_tokens_.push_back(feeder_.ids[static_cast<size_t>((*first)[s])]);
    } else {
        cache_.truncate(n_doc_slots_);   // drop the previous question and answer
        decode_ = &cache_;
        ctx_tokens_.clear();
        for (int64_t t : *first) ctx_tokens_.push_back(feeder_.ids[static_cast<size_t>(t)]);
    }
    const size_t n_ctx0 = ctx_tokens_.size();
    const int64_t size0 = decode_->size();
    try {
        forward_decode(selection.query.data(), selection.query.size(), &progress, logits);
    } catch (...) {
        decode_->truncate(size0);
        ctx_tokens_.resize(n_ctx0);
        throw;
    }
    progress.keep_going(1.0);
}

void RecurrentMethod::append(int32_t token, std::vector<float> &logits) {
    if (!decode_) fail(LCTX_ERR_STATE, "decode before recompute");
    forward_decode(&token, 1, nullptr, logits);
}

} // namespace lctx
