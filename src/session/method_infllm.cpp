#include "session/method_infllm.h"

#include <algorithm>
#include <climits>
#include <new>
#include <numeric>

#include "backend/budget_backend.h"
#include "common/error.h"
#include "session/state_digest.h"
#include "common/ggml_type.h"
#include "session/infllm_blocks.h"

namespace lctx {

namespace {

// Runs f, turning an allocation failure into LCTX_ERR_OUT_OF_MEMORY.
template <class F>
auto no_bad_alloc(const char *what, F &&f) -> decltype(f()) {
    try {
        return f();
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "INFLLM: out of memory while %s", what);
    }
}

} // namespace

InfllmMethod::InfllmMethod(const Model &model, Backend &backend, const InfllmParams &params)
    : model_(model), backend_(backend), p_(params), n_layer_(model.hparams().n_layer),
      n_kv_(model.hparams().n_head_kv), head_dim_(model.hparams().head_dim), forward_(model, backend),
      cache_(backend, model.hparams(), params.cache_slots(), -1, params.kv_type) {
    const int64_t width = int64_t(n_kv_) * head_dim_;
    no_bad_alloc("creating the memory store", [&] {
        for (int32_t l = 0; l < n_layer_; ++l) {
            k_store_.emplace_back(width, budget_of(backend));
            v_store_.emplace_back(width, budget_of(backend));
        }
        const size_t n = static_cast<size_t>(n_layer_) * n_kv_;
        kbar_.resize(n);
        pend_.resize(n);
        retrieved_.resize(n);
    });
    feeder_.chunk = p_.chunk;
    feeder_.who = "INFLLM";
    feeder_.n_encoded = [this] { return n_encoded_; };
}

void InfllmMethod::RetrievalPolicy::before_attention(int32_t layer, const float *q, int64_t n_q, KvStore &) {
    m.retrieve(layer, q, n_q);
    if (used)
        for (int32_t g = 0; g < m.n_kv_; ++g)
            for (int64_t b : m.retrieved_[m.index(layer, g)]) (*used)[static_cast<size_t>(b)] = 1;
}

void InfllmMethod::require_sealed(const char *call) const {
    if (!sealed_) fail(LCTX_ERR_STATE, "INFLLM: %s before the document is finished (build the index first)", call);
}

void InfllmMethod::fill(int32_t l, int32_t g, int64_t slot0, int64_t tok0, int64_t n) {
    // Runs on the backend's host threads (fills of different heads in
    // parallel): scratch is per call.
    const int64_t D = head_dim_;
    std::vector<float> kc(static_cast<size_t>(n * D)), vc(static_cast<size_t>(n * D));
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
        const uint16_t *ks = k_store_[l].row(tok0 + t) + g * D, *vs = v_store_[l].row(tok0 + t) + g * D;
        for (int64_t d = 0; d < D; ++d) {
            kc[t * D + d] = fp16_to_fp32(ks[d]);
            vc[t * D + d] = fp16_to_fp32(vs[d]);
        }
        pos[t] = static_cast<int32_t>(slot0 + t);   // memory slots sit at position = slot
    }
    cache_.write_unrotated(l, g, slot0, n, kc.data(), vc.data(), pos.data());
}

void InfllmMethod::form_blocks(int64_t c0) {
    const int64_t B = p_.block, D = head_dim_;
    int64_t nb = n_blocks_;
    while (block_start(nb + 1) <= c0 - p_.window) ++nb;
    if (nb == n_blocks_) return;
    const int64_t end = block_start(nb);
    no_bad_alloc("forming memory blocks", [&] {
        for (auto &kb : kbar_) kb.reserve(static_cast<size_t>(nb * D));
        gather_.resize(static_cast<size_t>(B * D));
    });
    // From here on nothing allocates.
    for (int32_t l = 0; l < n_layer_; ++l) {
        for (int32_t g = 0; g < n_kv_; ++g) {
            std::vector<float> &kb = kbar_[index(l, g)];
            const std::vector<float> &sc = pend_[index(l, g)];
            for (int64_t b = n_blocks_; b < nb; ++b) {
                const int64_t t0 = block_start(b);
                for (int64_t t = 0; t < B; ++t)
                    std::copy_n(k_store_[l].row(t0 + t) + g * D, D, gather_.data() + t * D);
                kb.resize(static_cast<size_t>((b + 1) * D));
                infllm_repr_key(gather_.data(), D, sc.data() + (t0 - pend_base_), B, p_.repr,
                                static_cast<int32_t>(D), kb.data() + b * D);
            }
        }
    }
    for (auto &sc : pend_) sc.erase(sc.begin(), sc.begin() + (end - pend_base_));
    pend_base_ = end;
    n_blocks_ = nb;
}

