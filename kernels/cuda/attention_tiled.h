// Tiled attention for many query rows (prefill): the semantics of
// attention_body (attention.h) without key splits, at a fraction of its
// memory traffic. attention_body gives each (query, head) row a block and
// reads every key from global memory once per row; here a block of 128
// threads takes BQ = 16 * RQ queries of one head, and each tile of
// kTiledKeys keys is read once into shared memory for all of them:
//
//   scores   every thread holds an RQ x 4 tile of scores: rows ty * RQ + i,
//            keys tx + 8 c (tid = 8 ty + tx); per 4 head dims, RQ float4
//            loads of the queries and 4 of the keys feed 16 RQ FMAs;
//   softmax  the online update of (m, l) per row, the row's maximum and
//            sum combined over its 8 lanes through shared memory;
//   P.V      every thread holds RQ rows x 8 head dims per 64-dim chunk
//            (dims tx * 4 + {0..3} and 32 + tx * 4 + {0..3}), fed per key
//            by one load of the probabilities and two float4 loads of V.
//
// Head dims go through shared memory in chunks of 64 (keys, then values),
// so the shared memory stays under the 48 KiB a launch gets without opting
// in: (RQ, chunks) = (4, 1) for head_dim <= 64, (2, 2) for <= 128, (2, 4)
// for <= 256 (Gemma 3). A key tile that no query of the block may see
// (causal prefill: the tiles after the block's last query) is skipped.
// Long key ranges over few blocks are split (attention_tiled_splits) and
// merged by attn_combine_body, as attention_body's are. Rows whose final
// (m, l) the column pass needs are written to row_ml; attn_cols_body
// (attention.h) then adds the column scores.
// docs/backends/cuda.md has the measurements.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/attention.h"

// Loops over a thread's accumulators must unroll on the GPU, or the arrays
// go to local memory (ptxas --resource-usage shows a stack frame).
#ifdef __CUDACC__
#define LCTX_UNROLL _Pragma("unroll")
#else
#define LCTX_UNROLL
#endif

