// Top-k dot products driver (cpu_kernels.h, TopkDotArgs): splits the keys
// into ranges and the rows into groups, gives each (range, row group) item its
// own lists, then merges the ranges' lists into the caller's per row in range
// order. Each score is computed by the same register code whatever the split,
// and the merge orders by (score, index), so the result does not depend on
// the thread count. topk_dot_ref is the one-key-at-a-time reference.
//
// Where the CPU has AVX512_BF16, a work item screens its keys in bf16
// (simd_topk_bf16.h): only keys that may still enter a list are scored
// exactly, so the lists are the same bit for bit, for about half the
// arithmetic.
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

// Head dims the screen takes (its error bound assumes at most this many).
constexpr int32_t kScreenMaxDim = 1024;

// The queries of a call prepared for the bf16 screen: bf16 pairs, the
// shift, the channel weights and each row's error bound (simd_topk_bf16.h). Empty (ok false) when
// the screen is off, the dim is odd or too large, or a query value is not
// finite or beyond the screen's range: then every tile is scored exactly.
struct ScreenQueries {
    bool ok = false;
    std::vector<uint32_t> q2;
    std::vector<float> mu, key_scale, bound_k, bound_f, bound_1;
    TopkScreenRows rows;
};

// Visits a sample of at most about 1024 of the call's keys, widened to f32.
template <class F>
void for_sampled_keys(const TopkDotArgs &a, std::vector<float> &row, F &&fn) {
    int64_t total = 0;
    for (int64_t s = 0; s < a.n_segments; ++s) total += a.segments[s].n;
    const int64_t stride = std::max<int64_t>(1, total / 1024);
    row.resize(static_cast<size_t>(a.dim));
    for (int64_t s = 0; s < a.n_segments; ++s) {
        const TopkDotArgs::Segment &sg = a.segments[s];
        for (int64_t j = 0; j < sg.n; j += stride) {
            for (int32_t c = 0; c < a.dim; ++c)
                row[static_cast<size_t>(c)] =
                    a.keys_f16 ? fp16_to_fp32(static_cast<const uint16_t *>(sg.keys)[j * a.ld_keys + c])
                               : static_cast<const float *>(sg.keys)[j * a.ld_keys + c];
            fn(row.data());
        }
    }
}

// The screen's shift mu and per-channel weights (simd_topk_bf16.h): mu the
// mean of a sample of the keys, so the keys' shared part leaves the bound;
// query channel c weighted by w_c and key channel c by key_scale[c] >= 1 / w_c,
// w_c^2 = mean |k_c - mu_c| / mean |q_c| (clamped to [2^-40, 2^40]), so that
// Cauchy-Schwarz over the weighted vectors stays tight when queries and keys
// put their weight in different channels (outlier channels). Any mu and any
// positive weights keep the lists exact; these make the bound tight. mu is
// zero where it is not finite or out of range.
void screen_shift_and_weights(const TopkDotArgs &a, std::vector<float> &mu, std::vector<double> &w,
                              std::vector<float> &key_scale) {
    const size_t d = static_cast<size_t>(a.dim);
    std::vector<double> sum(d, 0.0), dev(d, 0.0), qabs(d, 0.0);
    std::vector<float> row;
    int64_t n = 0;
    for_sampled_keys(a, row, [&](const float *k) {
        for (size_t c = 0; c < d; ++c) sum[c] += k[c];
        ++n;
    });
    mu.assign(d, 0.0f);
    for (size_t c = 0; c < d && n > 0; ++c) mu[c] = static_cast<float>(sum[c] / double(n));
    for (float m : mu)
        if (!(std::fabs(m) <= kTopkScreenMaxAbs)) mu.assign(d, 0.0f);
    for_sampled_keys(a, row, [&](const float *k) {
        for (size_t c = 0; c < d; ++c) dev[c] += std::fabs(double(k[c]) - mu[c]);
    });
    for (int64_t r = 0; r < a.n_rows; ++r)
        for (size_t c = 0; c < d; ++c) qabs[c] += std::fabs(double(a.q[r * a.ldq + static_cast<int64_t>(c)]));
    w.assign(d, 1.0);
    key_scale.assign(d, 1.0f);
    for (size_t c = 0; c < d; ++c) {
        double wc = std::sqrt((dev[c] / double(std::max<int64_t>(n, 1))) / (qabs[c] / double(std::max<int64_t>(a.n_rows, 1))));
        if (std::isnan(wc)) wc = 1.0;
        wc = std::exp2(std::round(std::log2(std::clamp(wc, 0x1p-40, 0x1p40))));   // a power of two: 1 / w exact
        w[c] = wc;
        key_scale[c] = static_cast<float>(1.0 / wc);
    }
}

