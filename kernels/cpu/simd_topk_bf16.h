// Exact top-k dot products with a bf16 screen (topk_dot.cpp drives it;
// docs/methods/reattention.md, "Scoring the middle"). The lists come out the
// same bit for bit as topk_tile's; the screen only skips keys that cannot
// enter them.
//
// A key enters a row's list only if its exact score e (the f32 chain of
// FMAs of topk_rows, simd_impl.h) beats the list's last entry. The screen
// scores every key of a tile in bf16 with VDPBF16PS, twice the multiply-adds
// of an f32 FMA per instruction. It scores q . (k - mu), mu a vector common
// to the call (the keys' mean): keys share a large common part, which would
// dominate |k| and so the bound below, and subtracting it shifts every
// score of a row by the same c = q . mu, which changes no order. With
// |.| the Euclidean norm, the bf16 score a of a key satisfies
//
//     |a - (e - c)| <= B = rel |q w| |(k - mu) / w| + relf |q| |k| + 2^-110 (1 + |q| + |k| + |k - mu|)
//
// with w > 0 a weight per channel (products and quotients taken channel by
// channel; TopkScreenRows::key_scale holds 1 / w). Any w is valid; w_c^2 =
// mean |k_c - mu_c| / mean |q_c| balances channels where queries and keys
// are large in different channels (the outlier channels of small models),
// which Cauchy-Schwarz over the plain vectors would charge in full.
// Per row the screen keeps the k best lower bounds a - B seen so far: k keys
// score at least the k-th of them, so a key with a + B below it cannot be in
// the top k and is skipped; every other key is scored again by the exact
// chain and offered to the list in key order, as topk_rows would. Why B
// holds, with u = 2^-8 the unit roundoff of bf16 (round to nearest even),
// every value within +-kTopkScreenMaxAbs (checked, else the tile or the call
// goes the exact way) and d <= kScreenMaxDim:
// - k - mu is rounded to f32 (2^-24 |k_e - mu_e| each), then q and k - mu
//   to bf16: the products move by at most (2u + u^2 + 2^-23)|q_e||k_e - mu_e|;
//   a denormal flushed to zero adds at most 2^-126 (1 + u)(|q_e| + |k_e - mu_e|).
// - Products of two bf16 are exact in f32. VDPBF16PS adds d of them with
//   rounding: within 2.2 d 2^-24 sum|q_e (k_e - mu_e)| of their real sum.
//   The exact chain likewise: e is within 2.2 d 2^-24 sum|q_e k_e| of q . k.
//   Flushed denormal products and sums add 2^-126 each.
// - sum |q_e x_e| = sum |q_e w_e| |x_e / w_e| <= |q w| |x / w| (Cauchy-Schwarz),
//   sum |q_e| <= sqrt(d) |q|.
// So rel = 2u + u^2 + 2^-23 + 2.2 d 2^-24 + 2^-18 (the last term covers
// rounding B itself and a + B in f32), relf = 2.2 d 2^-24 + 2^-30, and the
// absolute terms stay under the 2^-110 term. The norms are computed in
// double and rounded up. The range limit keeps every product, sum and B
// finite in f32.
//
// Included by kernels_avx512.cpp after simd_impl.h and simd_bf16.h; the
// functions carry the bf16 target attribute and are in the table only where
// cpuid reports AVX512_BF16.
#pragma once

