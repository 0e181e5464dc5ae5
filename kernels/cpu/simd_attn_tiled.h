// Tiled flash attention for many query rows (prefill), part of simd_impl.h
// (same vector type V, internal linkage). Per key block of kAttnKeyBlock
// keys, K is transposed once into kt[d][key] and shared by all rows of the
// call; rows then go in tiles of RT:
//   scores  RT rows x (CV vectors of keys): q[d] broadcast times kt[d][..],
//   softmax the online update of (m, l) per row, probabilities in place,
//   P.V     RT rows x (CV vectors of head dims) accumulators over the keys.
// Each FMA's operands come from L1 (kt and the V block: 2 x 16 KiB at
// head_dim 64), and every vector load feeds RT FMAs. CV is the variant's
// V::kAttnTileVectors: RT x CV accumulators, CV loads and a broadcast must
// fit its registers (AVX-512: 6 x 4 of 32; AVX2: 6 x 2 of 16). Each output
// lane sums its products in the same order whatever CV is.
#pragma once

namespace {

constexpr int RT = 6;                  // query rows per register tile
constexpr int CV = V::kAttnTileVectors;
constexpr int KB = static_cast<int>(kAttnKeyBlock);
constexpr int CJ = CV * W;             // keys per score tile, head dims per P.V tile
static_assert(KB % CJ == 0, "a key block is whole score tiles");

inline F load_part(const float *p, int n) { return n >= W ? V::load(p) : V::load_n(p, n); }
inline void store_part(float *p, F v, int n) {
    if (n >= W) V::store(p, v);
    else V::store_n(p, v, n);
}

// st[rr][0..ncols) = scale * q_rr . k_j (keys beyond the block are zero
// columns of kt); ncols is a multiple of CJ, at most KB.
template <int R>
inline void tile_scores(const float *const *q, const float *kt, int hd, float scale, float *st, int ncols = KB) {
    const F vs = V::set1(scale);
    for (int c0 = 0; c0 < ncols; c0 += CJ) {
        F acc[R][CV];
#pragma GCC unroll 8
        for (int rr = 0; rr < R; ++rr)
#pragma GCC unroll 4
            for (int c = 0; c < CV; ++c) acc[rr][c] = V::zero();
        for (int d = 0; d < hd; ++d) {
            const float *kd = kt + static_cast<int64_t>(d) * KB + c0;
            F k[CV];
#pragma GCC unroll 4
            for (int c = 0; c < CV; ++c) k[c] = V::load(kd + c * W);
#pragma GCC unroll 8
            for (int rr = 0; rr < R; ++rr) {
                const F qb = V::set1(q[rr][d]);
#pragma GCC unroll 4
                for (int c = 0; c < CV; ++c) acc[rr][c] = V::fmadd(qb, k[c], acc[rr][c]);
            }
        }
#pragma GCC unroll 8
        for (int rr = 0; rr < R; ++rr)
#pragma GCC unroll 4
            for (int c = 0; c < CV; ++c) V::store(st + rr * KB + c0 + c * W, V::mul(acc[rr][c], vs));
    }
}

// o_rr[d] = o_rr[d] * fac[rr] + sum_j st[rr][j] * v_j[d] for the head dims
// [d0, d0 + n) of one tile, n <= CJ.
template <int R>
inline void tile_pv(float *const *o, const float *fac, const float *st, const float *v, int64_t ld, int64_t nb,
                    int d0, int n) {
    const int nv = (n + W - 1) / W;
    int cnt[CV];
    for (int c = 0; c < CV; ++c) cnt[c] = c < nv ? (n - c * W < W ? n - c * W : W) : 0;
    F acc[R][CV];
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr) {
        const F f = V::set1(fac[rr]);
#pragma GCC unroll 4
        for (int c = 0; c < CV; ++c)
            acc[rr][c] = cnt[c] > 0 ? V::mul(load_part(o[rr] + d0 + c * W, cnt[c]), f) : V::zero();
    }
    if (n == CJ) {
        for (int64_t j = 0; j < nb; ++j) {
            const float *vj = v + j * ld + d0;
            F vv[CV];
#pragma GCC unroll 4
            for (int c = 0; c < CV; ++c) vv[c] = V::load(vj + c * W);
#pragma GCC unroll 8
            for (int rr = 0; rr < R; ++rr) {
                const F p = V::set1(st[rr * KB + j]);
#pragma GCC unroll 4
                for (int c = 0; c < CV; ++c) acc[rr][c] = V::fmadd(p, vv[c], acc[rr][c]);
            }
        }
    } else {   // head-dim tail: partial vectors
        for (int64_t j = 0; j < nb; ++j) {
            const float *vj = v + j * ld + d0;
            F vv[CV];
            for (int c = 0; c < CV; ++c) vv[c] = cnt[c] > 0 ? load_part(vj + c * W, cnt[c]) : V::zero();
#pragma GCC unroll 8
            for (int rr = 0; rr < R; ++rr) {
                const F p = V::set1(st[rr * KB + j]);
                for (int c = 0; c < CV; ++c) acc[rr][c] = V::fmadd(p, vv[c], acc[rr][c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int rr = 0; rr < R; ++rr)
        for (int c = 0; c < CV; ++c)
            if (cnt[c] > 0) store_part(o[rr] + d0 + c * W, acc[rr][c], cnt[c]);
}

// The online-softmax step of rows [r0, r0 + R) over the first nb keys of a
// key block, whose scaled scores are in st[rr][0..ncols) (ncols: nb rounded
// up to whole score tiles): masks what a row may not see, updates (m, l),
// leaves the probabilities exp(s - m_new) in st (0 from nb to ncols) and the
// factor fac[rr] the row's earlier output must be rescaled by. Returns false
// when no row sees any key of the block (nothing to add).
template <int R>
inline bool tile_softmax(const AttentionArgs &a, int g, int64_t i0, int64_t r0, int64_t jb, int64_t nb, int ncols,
                         int32_t block_min_pos, int32_t block_max_pos, float *m, float *l, float *st, float *fac) {
    const int ng = a.n_head / a.n_head_kv;
    const int32_t *kvp = a.kv_pos + g * a.kv_pos_head_stride;
    bool any = false;
    for (int rr = 0; rr < R; ++rr) {
        const int64_t r = r0 + rr;
        const int32_t qp = a.q_pos[i0 + r / ng];
        float *s = st + rr * KB;
        if (a.softcap > 0.0f)
            for (int64_t j = 0; j < nb; ++j) s[j] = softcap_score(s[j], a.softcap);
        // some key of the block is after the query, or out of its window
        if (block_max_pos > qp || (a.window > 0 && int64_t(qp) - block_min_pos >= a.window))
            for (int64_t j = 0; j < nb; ++j)
                if (!key_visible(kvp[jb + j], qp, a.window)) s[j] = -INFINITY;
        for (int64_t j = nb; j < ncols; ++j) s[j] = -INFINITY;
        F vm = V::load(s);
        for (int j = W; j < ncols; j += W) vm = V::max(vm, V::load(s + j));
        const float bmax = V::hmax(vm);
        if (bmax == -INFINITY) {   // the row sees no key here: unchanged
            for (int j = 0; j < ncols; ++j) s[j] = 0.0f;
            fac[rr] = 1.0f;
            continue;
        }
        const float mnew = fmaxf_(m[r], bmax);
        fac[rr] = m[r] == -INFINITY ? 0.0f : __builtin_expf(m[r] - mnew);
        l[r] = l[r] * fac[rr] + exp_sum(s, ncols, mnew);
        m[r] = mnew;
        any = true;
    }
    return any;
}

// Rows [r0, r0 + R) of the call against one transposed key block.
template <int R>
void attn_tile(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t r0, int64_t jb, int64_t nb,
               int32_t block_min_pos, int32_t block_max_pos, const float *kt, const float *vb, int64_t ldv, float *o, float *m, float *l,
               float *st) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    const float *q[R];
    float *orow[R];
    float fac[R];
    int32_t qmax = a.q_pos[i0 + r0 / ng];
    for (int rr = 0; rr < R; ++rr) {
        const int64_t r = r0 + rr, i = i0 + r / ng;
        q[rr] = a.q + i * a.ldq + static_cast<int64_t>(g * ng + r % ng) * hd;
        orow[rr] = o + r * hd;
        qmax = a.q_pos[i] > qmax ? a.q_pos[i] : qmax;
    }
    // A block on the causal diagonal: the tile needs its keys only up to the
    // last one some row of it sees. Those past it would score -inf and add
    // exact zeros, so trimming them leaves every result bit for bit as it was.
    if (block_max_pos > qmax) {
        const int32_t *kvp = a.kv_pos + g * a.kv_pos_head_stride + jb;
        while (nb > 0 && kvp[nb - 1] > qmax) --nb;
        if (nb == 0) return;
    }
    const int ncols = static_cast<int>((nb + CJ - 1) / CJ * CJ);
    tile_scores<R>(q, kt, hd, scale, st, ncols);
    if (!tile_softmax<R>(a, g, i0, r0, jb, nb, ncols, block_min_pos, block_max_pos, m, l, st, fac)) return;
    for (int d0 = 0; d0 < hd; d0 += CJ) tile_pv<R>(orow, fac, st, vb, ldv, nb, d0, hd - d0 < CJ ? hd - d0 : CJ);
}

// kt[d * KB + j] = k[j * ld + d] for j < nb, d < hd, and 0 for nb <= j < KB
// (keys missing from a last, short block): the GEMM's panel transpose, then
// the zero columns.
inline void transpose_keys(const float *k, int64_t ld, int64_t nb, int hd, float *kt) {
    transpose(k, ld, nb, hd, kt, KB);
    if (nb < KB)
        for (int64_t d = 0; d < hd; ++d) std::fill(kt + d * KB + nb, kt + (d + 1) * KB, 0.0f);
}

// The first 64-byte boundary in a scratch buffer (attn_scratch_floats counts
// the 16 floats this may skip).
template <class T>
inline T *align64(float *scratch) {
    return reinterpret_cast<T *>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~static_cast<uintptr_t>(63));
}

// Adds row probabilities p[0..nb) / L into the column accumulator cs (or,
// col_max, takes the maximum): one observation row's share of the eviction
// scores (attn_colsum and attn_colsum_tiled).
inline void add_row_to_columns(const float *p, int64_t nb, float L, bool col_max, float *cs) {
    const F inv = V::set1(1.0f / L);
    int64_t j = 0;
    if (col_max) {
        for (; j + W <= nb; j += W) V::store(cs + j, V::max(V::mul(V::load(p + j), inv), V::load(cs + j)));
        for (; j < nb; ++j) cs[j] = std::max(cs[j], p[j] * (1.0f / L));
        return;
    }
    for (; j + W <= nb; j += W) V::store(cs + j, V::fmadd(V::load(p + j), inv, V::load(cs + j)));
    for (; j < nb; ++j) cs[j] += p[j] * (1.0f / L);
}

// col[0..nb) += cs (or, col_max, the elementwise maximum): a key block's
// accumulated column scores into the call's output.
inline void flush_columns(const float *cs, int64_t nb, bool col_max, float *col) {
    if (col_max)
        for (int64_t j = 0; j < nb; ++j) col[j] = std::max(col[j], cs[j]);
    else
        for (int64_t j = 0; j < nb; ++j) col[j] += cs[j];
}

// Calls tile.template operator()<R>(r0) for the row tiles of `rows` rows:
// RT rows at a time, then one tile of the remainder.
template <class Tile>
inline void for_row_tiles(int64_t rows, Tile &&tile) {
    int64_t r0 = 0;
    for (; r0 + RT <= rows; r0 += RT) tile.template operator()<RT>(r0);
    switch (rows - r0) {
    case 5: tile.template operator()<5>(r0); break;
    case 4: tile.template operator()<4>(r0); break;
    case 3: tile.template operator()<3>(r0); break;
    case 2: tile.template operator()<2>(r0); break;
    case 1: tile.template operator()<1>(r0); break;
    default: break;
    }
}

// Resets the partial state of the call's rows, then calls
// on_block(jb, nb, pmin, pmax) for each key block of [j0, j1) that some query
// of [i0, i1) may see (pmin, pmax: the block's smallest and largest position).
template <class Block>
inline void for_visible_key_blocks(const AttentionArgs &a, int g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                                   float *o, float *m, float *l, Block &&on_block) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    const int32_t *kvp = a.kv_pos + g * a.kv_pos_head_stride;
    const int64_t rows = (i1 - i0) * ng;
    for (int64_t r = 0; r < rows; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    for (int64_t x = 0; x < rows * hd; ++x) o[x] = 0.0f;
    int32_t qmax = a.q_pos[i0], qmin = a.q_pos[i0];
    for (int64_t i = i0; i < i1; ++i) {
        qmax = a.q_pos[i] > qmax ? a.q_pos[i] : qmax;
        qmin = a.q_pos[i] < qmin ? a.q_pos[i] : qmin;
    }
    for (int64_t jb = j0; jb < j1; jb += KB) {
        const int64_t nb = min64(KB, j1 - jb);
        int32_t pmin = kvp[jb];
        for (int64_t j = 1; j < nb; ++j) pmin = kvp[jb + j] < pmin ? kvp[jb + j] : pmin;
        if (pmin > qmax) continue;   // every key of the block is after every query (causal prefill)
        int32_t pmax = kvp[jb];
        for (int64_t j = 1; j < nb; ++j) pmax = kvp[jb + j] > pmax ? kvp[jb + j] : pmax;
        if (a.window > 0 && int64_t(qmin) - pmax >= a.window) continue;   // every key is out of every query's window
        on_block(jb, nb, pmin, pmax);
    }
}

// Same contract as attn_partial (see simd.h); scratch: attn_scratch_floats.
void attn_partial_tiled(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                        float *o, float *m, float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    const float *kg = a.k + g * a.kv_head_stride, *vg = a.v + g * a.kv_head_stride;
    const int64_t rows = (i1 - i0) * ng;
    // 64-byte aligned buffers: split-line vector loads cost ~15% in the
    // GEMM micro-kernel, and KV cache rows need not be line-aligned, so the
    // V block is copied (16 KiB per block, shared by all rows of the call).
    float *kt = align64<float>(scratch);
    float *st = kt + static_cast<int64_t>(hd) * KB, *vcopy = st + RT * KB;
    const int64_t ldv = (hd + 15) / 16 * 16;
    for_visible_key_blocks(a, g, i0, i1, j0, j1, o, m, l, [&](int64_t jb, int64_t nb, int32_t pmin, int32_t pmax) {
        transpose_keys(kg + jb * a.ld_kv, a.ld_kv, nb, hd, kt);
        for (int64_t j = 0; j < nb; ++j) std::memcpy(vcopy + j * ldv, vg + (jb + j) * a.ld_kv, sizeof(float) * hd);
        for_row_tiles(rows, [&]<int R>(int64_t r0) {
            attn_tile<R>(a, scale, g, i0, r0, jb, nb, pmin, pmax, kt, vcopy, ldv, o, m, l, st);
        });
    });
}

// attn_colsum's contract (simd.h) for many observation rows: per key block,
// K transposed once and the rows scored RT at a time (tile_scores), then
// exp(s - m) / l of each row added into (or, col_max, maxed with) the
// block's columns. The row maxima m and sums l are the first pass's.
void attn_colsum_tiled(const AttentionArgs &a, float scale, int g, int64_t j0, int64_t j1, const float *m,
                       const float *l, float *scratch) {
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    const float *kg = a.k + g * a.kv_head_stride;
    const int32_t *kvp = a.kv_pos + g * a.kv_pos_head_stride;
    float *kt = align64<float>(scratch);
    float *st = kt + static_cast<int64_t>(hd) * KB, *cs = st + RT * KB;
    float *col = a.col_sums + g * a.n_kv;
    const int64_t ib = a.obs_begin < 0 ? 0 : a.obs_begin, rows = (a.n_q - ib) * ng;
    for (int64_t jb = j0; jb < j1; jb += KB) {
        const int64_t nb = min64(KB, j1 - jb);
        transpose_keys(kg + jb * a.ld_kv, a.ld_kv, nb, hd, kt);
        for (int j = 0; j < KB; ++j) cs[j] = 0.0f;
        for_row_tiles(rows, [&]<int R>(int64_t r0) {
            const float *q[R];
            for (int rr = 0; rr < R; ++rr) {
                const int64_t r = r0 + rr, i = ib + r / ng;
                q[rr] = a.q + i * a.ldq + static_cast<int64_t>(g * ng + r % ng) * hd;
            }
            tile_scores<R>(q, kt, hd, scale, st);
            for (int rr = 0; rr < R; ++rr) {
                const int64_t r = r0 + rr, i = ib + r / ng, row = i * a.n_head + g * ng + r % ng;
                const float L = l[row];
                if (!(L > 0.0f)) continue;
                float *s = st + rr * KB;
                if (a.softcap > 0.0f)
                    for (int64_t j = 0; j < nb; ++j) s[j] = softcap_score(s[j], a.softcap);
                for (int64_t j = 0; j < nb; ++j)
                    if (!key_visible(kvp[jb + j], a.q_pos[i], a.window)) s[j] = -INFINITY;
                exp_sum(s, nb, m[row]);
                add_row_to_columns(s, nb, L, a.col_max, cs);
            }
        });
        flush_columns(cs, nb, a.col_max, col + jb);
    }
}

} // namespace
