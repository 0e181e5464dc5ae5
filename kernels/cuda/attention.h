// Flash-attention style kernel body (launch.h) with the semantics of
// lctx::AttentionArgs (src/backend/backend.h) and cpu::attention_ref: one
// block per (query, head); the keys stream through in blocks of nthreads()
// with an online softmax (running max m, running sum l, the output rescaled
// when m grows), never the whole score row in memory. Query i sees slot j of
// KV head g iff kv_pos[g * kv_pos_head_stride + j] <= q_pos[i]; head h reads
// KV head h / (n_head / n_head_kv) (GQA). A row that sees no slot outputs 0.
//
// Column scores (col_sums, queries i >= obs_begin): the final softmax
// probability of every slot needs the row's final m and l, so a second pass
// over the keys recomputes the scores and adds (or, col_max, maxes) p / l
// into col_sums[g][j] with atomics; the query heads of a group and the
// queries all land on the same [n_head_kv][n_kv] array.
//
// Key split (flash-decoding): with few (query, head) rows, a decode step
// over a long cache would occupy only a few SMs, so the keys are split into
// n_split ranges, one block each (grid.z). Each writes its partial
// (m, l, unnormalised output) to `part`; attn_combine_body merges the
// partials of a row into the output and the row's final (m, l) (row_ml);
// attn_cols_body then adds the column scores, one block per (row, range).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace lctx::cuda {

constexpr int kAttnThreads = 128;   // threads per (query, head) = keys per block
constexpr int kAttnMaxDimPerThread = 4;   // head_dim <= kAttnThreads * 4

struct AttnArgs {
    const float *q;
    int64_t ldq;
    const void *k, *v;
    bool kv_f16;
    int64_t ld_kv, kv_head_stride;
    float *out;
    int64_t ldo;
    int64_t n_q, n_kv;
    int32_t n_head, n_head_kv, head_dim;
    const int32_t *q_pos, *kv_pos;
    int64_t kv_pos_head_stride;
    float scale;
    float *col_sums;   // may be null
    int64_t obs_begin;
    bool col_max;
    int32_t window = 0;      // > 0: slots at q_pos - kv_pos >= window are masked (sliding-window layers)
    float softcap = 0.0f;    // > 0: scores s become softcap * tanh(s / softcap) (gemma2)
    int32_t n_split = 1;     // key ranges per (query, head); > 1: part and row_ml are set
    float *part = nullptr;   // [n_q][n_head][n_split][head_dim + 2]: m, l, output sums
    float *row_ml = nullptr; // [n_q][n_head][2]: the row's final m and l
    bool tiled = false;      // attention_tiled_body (attention_tiled.h: attention_tiled_fits) instead of attention_body
};

// Key ranges for n_rows (query, head) rows over n_kv keys: enough blocks to
// give every one of `target_blocks` a share, ranges of at least 512 keys.
inline int32_t attention_splits(int64_t n_rows, int64_t n_kv, int64_t target_blocks) {
    if (n_rows <= 0 || n_rows >= target_blocks) return 1;
    int64_t s = (target_blocks + n_rows - 1) / n_rows;
    const int64_t by_keys = n_kv / 512;
    if (s > by_keys) s = by_keys;
    if (s > 1024) s = 1024;
    return static_cast<int32_t>(s < 1 ? 1 : s);
}

// Keys [*j0, *j1) of range z.
LCTX_HD inline void attn_range(const AttnArgs &a, int64_t z, int nt, int64_t *j0, int64_t *j1) {
    const int64_t chunk = ceil_div(ceil_div(a.n_kv, a.n_split), nt) * nt;
    *j0 = z * chunk < a.n_kv ? z * chunk : a.n_kv;
    *j1 = *j0 + chunk < a.n_kv ? *j0 + chunk : a.n_kv;
}

// Shared memory of one block: q (head_dim floats), p (nthreads floats), reduction (nthreads floats).
inline size_t attn_shared_bytes(int head_dim, int threads) {
    return static_cast<size_t>(head_dim + 2 * threads) * sizeof(float);
}

