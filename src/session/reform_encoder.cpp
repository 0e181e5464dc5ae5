#include "session/reform_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "common/error.h"
#include "session/evictor_h2o.h"
#include "session/kv_compact.h"

namespace lctx {

void l2_normalize(const float *v, int32_t n, float *out) {
    double ss = 0.0;
    for (int32_t i = 0; i < n; ++i) ss += double(v[i]) * v[i];
    const double norm = std::sqrt(ss);
    const float inv = norm < 1e-20 ? 0.0f : static_cast<float>(1.0 / norm);
    for (int32_t i = 0; i < n; ++i) out[i] = v[i] * inv;
}

ReformEncoder::ReformEncoder(const Model &model, Backend &backend, const EncoderConfig &cfg,
                             std::vector<HeadSpec> heads)
    : model_(model), backend_(backend), forward_(model, backend), cfg_(cfg), heads_(std::move(heads)),
      exit_(0), head_dim_(model.hparams().head_dim), n_kv_(model.hparams().n_head_kv),
      cache_(backend, model.hparams(), cfg.budget + cfg.chunk, [&] {
          int32_t e = 0;
          for (const HeadSpec &h : heads_) e = std::max(e, h.layer);
          return e;
      }(), cfg.kv_type) {
    if (heads_.empty()) fail(LCTX_ERR_INVALID_ARG, "REFORM encoder: no heads to capture");
    exit_ = cache_.n_layers();
    orig_.resize(static_cast<size_t>(exit_) * n_kv_);
    score_.resize(static_cast<size_t>(exit_) * n_kv_);
}

void ReformEncoder::capture_exit_layer(const float *x, int64_t n, int64_t row0, const RowWriter &write,
                                       ReformProfile *prof) {
    auto slot = [&](ReformProfile::Part p) { return prof ? &prof->seconds[p] : nullptr; };
    const Hparams &hp = model_.hparams();
    const LayerWeights &L = model_.layers()[static_cast<size_t>(exit_)];
    const int64_t E = hp.n_embd, D = head_dim_;
    // x is a host copy of the residual stream: the projections run on the
    // backend, in its memory, and come back to the host for normalising.
    float *xb = scratch_f32(backend_, x_buf_, n * E), *xn = scratch_f32(backend_, xn_buf_, n * E),
          *pb = scratch_f32(backend_, proj_buf_, n * D);
    {
        ProfileTimer t(slot(ReformProfile::EXIT_NORM));
        backend_.from_host(xb, x, static_cast<size_t>(n * E) * sizeof(float));
        backend_.rms_norm(xb, L.attn_norm, xn, n, E, hp.rms_eps);
    }
    proj_.resize(static_cast<size_t>(n * D));
    tmp_.resize(static_cast<size_t>(D));
    for (size_t i = 0; i < heads_.size(); ++i) {
        const HeadSpec &h = heads_[i];
        if (h.layer != exit_) continue;
        ProfileTimer t_proj(slot(ReformProfile::EXIT_PROJ));
        if (prof) prof->exit_rows += n * D;
        const WeightView &W = h.kind == HeadKind::Q ? L.wq : h.kind == HeadKind::K ? L.wk : L.wv;
        WeightView sub = W;   // the head's D rows of the projection
        sub.data = W.row(int64_t(h.head) * D);
        sub.n_rows = D;
        backend_.matmul(sub, xn, E, n, pb);
        if (hp.qkv_bias) {   // the head's D entries of the bias
            const WeightView &B = h.kind == HeadKind::Q ? L.bq : h.kind == HeadKind::K ? L.bk : L.bv;
            WeightView bsub = B;
            bsub.data = B.data + static_cast<size_t>(h.head) * D * sizeof(float);
            bsub.n_cols = D;
            bsub.row_bytes = static_cast<size_t>(D) * sizeof(float);
            backend_.add_bias(pb, bsub, n);
        }
        if (hp.qk_norm && h.kind != HeadKind::V)   // as the forward pass's on_qkv sees Q and K
            backend_.rms_norm(pb, h.kind == HeadKind::Q ? L.q_norm : L.k_norm, pb, n, D, hp.rms_eps);
        backend_.to_host(proj_.data(), pb, static_cast<size_t>(n * D) * sizeof(float));
        t_proj.stop();
        ProfileTimer t_cap(slot(ReformProfile::EXIT_CAPTURE));
        for (int64_t t = 0; t < n; ++t) {
            l2_normalize(proj_.data() + t * D, static_cast<int32_t>(D), tmp_.data());
            write(row0 + t, static_cast<int32_t>(i * D), tmp_.data());
        }
    }
}

void ReformEncoder::run_capture(const int32_t *tokens, int64_t n, const RowWriter &write, ForwardHooks *extra,
                                const std::function<bool()> &keep_going, ReformProfile *prof) {
    const Hparams &hp = model_.hparams();
    const int64_t D = head_dim_, E = hp.n_embd;
    if (exit_ == 0) {
        // Heads at layer 0 only: their input is the token embedding; no
        // working cache exists.
        std::vector<float> x(static_cast<size_t>(n * E));
        std::unique_ptr<Buffer> rows = backend_.alloc(x.size() * sizeof(float));
        backend_.get_rows(model_.tok_embd(), tokens, n, rows->f32());
        if (hp.embd_scale != 1.0f) backend_.scale(rows->f32(), hp.embd_scale, n * E);
        backend_.to_host(x.data(), rows->data(), x.size() * sizeof(float));
        capture_exit_layer(x.data(), n, 0, write, prof);
        return;
    }
    ForwardHooks hooks;
    if (extra) hooks = *extra;
    // Hooks come per sub-batch in token order: count rows per layer.
    std::vector<int64_t> done(static_cast<size_t>(exit_) + 1, 0);
    std::vector<float> buf(static_cast<size_t>(D));
    hooks.on_qkv = [&](int32_t l, const float *q, const float *k, const float *v, int64_t nt) {
        ProfileTimer t(prof ? &prof->seconds[ReformProfile::HEAD_CAPTURE] : nullptr);
        for (size_t i = 0; i < heads_.size(); ++i) {
            const HeadSpec &h = heads_[i];
            if (h.layer != l) continue;
            const float *src = h.kind == HeadKind::Q ? q : h.kind == HeadKind::K ? k : v;
            const int64_t ld = (h.kind == HeadKind::Q ? hp.n_head : hp.n_head_kv) * D;
            for (int64_t t = 0; t < nt; ++t) {
                l2_normalize(src + t * ld + h.head * D, static_cast<int32_t>(D), buf.data());
                write(done[l] + t, static_cast<int32_t>(i * D), buf.data());
            }
        }
        done[l] += nt;
    };
    hooks.on_hidden = [&](int32_t l, const float *x, int64_t nt) {
        if (l != exit_ - 1) return;
        capture_exit_layer(x, nt, done[exit_], write, prof);
        done[exit_] += nt;
    };
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cache_.size()));
    ForwardOptions opt;
    opt.n_layers = exit_;
    opt.logits = LogitsMode::NONE;
    opt.hooks = &hooks;
    opt.keep_going = keep_going;
    opt.profile = prof ? &prof->forward : nullptr;
    std::vector<float> no_logits;
    forward_.run(tokens, pos.data(), n, cache_, opt, no_logits);
}

