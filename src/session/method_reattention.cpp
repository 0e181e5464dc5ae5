#include "session/method_reattention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/budget_backend.h"
#include "common/error.h"
#include "session/reattention_select.h"
#include "session/state_digest.h"

namespace lctx {

// The engine's view of one step: per layer, pick and place the spans before
// attention, then attend from the lowest placed slot to the step's own.
class ReattentionMethod::WindowPolicy final : public AttentionPolicy {
public:
    explicit WindowPolicy(ReattentionMethod &m) : m_(m), lo_(static_cast<size_t>(m.model_.hparams().n_layer), 0) {}

    // A step that ends with n_total tokens stored and has c of its own.
    void begin(int64_t n_total, int64_t c) {
        n_total_ = n_total;
        c_ = c;
        windowed_ = n_total > m_.p_.n_global + m_.p_.n_local;
    }
    bool windowed() const { return windowed_; }
    int64_t n_total() const { return n_total_; }
    int64_t step_tokens() const { return c_; }

    void before_attention(int32_t layer, const float *q, int64_t n_q, KvStore &) override {
        auto &sel = m_.last_sel_[static_cast<size_t>(layer)];
        if (!windowed_) {
            sel.clear();
            lo_[static_cast<size_t>(layer)] = m_.slot_of(0);
            return;
        }
        const int64_t first_local = n_total_ - m_.p_.n_local;
        if (m_.sees_local_only(layer, c_)) {
            sel.clear();
            lo_[static_cast<size_t>(layer)] = m_.slot_of(first_local);
            return;
        }
        int64_t &age = m_.sel_age_[static_cast<size_t>(layer)];
        const bool reuse = c_ == 1 && n_q == 1 && age > 0 && age < m_.p_.reuse_steps;
        if (m_.p_.n_spans == 0) {
            sel.clear();
        } else if (reuse) {
            ++age;
        } else {
            sel = m_.select_spans(layer, q, n_q, n_total_);
            age = 1;
        }
        lo_[static_cast<size_t>(layer)] = m_.place_selected(layer, sel, m_.slot_of(first_local), m_.pos_of(first_local));
    }

