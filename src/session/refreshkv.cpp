#include "session/refreshkv.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "common/params_abi.h"
#include <cstring>

namespace lctx {

namespace {

// docs/methods/refreshkv.md, "Calibration": the s at which SmolLM2-135M's
// measured effective stride at QC stride 10 matches the paper's Llama-3.1
// range (17-19).
constexpr float kSmolLM2Threshold = 0.9f;
constexpr float kPaperThreshold = 0.85f;   // Llama-3.1-8B in the paper

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace

float refreshkv_default_threshold(const Hparams &hp) {
    // SmolLM2-135M and -360M share the family's tokenizer and trained context.
    if (hp.n_vocab == 49152 && hp.n_ctx_train == 8192 && hp.n_layer == 30 && hp.n_embd == 576)
        return kSmolLM2Threshold;
    return kPaperThreshold;
}

RefreshKvConfig refreshkv_config_from(const Hparams &hp, const lctx_refreshkv_params &p) {
    const char *who = "lctx_refreshkv_params";
    RefreshKvConfig c;
    if (p.partial < 0) fail(LCTX_ERR_INVALID_ARG, "%s: partial = %d is negative: give K > 0, or 0 for L/8", who, p.partial);
    c.partial = p.partial;
    if (p.stride < 0) fail(LCTX_ERR_INVALID_ARG, "%s: stride = %d is negative: give S > 0, or 0 for 10", who, p.stride);
    c.stride = p.stride > 0 ? p.stride : 10;
    if (!std::isfinite(p.threshold))
        fail(LCTX_ERR_INVALID_ARG, "%s: threshold is not a finite number (give a cosine, or 0 for the model's value)",
             who);
    c.threshold = p.threshold != 0.0f ? p.threshold : refreshkv_default_threshold(hp);
    int32_t schedule = 0;
    static_assert(sizeof schedule == sizeof p.schedule);
    std::memcpy(&schedule, &p.schedule, sizeof schedule);
    if (schedule != LCTX_REFRESHKV_DYNAMIC && schedule != LCTX_REFRESHKV_FIXED)
        fail(LCTX_ERR_INVALID_ARG, "%s: schedule = %d is not LCTX_REFRESHKV_DYNAMIC (0) or LCTX_REFRESHKV_FIXED (1)",
             who, schedule);
    c.fixed = schedule == LCTX_REFRESHKV_FIXED;
    if (p.pool_kernel < 0 || (p.pool_kernel > 0 && p.pool_kernel % 2 == 0) || p.pool_kernel > 1025)
        fail(LCTX_ERR_INVALID_ARG, "%s: pool_kernel = %d must be odd and in 1..1025 (0: 7)", who, p.pool_kernel);
    c.pool_kernel = p.pool_kernel > 0 ? p.pool_kernel : 7;
    if (p.max_partial_run < 0)
        fail(LCTX_ERR_INVALID_ARG, "%s: max_partial_run = %d is negative (0: off)", who, p.max_partial_run);
    c.max_partial_run = p.max_partial_run;
    return c;
}

std::optional<RefreshKvConfig> gathered_refreshkv(const Hparams &hp, const lctx_session_params &sp) {
    const lctx_refreshkv_params p = read_params(sp.refreshkv, lctx_refreshkv_default_params, "lctx_refreshkv_params",
                                                "lctx_refreshkv_default_params");
    if (!p.gathered) return std::nullopt;
    return refreshkv_config_from(hp, p);
}

double RefreshKvStats::effective_stride() const {
    if (layer_full.empty()) return 0.0;
    double sum = 0.0;
    int64_t n = 0;
    for (size_t l = 0; l < layer_full.size(); ++l) {
        if (l < keeps_partial.size() && !keeps_partial[l]) continue;
        sum += double(n_steps) / double(std::max<int64_t>(1, layer_full[l]));
        ++n;
    }
    return n > 0 ? sum / double(n) : 1.0;
}

RefreshKvPolicy::RefreshKvPolicy(Backend &backend, const Hparams &hp, KvType kv_type, const RefreshKvConfig &cfg)
    : be_(backend), hp_(hp), kv_type_(kv_type), cfg_(cfg), n_layer_(hp.n_layer), H_(hp.n_head), H_kv_(hp.n_head_kv),
      D_(hp.head_dim) {
    if (cfg_.stride <= 0 || cfg_.pool_kernel <= 0 || cfg_.pool_kernel % 2 == 0 || cfg_.partial < 0)
        fail(LCTX_ERR_INVALID_ARG, "RefreshKV: invalid configuration (stride %d, pool kernel %d, partial %lld)",
             cfg_.stride, cfg_.pool_kernel, (long long)cfg_.partial);
    const size_t L = static_cast<size_t>(n_layer_);
    for (int32_t l = 0; l < n_layer_; ++l) cp_layer_.push_back(hp.window_of(l) > 0 ? -1 : n_cp_layers_++);
    live_.assign(L, 0);
    fifo_.assign(L, {});
    spare_.assign(L, 0);
    qbar_.assign(L, std::vector<float>(static_cast<size_t>(D_), 0.0f));
    qref_ = qbar_;
    last_full_.assign(L, 0);
    full_.assign(L, 0);
}

void RefreshKvPolicy::begin_prompt(int64_t end) {
    if (end <= 0) fail(LCTX_ERR_INVALID_ARG, "RefreshKV: empty prompt");
    const int64_t K = cfg_.partial > 0 ? cfg_.partial : std::max<int64_t>(1, std::llround(double(end) / 8.0));
    if (!cp_ || K != K_) {
        cp_.reset();
        cp_ = std::make_unique<KvStore>(be_, hp_, K + 1, n_cp_layers_, kv_type_);
        cp_->append(K + 1);
        K_ = K;
    }
    mode_ = Mode::PROMPT;
    prompt_end_ = end;
    step_ = 0;
    ready_ = false;
    stats_ = RefreshKvStats{};
    stats_.partial = K_;
    stats_.layer_full.assign(static_cast<size_t>(n_layer_), 0);
    stats_.layer_partial.assign(static_cast<size_t>(n_layer_), 0);
    for (int32_t l = 0; l < n_layer_; ++l) stats_.keeps_partial.push_back(keeps_partial(l) ? 1 : 0);
    std::fill(last_full_.begin(), last_full_.end(), 0);
    std::fill(full_.begin(), full_.end(), 0);
}

void RefreshKvPolicy::begin_step() {
    if (!ready_) fail(LCTX_ERR_STATE, "RefreshKV: decoding before a prompt built the partial caches");
    mode_ = Mode::STEP;
    ++step_;
    ++stats_.n_steps;
}

void RefreshKvPolicy::cancel_step() {
    if (mode_ != Mode::STEP || step_ == 0) return;
    --step_;
    --stats_.n_steps;
}

std::vector<int32_t> RefreshKvPolicy::partial_positions(int32_t layer, int32_t head) const {
    if (!cp_ || layer < 0 || layer >= n_layer_ || head < 0 || head >= H_kv_ || !keeps_partial(layer)) return {};
    const int32_t *p = cp_->positions(cp_layer_[static_cast<size_t>(layer)], head);
    std::vector<int32_t> out;
    for (int64_t s : fifo_[static_cast<size_t>(layer)]) out.push_back(p[s]);
    return out;
}

bool RefreshKvPolicy::decide(int32_t l) const {
    const int64_t i = step_;
    if (cfg_.max_partial_run > 0 && i - last_full_[static_cast<size_t>(l)] >= cfg_.max_partial_run) return true;
    if (i % cfg_.stride != 0) return false;
    if (cfg_.fixed) return true;
    const std::vector<float> &a = qbar_[static_cast<size_t>(l)], &b = qref_[static_cast<size_t>(l)];
    double dot = 0, na = 0, nb = 0;
    for (int32_t d = 0; d < D_; ++d) {
        dot += double(a[d]) * b[d];
        na += double(a[d]) * a[d];
        nb += double(b[d]) * b[d];
    }
    const double cos = na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 1.0;
    return cos <= double(cfg_.threshold);
}

void RefreshKvPolicy::before_attention(int32_t l, const float *q, int64_t n_q, KvStore &) {
    if (mode_ == Mode::IDLE || n_q <= 0 || l >= n_layer_ || !keeps_partial(l)) return;
    // Mean over all query heads of the last query's pre-RoPE vector.
    std::vector<float> &qb = qbar_[static_cast<size_t>(l)];
    const float *row = q + (n_q - 1) * int64_t(H_) * D_;
    for (int32_t d = 0; d < D_; ++d) {
        double s = 0;
        for (int32_t h = 0; h < H_; ++h) s += row[int64_t(h) * D_ + d];
        qb[static_cast<size_t>(d)] = static_cast<float>(s / H_);
    }
    if (mode_ == Mode::STEP) {
        if (n_q != 1) fail(LCTX_ERR_INTERNAL, "RefreshKV: a decode step of %lld tokens", (long long)n_q);
        full_[static_cast<size_t>(l)] = decide(l) ? 1 : 0;
    }
}

AttentionPlan RefreshKvPolicy::plan(int32_t l, KvStore &store, int64_t n_kv, int64_t n_q) {
    AttentionPlan p;
    if (l >= n_layer_ || !keeps_partial(l)) return p;   // a sliding layer: dense over its window
    if (mode_ == Mode::PROMPT) {
        if (n_kv != prompt_end_) return p;   // an earlier sub-batch of the prompt: dense
        probs_.resize(static_cast<size_t>(H_kv_) * n_kv);
        p.col_max = probs_.data();
        p.obs_begin = n_q - 1;
        return p;
    }
    if (mode_ != Mode::STEP) return p;
    t0_ = std::chrono::steady_clock::now();
    const size_t L = static_cast<size_t>(l);
    if (full_[L]) {
        probs_.resize(static_cast<size_t>(H_kv_) * n_kv);
        p.col_max = probs_.data();
        p.obs_begin = 0;
        return p;
    }
    // Partial step: the new token (already in C_f) enters C_p's spare slot;
    // attend over the live slots + it.
    const int64_t cur = n_kv - 1;
    for (int32_t g = 0; g < H_kv_; ++g) cp_->copy_head_rows(cp_layer_[L], g, spare_[L], store, l, &cur, 1);
    p.store = cp_.get();
    p.store_layer = cp_layer_[L];
    p.n_kv = live_[L] + 1;
    return p;
}

void RefreshKvPolicy::after_attention(int32_t l, KvStore &store, int64_t n_kv, int64_t) {
    if (l >= n_layer_) return;
    const size_t L = static_cast<size_t>(l);
    if (mode_ == Mode::PROMPT) {
        if (n_kv != prompt_end_) return;
        if (keeps_partial(l)) {
            refresh(l, store, n_kv);
            qref_[L] = qbar_[L];
            last_full_[L] = 0;
        }
        if (l == n_layer_ - 1) ready_ = true;
        return;
    }
    if (mode_ != Mode::STEP || !keeps_partial(l)) return;
    if (full_[L]) {
        const auto t1 = std::chrono::steady_clock::now();
        refresh(l, store, n_kv);
        stats_.refresh_s += seconds_since(t1);
        qref_[L] = qbar_[L];
        last_full_[L] = step_;
        ++stats_.layer_full[L];
        stats_.full_s += seconds_since(t0_);
        return;
    }
    // FIFO: the spare slot joins the live ones; past K the oldest-ranked leaves.
    std::deque<int64_t> &fifo = fifo_[L];
    fifo.push_back(spare_[L]);
    if (live_[L] < K_) {
        ++live_[L];
        spare_[L] = live_[L];
    } else {
        spare_[L] = fifo.front();
        fifo.pop_front();
    }
    ++stats_.layer_partial[L];
    stats_.partial_s += seconds_since(t0_);
}

void RefreshKvPolicy::refresh(int32_t l, const KvStore &store, int64_t n_kv) {
    const int64_t c = n_kv - 1;                       // the current token's slot (always kept)
    const int64_t m = std::min<int64_t>(K_, c + 1);   // live slots afterwards
    const int64_t nsel = m - 1;                        // chosen among slots [0, c)
    const int64_t r = cfg_.pool_kernel / 2;
    be_.parallel_for(H_kv_, [&](int64_t g0, int64_t g1, int) {
        std::vector<float> B(static_cast<size_t>(c));
        std::vector<int64_t> idx(static_cast<size_t>(c));
        for (int64_t g = g0; g < g1; ++g) {
            const float *A = probs_.data() + g * n_kv;
            // Max-pool over [j - r, j + r] within [0, c) (the current token is
            // not a candidate and pools into nobody).
            for (int64_t j = 0; j < c; ++j) {
                float mx = A[j];
                for (int64_t d = std::max<int64_t>(0, j - r), e = std::min<int64_t>(c - 1, j + r); d <= e; ++d)
                    mx = std::max(mx, A[d]);
                B[static_cast<size_t>(j)] = mx;
            }
            std::iota(idx.begin(), idx.end(), int64_t{0});
            // Higher pooled score first; ties: the later slot.
            auto higher = [&](int64_t a, int64_t b) {
                const float sa = B[static_cast<size_t>(a)], sb = B[static_cast<size_t>(b)];
                return sa != sb ? sa > sb : a > b;
            };
            if (nsel < c) std::nth_element(idx.begin(), idx.begin() + nsel, idx.end(), higher);
            idx.resize(static_cast<size_t>(nsel));
            // Slot 0 = the lowest score = the first to leave (FIFO order).
            std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return higher(b, a); });
            idx.push_back(c);
            cp_->copy_head_rows(cp_layer_[static_cast<size_t>(l)], static_cast<int32_t>(g), 0, store, l, idx.data(),
                                m);
            idx.resize(static_cast<size_t>(c));
        }
    });
    const size_t L = static_cast<size_t>(l);
    live_[L] = m;
    fifo_[L].clear();
    for (int64_t s = 0; s < m; ++s) fifo_[L].push_back(s);
    spare_[L] = m;
}

} // namespace lctx