void InfllmMethod::build_prefix(int64_t c0) {
    n_sink_ = std::min(p_.sink, c0);
    k_ = std::min(p_.memory / p_.block, n_blocks_);
    w0_ = c0 > p_.sink ? block_start(n_blocks_) : c0;
    w1_ = c0;
    prefix_ = n_sink_ + k_ * p_.block + (w1_ - w0_);
    cache_.clear();
    cache_.append(prefix_);
    std::vector<int32_t> pos(static_cast<size_t>(prefix_));
    std::iota(pos.begin(), pos.end(), 0);
    cache_.set_positions(0, pos.data(), prefix_);
    const int64_t win_slot = n_sink_ + k_ * p_.block;
    // Layers are independent: fill them in parallel.
    backend_.parallel_for(n_layer_, [&](int64_t l0, int64_t l1, int) {
        for (int64_t l = l0; l < l1; ++l)
            for (int32_t g = 0; g < n_kv_; ++g) {
                fill(static_cast<int32_t>(l), g, 0, 0, n_sink_);
                fill(static_cast<int32_t>(l), g, win_slot, w0_, w1_ - w0_);
            }
    });
    for (auto &r : retrieved_) r.clear();   // memory slots hold nothing valid yet
}

void InfllmMethod::retrieve(int32_t l, const float *q, int64_t n_q) {
    if (k_ == 0) return;
    try {
        retrieve_blocks(l, q, n_q);
    } catch (...) {
        // Slots and bookkeeping may disagree now: refill everything next time.
        for (int32_t g = 0; g < n_kv_; ++g) retrieved_[index(l, g)].clear();
        throw;
    }
}

void InfllmMethod::retrieve_blocks(int32_t l, const float *q, int64_t n_q) {
    const Hparams &hp = model_.hparams();
    const int32_t ng = hp.n_head / hp.n_head_kv;
    fill_jobs_.clear();
    scores_.resize(static_cast<size_t>(n_blocks_));
    for (int32_t g = 0; g < n_kv_; ++g) {
        infllm_block_scores(q, int64_t(hp.n_head) * head_dim_, n_q, g * ng, ng, head_dim_, kbar_[index(l, g)].data(),
                            n_blocks_, scores_.data());
        std::vector<int64_t> top = infllm_top_indices(scores_.data(), n_blocks_, k_);   // ascending
        std::vector<int64_t> &cur = retrieved_[index(l, g)];
        auto job = [&](size_t slot, int64_t b) {
            fill_jobs_.push_back({g, n_sink_ + static_cast<int64_t>(slot) * p_.block, block_start(b)});
        };
        if (cur.size() != top.size()) {   // fresh slots: document order
            for (size_t i = 0; i < top.size(); ++i) job(i, top[i]);
            cur = std::move(top);
            continue;
        }
        // Blocks still retrieved keep their slots; new ones take the freed slots.
        std::vector<int64_t> had = cur;
        std::sort(had.begin(), had.end());
        size_t next = 0;
        for (size_t i = 0; i < cur.size(); ++i) {
            if (std::binary_search(top.begin(), top.end(), cur[i])) continue;
            while (std::binary_search(had.begin(), had.end(), top[next])) ++next;
            cur[i] = top[next++];
            job(i, cur[i]);
        }
    }
    if (fill_jobs_.empty()) return;
    block_copies_ += static_cast<int64_t>(fill_jobs_.size());
    backend_.parallel_for(static_cast<int64_t>(fill_jobs_.size()), [&](int64_t b, int64_t e, int) {
        for (int64_t j = b; j < e; ++j) {
            const FillJob &f = fill_jobs_[static_cast<size_t>(j)];
            fill(l, f.g, f.slot, f.tok, p_.block);
        }
    });
}