    SlotRanges ranges(int32_t layer, int64_t n_kv, int64_t) const override {
        return {{lo_[static_cast<size_t>(layer)], n_kv}};
    }

private:
    ReattentionMethod &m_;
    std::vector<int64_t> lo_;   // per layer: the first attended slot
    int64_t n_total_ = 0, c_ = 0;
    bool windowed_ = false;
};

namespace {

// RoPE of n host rows of `heads` heads (row stride ld floats) at pos[], on
// any backend (a device backend rotates a copy in its own memory).
void rope_host(Backend &be, const Hparams &hp, float *x, int64_t ld, int64_t n, int32_t heads, const int32_t *pos) {
    if (n <= 0) return;
    if (be.host_memory()) {
        be.rope(hp, x, ld, n, heads, pos);
        return;
    }
    const size_t bytes = static_cast<size_t>(n * ld) * sizeof(float);
    std::unique_ptr<Buffer> b = be.alloc(bytes);
    be.from_host(b->data(), x, bytes);
    be.rope(hp, b->f32(), ld, n, heads, pos);
    be.to_host(x, b->data(), bytes);
}

} // namespace

ReattentionMethod::ReattentionMethod(const Model &model, Backend &backend, const lctx_session_params &params)
    : model_(model), be_(backend), p_(reattention_params_from(model, params)), forward_(model, backend),
      window_(backend, model.hparams(), p_.window_capacity(), -1, p_.kv_type),
      // The top-k scan reads the store's keys as f16 or f32: a q8 session keeps it in f16.
      store_(model.hparams(), p_.kv_type == KvType::Q8 ? KvType::F16 : p_.kv_type, budget_of(backend),
             p_.store_max_ram, p_.store_dir) {
    const Hparams &hp = model.hparams();
    if (hp.n_head % hp.n_head_kv != 0)
        fail(LCTX_ERR_UNSUPPORTED, "ReAttention: %d query heads are not a multiple of %d KV heads", hp.n_head,
             hp.n_head_kv);
    feeder_.who = "ReAttention";
    feeder_.chunk = p_.chunk;
    feeder_.first_chunk = p_.n_global + p_.n_local;
    feeder_.n_encoded = [this] { return n_; };
    policy_ = std::make_unique<WindowPolicy>(*this);
    last_sel_.assign(static_cast<size_t>(hp.n_layer), {});
    sel_age_.assign(static_cast<size_t>(hp.n_layer), 0);
    bs_ = -p_.selected_slots();
    bp_ = 0;
    window_.append(slot_of(0));
}

ReattentionMethod::~ReattentionMethod() = default;

std::vector<int64_t> ReattentionMethod::select_spans(int32_t layer, const float *q, int64_t c, int64_t n_total) {
    const Hparams &hp = model_.hparams();
    const int64_t H = hp.n_head, Hk = hp.n_head_kv, gs = H / Hk, D = hp.head_dim, k = p_.top_k;
    const int64_t mid0 = p_.n_global, mid1 = n_total - p_.n_local;
    if (mid1 <= mid0) return {};
    const int64_t rows = c * gs;
    std::vector<float> qg(static_cast<size_t>(rows * D));
    std::vector<float> best(static_cast<size_t>(Hk * rows * k));
    std::vector<int64_t> index(best.size());
    std::fill(best.begin(), best.end(), -INFINITY);
    std::fill(index.begin(), index.end(), int64_t{-1});
    std::vector<TopkKeySegment> segs;
    for (int64_t g = 0; g < Hk; ++g) {
        // Rows (query token i, u-th head of the group), each against its KV head g.
        for (int64_t i = 0; i < c; ++i)
            std::copy(q + i * H * D + g * gs * D, q + i * H * D + (g + 1) * gs * D, qg.begin() + i * gs * D);
        segs.clear();
        for (int64_t t = mid0; t < mid1;) {
            const int64_t n = std::min(mid1 - t, ReattentionStore::contiguous_from(t));
            segs.push_back({store_.keys(layer, static_cast<int32_t>(g), t), n, t});
            t += n;
        }
        TopkDotArgs a;
        a.q = qg.data();
        a.ldq = D;
        a.n_rows = rows;
        a.segments = segs.data();
        a.n_segments = static_cast<int64_t>(segs.size());
        a.key_type = store_.type();
        a.ld_keys = D;
        a.dim = static_cast<int32_t>(D);
        a.k = static_cast<int32_t>(k);
        a.tile_max = p_.tile_max;
        a.best_score = best.data() + g * rows * k;
        a.best_index = index.data() + g * rows * k;
        be_.topk_dot(a);
    }
    return vote_spans(index.data(), best.data(), static_cast<int64_t>(index.size()), mid0, mid1, p_.n_spans, p_.span);
}

bool ReattentionMethod::sees_local_only(int32_t layer, int64_t c) const {
    // The step's first query sits n_local - c + 1 positions above the highest
    // global or span row (they are placed just below the local tokens).
    const int32_t w = model_.hparams().window_of(layer);
    return w > 0 && p_.n_local - c + 1 >= w;
}

void ReattentionMethod::copy_to_window(int32_t layer, const int64_t *tok, int64_t n, int64_t slot0,
                                       const int32_t *pos) {
    const Hparams &hp = model_.hparams();
    const int64_t D = hp.head_dim, KV = int64_t(hp.n_head_kv) * D;
    rows_k_.resize(static_cast<size_t>(n * KV));
    rows_v_.resize(rows_k_.size());
    store_.read(layer, tok, n, rows_k_.data(), rows_v_.data(), KV);
    rope_host(be_, hp.rope_of(layer), rows_k_.data(), KV, n, hp.n_head_kv, pos);
    for (int32_t h = 0; h < hp.n_head_kv; ++h) {
        window_.write_rows(layer, h, slot0, n, rows_k_.data() + h * D, rows_v_.data() + h * D, KV);
        window_.set_head_positions(layer, h, slot0, pos, n);
    }
}

int64_t ReattentionMethod::place_selected(int32_t layer, const std::vector<int64_t> &sel, int64_t ls,
                                          int64_t local_pos) {
    const int64_t G = p_.n_global;
    const int64_t n = G + static_cast<int64_t>(sel.size());
    const int64_t slot0 = ls - n;
    if (slot0 < 0) fail(LCTX_ERR_INTERNAL, "ReAttention: %lld selected rows do not fit below slot %lld", (long long)n,
                        (long long)ls);
    if (n == 0) return ls;
    std::vector<int64_t> tok(static_cast<size_t>(n));
    std::iota(tok.begin(), tok.begin() + G, int64_t{0});
    std::copy(sel.begin(), sel.end(), tok.begin() + G);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) pos[j] = static_cast<int32_t>(local_pos - n + j);
    copy_to_window(layer, tok.data(), n, slot0, pos.data());
    return slot0;
}

