// Top-k dot products driver (cpu_kernels.h, TopkDotArgs): splits the keys
// into ranges and the rows into groups, gives each (range, row group) item its
// own lists, then merges the ranges' lists into the caller's per row in range
// order. Each score is computed by the same register code whatever the split,
// and the merge orders by (score, index), so the result does not depend on
// the thread count. topk_dot_ref is the one-key-at-a-time reference.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {
namespace {

void check(const TopkDotArgs &a) {
    if (a.n_rows < 0 || a.n_segments < 0 || a.dim <= 0)
        fail(LCTX_ERR_INVALID_ARG, "topk_dot: bad sizes (rows %lld, segments %lld, dim %d)", (long long)a.n_rows,
             (long long)a.n_segments, a.dim);
    if (a.k < 1 || a.k > kMaxTopk) fail(LCTX_ERR_INVALID_ARG, "topk_dot: k = %d is outside [1, %d]", a.k, kMaxTopk);
    if (a.n_rows > 0 && (!a.q || !a.best_score || !a.best_index || a.ldq < a.dim))
        fail(LCTX_ERR_INVALID_ARG, "topk_dot: null queries or lists");
    if (a.n_segments > 0 && (!a.segments || a.ld_keys < a.dim))
        fail(LCTX_ERR_INVALID_ARG, "topk_dot: null segments or key stride below dim");
    for (int64_t s = 0; s < a.n_segments; ++s)
        if (a.segments[s].n < 0 || a.segments[s].index_base < 0 || (a.segments[s].n > 0 && !a.segments[s].keys))
            fail(LCTX_ERR_INVALID_ARG, "topk_dot: bad segment %lld", (long long)s);
}

// One tile of work: keys [j0, j1) of a segment.
struct Tile {
    int64_t seg, j0, j1;
};

// The segments cut at aligned index boundaries, every T indices.
std::vector<Tile> tiles_of(const TopkDotArgs &a, int64_t T) {
    std::vector<Tile> tiles;
    for (int64_t s = 0; s < a.n_segments; ++s) {
        const int64_t base = a.segments[s].index_base, n = a.segments[s].n;
        for (int64_t j = 0; j < n;) {
            const int64_t end = std::min(n, ((base + j) / T + 1) * T - base);
            tiles.push_back({s, j, end});
            j = end;
        }
    }
    return tiles;
}

// a before b: a holds an entry and b is empty, or a scores higher, or equal with a lower index.
inline bool better(float as, int64_t ai, float bs, int64_t bi) {
    if (ai < 0) return false;
    if (bi < 0) return true;
    return as > bs || (as == bs && ai < bi);
}

// Merges list (s, i) of k entries into (ds, di).
void merge_into(float *ds, int64_t *di, const float *s, const int64_t *i, int k) {
    float ms[kMaxTopk];
    int64_t mi[kMaxTopk];
    // check() keeps k in [1, kMaxTopk]; saying so here also tells GCC that the
    // copies below stay inside ms and mi (it warned of an overflow otherwise).
    if (k < 1 || k > kMaxTopk) __builtin_unreachable();
    int a = 0, b = 0;
    for (int o = 0; o < k; ++o) {
        if (better(s[b], i[b], ds[a], di[a])) {
            ms[o] = s[b];
            mi[o] = i[b++];
        } else {
            ms[o] = ds[a];
            mi[o] = di[a++];
        }
    }
    std::copy(ms, ms + k, ds);
    std::copy(mi, mi + k, di);
}

void clear_lists(float *s, int64_t *i, int64_t n) {
    std::fill(s, s + n, -INFINITY);
    std::fill(i, i + n, int64_t{-1});
}

} // namespace

