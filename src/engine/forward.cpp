// The llama forward pass over a KV cache. A batch is processed in sub-batches
// of at most kSubBatch tokens (bounding scratch memory); each sub-batch runs
// through all layers before the next, so its attention sees the K/V of the
// cache and of the earlier sub-batches.
#include "engine/forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lctx {

namespace {

constexpr int64_t kSubBatch = 512;

void add_into(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// Row-wise RMSNorm of n_tok rows of `n` floats, rows split over the pool.
void norm_rows(cpu::ThreadPool &pool, const float *x, const WeightView &w, float *y, int64_t n_tok, int64_t n,
               float eps) {
    const float *wd = reinterpret_cast<const float *>(w.data);
    if (n_tok == 1) {
        cpu::rms_norm(x, wd, y, n, eps);
        return;
    }
    pool.parallel_for(n_tok, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) cpu::rms_norm(x + t * n, wd, y + t * n, n, eps);
    });
}

// Profiling laps: lap(op) charges the time since the previous lap to op.
// Without a profile it is one predictable branch.
struct Laps {
    ForwardProfile *p;
    std::chrono::steady_clock::time_point t0;
    explicit Laps(ForwardProfile *prof) : p(prof) {
        if (p) t0 = std::chrono::steady_clock::now();
    }
    void lap(ForwardProfile::Op op) {
        if (!p) return;
        const auto t = std::chrono::steady_clock::now();
        p->seconds[op] += std::chrono::duration<double>(t - t0).count();
        t0 = t;
    }
};

} // namespace

const char *ForwardProfile::name(int op) {
    static const char *const names[N_OPS] = {"embed",       "norm",   "qkv",       "rope",     "kv_store", "attention",
                                             "attn_output", "ffn_gate_up", "swiglu", "ffn_down", "residual", "output"};
    return op >= 0 && op < N_OPS ? names[op] : "?";
}

double ForwardProfile::total() const {
    double t = 0.0;
    for (double s : seconds) t += s;
    return t;
}

Forward::Forward(const Model &model, cpu::ThreadPool &pool) : model_(model), pool_(pool) {}