void ReattentionMethod::fill_window(int64_t t0, int64_t t1) {
    const int64_t piece = 1024;   // bounds the row buffers
    std::vector<int64_t> tok;
    std::vector<int32_t> pos;
    for (int64_t a = t0; a < t1; a += piece) {
        const int64_t n = std::min(piece, t1 - a);
        tok.resize(static_cast<size_t>(n));
        pos.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
            tok[j] = a + j;
            pos[j] = pos_of(a + j);
        }
        for (int32_t l = 0; l < model_.hparams().n_layer; ++l) copy_to_window(l, tok.data(), n, slot_of(a), pos.data());
    }
}

void ReattentionMethod::rebuild() {
    // The same layout (bs_, bp_) as before, so the rows come out bit for bit
    // as the forward pass wrote them (f32; f16 rounds before RoPE here).
    const int64_t first = n_ <= p_.n_global + p_.n_local ? 0 : n_ - p_.n_local;
    if (slot_of(first) < 0 || slot_of(n_) > window_.capacity())
        fail(LCTX_ERR_INTERNAL, "ReAttention: tokens [%lld, %lld) do not fit the window layout", (long long)first,
             (long long)n_);
    window_.truncate(0);
    window_.append(slot_of(n_));
    fill_window(first, n_);
    std::fill(sel_age_.begin(), sel_age_.end(), 0);
    dirty_ = false;
}

void ReattentionMethod::step(const int32_t *tokens, int64_t c, LogitsMode mode, std::vector<float> &logits,
                             const std::function<bool()> &keep_going) {
    const Hparams &hp = model_.hparams();
    const int64_t N = n_, Nt = N + c, KV = int64_t(hp.n_head_kv) * hp.head_dim;
    const bool windowed = Nt > p_.n_global + p_.n_local;
    if (windowed && c > std::min<int64_t>(p_.n_local, 512))
        fail(LCTX_ERR_INTERNAL, "ReAttention: a step of %lld tokens past the first window", (long long)c);
    store_.reserve(Nt);   // may throw OUT_OF_MEMORY: nothing has changed yet
    if (dirty_) rebuild();
    if (windowed && slot_of(N) + c > window_.capacity()) {
        // Move the local tokens back down to the bottom of their region.
        const int64_t first = Nt - p_.n_local;
        bs_ = bp_ = first - p_.selected_slots();
        window_.truncate(0);
        window_.append(slot_of(N));
        fill_window(first, N);
        ++rebases_;
    }
    if (window_.size() != slot_of(N))
        fail(LCTX_ERR_INTERNAL, "ReAttention: window holds %lld slots, expected %lld", (long long)window_.size(),
             (long long)slot_of(N));

    std::vector<int32_t> pos(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) pos[i] = pos_of(N + i);
    std::vector<int64_t> written(static_cast<size_t>(hp.n_layer), 0);
    ForwardHooks hooks;
    hooks.on_qkv = [&](int32_t l, const float *, const float *k, const float *v, int64_t nb) {
        store_.write(l, N + written[l], nb, k, v, KV);
        written[l] += nb;
    };
    policy_->begin(Nt, c);
    ForwardOptions opt;
    opt.logits = mode;
    opt.hooks = &hooks;
    opt.policy = policy_.get();
    opt.keep_going = keep_going;
    try {
        forward_.run(tokens, pos.data(), c, window_, opt, logits);
    } catch (...) {
        // The store keeps N tokens (the rows written are past its size); a
        // windowed step may have overwritten local slots below the new ones.
        if (windowed) dirty_ = true;
        throw;
    }
    store_.commit(Nt);
    n_ = Nt;
    tokens_.insert(tokens_.end(), tokens, tokens + c);
    ++steps_;
    if (windowed && p_.n_spans > 0) ++selecting_steps_;
}

void ReattentionMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    feeder_.feed(tokens, n, progress, [this](const int32_t *t, int64_t m, const std::function<bool()> &keep_going) {
        step(t, m, LogitsMode::NONE, scratch_logits_, keep_going);
    });
}

void ReattentionMethod::finish(Progress &progress) {
    feeder_.finish(progress, [this](const int32_t *t, int64_t m, const std::function<bool()> &keep_going) {
        step(t, m, LogitsMode::NONE, scratch_logits_, keep_going);
    });
    sealed_ = true;
    doc_bs_ = bs_;
    doc_bp_ = bp_;
}