void InfllmMethod::refill_memory() {
    backend_.parallel_for(int64_t(n_layer_) * n_kv_, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
            const int32_t l = static_cast<int32_t>(i / n_kv_), g = static_cast<int32_t>(i % n_kv_);
            const std::vector<int64_t> &r = retrieved_[static_cast<size_t>(i)];
            for (size_t j = 0; j < r.size(); ++j)
                fill(l, g, n_sink_ + static_cast<int64_t>(j) * p_.block, block_start(r[j]), p_.block);
        }
    });
}

bool InfllmMethod::memory_slots_consistent() const {
    const int64_t D = head_dim_, B = p_.block;
    std::vector<float> k(static_cast<size_t>(B * D)), kc(k.size()), vc(k.size());
    for (int32_t l = 0; l < n_layer_; ++l)
        for (int32_t g = 0; g < n_kv_; ++g) {
            const std::vector<int64_t> &r = retrieved_[index(l, g)];
            for (size_t i = 0; i < r.size(); ++i) {
                const int64_t slot0 = n_sink_ + static_cast<int64_t>(i) * B, tok0 = block_start(r[i]);
                cache_.read_keys(l, g, slot0, B, kc.data());
                cache_.read_values(l, g, slot0, B, vc.data());
                for (int64_t t = 0; t < B; ++t)
                    for (int64_t d = 0; d < D; ++d) {
                        k[t * D + d] = fp16_to_fp32(k_store_[l].row(tok0 + t)[g * D + d]);
                        if (vc[t * D + d] != fp16_to_fp32(v_store_[l].row(tok0 + t)[g * D + d])) return false;
                    }
                backend_.rope(model_.hparams().rope_of(l), k.data(), D, B, 1, cache_.positions(l, g) + slot0);
                if (!std::equal(k.begin(), k.end(), kc.begin())) return false;
            }
        }
    return true;
}

void InfllmMethod::run(const int32_t *tokens, int64_t n, int64_t pos0, ForwardHooks &hooks, LogitsMode mode,
                       std::vector<float> &logits, const std::function<bool()> &keep_going) {
    std::vector<int32_t> pos;
    for (int64_t done = 0; done < n;) {
        const int64_t b = std::min<int64_t>(n - done, p_.n_batch);
        pos.resize(static_cast<size_t>(b));
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(pos0 + done));
        ForwardOptions opt;
        opt.logits = done + b == n ? mode : LogitsMode::NONE;
        opt.hooks = &hooks;
        opt.policy = &policy_;
        opt.keep_going = keep_going;
        no_bad_alloc("running the model", [&] { forward_.run(tokens + done, pos.data(), b, cache_, opt, logits); });
        max_slots_ = std::max(max_slots_, cache_.size());
        done += b;
    }
}

void InfllmMethod::step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
    const int64_t c0 = n_encoded_, KV = int64_t(n_kv_) * head_dim_;
    form_blocks(c0);
    build_prefix(c0);
    const int64_t mem_end = n_sink_ + k_ * p_.block;   // slots >= mem_end are document tokens w0_..
    const int64_t n_acc = c0 + m - w0_;
    std::vector<float> acc;
    no_bad_alloc("encoding a chunk", [&] {
        acc.assign(static_cast<size_t>(n_layer_) * n_kv_ * n_acc, 0.0f);
        for (auto &pe : pend_) pe.reserve(static_cast<size_t>(c0 + m - pend_base_));
    });
    int64_t run0 = 0;   // chunk index of the current forward call's first token
    std::vector<int64_t> done(static_cast<size_t>(n_layer_), 0);
    std::vector<std::vector<float>> cols;
    ForwardHooks hooks;
    hooks.col_sums = &cols;
    hooks.on_qkv = [&](int32_t l, const float *q, const float *k, const float *v, int64_t nt) {
        for (int64_t t = 0; t < nt; ++t) {
            const int64_t row = c0 + run0 + done[l] + t;
            uint16_t *kr = k_store_[l].row(row), *vr = v_store_[l].row(row);
            for (int64_t i = 0; i < KV; ++i) {
                kr[i] = fp32_to_fp16(k[t * KV + i]);
                vr[i] = fp32_to_fp16(v[t * KV + i]);
            }
        }
        done[l] += nt;
    };
    std::vector<float> no_logits;
    try {
        for (int32_t l = 0; l < n_layer_; ++l) {   // room for the chunk's rows
            k_store_[l].resize(c0 + m);
            v_store_[l].resize(c0 + m);
        }
        for (run0 = 0; run0 < m;) {
            const int64_t b = std::min<int64_t>(m - run0, p_.n_batch);
            std::fill(done.begin(), done.end(), 0);
            const int64_t base = cache_.size();
            hooks.obs_begin = std::max<int64_t>(0, b - p_.obs);
            run(tokens + run0, b, prefix_ + run0, hooks, LogitsMode::NONE, no_logits, keep_going);
            const int64_t n_slots = base + b;
            for (int32_t l = 0; l < n_layer_; ++l)
                for (int32_t g = 0; g < n_kv_; ++g) {
                    const float *c = cols[static_cast<size_t>(l)].data() + g * n_slots;
                    float *a = acc.data() + index(l, g) * n_acc;
                    for (int64_t s = mem_end; s < n_slots; ++s) a[s - mem_end] += c[s];
                }
            run0 += b;
        }
    } catch (...) {
        for (int32_t l = 0; l < n_layer_; ++l) {
            k_store_[l].resize(c0);
            v_store_[l].resize(c0);
        }
        cache_.truncate(prefix_);
        throw;
    }
    // Commit (nothing throws: pend_ capacity was reserved).
    for (size_t i = 0; i < pend_.size(); ++i) {
        std::vector<float> &pe = pend_[i];
        pe.resize(static_cast<size_t>(c0 + m - pend_base_), 0.0f);
        const float *a = acc.data() + i * n_acc;
        for (int64_t t = w0_; t < c0 + m; ++t) pe[t - pend_base_] += a[t - w0_];
    }
    n_encoded_ = c0 + m;
}