namespace lctx::cuda {

constexpr int kTiledThreads = 128;   // 16 row groups (ty) x 8 lanes (tx)
constexpr int kTiledKeys = 32;       // keys per tile
constexpr int kTiledChunk = 64;      // head dims per chunk of K or V in shared memory
// Row stride of a K/V chunk: 68 floats put rows tx + 8c of the 8 lanes of a
// quarter warp in 8 different 16-byte bank groups, so their float4 loads
// do not conflict; multiples of 4 keep the rows 16-byte aligned.
constexpr int kTiledChunkStride = kTiledChunk + 4;
// Fewer queries than this go to attention_body (decode, short batches).
constexpr int64_t kTiledMinQueries = 16;
// Key ranges of a split (attention_tiled_splits) hold at least this many keys.
constexpr int64_t kTiledMinKeysPerSplit = 1024;

struct alignas(16) Float4 {
    float x, y, z, w;
};

LCTX_HD inline Float4 load_float4(const float *p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const Float4 *>(p);   // one 16-byte shared-memory load
#else
    Float4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
#endif
}

// Shared memory of one block, in floats: queries Qs[BQ][QS], one K or V
// chunk [kTiledKeys][kTiledChunkStride], probabilities Pt[kTiledKeys][BQ + 4]
// (key-major: the P.V loop reads a key's RQ rows at once), the row maxima
// and sums of the 8 lanes red[2][BQ][RS], the tile's key positions.
template <int RQ, int NC>
struct TiledLayout {
    static constexpr int BQ = 16 * RQ;
    static constexpr int QS = NC * kTiledChunk + 4;
    static constexpr int PS = BQ + 4;
    // 9, not 8: the 4 row groups of a warp, reading their rows' 8 lanes,
    // land in different banks
    static constexpr int RS = 9;
    static constexpr int q_off = 0;
    static constexpr int kv_off = q_off + BQ * QS;
    static constexpr int p_off = kv_off + kTiledKeys * kTiledChunkStride;
    static constexpr int red_off = p_off + kTiledKeys * PS;
    static constexpr int pos_off = red_off + 2 * BQ * RS;
    static constexpr int floats = pos_off + kTiledKeys;
    static_assert(floats * sizeof(float) <= 48 * 1024, "a launch gets 48 KiB of shared memory without opting in");
};

// The variant for a head dim: 1 (RQ 4, one chunk), 2 (RQ 2, two), 3 (RQ 2,
// four), 0 (head_dim > 256: attention_body only).
inline int tiled_variant(int head_dim) {
    return head_dim <= 0 ? 0 : head_dim <= 64 ? 1 : head_dim <= 128 ? 2 : head_dim <= 256 ? 3 : 0;
}

// Whether a batch of n_q queries at this head dim suits the tiled kernel
// (the caller then sets AttnArgs::tiled).
inline bool attention_tiled_fits(int64_t n_q, int head_dim) {
    return n_q >= kTiledMinQueries && tiled_variant(head_dim) != 0;
}

// Key ranges per (query block, head) of the tiled kernel. Its blocks alone
// can leave most of the device idle (a 512-token batch of SmolLM2 makes 72
// blocks, an H100 has 132 SMs), so long key ranges are split until there
// are about two blocks per SM, every range at least kTiledMinKeysPerSplit
// keys; attn_combine_body merges the partials.
inline int32_t attention_tiled_splits(int64_t n_q, int32_t n_head, int head_dim, int64_t n_kv, int64_t n_sm) {
    if (tiled_variant(head_dim) == 0 || n_q <= 0 || n_head <= 0) return 1;
    const int64_t bq = tiled_variant(head_dim) == 1 ? 64 : 32, blocks = ceil_div(n_q, bq) * n_head, want = 2 * n_sm;
    if (blocks >= want) return 1;
    int64_t s = ceil_div(want, blocks);
    const int64_t by_keys = n_kv / kTiledMinKeysPerSplit;
    if (s > by_keys) s = by_keys;
    if (s > 64) s = 64;
    return static_cast<int32_t>(s < 1 ? 1 : s);
}

// Whether launch_attention takes the tiled path for these arguments.
inline bool attention_use_tiled(const AttnArgs &a) { return a.tiled && tiled_variant(a.head_dim) != 0; }

// Whether the launches of these arguments need AttnArgs::row_ml (and, with
// key splits, part): the combine step of a split, or the column pass after
// the tiled kernel.
inline bool attention_needs_row_ml(const AttnArgs &a) {
    return a.n_split > 1 || (a.col_sums && attention_use_tiled(a));
}

template <int RQ, int NC>
inline LaunchDims attention_tiled_dims(int64_t n_q, int32_t n_head, int32_t n_split = 1) {
    using L = TiledLayout<RQ, NC>;
    return {{static_cast<unsigned>(ceil_div(n_q, L::BQ)), static_cast<unsigned>(n_head), static_cast<unsigned>(n_split)},
            kTiledThreads, static_cast<size_t>(L::floats) * sizeof(float)};
}

template <int RQ, int NC>
struct TiledVariant {
    static constexpr int rq = RQ, nc = NC;
};

// Calls launch(TiledVariant<RQ, NC>{}) with the variant for a.head_dim; the
// GPU launcher (kernels.cu) and the emulated one share this choice.
template <class Launch>
void dispatch_attention_tiled(const AttnArgs &a, Launch &&launch) {
    switch (tiled_variant(a.head_dim)) {
    case 1: launch(TiledVariant<4, 1>{}); break;
    case 2: launch(TiledVariant<2, 2>{}); break;
    case 3: launch(TiledVariant<2, 4>{}); break;
    default: break;
    }
}

// Head dims [ch * 64, ch * 64 + 64) of the tile's keys j0.. (src: a.k or
// a.v of the KV head at kbase) into kv[j][d], row stride
// kTiledChunkStride, zeros from key k1 and past head_dim; all threads of
// the block.
LCTX_HD inline void load_chunk(const AttnArgs &a, const void *src, int64_t kbase, int64_t j0, int64_t k1, int ch, int tid,
                               float *kv) {
    for (int x = tid; x < kTiledKeys * kTiledChunk; x += kTiledThreads) {
        const int j = x / kTiledChunk, d = x % kTiledChunk, dim = ch * kTiledChunk + d;
        kv[j * kTiledChunkStride + d] =
            j0 + j < k1 && dim < a.head_dim ? kv_at(src, a.kv_f16, kbase + (j0 + j) * a.ld_kv + dim) : 0.0f;
    }
}

// grid (ceil(n_q / BQ), n_head, n_split); shared: TiledLayout<RQ, NC>::floats
// floats. With n_split > 1, block z takes the key range attn_range(z) and
// writes its rows' partials (m, l, unnormalised output) to part, as
// attention_body does, for attn_combine_body.
template <int RQ, int NC, class Ctx>
LCTX_HD void attention_tiled_body(Ctx &c, const AttnArgs &a) {
    using L = TiledLayout<RQ, NC>;
    constexpr int BQ = L::BQ, BK = kTiledKeys, CS = kTiledChunkStride, CH = kTiledChunk;
    const int tid = c.tid(), ty = tid / 8, tx = tid % 8;
    const int h = static_cast<int>(c.by());
    const int g = h / (a.n_head / a.n_head_kv), hd = a.head_dim;
    const int64_t i0 = c.bx() * BQ;
    float *sh = reinterpret_cast<float *>(c.shared());
    float *qs = sh + L::q_off, *kv = sh + L::kv_off, *pt = sh + L::p_off, *red = sh + L::red_off;
    int32_t *tile_pos = reinterpret_cast<int32_t *>(sh + L::pos_off);

    for (int x = tid; x < BQ * NC * CH; x += kTiledThreads) {
        const int r = x / (NC * CH), d = x % (NC * CH);
        const int64_t i = i0 + r;
        qs[r * L::QS + d] = i < a.n_q && d < hd ? a.q[i * a.ldq + static_cast<int64_t>(h) * hd + d] : 0.0f;
    }
    // The block's query positions (every thread, so that the skip test below
    // is uniform over the block) and this thread's rows.
    int32_t qmin = INT32_MAX, qmax = INT32_MIN;
    for (int r = 0; r < BQ && i0 + r < a.n_q; ++r) {
        const int32_t p = a.q_pos[i0 + r];
        qmin = p < qmin ? p : qmin;
        qmax = p > qmax ? p : qmax;
    }
    int32_t qp[RQ];
    bool live[RQ];
    float m[RQ], l[RQ], acc[RQ][NC][8];
    LCTX_UNROLL
    for (int i = 0; i < RQ; ++i) {
        const int64_t qi = i0 + ty * RQ + i;
        live[i] = qi < a.n_q;
        qp[i] = live[i] ? a.q_pos[qi] : INT32_MIN;
        m[i] = -INFINITY;
        l[i] = 0.0f;
        LCTX_UNROLL
        for (int ch = 0; ch < NC; ++ch)
            LCTX_UNROLL
            for (int e = 0; e < 8; ++e) acc[i][ch][e] = 0.0f;
    }
    const int32_t *kpos = a.kv_pos + g * a.kv_pos_head_stride;
    const int64_t kbase = g * a.kv_head_stride;
    int64_t k0 = 0, k1 = a.n_kv;
    if (a.n_split > 1) attn_range(a, c.bz(), BK, &k0, &k1);

    for (int64_t j0 = k0; j0 < k1; j0 += BK) {
        c.sync();   // the previous tile's readers of tile_pos, kv and pt are done
        if (tid < BK) tile_pos[tid] = j0 + tid < k1 ? kpos[j0 + tid] : INT32_MAX;
        c.sync();
        bool any = false;   // some query of the block may see some key of the tile
        for (int j = 0; j < BK; ++j) {
            const int32_t p = tile_pos[j];
            if (p <= qmax && (a.window <= 0 || int64_t(qmin) - p < a.window)) any = true;
        }
        if (!any) continue;   // uniform: every thread read the same positions

        float s[RQ][4];
        for (int i = 0; i < RQ; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
        LCTX_UNROLL
        for (int ch = 0; ch < NC; ++ch) {
            if (ch * CH >= hd) continue;   // uniform; continue, not break, so that the loop unrolls
            if (ch > 0) c.sync();   // the previous chunk's readers are done
            load_chunk(a, a.k, kbase, j0, k1, ch, tid, kv);
            c.sync();
            for (int d = 0; d < CH; d += 4) {
                Float4 k4[4];
                for (int u = 0; u < 4; ++u) k4[u] = load_float4(kv + (tx + 8 * u) * CS + d);
                for (int i = 0; i < RQ; ++i) {
                    const Float4 q4 = load_float4(qs + (ty * RQ + i) * L::QS + ch * CH + d);
                    for (int u = 0; u < 4; ++u)
                        s[i][u] += q4.x * k4[u].x + q4.y * k4[u].y + q4.z * k4[u].z + q4.w * k4[u].w;
                }
            }
        }

        // Mask and scale; each row's maximum over the tile from its 8 lanes.
        for (int i = 0; i < RQ; ++i) {
            float mx = -INFINITY;
            for (int u = 0; u < 4; ++u) {
                const int32_t p = tile_pos[tx + 8 * u];
                const bool seen = live[i] && p <= qp[i] && (a.window <= 0 || int64_t(qp[i]) - p < a.window);
                const float v = a.softcap > 0.0f ? a.softcap * tanhf(s[i][u] * a.scale / a.softcap) : s[i][u] * a.scale;
                s[i][u] = seen ? v : -INFINITY;
                mx = s[i][u] > mx ? s[i][u] : mx;
            }
            red[(ty * RQ + i) * L::RS + tx] = mx;
        }
        c.sync();
        float alpha[RQ];
        for (int i = 0; i < RQ; ++i) {
            const int row = ty * RQ + i;
            float m_new = m[i];
            for (int t = 0; t < 8; ++t) m_new = red[row * L::RS + t] > m_new ? red[row * L::RS + t] : m_new;
            float sum = 0.0f;
            for (int u = 0; u < 4; ++u) {
                const float p = s[i][u] == -INFINITY ? 0.0f : expf(s[i][u] - m_new);
                pt[(tx + 8 * u) * L::PS + row] = p;
                sum += p;
            }
            red[(BQ + row) * L::RS + tx] = sum;
            alpha[i] = m_new == -INFINITY ? 1.0f : m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);
            m[i] = m_new;
        }
        c.sync();
        LCTX_UNROLL
        for (int i = 0; i < RQ; ++i) {
            float sum = 0.0f;
            for (int t = 0; t < 8; ++t) sum += red[(BQ + ty * RQ + i) * L::RS + t];
            l[i] = l[i] * alpha[i] + sum;
            LCTX_UNROLL
            for (int ch = 0; ch < NC; ++ch)
                LCTX_UNROLL
                for (int e = 0; e < 8; ++e) acc[i][ch][e] *= alpha[i];
        }

        // P.V, chunk by chunk of head dims (the scores' readers of kv are
        // done: they all passed the two barriers above).
        LCTX_UNROLL
        for (int ch = 0; ch < NC; ++ch) {
            if (ch * CH >= hd) continue;
            if (ch > 0) c.sync();
            load_chunk(a, a.v, kbase, j0, k1, ch, tid, kv);
            c.sync();
            for (int j = 0; j < BK; ++j) {
                float p[RQ];
                if constexpr (RQ == 4) {
                    const Float4 p4 = load_float4(pt + j * L::PS + ty * RQ);
                    p[0] = p4.x;
                    p[1] = p4.y;
                    p[2] = p4.z;
                    p[3] = p4.w;
                } else {
                    for (int i = 0; i < RQ; ++i) p[i] = pt[j * L::PS + ty * RQ + i];
                }
                const Float4 v0 = load_float4(kv + j * CS + tx * 4), v1 = load_float4(kv + j * CS + 32 + tx * 4);
                LCTX_UNROLL
                for (int i = 0; i < RQ; ++i) {
                    acc[i][ch][0] += p[i] * v0.x;
                    acc[i][ch][1] += p[i] * v0.y;
                    acc[i][ch][2] += p[i] * v0.z;
                    acc[i][ch][3] += p[i] * v0.w;
                    acc[i][ch][4] += p[i] * v1.x;
                    acc[i][ch][5] += p[i] * v1.y;
                    acc[i][ch][6] += p[i] * v1.z;
                    acc[i][ch][7] += p[i] * v1.w;
                }
            }
        }
    }

    if (a.n_split > 1) {   // a partial for attn_combine_body
        LCTX_UNROLL
        for (int i = 0; i < RQ; ++i) {
            if (!live[i]) continue;
            float *part = a.part + ((i0 + ty * RQ + i) * a.n_head + h) * a.n_split * (hd + 2) + c.bz() * (hd + 2);
            if (tx == 0) {
                part[0] = m[i];
                part[1] = l[i];
            }
            LCTX_UNROLL
            for (int ch = 0; ch < NC; ++ch)
                LCTX_UNROLL
                for (int e = 0; e < 8; ++e) {
                    const int d = ch * CH + (e < 4 ? tx * 4 + e : 32 + tx * 4 + e - 4);
                    if (d < hd) part[2 + d] = acc[i][ch][e];
                }
        }
        return;
    }
    LCTX_UNROLL
    for (int i = 0; i < RQ; ++i) {
        if (!live[i]) continue;
        const int64_t qi = i0 + ty * RQ + i;
        const float inv_l = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *out = a.out + qi * a.ldo + static_cast<int64_t>(h) * hd;
        LCTX_UNROLL
        for (int ch = 0; ch < NC; ++ch)
            LCTX_UNROLL
            for (int e = 0; e < 8; ++e) {
                const int d = ch * CH + (e < 4 ? tx * 4 + e : 32 + tx * 4 + e - 4);
                if (d < hd) out[d] = acc[i][ch][e] * inv_l;
            }
        if (a.row_ml && tx == 0) {
            a.row_ml[(qi * a.n_head + h) * 2] = m[i];
            a.row_ml[(qi * a.n_head + h) * 2 + 1] = l[i];
        }
    }
}

} // namespace lctx::cuda
