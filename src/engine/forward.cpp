// The transformer forward pass over a KV cache, one layer loop for every
// architecture with per-architecture switches (docs/models.md). A batch is processed in sub-batches
// of at most kSubBatch tokens (bounding scratch memory); each sub-batch runs
// through all layers before the next, so its attention sees the K/V of the
// cache and of the earlier sub-batches.
#include "engine/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "common/error.h"

namespace lctx {

namespace {

constexpr int64_t kSubBatch = 512;

// Profiling laps: lap(op) charges the time since the previous lap to op.
// Without a profile it is one predictable branch.
// Laps inside a layer are also added to that layer's total.
struct Laps {
    ForwardProfile *p;
    std::chrono::steady_clock::time_point t0;
    int32_t layer = -1;
    explicit Laps(ForwardProfile *prof) : p(prof) {
        if (p) t0 = std::chrono::steady_clock::now();
    }
    void lap(ForwardProfile::Op op) {
        if (!p) return;
        const auto t = std::chrono::steady_clock::now();
        const double dt = std::chrono::duration<double>(t - t0).count();
        p->seconds[op] += dt;
        if (layer >= 0) {
            if (p->layer_seconds.size() <= static_cast<size_t>(layer)) p->layer_seconds.resize(layer + 1, 0.0);
            p->layer_seconds[static_cast<size_t>(layer)] += dt;
        }
        t0 = t;
    }
    // Moves seconds already lapped to one op over to another (same layer).
    void move(ForwardProfile::Op from, ForwardProfile::Op to, double seconds) {
        if (!p) return;
        p->seconds[from] -= seconds;
        p->seconds[to] += seconds;
    }
};

// Keys attended by queries that see lo, lo + 1, ..., hi slots each (causal,
// one query per count), each seeing at most `window` of them when window > 0.
double attended_pairs(int64_t lo, int64_t hi, int64_t window) {
    const auto upto = [window](int64_t m) {   // sum of min(j, window) for j = 1..m
        const double w = double(window), x = double(m);
        if (window <= 0 || m <= window) return 0.5 * x * (x + 1.0);
        return 0.5 * w * (w + 1.0) + (x - w) * w;
    };
    return hi < lo ? 0.0 : upto(hi) - upto(lo - 1);
}

} // namespace

const char *ForwardProfile::name(int op) {
    static const char *const names[N_OPS] = {"embed",       "norm",   "qkv",       "rope",     "kv_store", "attention",
                                             "attn_output", "ffn_gate_up", "swiglu", "ffn_down", "residual", "output",
                                             "hooks",       "policy", "col_scores"};
    return op >= 0 && op < N_OPS ? names[op] : "?";
}

double ForwardProfile::total() const {
    double t = 0.0;
    for (double s : seconds) t += s;
    return t;
}

double ForwardProfile::matmul_flops(const Hparams &hp) const {
    const double E = hp.n_embd, F = hp.n_ff, Q = double(hp.n_head) * hp.head_dim,
                 KV = double(hp.n_head_kv) * hp.head_dim;
    return 2.0 * (double(layer_tokens) * (E * Q + 2 * E * KV) + double(mlp_rows) * (Q * E + 3 * E * F));
}

double ForwardProfile::attention_flops(const Hparams &hp) const {
    return 4.0 * double(hp.n_head) * hp.head_dim * attn_pairs;   // q.k and p.v, a multiply-add each
}

Forward::Forward(const Model &model, Backend &backend) : model_(model), be_(backend) {
    be_.prepare(model);
    for (int32_t l = 0; l < model.hparams().n_layer; ++l) rope_hp_.push_back(model.hparams().rope_of(l));
}

float *Forward::scratch(std::unique_ptr<Buffer> &b, int64_t n) { return scratch_f32(be_, b, n); }

void Forward::run(const int32_t *tokens, const int32_t *pos, int64_t n, KvStore &cache, const ForwardOptions &opt,
                  std::vector<float> &logits) {
    const Hparams &hp = model_.hparams();
    if (n < 0) fail(LCTX_ERR_INVALID_ARG, "negative token count %lld", (long long)n);
    if (n > 0 && (!tokens || !pos)) fail(LCTX_ERR_INVALID_ARG, "tokens or positions is NULL");
    for (int64_t i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= hp.n_vocab)
            fail(LCTX_ERR_INVALID_ARG, "token id %d at index %lld is out of range [0, %d)", tokens[i],
                 (long long)i, hp.n_vocab);
    const int32_t n_layers = opt.n_layers < 0 ? cache.n_layers() : opt.n_layers;
    if (n_layers > cache.n_layers() || n_layers > hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "%d layers requested, the cache holds %d and the model has %d", n_layers,
             cache.n_layers(), hp.n_layer);
    if (cache.n_head_kv() != hp.n_head_kv || cache.head_dim() != hp.head_dim)
        fail(LCTX_ERR_INVALID_ARG, "the KV cache was made for another model");
    if (&cache.backend() != &be_) fail(LCTX_ERR_INVALID_ARG, "the KV cache lives on another backend");

    const int64_t E = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, D = hp.head_dim;
    const int64_t Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D;
    const int32_t H_kv = hp.n_head_kv;
    const bool host = be_.host_memory();
    DensePolicy dense;
    AttentionPolicy &policy = opt.policy ? *opt.policy : dense;

    const int64_t old_size = cache.size();
    const int64_t base = cache.append(n);   // throws CONTEXT_FULL, cache untouched
    try {
        cache.set_positions(base, pos, n);

        switch (opt.logits) {
            case LogitsMode::NONE: logits.clear(); break;
            case LogitsMode::LAST: logits.assign(n > 0 ? static_cast<size_t>(V) : 0, 0.0f); break;
            case LogitsMode::ALL: logits.assign(static_cast<size_t>(n * V), 0.0f); break;
        }
        ForwardHooks *hooks = opt.hooks;
        Laps laps(opt.profile);
        if (opt.profile) opt.profile->tokens += n;
        std::vector<std::vector<float>> *col_sums = hooks ? hooks->col_sums : nullptr;
        if (col_sums) {
            col_sums->assign(static_cast<size_t>(n_layers), {});
            for (auto &c : *col_sums) c.assign(static_cast<size_t>(H_kv * (base + n)), 0.0f);
            laps.lap(ForwardProfile::COL_SCORES);
        }

        const int64_t nb_max = std::min<int64_t>(n, kSubBatch);
        float *x = scratch(x_, nb_max * E), *xn = scratch(xn_, nb_max * E), *q = scratch(q_, nb_max * Q);
        float *k = scratch(k_, nb_max * KV), *v = scratch(v_, nb_max * KV);
        float *attn = scratch(attn_, nb_max * std::max(Q, E));
        float *gate = scratch(gate_, nb_max * F), *up = scratch(up_, nb_max * F), *tmp = scratch(tmp_, nb_max * F);
        // Hooks and policies read activations on the host.
        auto on_host = [&](std::vector<float> &h, const float *src, int64_t count) -> const float * {
            if (host) return src;
            h.resize(static_cast<size_t>(count));
            be_.to_host(h.data(), src, static_cast<size_t>(count) * sizeof(float));
            return h.data();
        };
        std::vector<float> cols, logits_dev;

        for (int64_t b0 = 0; b0 < n; b0 += kSubBatch) {
            const int64_t nb = std::min(kSubBatch, n - b0);
            const int64_t n_kv = base + b0 + nb;   // slots filled once this sub-batch is stored
            be_.get_rows(model_.tok_embd(), tokens + b0, nb, x);
            if (hp.embd_scale != 1.0f) be_.scale(x, hp.embd_scale, nb * E);
            laps.lap(ForwardProfile::EMBED);

            // The last layer run needs its output only where something reads
            // it: the logits' rows, every row for an on_hidden hook. Rows
            // [0, last_r0) of this sub-batch only store their K/V there; the
            // column scores of a layer (below) keep its attention on every
            // row, since they read every row's probabilities.
            int64_t last_r0 = 0;
            if (!opt.every_row_last_layer && !(hooks && hooks->on_hidden)) {
                if (opt.logits == LogitsMode::NONE) last_r0 = nb;
                else if (opt.logits == LogitsMode::LAST) last_r0 = b0 + nb == n ? nb - 1 : nb;
            }
            if (opt.profile) opt.profile->layer_tokens += nb * n_layers;
            for (int32_t l = 0; l < n_layers; ++l) {
                laps.layer = l;
                if (opt.keep_going && !opt.keep_going()) fail(LCTX_ERR_CANCELLED, "forward pass cancelled");
                const LayerWeights &L = model_.layers()[static_cast<size_t>(l)];
                const Hparams &rope_hp = rope_hp_[static_cast<size_t>(l)];

                // --- attention
                be_.rms_norm(x, L.attn_norm, xn, nb, E, hp.rms_eps);
                laps.lap(ForwardProfile::NORM);
                const MatmulJob qkv[3] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
                be_.matmul_multi(qkv, 3, xn, E, nb);
                if (hp.qkv_bias) {
                    be_.add_bias(q, L.bq, nb);
                    be_.add_bias(k, L.bk, nb);
                    be_.add_bias(v, L.bv, nb);
                }
                laps.lap(ForwardProfile::QKV);
                if (hp.qk_norm) {   // per head, before the hooks: they see q/k as attention uses them, pre-RoPE
                    be_.rms_norm(q, L.q_norm, q, nb * hp.n_head, D, hp.rms_eps);
                    be_.rms_norm(k, L.k_norm, k, nb * hp.n_head_kv, D, hp.rms_eps);
                    laps.lap(ForwardProfile::NORM);
                }
                const float *q_host = on_host(hq_, q, nb * Q);   // copied once for hooks and policy
                if (hooks && hooks->on_qkv)
                    hooks->on_qkv(l, q_host, on_host(hk_, k, nb * KV), on_host(hv_, v, nb * KV), nb);
                laps.lap(ForwardProfile::HOOKS);
                policy.before_attention(l, q_host, nb, cache);
                laps.lap(ForwardProfile::POLICY);
                be_.rope(rope_hp, q, Q, nb, hp.n_head, pos + b0);
                be_.rope(rope_hp, k, KV, nb, hp.n_head_kv, pos + b0);
                laps.lap(ForwardProfile::ROPE);

                cache.store(l, base + b0, k, v, nb, KV);
                laps.lap(ForwardProfile::KV_STORE);

                const AttentionPlan plan = policy.plan(l, cache, n_kv, nb);
                laps.lap(ForwardProfile::POLICY);
                // A store that releases sliding-window slots holds a suffix of them
                // (KvStore::first_held): the released ones are out of every query's window.
                const SlotRanges ranges = plan.store ? SlotRanges{} : cache.held(l, policy.ranges(l, n_kv, nb));
                const int32_t store_layer = plan.store_layer >= 0 ? plan.store_layer : l;
                AttentionArgs a = plan.store ? plan.store->attention_args(store_layer, plan.n_kv)
                                             : cache.attention_args(l, ranges, gather_);
                a.ldq = Q;
                a.ldo = Q;
                a.n_head = hp.n_head;
                a.scale = hp.attn_scale;
                a.window = hp.window_of(l);
                a.softcap = hp.attn_softcap;
                // Column sums over queries i >= obs_begin (batch index): the
                // kernel writes [H_kv][attended slots]; add them into
                // [H_kv][base + n] at the slots' indices.
                const bool want_cols = col_sums && hooks->obs_begin < b0 + nb;
                // Rows [r0, nb) of this layer go on past attention (see last_r0);
                // rows [ra, nb) attend: column scores read the probabilities of
                // every row from their obs_begin on, so with them every row does.
                const int64_t r0 = l == n_layers - 1 ? last_r0 : 0, nr = nb - r0;
                const int64_t ra = want_cols || plan.col_max ? 0 : r0;
                a.q = q + ra * Q;
                a.out = attn + ra * Q;
                a.n_q = nb - ra;
                a.q_pos = pos + b0 + ra;
                if (opt.profile) {
                    opt.profile->attn_pairs += attended_pairs(n_kv - nb + ra + 1, n_kv, a.window);
                    opt.profile->mlp_rows += nr;
                }
                if ((want_cols || plan.col_max) && cache.first_held(l) > 0)
                    fail(LCTX_ERR_INTERNAL, "column scores over a KV store that released sliding-window slots");
                if (plan.col_max) {
                    if (want_cols || plan.store)
                        fail(LCTX_ERR_INTERNAL, "an attention plan's col_max with column-sum hooks or another store");
                    std::fill(plan.col_max, plan.col_max + H_kv * a.n_kv, 0.0f);
                    a.col_sums = plan.col_max;
                    a.col_max = true;
                    a.obs_begin = plan.obs_begin;
                } else if (want_cols) {
                    if (plan.store) fail(LCTX_ERR_INTERNAL, "column-sum hooks with a policy's own store");
                    cols.assign(static_cast<size_t>(H_kv * a.n_kv), 0.0f);
                    a.col_sums = cols.data();
                    a.obs_begin = std::max<int64_t>(0, hooks->obs_begin - b0);
                }
                double col_pass = 0.0;   // the kernel's column pass, when profiling
                if (opt.profile && a.col_sums) a.colsum_seconds = &col_pass;
                if (a.n_q > 0) be_.attention(a);
                laps.lap(ForwardProfile::ATTENTION);
                laps.move(ForwardProfile::ATTENTION, ForwardProfile::COL_SCORES, col_pass);
                if (want_cols) {
                    std::vector<float> &dst = (*col_sums)[static_cast<size_t>(l)];
                    for (int32_t h = 0; h < H_kv; ++h) {
                        const float *src = cols.data() + h * a.n_kv;
                        for (const auto &[r0, r1] : ranges) {
                            float *d = dst.data() + h * (base + n) + r0;
                            for (int64_t s = 0; s < r1 - r0; ++s) d[s] += src[s];
                            src += r1 - r0;
                        }
                    }
                }
                laps.lap(ForwardProfile::COL_SCORES);
                policy.after_attention(l, cache, n_kv, nb);
                laps.lap(ForwardProfile::POLICY);
                if (nr == 0) continue;   // the last layer, and no row of it is read
                // Rows [r0, nb) from here on: the residual stream xr, the
                // normed rows xnr; attn's first nr rows hold the MLP's output.
                float *xr = x + r0 * E, *xnr = xn + r0 * E;
                be_.matmul(L.wo, attn + r0 * Q, Q, nr, xnr);
                laps.lap(ForwardProfile::ATTN_OUT);
                if (hp.post_norms) {
                    be_.rms_norm(xnr, L.attn_post_norm, xnr, nr, E, hp.rms_eps);
                    laps.lap(ForwardProfile::NORM);
                }
                be_.add(xr, xnr, nr * E);
                laps.lap(ForwardProfile::RESIDUAL);

                // --- MLP
                be_.rms_norm(xr, L.ffn_norm, xnr, nr, E, hp.rms_eps);
                laps.lap(ForwardProfile::NORM);
                const MatmulJob gate_up[2] = {{&L.ffn_gate, gate}, {&L.ffn_up, up}};
                be_.matmul_multi(gate_up, 2, xnr, E, nr);
                laps.lap(ForwardProfile::FFN_GATE_UP);
                if (hp.ffn_act == FfnAct::GELU_TANH)
                    be_.geglu(gate, up, tmp, nr, F);
                else
                    be_.swiglu(gate, up, tmp, nr, F);
                laps.lap(ForwardProfile::SWIGLU);
                be_.matmul(L.ffn_down, tmp, F, nr, attn);
                laps.lap(ForwardProfile::FFN_DOWN);
                if (hp.post_norms) {
                    be_.rms_norm(attn, L.ffn_post_norm, attn, nr, E, hp.rms_eps);
                    laps.lap(ForwardProfile::NORM);
                }
                be_.add(xr, attn, nr * E);
                laps.lap(ForwardProfile::RESIDUAL);

                if (hooks && hooks->on_hidden) hooks->on_hidden(l, on_host(hx_, x, nb * E), nb);
                laps.lap(ForwardProfile::HOOKS);
            }
            laps.layer = -1;

            // --- output head, only for the rows wanted
            int64_t r0 = 0, nr = 0;
            float *dst = nullptr;
            if (opt.logits == LogitsMode::ALL) {
                r0 = 0;
                nr = nb;
                dst = logits.data() + b0 * V;
            } else if (opt.logits == LogitsMode::LAST && b0 + nb == n) {
                r0 = nb - 1;
                nr = 1;
                dst = logits.data();
            }
            if (nr > 0) {
                be_.rms_norm(x + r0 * E, model_.output_norm(), xn, nr, E, hp.rms_eps);
                if (host) {
                    be_.matmul(model_.output(), xn, E, nr, dst);
                } else {
                    float *out = scratch(tmp_, std::max<int64_t>(nb_max * F, nr * V));
                    be_.matmul(model_.output(), xn, E, nr, out);
                    be_.to_host(dst, out, static_cast<size_t>(nr * V) * sizeof(float));
                }
                if (hp.final_softcap > 0.0f) {
                    const float cap = hp.final_softcap;
                    for (int64_t i = 0; i < nr * V; ++i) dst[i] = cap * std::tanh(dst[i] / cap);
                }
                laps.lap(ForwardProfile::OUTPUT);
            }
        }
    } catch (...) {
        cache.truncate(old_size);
        throw;
    }
}

} // namespace lctx