ChunkStep InfllmMethod::encode_step() {
    return [this](const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
        step(tokens, m, keep_going);
    };
}

void InfllmMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    if (sealed_) fail(LCTX_ERR_STATE, "INFLLM: the document is sealed");
    feeder_.feed(tokens, n, progress, encode_step());
}

uint64_t InfllmMethod::state_digest() const {
    Hash64 h;
    digest_vec(h, feeder_.ids);
    h.add(n_encoded_);
    h.add(n_blocks_);
    h.add(pend_base_);
    digest_kv(h, cache_);
    for (const std::vector<Fp16Rows> *rows : {&k_store_, &v_store_})
        for (const Fp16Rows &r : *rows) {
            h.add(r.size());
            for (int64_t t = 0; t < r.size(); ++t) h.update(r.row(t), static_cast<size_t>(r.width()) * sizeof(uint16_t));
        }
    digest_vecs(h, kbar_);
    digest_vecs(h, pend_);
    digest_vecs(h, retrieved_);
    digest_vec(h, ctx_tokens_);
    return h.digest();
}

void InfllmMethod::finish(Progress &progress) {
    if (sealed_) return;
    feeder_.finish(progress, encode_step());
    const int64_t n_doc = static_cast<int64_t>(feeder_.ids.size());
    form_blocks(n_doc);
    build_prefix(n_doc);
    ctx_tokens_.assign(feeder_.ids.begin(), feeder_.ids.begin() + n_sink_);
    ctx_tokens_.insert(ctx_tokens_.end(), feeder_.ids.begin() + w0_, feeder_.ids.begin() + w1_);
    sealed_ = true;
    progress.keep_going(1.0);
}

