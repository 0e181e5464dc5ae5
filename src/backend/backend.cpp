#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/ggml_type.h"
#include "common/kv_q8_row.h"

namespace lctx {

const char *kv_type_name(KvType t) {
    switch (t) {
    case KvType::F16: return "f16";
    case KvType::Q8: return "q8";
    default: return "f32";
    }
}

size_t kv_type_size(KvType t) {
    switch (t) {
    case KvType::F16: return 2;
    case KvType::Q8: return 1;
    default: return 4;
    }
}

int64_t kv_row_elems(KvType t, int64_t d) { return t == KvType::Q8 ? q8_row_bytes(d) : d; }

namespace {

// The magnitude factor RoPE applies with hp (ggml's mscale).
float rope_magnitude(const Hparams &hp) {
    float mscale = hp.yarn_attn_factor;
    if (hp.rope_scaling == RopeScaling::YARN && hp.yarn_ext_factor != 0.0f)
        mscale *= 1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale);
    return mscale;
}

// fp16 -> fp32 through a table: the scalar conversion would dominate.
const float *half_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; ++h) t[h] = fp16_to_fp32(static_cast<uint16_t>(h));
        return t;
    }();
    return table.data();
}

void max_dot_range(const MaxDotArgs &a, int64_t t0, int64_t t1) {
    const float *tab = half_table();
    std::vector<float> row(static_cast<size_t>(a.dim));
    for (int64_t t = t0; t < t1; ++t) {
        const uint16_t *e = a.keys + t * a.ld;
        for (int32_t i = 0; i < a.dim; ++i) row[i] = tab[e[i]];
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t u = 0; u < a.n_q; ++u) {
            const float *q = a.q + u * a.ldq;
            float acc = 0.0f;
            for (int32_t i = 0; i < a.dim; ++i) acc += row[i] * q[i];
            best = std::max(best, acc);
        }
        a.out[t] = best;
    }
}

} // namespace

void max_dot_f16_portable(const MaxDotArgs &a, Backend *parallel) {
    if (a.n <= 0) return;
    if (!parallel || a.n < 4096) {
        max_dot_range(a, 0, a.n);
        return;
    }
    parallel->parallel_for(a.n, [&](int64_t b, int64_t e, int) { max_dot_range(a, b, e); });
}

void token_surprisal_portable(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens, float *out,
                              Backend *parallel) {
    auto rows = [&](int64_t b, int64_t e, int) {
        for (int64_t r = b; r < e; ++r) {
            const float *x = logits + r * n_vocab;
            float mx = x[0];
            for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, x[i]);
            double sum = 0.0;
            for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(double(x[i]) - mx);
            out[r] = static_cast<float>(std::log(sum) - (double(x[tokens[r]]) - mx));
        }
    };
    if (n_rows <= 0 || n_vocab <= 0) return;
    if (parallel && n_rows > 1) parallel->parallel_for(n_rows, rows);
    else rows(0, n_rows, 0);
}

Hparams rope_delta_hparams(const Hparams &hp) {
    // Rotations compose additively in the position (linear and YaRN angles
    // are linear in it), but the magnitude factor mscale must be applied
    // once only: cancel it for the delta rotation.
    Hparams rot = hp;
    rot.yarn_attn_factor = hp.yarn_attn_factor / rope_magnitude(hp);
    return rot;
}

Hparams rope_inverse_hparams(const Hparams &hp) {
    // A delta rotation (magnitude 1) that also divides by the magnitude the
    // original rotation applied.
    Hparams inv = rope_delta_hparams(hp);
    inv.yarn_attn_factor /= rope_magnitude(hp);
    return inv;
}

} // namespace lctx