namespace {

// Rounds a non-negative double up to a float that is not below it.
inline float round_up_to_float(double x) {
    const float f = static_cast<float>(x * (1.0 + 0x1p-20));
    return static_cast<double>(f) >= x ? f : std::nextafter(f, INFINITY);
}

// Builds the screen's tile from a transposed f32 key tile kt[e * T + t]
// (keys_transposed): kt2[p * T + t] = (k_t - mu)[2p], (k_t - mu)[2p + 1] as
// bf16, low half first, for p < d / 2 (d even); kn[t] >= |(k_t - mu) * key_scale| and
// kn_f[t] >= |k_t|. False when a key value is not finite or beyond
// kTopkScreenMaxAbs (the tile must then be scored exactly). T a multiple of 16;
// mu within kTopkScreenMaxAbs.
LCTX_TARGET_BF16 bool topk_screen_keys(const float *kt, int64_t T, int d, const float *mu, const float *key_scale,
                                       uint32_t *kt2, float *kn, float *kn_f) {
    const __m512 lim = _mm512_set1_ps(kTopkScreenMaxAbs);
    for (int64_t t0 = 0; t0 < T; t0 += 16) {
        __m512d s0 = _mm512_setzero_pd(), s1 = s0, f0 = s0, f1 = s0;
        __mmask16 ok = 0xFFFF;
        for (int e = 0; e < d; ++e) {
            const __m512 x = _mm512_loadu_ps(kt + e * T + t0);
            ok &= _mm512_cmp_ps_mask(_mm512_abs_ps(x), lim, _CMP_LE_OQ);   // NaN fails too
            const __m512d m = _mm512_set1_pd(mu[e]), ks = _mm512_set1_pd(key_scale[e]);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
            const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
            f0 = _mm512_fmadd_pd(lo, lo, f0);
            f1 = _mm512_fmadd_pd(hi, hi, f1);
            const __m512d dlo = _mm512_mul_pd(_mm512_sub_pd(lo, m), ks), dhi = _mm512_mul_pd(_mm512_sub_pd(hi, m), ks);
            s0 = _mm512_fmadd_pd(dlo, dlo, s0);
            s1 = _mm512_fmadd_pd(dhi, dhi, s1);
        }
        if (ok != 0xFFFF) return false;
        alignas(64) double sq[16], fq[16];
        _mm512_store_pd(sq, s0);
        _mm512_store_pd(sq + 8, s1);
        _mm512_store_pd(fq, f0);
        _mm512_store_pd(fq + 8, f1);
        for (int j = 0; j < 16; ++j) {
            kn[t0 + j] = round_up_to_float(std::sqrt(sq[j]));
            kn_f[t0 + j] = round_up_to_float(std::sqrt(fq[j]));
        }
    }
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    for (int p = 0; p < d / 2; ++p) {
        const __m512 m0 = _mm512_set1_ps(mu[2 * p]), m1 = _mm512_set1_ps(mu[2 * p + 1]);
        for (int64_t t0 = 0; t0 < T; t0 += 16) {
            const __m256bh h0 = _mm512_cvtneps_pbh(_mm512_sub_ps(_mm512_loadu_ps(kt + (2 * p) * T + t0), m0));
            const __m256bh h1 = _mm512_cvtneps_pbh(_mm512_sub_ps(_mm512_loadu_ps(kt + (2 * p + 1) * T + t0), m1));
            const __m512i w0 = _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i &>(h0));
            const __m512i w1 = _mm512_cvtepu16_epi32(reinterpret_cast<const __m256i &>(h1));
            _mm512_storeu_si512(kt2 + p * T + t0, _mm512_or_si512(_mm512_and_si512(w0, lo16), _mm512_slli_epi32(w1, 16)));
        }
    }
    return true;
}

// The exact score of topk_rows for a key row of the store (f32, or f16
// widened exactly) against query q: the same FMAs in the same order from +0.
// Eight at a time: the chains are independent, so they overlap instead of
// waiting d FMA latencies each.
struct TopkExactJob {
    const void *key;
    const float *q;
    float x;
};

inline void topk_exact_scores(TopkExactJob *job, int n, bool f16, int d) {
    for (int i = 0; i < n; i += 8) {
        const void *kp[8];
        const float *qp[8];
        for (int u = 0; u < 8; ++u) {   // a short last batch repeats its last job
            const int j = i + u < n ? i + u : n - 1;
            kp[u] = job[j].key;
            qp[u] = job[j].q;
        }
        float sc[8] = {};
        if (f16) {
            for (int e = 0; e < d; ++e)
#pragma GCC unroll 8
                for (int u = 0; u < 8; ++u)
                    sc[u] = std::fma(_cvtsh_ss(static_cast<const uint16_t *>(kp[u])[e]), qp[u][e], sc[u]);
        } else {
            for (int e = 0; e < d; ++e)
#pragma GCC unroll 8
                for (int u = 0; u < 8; ++u) sc[u] = std::fma(static_cast<const float *>(kp[u])[e], qp[u][e], sc[u]);
        }
        for (int u = 0; u < 8 && i + u < n; ++u) job[i + u].x = sc[u];
    }
}

