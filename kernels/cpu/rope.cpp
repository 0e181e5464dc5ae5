// RoPE as ggml's rope op computes it (NORMAL and NEOX layouts, n_rot <=
// head_dim with the tail copied, per-pair frequency factors (theta / factor),
// linear scaling and YaRN: ggml's rope_yarn,
// rope_yarn_ramp and ggml_rope_yarn_corr_dims). One deliberate difference:
// theta = pos * base^(-2i/n_rot) is computed in double precision instead of
// ggml's running float product, so positions near 1M keep their accuracy;
// at small positions the two agree to ~1e-6. The YaRN ramp is evaluated in
// double as well.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "cpu_kernels.h"

namespace lctx::cpu {
namespace {

float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * std::log(n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
}

// Pair i's frequency; the ramp below keeps using i (ggml divides theta by the factor, not i).
double inv_freq(const RopeParams &p, int i) {
    const double f = std::pow(p.base, -2.0 * i / p.n_rot);
    return p.freq_factors ? f / p.freq_factors[i] : f;
}

// cos/sin of pair i (elements i0 = 2i) at position pos, ggml's rope_yarn.
void rope_cs(const RopeParams &p, int64_t pos, int i, double invf, float &c, float &s) {
    const double theta_extrap = static_cast<double>(pos) * invf;
    const double theta_interp = p.freq_scale * theta_extrap;
    double theta = theta_interp;
    float mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        // the ramp in double too: in float its rounding shifts theta by ~1e-4 rad at 30K positions
        const double y = (i - static_cast<double>(p.corr[0])) / std::max(0.001, static_cast<double>(p.corr[1] - p.corr[0]));
        const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
        theta = theta_interp * (1 - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    c = static_cast<float>(std::cos(theta)) * mscale;
    s = static_cast<float>(std::sin(theta)) * mscale;
}

void check(const float *x, int64_t n_tok, int32_t n_heads, const int32_t *pos) {
    if (n_tok > 0 && (!x || !pos || n_heads <= 0)) fail(LCTX_ERR_INVALID_ARG, "rope: null input or no heads");
}

// Rotates one head with the per-pair (cos, sin) table cs[2i], cs[2i + 1].
inline void rotate(const RopeParams &p, const float *cs, float *x) {
    const int half = p.n_rot / 2;
    if (p.neox) {
        for (int i = 0; i < half; ++i) {
            const float x0 = x[i], x1 = x[i + half];
            x[i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
            x[i + half] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
        }
    } else {
        for (int i = 0; i < half; ++i) {
            const float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = x0 * cs[2 * i] - x1 * cs[2 * i + 1];
            x[2 * i + 1] = x0 * cs[2 * i + 1] + x1 * cs[2 * i];
        }
    }
}

} // namespace

RopeParams rope_params(const Hparams &hp) {
    RopeParams p{};
    p.head_dim = hp.head_dim;
    p.n_rot = hp.n_rot > 0 ? hp.n_rot : hp.head_dim;
    if (p.head_dim <= 0 || p.n_rot > p.head_dim || p.n_rot % 2 != 0)
        fail(LCTX_ERR_INVALID_ARG, "rope: n_rot %d must be even and <= head_dim %d", p.n_rot, p.head_dim);
    p.neox = hp.rope_layout == RopeLayout::NEOX;
    p.base = hp.rope_base;
    p.freq_scale = hp.rope_scaling == RopeScaling::NONE ? 1.0f : hp.rope_freq_scale;
    p.ext_factor = hp.rope_scaling == RopeScaling::YARN ? hp.yarn_ext_factor : 0.0f;
    p.attn_factor = hp.yarn_attn_factor;
    p.freq_factors = hp.rope_freq_factors;
    p.corr[0] = 0.0f;
    p.corr[1] = 0.0f;
    if (p.ext_factor != 0.0f) {
        const int n_orig = hp.rope_orig_ctx > 0 ? hp.rope_orig_ctx : hp.n_ctx_train;
        const float base = static_cast<float>(p.base);
        const float start = std::floor(corr_dim(p.n_rot, n_orig, hp.yarn_beta_fast, base));
        const float end = std::ceil(corr_dim(p.n_rot, n_orig, hp.yarn_beta_slow, base));
        p.corr[0] = std::max(0.0f, start);
        p.corr[1] = std::min(static_cast<float>(p.n_rot - 1), end);
    }
    return p;
}


void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos) {
    rope_cached(rope_params(hp), nullptr, x, ld, n_tok, n_heads, pos);
}

void rope_cached(const RopeParams &p, const RopeTable *table, float *x, int64_t ld, int64_t n_tok, int32_t n_heads,
                 const int32_t *pos) {
    check(x, n_tok, n_heads, pos);
    thread_local std::vector<float> cs;
    thread_local std::vector<double> invf;
    cs.resize(p.n_rot);
    invf.resize(p.n_rot / 2);
    bool have_invf = false;   // the pow() calls only when a position misses the table (decode mostly hits it)
    const int64_t n_table = table ? table->n_pos() : 0;
    for (int64_t t = 0; t < n_tok; ++t) {
        // one sin/cos table per token, shared by all its heads
        const float *c = nullptr;
        if (pos[t] >= 0 && pos[t] < n_table) {
            c = table->at(pos[t]);
        } else {
            if (!have_invf)
                for (int i = 0; i < p.n_rot / 2; ++i) invf[i] = inv_freq(p, i);
            have_invf = true;
            for (int i = 0; i < p.n_rot / 2; ++i) rope_cs(p, pos[t], i, invf[i], cs[2 * i], cs[2 * i + 1]);
            c = cs.data();
        }
        for (int32_t h = 0; h < n_heads; ++h) rotate(p, c, x + t * ld + static_cast<int64_t>(h) * p.head_dim);
    }
}

RopeTable::RopeTable(const RopeParams &p, int64_t n_pos) : p_(p), n_rot_(p.n_rot), n_pos_(n_pos) {
    if (p.freq_factors && p.n_rot >= 2) freq_factors_.assign(p.freq_factors, p.freq_factors + static_cast<size_t>(p.n_rot / 2));
    p_.freq_factors = freq_factors_.empty() ? nullptr : freq_factors_.data();
    fill_from(0);
}

RopeTable::RopeTable(const RopeTable &prev, int64_t n_pos)
    : p_(prev.p_), freq_factors_(prev.freq_factors_), n_rot_(prev.n_rot_), n_pos_(std::max(n_pos, prev.n_pos_)) {
    p_.freq_factors = freq_factors_.empty() ? nullptr : freq_factors_.data();
    cs_.reserve(static_cast<size_t>(n_pos_) * static_cast<size_t>(n_rot_));
    cs_ = prev.cs_;
    fill_from(prev.n_pos_);
}

void RopeTable::fill_from(int64_t t0) {
    cs_.resize(static_cast<size_t>(n_pos_) * static_cast<size_t>(n_rot_));
    std::vector<double> invf(static_cast<size_t>(n_rot_ / 2));
    for (int i = 0; i < n_rot_ / 2; ++i) invf[i] = inv_freq(p_, i);
    for (int64_t t = t0; t < n_pos_; ++t) {
        float *c = cs_.data() + t * n_rot_;
        for (int i = 0; i < n_rot_ / 2; ++i) rope_cs(p_, t, i, invf[i], c[2 * i], c[2 * i + 1]);
    }
}

bool RopeTable::matches(const RopeParams &p) const {
    // head_dim and the layout only change which elements rotate, not the table.
    if (p.n_rot != p_.n_rot || p.base != p_.base || p.freq_scale != p_.freq_scale || p.ext_factor != p_.ext_factor ||
        p.attn_factor != p_.attn_factor || p.corr[0] != p_.corr[0] || p.corr[1] != p_.corr[1])
        return false;
    if (!p.freq_factors || freq_factors_.empty()) return !p.freq_factors && freq_factors_.empty();
    return std::equal(freq_factors_.begin(), freq_factors_.end(), p.freq_factors);
}

std::shared_ptr<const RopeTable> RopeTableCache::get(const RopeParams &p, int64_t n_pos) {
    const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(kMaxBytes / (sizeof(float) * std::max(2, p.n_rot))));
    const int64_t want = std::min(n_pos, cap);
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < tables_.size(); ++i) {
        if (!tables_[i]->matches(p)) continue;
        std::shared_ptr<const RopeTable> t = tables_[i];
        tables_.erase(tables_.begin() + static_cast<std::ptrdiff_t>(i));
        // Grow by a quarter (at least 1024 positions), keeping the old
        // entries: positions rising one at a time (decode) then compute each
        // position once, in steps short enough not to stall a token.
        if (t->n_pos() < want)
            t = std::make_shared<const RopeTable>(
                *t, std::min(cap, std::max(want, t->n_pos() + std::max<int64_t>(1024, t->n_pos() / 4))));
        tables_.push_back(t);
        return t;
    }
    if (want <= 0) return nullptr;
    if (static_cast<int>(tables_.size()) == kMaxTables) tables_.erase(tables_.begin());
    tables_.push_back(std::make_shared<const RopeTable>(p, want));
    return tables_.back();
}

void rope_ref(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos) {
    check(x, n_tok, n_heads, pos);
    const RopeParams p = rope_params(hp);
    const int half = p.n_rot / 2;
    for (int64_t t = 0; t < n_tok; ++t)
        for (int32_t h = 0; h < n_heads; ++h) {
            float *v = x + t * ld + static_cast<int64_t>(h) * p.head_dim;
            for (int i = 0; i < half; ++i) {
                float c, s;
                rope_cs(p, pos[t], i, inv_freq(p, i), c, s);
                const int a = p.neox ? i : 2 * i, b = p.neox ? i + half : 2 * i + 1;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
}

} // namespace lctx::cpu