Selection ReattentionMethod::select(const std::vector<int32_t> &query, Progress &) {
    // The retrieval happens inside attention, per layer and step: the whole
    // document stays available.
    Selection s;
    s.positions.resize(feeder_.ids.size());
    std::iota(s.positions.begin(), s.positions.end(), int64_t{0});
    s.scores.assign(s.positions.size(), 1.0f);
    s.query = query;
    return s;
}

void ReattentionMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    const int64_t n_doc = static_cast<int64_t>(feeder_.ids.size());
    const std::vector<int32_t> &q = selection.query;
    if (q.empty()) fail(LCTX_ERR_INVALID_ARG, "ReAttention: the question is empty");
    // Back to the document alone; the window is rebuilt from the store, so
    // every question starts from the same state.
    store_.truncate(n_doc);
    n_ = n_doc;
    tokens_.assign(feeder_.ids.begin(), feeder_.ids.end());
    bs_ = doc_bs_;
    bp_ = doc_bp_;
    dirty_ = true;
    const int64_t nq = static_cast<int64_t>(q.size());
    // All but the last question token in steps (one prefill step while the
    // whole input fits the first window), the last alone (the decode path).
    for (int64_t at = 0; at < nq - 1;) {
        const int64_t room = n_ + (nq - 1 - at) <= p_.n_global + p_.n_local ? nq - 1 - at : p_.chunk;
        const int64_t m = std::min(room, nq - 1 - at);
        const double frac = double(at) / double(nq);
        if (!progress.keep_going(frac)) fail(LCTX_ERR_CANCELLED, "ReAttention: question cancelled");
        step(q.data() + at, m, LogitsMode::NONE, scratch_logits_, [&] { return progress.keep_going(frac); });
        at += m;
    }
    step(q.data() + nq - 1, 1, LogitsMode::LAST, logits, [&] { return progress.keep_going(0.99); });
    progress.keep_going(1.0);
}

void ReattentionMethod::append(int32_t token, std::vector<float> &logits) {
    step(&token, 1, LogitsMode::LAST, logits, {});
}

bool ReattentionMethod::attended_share(std::vector<float> &share) const {
    share.assign(static_cast<size_t>(n_), 0.0f);
    const int64_t n_total = std::min(policy_->n_total(), n_);
    if (steps_ == 0 || n_total <= 0) return true;   // nothing has run: nothing was attended
    if (!policy_->windowed()) {
        std::fill_n(share.begin(), n_total, 1.0f);
        return true;
    }
    // Each layer saw [global | its spans | local] of the n_total tokens of the
    // step; a sliding layer that sees only local tokens, its window of them.
    const float one = 1.0f / static_cast<float>(last_sel_.size());
    const int64_t first_local = n_total - p_.n_local;
    std::vector<char> seen(static_cast<size_t>(n_total));
    for (int32_t l = 0; l < static_cast<int32_t>(last_sel_.size()); ++l) {
        const auto &sel = last_sel_[static_cast<size_t>(l)];
        if (sees_local_only(l, policy_->step_tokens())) {
            const int64_t w = model_.hparams().window_of(l);
            for (int64_t t = std::max<int64_t>(0, n_total - w); t < n_total; ++t) share[static_cast<size_t>(t)] += one;
            continue;
        }
        std::fill(seen.begin(), seen.end(), 0);
        std::fill_n(seen.begin(), std::min(p_.n_global, n_total), 1);
        std::fill(seen.begin() + std::max<int64_t>(first_local, 0), seen.end(), 1);
        for (int64_t t : sel)
            if (t >= 0 && t < n_total) seen[static_cast<size_t>(t)] = 1;
        for (int64_t t = 0; t < n_total; ++t)
            if (seen[static_cast<size_t>(t)]) share[static_cast<size_t>(t)] += one;
    }
    return true;
}

uint64_t ReattentionMethod::state_digest() const {
    const Hparams &hp = model_.hparams();
    Hash64 h;
    h.add(n_);
    h.add(sealed_);
    digest_vec(h, feeder_.ids);
    digest_vec(h, tokens_);
    const size_t row = static_cast<size_t>(hp.head_dim) * kv_type_size(store_.type());
    for (int32_t l = 0; l < hp.n_layer; ++l)
        for (int32_t g = 0; g < hp.n_head_kv; ++g)
            for (int64_t t = 0; t < n_;) {
                const int64_t n = std::min(n_ - t, ReattentionStore::contiguous_from(t));
                h.update(store_.keys(l, g, t), static_cast<size_t>(n) * row);
                h.update(store_.values(l, g, t), static_cast<size_t>(n) * row);
                t += n;
            }
    return h.digest();
}

} // namespace lctx