// Offers the pending keys of item rows [ra, rb) that can still enter their
// lists (bf16 score + bound at least the row's k-th best lower bound) to the
// lists after scoring them exactly, each row's in the order they were
// screened (key order, as topk_rows offers them); empties them.
inline void topk_flush_pending(const TopkScreenRows &s, const TopkScreenItem &it, const TopkScreenScratch &w,
                               int64_t ra, int64_t rb) {
    constexpr int kBatch = 256;
    TopkExactJob job[kBatch];
    int32_t row[kBatch];
    int64_t index[kBatch];
    const size_t esize = it.keys_f16 ? 2 : 4;
    int n = 0;
    auto offer = [&] {
        topk_exact_scores(job, n, it.keys_f16, it.d);
        for (int i = 0; i < n; ++i) {
            float *rs = it.bs + row[i] * it.k;
            if (job[i].x > rs[it.k - 1])
                topk_insert(rs, it.bi + row[i] * it.k, it.k, job[i].x, index[i]);
        }
        n = 0;
    };
    for (int64_t r = ra; r < rb; ++r) {
        const float floor = w.lb[r * it.k + it.k - 1];
        const TopkPending *p = w.pending + r * kTopkPendingCap;
        for (int32_t i = 0; i < w.n_pending[r]; ++i) {
            if (!(p[i].upper >= floor)) continue;
            if (n == kBatch) offer();
            const TopkScreenItem::Tile &t = it.tiles[p[i].tile];
            job[n] = {static_cast<const uint8_t *>(t.keys) + static_cast<size_t>(p[i].col * it.ld_keys) * esize,
                      s.q + (it.r0 + r) * s.ldq, 0.0f};
            row[n] = static_cast<int32_t>(r);
            index[n++] = t.idx0 + p[i].col;
        }
        w.n_pending[r] = 0;
    }
    offer();
}

// Inserts x into a descending list of k lower bounds (x above its last).
inline void topk_lb_insert(float *lb, int k, float x) {
    int p = k - 1;
    while (p > 0 && lb[p - 1] < x) {
        lb[p] = lb[p - 1];
        --p;
    }
    lb[p] = x;
}

// Row `row` of the item against 16 keys of screened tile ti from key t0 on:
// c their bf16 scores, kn / kf their norms (TopkScreenScratch). Every key
// whose bf16 score + bound reaches the row's k-th best lower bound is kept
// pending, in key order, and its bf16 score - bound joins the row's lower
// bounds. Returns how many were kept.
LCTX_TARGET_BF16 inline int64_t topk_screen_offer16(const TopkScreenRows &s, const TopkScreenItem &it,
                                                    const TopkScreenScratch &w, int64_t row, int32_t ti, int64_t t0,
                                                    int64_t n_valid, __m512 c, __m512 kn, __m512 kf) {
    const int k = it.k;
    float *lb = w.lb + row * k;
    const __m512 bound = _mm512_fmadd_ps(_mm512_set1_ps(s.bound_k[it.r0 + row]), kn,
                                         _mm512_fmadd_ps(_mm512_set1_ps(s.bound_f[it.r0 + row]), kf,
                                                         _mm512_set1_ps(s.bound_1[it.r0 + row])));
    const __m512 upper = _mm512_add_ps(c, bound);
    unsigned m = _mm512_cmp_ps_mask(upper, _mm512_set1_ps(lb[k - 1]), _CMP_GE_OQ) & valid_lanes(t0, n_valid);
    if (!m) return 0;
    int64_t kept_keys = 0;
    alignas(64) float up[16], lo[16];
    _mm512_store_ps(up, upper);
    _mm512_store_ps(lo, _mm512_sub_ps(c, bound));
    for (; m; m &= m - 1) {
        const int j = __builtin_ctz(m);
        if (!(up[j] >= lb[k - 1])) continue;   // the floor rose within these 16 keys
        TopkPending *p = w.pending + row * kTopkPendingCap;
        if (w.n_pending[row] == kTopkPendingCap) {
            // Drop what the floor has passed; still half full: score them now.
            int32_t kept = 0;
            for (int32_t i = 0; i < kTopkPendingCap; ++i)
                if (p[i].upper >= lb[k - 1]) p[kept++] = p[i];
            w.n_pending[row] = kept;
            if (kept > kTopkPendingCap / 2) topk_flush_pending(s, it, w, row, row + 1);
        }
        p[w.n_pending[row]++] = {up[j], ti, static_cast<int32_t>(t0 + j)};
        ++kept_keys;
        if (lo[j] > lb[k - 1]) topk_lb_insert(lb, k, lo[j]);
    }
    return kept_keys;
}

