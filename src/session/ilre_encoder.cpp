#include "session/ilre_encoder.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/budget_backend.h"
#include "common/error.h"

namespace lctx {

IlreEncoder::IlreEncoder(const Model &model, Backend &backend, const IlreEncoderConfig &cfg,
                         std::vector<int32_t> index_layers)
    : model_(model), backend_(backend), cfg_(cfg), layers_(std::move(index_layers)), n_full_(0),
      n_kv_(model.hparams().n_head_kv), head_dim_(model.hparams().head_dim), forward_(model, backend) {
    const Hparams &hp = model.hparams();
    if (layers_.empty()) fail(LCTX_ERR_INTERNAL, "ILRe encoder: no index layer");
    for (size_t i = 0; i < layers_.size(); ++i) {
        if (layers_[i] < 0 || layers_[i] >= hp.n_layer || (i && layers_[i] <= layers_[i - 1]))
            fail(LCTX_ERR_INVALID_ARG, "ILRe encoder: index layer %d is out of range [0, %d) or not ascending",
                 layers_[i], hp.n_layer);
    }
    if (cfg_.sink < 0 || cfg_.window < 1 || cfg_.chunk < 1)
        fail(LCTX_ERR_INTERNAL, "ILRe encoder: bad sizes (sink %lld, window %lld, chunk %lld)", (long long)cfg_.sink,
             (long long)cfg_.window, (long long)cfg_.chunk);
    n_full_ = layers_.back();
    if (n_full_ > 0)
        cache_ = std::make_unique<KvStore>(backend, hp, cfg_.sink + cfg_.window + cfg_.chunk, n_full_, cfg_.kv_type);
    for (size_t i = 0; i < layers_.size() * static_cast<size_t>(n_kv_); ++i)
        keys_.push_back(std::make_unique<EmbeddingStore>(head_dim_, budget_of(backend)));   // charged to max_memory
}

size_t IlreEncoder::memory_bytes() const {
    size_t b = cache_ ? cache_->bytes() : 0;
    for (const auto &k : keys_) b += k->memory_bytes();
    return b;
}

int64_t IlreEncoder::sink_shift(int64_t p0, int64_t n) const {
    if (!cfg_.dca || p0 + n <= cfg_.dca_after) return 0;
    return std::max<int64_t>(0, p0 - cfg_.sink - cfg_.chunk);
}

void IlreEncoder::project(size_t i, const float *x, int64_t n, int64_t p0, bool want_queries, const KeySink &sink) {
    const Hparams &hp = model_.hparams();
    const LayerWeights &L = model_.layers()[static_cast<size_t>(layers_[i])];
    const WeightView &W = want_queries ? L.wq : L.wk;
    const int32_t heads = want_queries ? hp.n_head : hp.n_head_kv;
    const int64_t E = hp.n_embd, P = int64_t(heads) * head_dim_;
    float *xb = scratch_f32(backend_, x_buf_, n * E), *xn = scratch_f32(backend_, xn_buf_, n * E),
          *pb = scratch_f32(backend_, proj_buf_, n * P);
    backend_.from_host(xb, x, static_cast<size_t>(n * E) * sizeof(float));
    backend_.rms_norm(xb, L.attn_norm, xn, n, E, hp.rms_eps);
    backend_.matmul(W, xn, E, n, pb);
    if (hp.qkv_bias) backend_.add_bias(pb, want_queries ? L.bq : L.bk, n);
    if (hp.qk_norm) backend_.rms_norm(pb, want_queries ? L.q_norm : L.k_norm, pb, n * heads, head_dim_, hp.rms_eps);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(p0 + t);
    backend_.rope(hp.rope_of(layers_[i]), pb, P, n, heads, pos.data());
    proj_.resize(static_cast<size_t>(n * P));
    backend_.to_host(proj_.data(), pb, proj_.size() * sizeof(float));
    sink(i, proj_.data(), n, p0);
}

void IlreEncoder::run(const int32_t *tokens, int64_t n, bool want_queries, const KeySink &sink,
                      const std::function<bool()> &keep_going) {
    const Hparams &hp = model_.hparams();
    const int64_t p0 = n_encoded_, E = hp.n_embd;
    if (p0 + n > (int64_t(1) << 31) - 1)
        fail(LCTX_ERR_INVALID_ARG, "ILRe: position %lld exceeds the 2^31 positions RoPE takes", (long long)(p0 + n));
    if (layers_.front() == 0) {
        // Layer 0's input is the token embedding.
        std::vector<float> x(static_cast<size_t>(n * E));
        std::unique_ptr<Buffer> rows = backend_.alloc(x.size() * sizeof(float));
        backend_.get_rows(model_.tok_embd(), tokens, n, rows->f32());
        if (hp.embd_scale != 1.0f) backend_.scale(rows->f32(), hp.embd_scale, n * E);
        backend_.to_host(x.data(), rows->data(), x.size() * sizeof(float));
        project(0, x.data(), n, p0, want_queries, sink);
    }
    if (n_full_ == 0) return;
    if (keep_going && !keep_going()) fail(LCTX_ERR_CANCELLED, "ILRe: encoding cancelled");
    shift_sinks(p0, n);
    // Hooks come per sub-batch in token order: count rows per index layer.
    std::vector<int64_t> done(layers_.size(), 0);
    ForwardHooks hooks;
    hooks.on_hidden = [&](int32_t l, const float *x, int64_t nt) {
        for (size_t i = 0; i < layers_.size(); ++i) {
            if (layers_[i] != l + 1) continue;
            project(i, x, nt, p0 + done[i], want_queries, sink);
            done[i] += nt;
        }
    };
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(p0 + t);
    ForwardOptions opt;
    opt.n_layers = n_full_;
    opt.logits = LogitsMode::NONE;
    opt.hooks = &hooks;
    opt.keep_going = keep_going;
    std::vector<float> no_logits;
    forward_.run(tokens, pos.data(), n, *cache_, opt, no_logits);
}

void IlreEncoder::shift_sinks(int64_t p0, int64_t n) {
    if (!cfg_.dca || n_sinks_saved_ == 0) return;
    const int64_t shift = sink_shift(p0, n), ns = n_sinks_saved_, D = head_dim_;
    if (cache_->position(0, 0, 0) == shift) return;   // already there
    std::vector<int32_t> pos(static_cast<size_t>(ns));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(shift));
    for (int32_t l = 0; l < n_full_; ++l)
        for (int32_t g = 0; g < n_kv_; ++g) {
            const size_t off = (static_cast<size_t>(l) * n_kv_ + g) * static_cast<size_t>(ns * D);
            // Always from the saved originals: rotations never accumulate.
            cache_->write_unrotated(l, g, 0, ns, sink_k_.data() + off, sink_v_.data() + off, pos.data());
        }
}