Selection InfllmMethod::select(const std::vector<int32_t> &query, Progress &progress) {
    require_sealed("select");
    const int64_t q = static_cast<int64_t>(query.size());
    if (q > p_.n_ctx)
        fail(LCTX_ERR_CONTEXT_FULL, "INFLLM: the question has %lld tokens, more than n_ctx = %lld left for the "
             "question and answer", (long long)q, (long long)p_.n_ctx);
    // The previous question and answer stay for decode in case this call fails,
    // hidden from the new question by a position past all of its own.
    if (q > cache_.capacity() - cache_.size()) {
        cache_.truncate(prefix_);
        ctx_tokens_.resize(static_cast<size_t>(n_sink_ + (w1_ - w0_)));
    }
    const int64_t tail0 = prefix_, tail1 = cache_.size();
    // Every (layer, head) holds the same positions here: save one copy.
    std::vector<int32_t> saved(cache_.positions(0, 0) + tail0, cache_.positions(0, 0) + tail1);
    const std::vector<int32_t> hidden(saved.size(), INT32_MAX);
    cache_.set_positions(tail0, hidden.data(), tail1 - tail0);
    // Memory slots are restored too, so that the next decode step retrieves
    // exactly as if this select had not run.
    std::vector<std::vector<int64_t>> saved_blocks = no_bad_alloc("selecting", [&] { return retrieved_; });
    struct Restore {
        InfllmMethod &m;
        const std::vector<int32_t> &saved;
        std::vector<std::vector<int64_t>> &blocks;
        int64_t tail0, tail1;
        ~Restore() {
            m.cache_.truncate(tail1);
            m.cache_.set_positions(tail0, saved.data(), tail1 - tail0);
            m.retrieved_.swap(blocks);
            m.refill_memory();
        }
    } restore{*this, saved, saved_blocks, tail0, tail1};

    for (auto &r : retrieved_) r.clear();   // the question's blocks go in document order
    std::vector<std::vector<char>> used(1);
    no_bad_alloc("selecting", [&] { used[0].assign(static_cast<size_t>(n_blocks_), 0); });
    ForwardHooks hooks;
    policy_.used = &used[0];
    struct ClearUsed {
        RetrievalPolicy &p;
        ~ClearUsed() { p.used = nullptr; }
    } clear_used{policy_};
    std::vector<float> logits;
    if (!progress.keep_going(0.0)) fail(LCTX_ERR_CANCELLED, "INFLLM: select cancelled");
    run(query.data(), q, prefix_, hooks, LogitsMode::NONE, logits, [&] { return progress.keep_going(0.5); });

    Selection s;
    s.query = query;
    no_bad_alloc("selecting", [&] {
        for (int64_t t = 0; t < n_sink_; ++t) s.positions.push_back(t);
        for (int64_t b = 0; b < n_blocks_; ++b)
            if (used[0][static_cast<size_t>(b)])
                for (int64_t t = block_start(b); t < block_start(b + 1); ++t) s.positions.push_back(t);
        for (int64_t t = w0_; t < w1_; ++t) s.positions.push_back(t);
        s.scores.assign(s.positions.size(), 1.0f);
    });
    progress.keep_going(1.0);
    return s;
}

void InfllmMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    require_sealed("recompute");
    const int64_t q = static_cast<int64_t>(selection.query.size());
    if (q == 0) fail(LCTX_ERR_INVALID_ARG, "INFLLM: recompute with an empty question");
    if (q > p_.n_ctx)
        fail(LCTX_ERR_CONTEXT_FULL, "INFLLM: the question has %lld tokens, more than n_ctx = %lld left for the "
             "question and answer", (long long)q, (long long)p_.n_ctx);
    cache_.truncate(prefix_);   // drop the previous question and answer
    for (auto &r : retrieved_) r.clear();   // the question's blocks go in document order
    ctx_tokens_.resize(static_cast<size_t>(n_sink_ + (w1_ - w0_)));
    ForwardHooks hooks;
    try {
        if (!progress.keep_going(0.0)) fail(LCTX_ERR_CANCELLED, "INFLLM: recompute cancelled");
        run(selection.query.data(), q, prefix_, hooks, LogitsMode::LAST, logits,
            [&] { return progress.keep_going(0.5); });
    } catch (...) {
        cache_.truncate(prefix_);
        throw;
    }
    no_bad_alloc("recording the context",
                 [&] { ctx_tokens_.insert(ctx_tokens_.end(), selection.query.begin(), selection.query.end()); });
    progress.keep_going(1.0);
}

void InfllmMethod::append(int32_t token, std::vector<float> &logits) {
    require_sealed("decode");
    if (cache_.size() - prefix_ >= p_.n_ctx)
        fail(LCTX_ERR_CONTEXT_FULL, "INFLLM: the question and answer fill n_ctx = %lld tokens: create the session "
             "with a larger n_ctx", (long long)p_.n_ctx);
    ForwardHooks hooks;
    run(&token, 1, cache_.size(), hooks, LogitsMode::LAST, logits, {});
    no_bad_alloc("recording the context", [&] { ctx_tokens_.push_back(token); });
}

std::unique_ptr<Method> make_infllm_method(const Model &model, Backend &backend,
                                           const lctx_session_params &params) {
    const InfllmParams p = infllm_params_from(model.hparams(), params);
    return no_bad_alloc("creating the method", [&] { return std::make_unique<InfllmMethod>(model, backend, p); });
}

} // namespace lctx