// RB item rows from row r against one screened tile (item tile ti), 2W keys
// per register strip, the products by VDPBF16PS. Returns how many keys were
// kept pending.
template <int RB>
LCTX_TARGET_BF16 inline int64_t topk_rows_screened(const TopkScreenRows &s, const TopkScreenItem &it,
                                                const TopkScreenScratch &w, int64_t r, int32_t ti, int64_t n_valid) {
    const int64_t T = it.T;
    const int n_pairs = it.d / 2;
    const uint32_t *q2 = s.q2 + (it.r0 + r) * s.ldq2;
    int64_t kept_keys = 0;
    for (int64_t t = 0; t < n_valid; t += 2 * W) {
        __m512 c[RB][2];
#pragma GCC unroll 8
        for (int u = 0; u < RB; ++u) c[u][0] = c[u][1] = _mm512_setzero_ps();
        for (int p = 0; p < n_pairs; ++p) {
            const __m512bh b0 = as_bh(_mm512_loadu_si512(w.kt2 + p * T + t));
            const __m512bh b1 = as_bh(_mm512_loadu_si512(w.kt2 + p * T + t + W));
#pragma GCC unroll 8
            for (int u = 0; u < RB; ++u) {
                const __m512bh a = as_bh(_mm512_set1_epi32(static_cast<int>(q2[u * s.ldq2 + p])));
                c[u][0] = _mm512_dpbf16_ps(c[u][0], a, b0);
                c[u][1] = _mm512_dpbf16_ps(c[u][1], a, b1);
            }
        }
        const __m512 kn0 = _mm512_loadu_ps(w.kn + t), kn1 = _mm512_loadu_ps(w.kn + t + W);
        const __m512 kf0 = _mm512_loadu_ps(w.kn_f + t), kf1 = _mm512_loadu_ps(w.kn_f + t + W);
        for (int u = 0; u < RB; ++u) {
            kept_keys += topk_screen_offer16(s, it, w, r + u, ti, t, n_valid, c[u][0], kn0, kf0);
            kept_keys += topk_screen_offer16(s, it, w, r + u, ti, t + W, n_valid, c[u][1], kn1, kf1);
        }
    }
    return kept_keys;
}

// The AMX variant of one tile's screen (topk_item_screened_amx, simd.h):
// every item row against the tile's keys, 16 rows x 32 keys at a time, the
// bf16 products summed by TDPBF16PS into f32 (inputs and outputs that are
// denormal flushed to zero, as VDPBF16PS does, so the bound above holds the
// same), then the same offers as topk_rows_screened. Tiles 0-1: the scores
// of 16 rows x 16 keys each; 2: 16 rows' next 16 pairs; 3-4: 16 pairs of 16
// keys each. Needs T a multiple of 32, ldq2 a multiple of 16 with the q2 and
// kt2 padding of simd.h.
#define LCTX_TARGET_AMX __attribute__((target("avx512bf16,amx-tile,amx-bf16")))

struct alignas(64) AmxTileConfig {
    uint8_t palette_id = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// Loads the screen's tile shapes into this thread's tile configuration.
LCTX_TARGET_AMX inline void topk_amx_begin() {
    AmxTileConfig c;
    for (int i = 0; i < 5; ++i) c.rows[i] = 16, c.colsb[i] = 64;
    _tile_loadconfig(&c);
}

LCTX_TARGET_AMX __attribute__((noinline)) int64_t topk_tile_screened_amx(const TopkScreenRows &s,
                                                                         const TopkScreenItem &it,
                                                                         const TopkScreenScratch &w, int64_t nr,
                                                                         int32_t ti, int64_t n_valid) {
    const int64_t T = it.T, steps = s.ldq2 / 16;
    int64_t kept_keys = 0;
    alignas(64) float c0[16 * 16], c1[16 * 16];
    for (int64_t r = 0; r < nr; r += 16) {
        const uint32_t *q2 = s.q2 + (it.r0 + r) * s.ldq2;
        const int64_t rows = std::min<int64_t>(16, nr - r);
        for (int64_t t = 0; t < n_valid; t += 32) {
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t st = 0; st < steps; ++st) {
                const uint32_t *b = w.kt2 + st * 16 * T + t;
                _tile_loadd(2, q2 + st * 16, s.ldq2 * 4);
                _tile_loadd(3, b, T * 4);
                _tile_loadd(4, b + 16, T * 4);
                _tile_dpbf16ps(0, 2, 3);
                _tile_dpbf16ps(1, 2, 4);
            }
            _tile_stored(0, c0, 64);
            _tile_stored(1, c1, 64);
            const __m512 kn0 = _mm512_loadu_ps(w.kn + t), kn1 = _mm512_loadu_ps(w.kn + t + 16);
            const __m512 kf0 = _mm512_loadu_ps(w.kn_f + t), kf1 = _mm512_loadu_ps(w.kn_f + t + 16);
            for (int64_t u = 0; u < rows; ++u) {
                kept_keys += topk_screen_offer16(s, it, w, r + u, ti, t, n_valid, _mm512_load_ps(c0 + u * 16), kn0, kf0);
                kept_keys +=
                    topk_screen_offer16(s, it, w, r + u, ti, t + 16, n_valid, _mm512_load_ps(c1 + u * 16), kn1, kf1);
            }
        }
    }
    return kept_keys;
}

