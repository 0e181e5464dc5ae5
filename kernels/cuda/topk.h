// Kernel bodies of the top-k selection (launch.h), semantics of
// Backend::topk_dot / cpu::topk_dot_ref (kernels/cpu/cpu_kernels.h):
//   dot_scores_body   scores[r][j] = q_r . key_j (f32 or f16 keys)
//   row_topk_body     per row, the k best (score descending, equal scores by
//                     ascending index; NaN and -inf never selected) of one
//                     score row, or with tile_max of the winners of its
//                     aligned tiles of kTopkTile indices (a tile's first best)
// and merge_topk (host) that merges a candidate list into the caller's list
// as the CPU does. The selection runs k rounds of a block-wide arg-max, each
// over the entries strictly worse than the previous round's pick, so it needs
// no per-entry marks and no sort.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace lctx::cuda {

constexpr int kScoreThreads = 128;   // keys per block of dot_scores
constexpr int kTopkThreads = 128;
constexpr int64_t kTopkTileSize = 128;   // = cpu::kTopkTile

struct DotScoresArgs {
    const float *q;
    int64_t ldq;
    const void *keys;
    bool keys_f16;
    int64_t ld_keys, n;
    int32_t dim;
    float *scores;   // [rows][n]
};

inline LaunchDims dot_scores_dims(int64_t n, int64_t rows, int32_t dim) {
    return {{static_cast<unsigned>(ceil_div(n, kScoreThreads)), static_cast<unsigned>(rows), 1}, kScoreThreads,
            static_cast<size_t>(dim) * sizeof(float)};
}

// grid (ceil(n / nthreads), rows); shared: dim floats.
template <class Ctx>
LCTX_HD void dot_scores_body(Ctx &c, const DotScoresArgs &a) {
    const int64_t r = c.by(), j = c.bx() * c.nthreads() + c.tid();
    float *qs = reinterpret_cast<float *>(c.shared());
    for (int d = c.tid(); d < a.dim; d += c.nthreads()) qs[d] = a.q[r * a.ldq + d];
    c.sync();
    if (j >= a.n) return;
    float dot = 0.0f;
    if (a.keys_f16) {
        const uint16_t *k = static_cast<const uint16_t *>(a.keys) + j * a.ld_keys;
        for (int d = 0; d < a.dim; ++d) dot += qs[d] * half_to_float(k[d]);
    } else {
        const float *k = static_cast<const float *>(a.keys) + j * a.ld_keys;
        for (int d = 0; d < a.dim; ++d) dot += qs[d] * k[d];
    }
    a.scores[r * a.n + j] = dot;
}

// (as, ai) before (bs, bi): a holds an entry and b does not, or a scores
// higher, or equal with a lower index.
LCTX_HD inline bool topk_better(float as, int64_t ai, float bs, int64_t bi) {
    if (ai < 0) return false;
    if (bi < 0) return true;
    return as > bs || (as == bs && ai < bi);
}

struct RowTopkArgs {
    const float *scores;   // [rows][n]
    int64_t n, index_base;
    bool tile_max;
    int32_t k;
    float *best_score;     // [rows][k]: descending; unfilled: -inf, index -1
    int64_t *best_index;
};

inline size_t row_topk_shared_bytes(int threads) { return static_cast<size_t>(threads) * (sizeof(float) + sizeof(int64_t)); }

inline LaunchDims row_topk_dims(int64_t rows) {
    return {{static_cast<unsigned>(rows), 1, 1}, kTopkThreads, row_topk_shared_bytes(kTopkThreads)};
}

// grid.x = rows; nthreads a power of two.
template <class Ctx>
LCTX_HD void row_topk_body(Ctx &c, const RowTopkArgs &a) {
    const int64_t r = c.bx();
    const float *s = a.scores + r * a.n;
    int64_t *ri = reinterpret_cast<int64_t *>(c.shared());
    float *rs = reinterpret_cast<float *>(ri + c.nthreads());
    const int64_t T = kTopkTileSize;
    const int64_t t_first = a.index_base / T, n_tiles = a.n > 0 ? (a.index_base + a.n - 1) / T - t_first + 1 : 0;
    float last_s = 0.0f;
    int64_t last_i = -1;   // previous pick; -1: none yet
    for (int32_t round = 0; round < a.k; ++round) {
        float bs = -INFINITY;
        int64_t bi = -1;
        auto offer = [&](float v, int64_t idx) {
            if (!(v > -INFINITY)) return;   // -inf and NaN are never selected
            if (last_i >= 0 && !(v < last_s || (v == last_s && idx > last_i))) return;   // picked already
            if (topk_better(v, idx, bs, bi)) {
                bs = v;
                bi = idx;
            }
        };
        if (!a.tile_max) {
            for (int64_t j = c.tid(); j < a.n; j += c.nthreads()) offer(s[j], a.index_base + j);
        } else {
            for (int64_t t = c.tid(); t < n_tiles; t += c.nthreads()) {
                const int64_t tile = t_first + t;
                int64_t j0 = tile * T - a.index_base, j1 = (tile + 1) * T - a.index_base;
                if (j0 < 0) j0 = 0;
                if (j1 > a.n) j1 = a.n;
                float ws = -INFINITY;
                int64_t wi = -1;
                for (int64_t j = j0; j < j1; ++j)
                    if (s[j] > ws) {   // the tile's first best
                        ws = s[j];
                        wi = a.index_base + j;
                    }
                if (wi >= 0) offer(ws, wi);
            }
        }
        rs[c.tid()] = bs;
        ri[c.tid()] = bi;
        c.sync();
        for (int w = c.nthreads() / 2; w > 0; w >>= 1) {
            if (c.tid() < w && topk_better(rs[c.tid() + w], ri[c.tid() + w], rs[c.tid()], ri[c.tid()])) {
                rs[c.tid()] = rs[c.tid() + w];
                ri[c.tid()] = ri[c.tid() + w];
            }
            c.sync();
        }
        last_s = rs[0];
        last_i = ri[0];
        c.sync();
        if (c.tid() == 0) {
            a.best_score[r * a.k + round] = last_i >= 0 ? last_s : -INFINITY;
            a.best_index[r * a.k + round] = last_i;
        }
        if (last_i < 0) {   // nothing left (uniform): the rest stays empty
            for (int32_t o = round + 1 + c.tid(); o < a.k; o += c.nthreads()) {
                a.best_score[r * a.k + o] = -INFINITY;
                a.best_index[r * a.k + o] = -1;
            }
            break;
        }
    }
}

// Host: merges the k-entry list (s, i) into (ds, di) (k <= 64), as the CPU
// kernels merge their partial lists.
inline void merge_topk(float *ds, int64_t *di, const float *s, const int64_t *i, int k) {
    float ms[64];
    int64_t mi[64];
    int a = 0, b = 0;
    for (int o = 0; o < k; ++o) {
        if (topk_better(s[b], i[b], ds[a], di[a])) {
            ms[o] = s[b];
            mi[o] = i[b++];
        } else {
            ms[o] = ds[a];
            mi[o] = di[a++];
        }
    }
    for (int o = 0; o < k; ++o) {
        ds[o] = ms[o];
        di[o] = mi[o];
    }
}

} // namespace lctx::cuda