inline LaunchDims attention_dims(int64_t n_q, int32_t n_head, int32_t head_dim, int32_t n_split = 1) {
    return {{static_cast<unsigned>(n_q), static_cast<unsigned>(n_head), static_cast<unsigned>(n_split)}, kAttnThreads,
            attn_shared_bytes(head_dim, kAttnThreads)};
}
inline LaunchDims attn_combine_dims(int64_t n_q, int32_t n_head) {
    return {{static_cast<unsigned>(n_q), static_cast<unsigned>(n_head), 1}, kAttnThreads, 0};
}
inline LaunchDims attn_cols_dims(int64_t n_q, int32_t n_head, int32_t head_dim, int32_t n_split) {
    return {{static_cast<unsigned>(n_q), static_cast<unsigned>(n_head), static_cast<unsigned>(n_split)}, kAttnThreads,
            static_cast<size_t>(head_dim) * sizeof(float)};
}

LCTX_HD inline float kv_at(const void *base, bool f16, int64_t at) {
    return f16 ? half_to_float(static_cast<const uint16_t *>(base)[at]) : static_cast<const float *>(base)[at];
}

// Scaled (and, with softcap > 0, soft-capped) score of slot j against the
// query in qs (-inf when masked).
LCTX_HD inline float attn_score(const AttnArgs &a, const float *qs, const int32_t *kpos, int64_t kbase, int32_t qp,
                                int64_t j) {
    if (kpos[j] > qp || (a.window > 0 && int64_t(qp) - kpos[j] >= a.window)) return -INFINITY;
    const int64_t at = kbase + j * a.ld_kv;
    float s = 0.0f;
    for (int d = 0; d < a.head_dim; ++d) s += qs[d] * kv_at(a.k, a.kv_f16, at + d);
    return a.softcap > 0.0f ? a.softcap * tanhf(s * a.scale / a.softcap) : s * a.scale;
}

// Adds (or maxes) slot j's probability exp(s - m) / l into the column scores.
template <class Ctx>
LCTX_HD void attn_col(Ctx &c, const AttnArgs &a, int g, int64_t j, float s, float m, float inv_l) {
    if (s == -INFINITY) return;
    float *p = a.col_sums + g * a.n_kv + j;
    const float v = expf(s - m) * inv_l;
    if (a.col_max) c.atomic_max_nonneg(p, v);
    else c.atomic_add(p, v);
}

// grid (n_q, n_head, n_split); shared: attn_shared_bytes.
template <class Ctx>
LCTX_HD void attention_body(Ctx &c, const AttnArgs &a) {
    const int64_t i = c.bx(), z = c.bz();
    const int h = static_cast<int>(c.by());
    const int g = h / (a.n_head / a.n_head_kv), hd = a.head_dim, nt = c.nthreads(), tid = c.tid();
    float *qs = reinterpret_cast<float *>(c.shared());
    float *ps = qs + hd;
    float *red = ps + nt;
    for (int d = tid; d < hd; d += nt) qs[d] = a.q[i * a.ldq + static_cast<int64_t>(h) * hd + d];
    c.sync();
    const int32_t qp = a.q_pos[i];
    const int32_t *kpos = a.kv_pos + g * a.kv_pos_head_stride;
    const int64_t kbase = g * a.kv_head_stride;
    int64_t k0, k1;
    attn_range(a, z, nt, &k0, &k1);

    float m = -INFINITY, l = 0.0f;
    float acc[kAttnMaxDimPerThread];
    for (int u = 0; u < kAttnMaxDimPerThread; ++u) acc[u] = 0.0f;
    for (int64_t j0 = k0; j0 < k1; j0 += nt) {
        const float s = j0 + tid < k1 ? attn_score(a, qs, kpos, kbase, qp, j0 + tid) : -INFINITY;
        const float bm = block_max(c, red, s);
        const float m_new = bm > m ? bm : m;
        if (m_new == -INFINITY) continue;   // nothing visible yet (uniform over the block)
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
        ps[tid] = p;
        l = l * alpha + block_sum(c, red, p);   // block_sum syncs: ps is complete
        const int64_t nb = k1 - j0 < nt ? k1 - j0 : nt;
        for (int u = 0; u < kAttnMaxDimPerThread; ++u) {
            const int d = tid + u * nt;
            if (d >= hd) break;
            float o = acc[u] * alpha;
            for (int64_t jj = 0; jj < nb; ++jj)
                if (ps[jj] != 0.0f) o += ps[jj] * kv_at(a.v, a.kv_f16, kbase + (j0 + jj) * a.ld_kv + d);
            acc[u] = o;
        }
        m = m_new;
        // no sync needed here: the next block writes ps only after block_max's barriers
    }
    if (a.n_split > 1) {   // a partial for attn_combine_body
        float *part = a.part + ((i * a.n_head + h) * a.n_split + z) * (hd + 2);
        if (tid == 0) {
            part[0] = m;
            part[1] = l;
        }
        for (int u = 0; u < kAttnMaxDimPerThread; ++u) {
            const int d = tid + u * nt;
            if (d >= hd) break;
            part[2 + d] = acc[u];
        }
        return;
    }
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int u = 0; u < kAttnMaxDimPerThread; ++u) {
        const int d = tid + u * nt;
        if (d >= hd) break;
        a.out[i * a.ldo + static_cast<int64_t>(h) * hd + d] = acc[u] * inv_l;
    }

    if (!a.col_sums || i < a.obs_begin || l <= 0.0f) return;   // uniform over the block: no sync follows
    for (int64_t j = tid; j < a.n_kv; j += nt) attn_col(c, a, g, j, attn_score(a, qs, kpos, kbase, qp, j), m, inv_l);
}