void topk_dot(ThreadPool &pool, const TopkDotArgs &a) {
    check(a);
    // Exact top-k scores keys in tiles of 64: a transposed tile of 64 keys at
    // head dim 64 is 16 KiB, which stays in L1 beside the rows' queries while
    // every row is scored against it (one of 128 keys fills a 32 KiB L1).
    // tile_max keeps the aligned tiles of kTopkTile its semantics are about.
    const int64_t T = a.tile_max ? kTopkTile : kTopkTile / 2;
    const std::vector<Tile> tiles = tiles_of(a, T);
    if (a.n_rows == 0 || tiles.empty()) return;
    const KernelTable &kt = active_kernels();
    const int64_t k = a.k, R = a.n_rows, n_tiles = static_cast<int64_t>(tiles.size());
    const int64_t threads = pool.size();
    // Key ranges for long inputs (decode: few rows, many keys), row groups
    // for short ones (a prefill chunk against a short middle).
    const int64_t n_ranges = std::clamp<int64_t>(n_tiles * T / 1024, 1, 4 * threads);
    const int64_t n_groups = std::clamp<int64_t>((4 * threads + n_ranges - 1) / n_ranges, 1, (R + 47) / 48);
    const int64_t rows_per_group = (R + n_groups - 1) / n_groups;
    std::vector<float> ls(static_cast<size_t>(n_ranges * R * k));
    std::vector<int64_t> li(ls.size());
    clear_lists(ls.data(), li.data(), static_cast<int64_t>(ls.size()));
    const size_t esize = a.keys_f16 ? 2 : 4;

    std::atomic<int64_t> next{0};
    const int64_t n_items = n_ranges * n_groups;
    pool.parallel_for(std::min<int64_t>(threads, n_items), [&](int64_t, int64_t, int) {
        std::vector<float> ktile(static_cast<size_t>(T * a.dim)), tmp(static_cast<size_t>(T * a.dim));
        for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
            const int64_t range = item / n_groups, group = item % n_groups;
            const int64_t r0 = group * rows_per_group, r1 = std::min(R, r0 + rows_per_group);
            if (r0 >= r1) continue;
            float *bs = ls.data() + (range * R + r0) * k;
            int64_t *bi = li.data() + (range * R + r0) * k;
            for (int64_t ti = n_tiles * range / n_ranges; ti < n_tiles * (range + 1) / n_ranges; ++ti) {
                const Tile &t = tiles[static_cast<size_t>(ti)];
                const TopkDotArgs::Segment &sg = a.segments[t.seg];
                const void *src = static_cast<const uint8_t *>(sg.keys) + static_cast<size_t>(t.j0 * a.ld_keys) * esize;
                kt.keys_transposed(src, a.keys_f16, a.ld_keys, t.j1 - t.j0, a.dim, ktile.data(), T, tmp.data());
                for (int64_t r = r0; r < r1; r += 48) {
                    const int rows = static_cast<int>(std::min<int64_t>(48, r1 - r));
                    kt.topk_tile(a.q + r * a.ldq, a.ldq, rows, ktile.data(), T, t.j1 - t.j0, a.dim,
                                 sg.index_base + t.j0, a.k, a.tile_max, bs + (r - r0) * k, bi + (r - r0) * k);
                }
            }
        }
    });
    for (int64_t r = 0; r < R; ++r)
        for (int64_t range = 0; range < n_ranges; ++range)
            merge_into(a.best_score + r * k, a.best_index + r * k, ls.data() + (range * R + r) * k,
                       li.data() + (range * R + r) * k, a.k);
}

void topk_dot_ref(const TopkDotArgs &a) {
    check(a);
    const int64_t k = a.k, T = kTopkTile;
    std::vector<float> s(static_cast<size_t>(k));
    std::vector<int64_t> idx(static_cast<size_t>(k));
    for (int64_t r = 0; r < a.n_rows; ++r) {
        clear_lists(s.data(), idx.data(), k);
        float tile_best = -INFINITY;
        int64_t tile_arg = -1;
        auto offer = [&](float v, int64_t j) {
            if (!(v > s[k - 1])) return;
            int64_t p = k - 1;
            while (p > 0 && s[p - 1] < v) {
                s[p] = s[p - 1];
                idx[p] = idx[p - 1];
                --p;
            }
            s[p] = v;
            idx[p] = j;
        };
        for (int64_t sg = 0; sg < a.n_segments; ++sg) {
            const TopkDotArgs::Segment &seg = a.segments[sg];
            for (int64_t j = 0; j < seg.n; ++j) {
                float dot = 0.0f;
                for (int32_t c = 0; c < a.dim; ++c) {
                    const float kv = a.keys_f16
                                         ? fp16_to_fp32(static_cast<const uint16_t *>(seg.keys)[j * a.ld_keys + c])
                                         : static_cast<const float *>(seg.keys)[j * a.ld_keys + c];
                    dot += a.q[r * a.ldq + c] * kv;
                }
                const int64_t index = seg.index_base + j;
                if (!a.tile_max) {
                    offer(dot, index);
                    continue;
                }
                if (dot > tile_best) {
                    tile_best = dot;
                    tile_arg = index;
                }
                if (j + 1 == seg.n || (index + 1) % T == 0) {   // the tile ends here
                    if (tile_arg >= 0) offer(tile_best, tile_arg);
                    tile_best = -INFINITY;
                    tile_arg = -1;
                }
            }
        }
        merge_into(a.best_score + r * k, a.best_index + r * k, s.data(), idx.data(), a.k);
    }
}

} // namespace lctx::cpu
