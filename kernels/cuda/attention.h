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
};

// Shared memory of one block: q (head_dim floats), p (nthreads floats), reduction (nthreads floats).
inline size_t attn_shared_bytes(int head_dim, int threads) {
    return static_cast<size_t>(head_dim + 2 * threads) * sizeof(float);
}

inline LaunchDims attention_dims(int64_t n_q, int32_t n_head, int32_t head_dim) {
    return {{static_cast<unsigned>(n_q), static_cast<unsigned>(n_head), 1}, kAttnThreads,
            attn_shared_bytes(head_dim, kAttnThreads)};
}

LCTX_HD inline float kv_at(const void *base, bool f16, int64_t at) {
    return f16 ? half_to_float(static_cast<const uint16_t *>(base)[at]) : static_cast<const float *>(base)[at];
}

template <class Ctx>
LCTX_HD void attention_body(Ctx &c, const AttnArgs &a) {
    const int64_t i = c.bx();
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

    // score of slot j for this thread's row (-inf when masked or out of range)
    auto score = [&](int64_t j) -> float {
        if (j >= a.n_kv || kpos[j] > qp) return -INFINITY;
        const int64_t at = kbase + j * a.ld_kv;
        float s = 0.0f;
        for (int d = 0; d < hd; ++d) s += qs[d] * kv_at(a.k, a.kv_f16, at + d);
        return s * a.scale;
    };

    float m = -INFINITY, l = 0.0f;
    float acc[kAttnMaxDimPerThread];
    for (int u = 0; u < kAttnMaxDimPerThread; ++u) acc[u] = 0.0f;
    for (int64_t j0 = 0; j0 < a.n_kv; j0 += nt) {
        const float s = score(j0 + tid);
        const float bm = block_max(c, red, s);
        const float m_new = bm > m ? bm : m;
        if (m_new == -INFINITY) continue;   // nothing visible yet (uniform over the block)
        const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
        ps[tid] = p;
        l = l * alpha + block_sum(c, red, p);   // block_sum syncs: ps is complete
        const int64_t nb = a.n_kv - j0 < nt ? a.n_kv - j0 : nt;
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
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    for (int u = 0; u < kAttnMaxDimPerThread; ++u) {
        const int d = tid + u * nt;
        if (d >= hd) break;
        a.out[i * a.ldo + static_cast<int64_t>(h) * hd + d] = acc[u] * inv_l;
    }

    if (!a.col_sums || i < a.obs_begin || l <= 0.0f) return;   // uniform over the block: no sync follows
    float *cols = a.col_sums + g * a.n_kv;
    for (int64_t j = tid; j < a.n_kv; j += nt) {
        const float s = score(j);
        if (s == -INFINITY) continue;
        const float p = expf(s - m) * inv_l;
        if (a.col_max) c.atomic_max_nonneg(cols + j, p);
        else c.atomic_add(cols + j, p);
    }
}

} // namespace lctx::cuda