// grid (n_q, n_head): merges a row's n_split partials; threads over head_dim.
template <class Ctx>
LCTX_HD void attn_combine_body(Ctx &c, const AttnArgs &a) {
    const int64_t i = c.bx();
    const int h = static_cast<int>(c.by()), hd = a.head_dim;
    const float *part = a.part + (i * a.n_head + h) * a.n_split * (hd + 2);
    float m = -INFINITY;
    for (int z = 0; z < a.n_split; ++z) {
        const float mz = part[z * (hd + 2)];
        if (mz > m) m = mz;
    }
    float l = 0.0f;
    if (m != -INFINITY)
        for (int z = 0; z < a.n_split; ++z) {
            const float mz = part[z * (hd + 2)];
            if (mz != -INFINITY) l += part[z * (hd + 2) + 1] * expf(mz - m);
        }
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int d = c.tid(); d < hd; d += c.nthreads()) {
        float o = 0.0f;
        if (l > 0.0f)
            for (int z = 0; z < a.n_split; ++z) {
                const float mz = part[z * (hd + 2)];
                if (mz != -INFINITY) o += part[z * (hd + 2) + 2 + d] * expf(mz - m);
            }
        a.out[i * a.ldo + static_cast<int64_t>(h) * hd + d] = o * inv_l;
    }
    if (c.tid() == 0 && a.row_ml) {
        a.row_ml[(i * a.n_head + h) * 2] = m;
        a.row_ml[(i * a.n_head + h) * 2 + 1] = l;
    }
}

// grid (n_q, n_head, n_split): the column scores of range z of a row, with
// the row's final (m, l) from attn_combine_body. shared: head_dim floats.
template <class Ctx>
LCTX_HD void attn_cols_body(Ctx &c, const AttnArgs &a) {
    const int64_t i = c.bx(), z = c.bz();
    const int h = static_cast<int>(c.by());
    const int g = h / (a.n_head / a.n_head_kv), hd = a.head_dim;
    float *qs = reinterpret_cast<float *>(c.shared());
    for (int d = c.tid(); d < hd; d += c.nthreads()) qs[d] = a.q[i * a.ldq + static_cast<int64_t>(h) * hd + d];
    c.sync();
    const float m = a.row_ml[(i * a.n_head + h) * 2], l = a.row_ml[(i * a.n_head + h) * 2 + 1];
    if (i < a.obs_begin || !(l > 0.0f)) return;
    int64_t k0, k1;
    attn_range(a, z, c.nthreads(), &k0, &k1);
    const int32_t *kpos = a.kv_pos + g * a.kv_pos_head_stride;
    for (int64_t j = k0 + c.tid(); j < k1; j += c.nthreads())
        attn_col(c, a, g, j, attn_score(a, qs, kpos, g * a.kv_head_stride, a.q_pos[i], j), m, 1.0f / l);
}

} // namespace lctx::cuda