void Forward::run(const int32_t *tokens, const int32_t *pos, int64_t n, KvCache &cache, const ForwardOptions &opt,
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

    const int64_t E = hp.n_embd, F = hp.n_ff, V = hp.n_vocab, D = hp.head_dim;
    const int64_t Q = int64_t(hp.n_head) * D, KV = int64_t(hp.n_head_kv) * D;
    const int32_t H_kv = hp.n_head_kv;

    const int64_t old_size = cache.size();
    const int64_t base = cache.append(n);   // throws CONTEXT_FULL, cache untouched
    try {
        int32_t *cpos = cache.positions();
        for (int64_t i = 0; i < n; ++i) cpos[base + i] = pos[i];

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
        }

        const int64_t nb_max = std::min<int64_t>(n, kSubBatch);
        x_.resize(static_cast<size_t>(nb_max * E));
        xn_.resize(static_cast<size_t>(nb_max * E));
        q_.resize(static_cast<size_t>(nb_max * Q));
        k_.resize(static_cast<size_t>(nb_max * KV));
        v_.resize(static_cast<size_t>(nb_max * KV));
        attn_.resize(static_cast<size_t>(nb_max * std::max(Q, E)));
        gate_.resize(static_cast<size_t>(nb_max * F));
        up_.resize(static_cast<size_t>(nb_max * F));
        tmp_.resize(static_cast<size_t>(nb_max * F));

        for (int64_t b0 = 0; b0 < n; b0 += kSubBatch) {
            const int64_t nb = std::min(kSubBatch, n - b0);
            const int64_t n_kv = base + b0 + nb;   // slots filled once this sub-batch is stored
            for (int64_t t = 0; t < nb; ++t) cpu::get_row(model_.tok_embd(), tokens[b0 + t], x_.data() + t * E);
            laps.lap(ForwardProfile::EMBED);

            for (int32_t l = 0; l < n_layers; ++l) {
                if (opt.keep_going && !opt.keep_going()) fail(LCTX_ERR_CANCELLED, "forward pass cancelled");
                const LayerWeights &L = model_.layers()[static_cast<size_t>(l)];

                // --- attention
                norm_rows(pool_, x_.data(), L.attn_norm, xn_.data(), nb, E, hp.rms_eps);
                laps.lap(ForwardProfile::NORM);
                const cpu::MatmulJob qkv[3] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
                cpu::matmul_multi(pool_, qkv, 3, xn_.data(), E, nb);
                laps.lap(ForwardProfile::QKV);
                if (hooks && hooks->on_qkv) hooks->on_qkv(l, q_.data(), k_.data(), v_.data(), nb);
                pool_.parallel_for(nb, [&](int64_t t0, int64_t t1, int) {
                    cpu::rope(hp, q_.data() + t0 * Q, Q, t1 - t0, hp.n_head, pos + b0 + t0);
                    cpu::rope(hp, k_.data() + t0 * KV, KV, t1 - t0, hp.n_head_kv, pos + b0 + t0);
                });
                laps.lap(ForwardProfile::ROPE);

                // Store into the cache, head-major: keys(l) + h * head_stride + slot * D.
                for (int32_t h = 0; h < H_kv; ++h) {
                    float *kc = cache.keys(l) + h * cache.head_stride() + (base + b0) * D;
                    float *vc = cache.values(l) + h * cache.head_stride() + (base + b0) * D;
                    for (int64_t t = 0; t < nb; ++t) {
                        std::memcpy(kc + t * D, k_.data() + t * KV + h * D, D * sizeof(float));
                        std::memcpy(vc + t * D, v_.data() + t * KV + h * D, D * sizeof(float));
                    }
                }
                laps.lap(ForwardProfile::KV_STORE);

                cpu::AttentionArgs a;
                a.q = q_.data();
                a.ldq = Q;
                a.k = cache.keys(l);
                a.v = cache.values(l);
                a.ld_kv = D;
                a.kv_head_stride = cache.head_stride();
                a.out = attn_.data();
                a.ldo = Q;
                a.n_q = nb;
                a.n_kv = n_kv;
                a.n_head = hp.n_head;
                a.n_head_kv = hp.n_head_kv;
                a.head_dim = hp.head_dim;
                a.q_pos = pos + b0;
                a.kv_pos = cpos;
                // Column sums over queries i >= obs_begin (batch index): the
                // kernel writes [H_kv][n_kv]; add into [H_kv][base + n].
                const bool want_cols = col_sums && hooks->obs_begin < b0 + nb;
                std::vector<float> cols;
                if (want_cols) {
                    cols.assign(static_cast<size_t>(H_kv * n_kv), 0.0f);
                    a.col_sums = cols.data();
                    a.obs_begin = std::max<int64_t>(0, hooks->obs_begin - b0);
                }
                cpu::attention(pool_, a);
                if (want_cols) {
                    std::vector<float> &dst = (*col_sums)[static_cast<size_t>(l)];
                    for (int32_t h = 0; h < H_kv; ++h)
                        add_into(dst.data() + h * (base + n), cols.data() + h * n_kv, n_kv);
                }
                laps.lap(ForwardProfile::ATTENTION);
                cpu::matmul(pool_, L.wo, attn_.data(), Q, nb, xn_.data());
                laps.lap(ForwardProfile::ATTN_OUT);
                add_into(x_.data(), xn_.data(), nb * E);
                laps.lap(ForwardProfile::RESIDUAL);

                // --- MLP
                norm_rows(pool_, x_.data(), L.ffn_norm, xn_.data(), nb, E, hp.rms_eps);
                laps.lap(ForwardProfile::NORM);
                const cpu::MatmulJob gate_up[2] = {{&L.ffn_gate, gate_.data()}, {&L.ffn_up, up_.data()}};
                cpu::matmul_multi(pool_, gate_up, 2, xn_.data(), E, nb);
                laps.lap(ForwardProfile::FFN_GATE_UP);
                pool_.parallel_for(nb, [&](int64_t t0, int64_t t1, int) {
                    cpu::swiglu(gate_.data() + t0 * F, up_.data() + t0 * F, tmp_.data() + t0 * F, (t1 - t0) * F);
                });
                laps.lap(ForwardProfile::SWIGLU);
                cpu::matmul(pool_, L.ffn_down, tmp_.data(), F, nb, attn_.data());
                laps.lap(ForwardProfile::FFN_DOWN);
                add_into(x_.data(), attn_.data(), nb * E);
                laps.lap(ForwardProfile::RESIDUAL);

                if (hooks && hooks->on_hidden) hooks->on_hidden(l, x_.data(), nb);
            }

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
                norm_rows(pool_, x_.data() + r0 * E, model_.output_norm(), xn_.data(), nr, E, hp.rms_eps);
                cpu::matmul(pool_, model_.output(), xn_.data(), E, nr, dst);
                laps.lap(ForwardProfile::OUTPUT);
            }
        }
    } catch (...) {
        cache.truncate(old_size);
        throw;
    }
}

} // namespace lctx