// topk_item_screened (simd.h): each tile is transposed, screened and its
// candidates kept pending. A tile with a value out of the screen's range is
// scored exactly by topk_tile after the pending keys are offered, so every
// row's offers stay in key order; so is the rest of the item once more than
// kScreenMaxPass of its (row, key) pairs have passed the screen (keys whose
// scores differ by less than the bound, as when a model normalises its keys:
// rescoring them one by one would cost more than the exact kernel). Amx:
// the products on the tile unit (the caller configured it).
constexpr double kScreenMaxPass = 0.15;

template <bool Amx>
LCTX_TARGET_BF16 inline void topk_item_screened_impl(const TopkScreenRows &s, const TopkScreenItem &it,
                                                     const TopkScreenScratch &w) {
    const int64_t nr = it.r1 - it.r0;
    std::fill(w.lb, w.lb + nr * it.k, -INFINITY);
    std::fill(w.n_pending, w.n_pending + nr, 0);
    int64_t passed = 0, screened_keys = 0;
    bool screen = true;
    for (int64_t ti = 0; ti < it.n_tiles; ++ti) {
        const TopkScreenItem::Tile &t = it.tiles[ti];
        keys_transposed(t.keys, it.keys_f16, it.ld_keys, t.n, it.d, w.kt, it.T, w.tmp);
        // Judged from the second tile on: the first lets keys through until the lists fill.
        if (screen && ti >= 2 && double(passed) > kScreenMaxPass * double(screened_keys) * double(nr)) screen = false;
        if (!screen || !topk_screen_keys(w.kt, it.T, it.d, s.mu, s.key_scale, w.kt2, w.kn, w.kn_f)) {
            topk_flush_pending(s, it, w, 0, nr);
            for (int64_t r = 0; r < nr; r += 48)
                topk_tile(s.q + (it.r0 + r) * s.ldq, s.ldq, static_cast<int>(std::min<int64_t>(48, nr - r)), w.kt,
                          it.T, t.n, it.d, t.idx0, it.k, false, it.bs + r * it.k, it.bi + r * it.k);
            continue;
        }
        const int32_t t32 = static_cast<int32_t>(ti);
        if constexpr (Amx) {
            passed += topk_tile_screened_amx(s, it, w, nr, t32, t.n);
        } else {
            constexpr int RB = 6;
            int64_t r = 0;
            for (; r + RB <= nr; r += RB) passed += topk_rows_screened<RB>(s, it, w, r, t32, t.n);
            switch (nr - r) {
            case 5: passed += topk_rows_screened<5>(s, it, w, r, t32, t.n); break;
            case 4: passed += topk_rows_screened<4>(s, it, w, r, t32, t.n); break;
            case 3: passed += topk_rows_screened<3>(s, it, w, r, t32, t.n); break;
            case 2: passed += topk_rows_screened<2>(s, it, w, r, t32, t.n); break;
            case 1: passed += topk_rows_screened<1>(s, it, w, r, t32, t.n); break;
            default: break;
            }
        }
        if (ti == 0) passed = 0;
        else screened_keys += t.n;
    }
    topk_flush_pending(s, it, w, 0, nr);
}

LCTX_TARGET_BF16 void topk_item_screened(const TopkScreenRows &s, const TopkScreenItem &it, const TopkScreenScratch &w) {
    topk_item_screened_impl<false>(s, it, w);
}

LCTX_TARGET_AMX void topk_item_screened_amx(const TopkScreenRows &s, const TopkScreenItem &it,
                                            const TopkScreenScratch &w) {
    topk_amx_begin();
    topk_item_screened_impl<true>(s, it, w);
    _tile_release();   // back to the init state: a context switch need not save 8 KiB of tiles
}

} // namespace