void ReformEncoder::step(const int32_t *tokens, int64_t m, EmbeddingStore &store,
                         const std::function<bool()> &keep_going) {
    if (m < 1 || m > cfg_.chunk)
        fail(LCTX_ERR_INTERNAL, "REFORM step of %lld tokens (chunk %lld)", (long long)m, (long long)cfg_.chunk);
    ProfileTimer t_step(prof_ ? &prof_->step_seconds : nullptr);
    const int64_t base = n_encoded_, n0 = cache_.size();
    {
        ProfileTimer t(timer(ReformProfile::STORE));
        store.reserve(base + m);
    }
    RowWriter write = [&](int64_t row, int32_t col, const float *v) { store.write(base + row, col, v, head_dim_); };
    ForwardHooks extra;
    const bool scored = cfg_.evictor != EvictorKind::STREAMING;   // StreamingLLM needs no attention scores
    if (scored) {
        extra.col_sums = &cols_;
        extra.obs_begin = m - std::min(cfg_.obs, m);
    }
    run_capture(tokens, m, write, &extra, keep_going, prof_);   // throws with the cache unchanged

    // From here on nothing throws except allocation failures.
    const int64_t n = n0 + m;
    ProfileTimer t_acc(timer(ReformProfile::SCORE_ACCUM));
    for (int32_t l = 0; l < exit_; ++l) {
        for (int32_t g = 0; g < n_kv_; ++g) {
            std::vector<int64_t> &o = orig(l, g);
            std::vector<float> &s = score(l, g);
            if (!cfg_.accumulate) std::fill(s.begin(), s.end(), 0.0f);
            s.resize(static_cast<size_t>(n), 0.0f);
            o.resize(static_cast<size_t>(n));
            for (int64_t i = 0; i < m; ++i) o[n0 + i] = base + i;
            if (!scored) continue;
            const float *a = cols_[static_cast<size_t>(l)].data() + static_cast<size_t>(g) * n;
            for (int64_t i = 0; i < n; ++i) s[i] += a[i];
        }
    }
    t_acc.stop();
    {
        ProfileTimer t(timer(ReformProfile::STORE));
        store.commit(base + m);
    }
    n_encoded_ = base + m;
    if (n > cfg_.budget) evict();
    if (prof_) {
        ++prof_->steps;
        prof_->tokens += m;
    }
}