void IlreEncoder::keep_sinks_and_window() {
    const int64_t n = cache_->size(), s1 = std::min(cfg_.sink, n), w0 = std::max(s1, n - cfg_.window);
    if (s1 == w0) return;   // nothing to drop
    std::vector<int64_t> keep;
    keep.reserve(static_cast<size_t>(s1 + n - w0));
    for (int64_t s = 0; s < s1; ++s) keep.push_back(s);
    for (int64_t s = w0; s < n; ++s) keep.push_back(s);
    cache_->compact(keep);   // positions stay: the window keeps its original positions
}

void IlreEncoder::step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
    if (m < 1 || m > step_size())
        fail(LCTX_ERR_INTERNAL, "ILRe step of %lld tokens (step size %lld)", (long long)m, (long long)step_size());
    const int64_t base = n_encoded_, KV = int64_t(n_kv_) * head_dim_;
    for (auto &k : keys_) k->reserve(base + m);
    KeySink write = [&](size_t i, const float *rows, int64_t n, int64_t p0) {
        for (int64_t t = 0; t < n; ++t)
            for (int32_t g = 0; g < n_kv_; ++g)
                keys(i, g).write(p0 + t, 0, rows + t * KV + int64_t(g) * head_dim_, head_dim_);
    };
    run(tokens, m, false, write, keep_going);   // throws with the cache and the index unchanged
    for (auto &k : keys_) k->commit(base + m);
    n_encoded_ = base + m;
    if (!cache_) return;
    if (cfg_.dca && n_sinks_saved_ == 0) {
        // The first step put the sinks at positions 0..: keep their pre-RoPE rows.
        const int64_t ns = std::min(cfg_.sink, cache_->size()), D = head_dim_;
        sink_k_.assign(static_cast<size_t>(n_full_) * n_kv_ * static_cast<size_t>(ns * D), 0.0f);
        sink_v_ = sink_k_;
        for (int32_t l = 0; l < n_full_; ++l)
            for (int32_t g = 0; g < n_kv_; ++g) {
                const size_t off = (static_cast<size_t>(l) * n_kv_ + g) * static_cast<size_t>(ns * D);
                cache_->unrotated_keys(l, g, 0, ns, sink_k_.data() + off);
                cache_->read_values(l, g, 0, ns, sink_v_.data() + off);
            }
        n_sinks_saved_ = ns;
    }
    keep_sinks_and_window();
}

void IlreEncoder::queries(const int32_t *tokens, int64_t q, std::vector<std::vector<float>> &out,
                          const std::function<bool()> &keep_going) {
    if (q > cfg_.chunk)
        fail(LCTX_ERR_INVALID_ARG, "ILRe: the question has %lld tokens; at most %lld (the chunk size) are read: "
             "shorten it, raise ilre chunk, or set query_tokens", (long long)q, (long long)cfg_.chunk);
    const int64_t QD = int64_t(model_.hparams().n_head) * head_dim_;
    out.assign(layers_.size(), std::vector<float>(static_cast<size_t>(q * QD)));
    KeySink write = [&](size_t i, const float *rows, int64_t n, int64_t p0) {
        std::memcpy(out[i].data() + (p0 - n_encoded_) * QD, rows, static_cast<size_t>(n * QD) * sizeof(float));
    };
    const int64_t n0 = cache_ ? cache_->size() : 0;
    if (q > 0) run(tokens, q, true, write, keep_going);
    if (cache_) cache_->truncate(n0);   // the question's rows are dropped
}

void IlreEncoder::restore(int64_t n_encoded, int64_t n_dca_sinks, std::vector<float> sink_k,
                          std::vector<float> sink_v) {
    const size_t want = static_cast<size_t>(n_full_) * n_kv_ * static_cast<size_t>(n_dca_sinks * head_dim_);
    if (n_dca_sinks < 0 || n_dca_sinks > cfg_.sink || sink_k.size() != want || sink_v.size() != want)
        fail(LCTX_ERR_FORMAT, "ILRe: %lld DCA sink rows do not fit the encoder", (long long)n_dca_sinks);
    n_encoded_ = n_encoded;
    n_sinks_saved_ = n_dca_sinks;
    sink_k_ = std::move(sink_k);
    sink_v_ = std::move(sink_v);
}

} // namespace lctx