ScreenQueries screen_queries(const KernelTable &kt, const TopkDotArgs &a) {
    ScreenQueries s;
    if (a.tile_max || !topk_screen_enabled() || !kt.topk_item_screened || !kt.to_bf16_words || a.dim % 2 != 0 ||
        a.dim > kScreenMaxDim || a.n_rows == 0)
        return s;
    for (int64_t r = 0; r < a.n_rows; ++r)
        for (int32_t c = 0; c < a.dim; ++c)
            if (!(std::fabs(a.q[r * a.ldq + c]) <= kTopkScreenMaxAbs)) return s;   // also NaN
    const int64_t R = a.n_rows, ldq2 = (a.dim / 2 + 15) / 16 * 16;
    std::vector<double> w;
    screen_shift_and_weights(a, s.mu, w, s.key_scale);
    double mu_norm = 0;
    for (float m : s.mu) mu_norm += double(m) * m;
    mu_norm = std::sqrt(mu_norm);
    // rel = 2u + u^2 + 2^-23 + 2.2 d 2^-24 + 2^-18 with u = 2^-8, relf =
    // 2.2 d 2^-24 + 2^-30 (simd_topk_bf16.h).
    const double rel = 0x1p-7 + 0x1p-16 + 0x1p-23 + 2.2 * a.dim * 0x1p-24 + 0x1p-18;
    const double relf = 2.2 * a.dim * 0x1p-24 + 0x1p-30;
    const double up = 1.0 + 0x1p-20;   // rounds the bound's terms up
    s.q2.resize(static_cast<size_t>((R + 15) * ldq2));   // 15 zero rows past the last: the AMX screen's padding
    s.bound_k.resize(static_cast<size_t>(R));
    s.bound_f.resize(static_cast<size_t>(R));
    s.bound_1.resize(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
        const float *q = a.q + r * a.ldq;
        double sq = 0, sqw = 0;
        for (int32_t c = 0; c < a.dim; ++c) {
            const double x = q[c], xw = x * w[static_cast<size_t>(c)];
            sq += x * x;
            sqw += xw * xw;
        }
        const double qn = std::sqrt(sq) * up, qn_w = std::sqrt(sqw) * up;
        const size_t i = static_cast<size_t>(r);
        s.bound_k[i] = static_cast<float>(rel * qn_w * up);
        s.bound_f[i] = static_cast<float>((relf * qn + 0x1p-109) * up);
        s.bound_1[i] = static_cast<float>(0x1p-110 * (1.0 + qn + mu_norm) * up);
        kt.to_bf16_words(q, a.dim, s.q2.data() + r * ldq2, ldq2);
    }
    s.rows = {a.q,           a.ldq,           s.q2.data(),       ldq2,           s.mu.data(),
              s.key_scale.data(), s.bound_k.data(), s.bound_f.data(), s.bound_1.data()};
    s.ok = true;
    return s;
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
    const ScreenQueries screen = screen_queries(kt, a);
    // The screen's products on the AMX tile unit where there is one (32-key strips).
    const bool amx = screen.ok && topk_amx_enabled() && T % 32 == 0;   // enabled: the active table kt has it
    // Key ranges for long inputs (decode: few rows, many keys), row groups
    // for short ones (a prefill chunk against a short middle). Each range
    // starts its lists empty, and a screened list lets through every key
    // until it fills, so with the screen many rows prefer fewer ranges.
    const int64_t max_ranges = screen.ok && R >= 48 * 4 * threads ? threads : 4 * threads;
    const int64_t n_ranges = std::clamp<int64_t>(n_tiles * T / 1024, 1, max_ranges);
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
        // The screen's scratch (simd.h, TopkScreenScratch), for the largest item.
        const size_t nr_max = screen.ok ? static_cast<size_t>(rows_per_group) : 0;
        // ldq2 pair rows: the AMX screen reads whole steps of 16 pairs (the ones past d / 2 stay zero).
        std::vector<uint32_t> kt2(screen.ok ? static_cast<size_t>(T * screen.rows.ldq2) : 0);
        std::vector<float> kn(screen.ok ? static_cast<size_t>(T) : 0), kn_f(kn.size()), lb(nr_max * static_cast<size_t>(k));
        std::vector<TopkPending> pending(nr_max * kTopkPendingCap);
        std::vector<int32_t> n_pending(nr_max);
        std::vector<TopkScreenItem::Tile> item_tiles;
        const TopkScreenScratch scratch{ktile.data(), tmp.data(), kn.data(),     kn_f.data(),
                                        lb.data(),    kt2.data(), pending.data(), n_pending.data()};
        for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
            const int64_t range = item / n_groups, group = item % n_groups;
            const int64_t r0 = group * rows_per_group, r1 = std::min(R, r0 + rows_per_group);
            if (r0 >= r1) continue;
            float *bs = ls.data() + (range * R + r0) * k;
            int64_t *bi = li.data() + (range * R + r0) * k;
            const int64_t ti0 = n_tiles * range / n_ranges, ti1 = n_tiles * (range + 1) / n_ranges;
            auto tile_keys = [&](const Tile &t) {
                return static_cast<const uint8_t *>(a.segments[t.seg].keys) + static_cast<size_t>(t.j0 * a.ld_keys) * esize;
            };
            if (screen.ok) {
                item_tiles.clear();
                for (int64_t ti = ti0; ti < ti1; ++ti) {
                    const Tile &t = tiles[static_cast<size_t>(ti)];
                    item_tiles.push_back({tile_keys(t), t.j1 - t.j0, a.segments[t.seg].index_base + t.j0});
                }
                const TopkScreenItem it{item_tiles.data(), static_cast<int64_t>(item_tiles.size()), T, a.keys_f16,
                                        a.ld_keys, a.dim, a.k, r0, r1, bs, bi};
                (amx ? kt.topk_item_screened_amx : kt.topk_item_screened)(screen.rows, it, scratch);
                continue;
            }
            for (int64_t ti = ti0; ti < ti1; ++ti) {
                const Tile &t = tiles[static_cast<size_t>(ti)];
                const TopkDotArgs::Segment &sg = a.segments[t.seg];
                kt.keys_transposed(tile_keys(t), a.keys_f16, a.ld_keys, t.j1 - t.j0, a.dim, ktile.data(), T, tmp.data());
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