void ReformEncoder::evict() {
    // Survivors move to slots and positions 0..B-1 (the store re-rotates
    // their keys by the position delta).
    const int64_t n = cache_.size(), B = cfg_.budget;
    Evictor rule = Evictor::make(cfg_.evictor, B, cfg_.sink, cfg_.recent);
    rule.snapkv_kernel = cfg_.snapkv_kernel;
    for (int32_t l = 0; l < exit_; ++l) {
        for (int32_t g = 0; g < n_kv_; ++g) {
            std::vector<int64_t> &o = orig(l, g);
            std::vector<float> &s = score(l, g);
            std::vector<int64_t> keep;
            {
                ProfileTimer t(timer(ReformProfile::EVICT_KEEP));
                keep = rule.keep(s.data(), o.data(), n);
            }
            ProfileTimer t(timer(ReformProfile::KV_COMPACT));
            compact_head_slots(cache_, l, g, keep, o, s);
        }
    }
    ProfileTimer t(timer(ReformProfile::KV_COMPACT));
    cache_.truncate(B);   // every head now holds B slots at positions 0..B-1
}

void ReformEncoder::embed_query(const int32_t *tokens, int64_t q, std::vector<float> &out,
                                const std::function<bool()> &keep_going) {
    if (exit_ > 0 && q > cache_.capacity() - cache_.size())
        fail(LCTX_ERR_INVALID_ARG, "REFORM: the query has %lld tokens; at most %lld fit on top of the working cache "
             "(the chunk size): shorten the question or raise reform_chunk", (long long)q,
             (long long)(cache_.capacity() - cache_.size()));
    const int32_t Dm = dim();
    out.assign(static_cast<size_t>(q * Dm), 0.0f);
    RowWriter write = [&](int64_t r, int32_t col, const float *v) {
        std::memcpy(out.data() + r * Dm + col, v, static_cast<size_t>(head_dim_) * sizeof(float));
    };
    const int64_t n0 = cache_.size();
    run_capture(tokens, q, write, nullptr, keep_going, nullptr);   // select is not profiled
    cache_.truncate(n0);   // select works "on a copy": the query rows are dropped
}

void ReformEncoder::restore(int64_t n_slots, int64_t n_encoded) {
    if (n_slots < 0 || n_slots > cfg_.budget || (exit_ > 0 && n_slots > cache_.capacity()))
        fail(LCTX_ERR_FORMAT, "REFORM: working cache of %lld slots does not fit the budget %lld",
             (long long)n_slots, (long long)cfg_.budget);
    cache_.clear();
    if (exit_ > 0) cache_.append(n_slots);
    std::vector<int32_t> pos(static_cast<size_t>(cache_.size()));
    std::iota(pos.begin(), pos.end(), 0);
    cache_.set_positions(0, pos.data(), cache_.size());
    n_encoded_ = n_encoded;
    for (auto &o : orig_) o.assign(static_cast<size_t>(n_slots), 0);
    for (auto &s : score_) s.assign(static_cast<size_t>(n_slots), 0.0f);
}

} // namespace lctx
