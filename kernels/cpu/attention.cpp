// Attention driver: splits the work into (KV head, query block, key split)
// items for the pool, merges the partial softmax states of key splits
// (flash-decoding, used when there are too few queries to keep threads busy),
// then runs the column-sum pass over (KV head, key range) items so that each
// column has one writer. attention_ref is the naive materialised version.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {
namespace {

constexpr int64_t kMinQueryBlock = 16, kMaxQueryBlock = kAttnMaxQueryBlock;
constexpr int64_t kMinKeysPerSplit = 512;

void check(const AttentionArgs &a) {
    if (a.n_q < 0 || a.n_kv < 0) fail(LCTX_ERR_INVALID_ARG, "attention: negative sizes");
    if (a.n_head <= 0 || a.n_head_kv <= 0 || a.head_dim <= 0 || a.n_head % a.n_head_kv != 0)
        fail(LCTX_ERR_INVALID_ARG, "attention: n_head %d must be a positive multiple of n_head_kv %d (head_dim %d)",
             a.n_head, a.n_head_kv, a.head_dim);
    if (a.n_q == 0) return;
    const int stores = (a.k || a.v) + (a.k16 || a.v16) + (a.k8 || a.v8);
    if (stores > 1) fail(LCTX_ERR_INVALID_ARG, "attention: K/V given in more than one element type");
    const bool kv = (a.k && a.v) || (a.k16 && a.v16) || (a.k8 && a.v8);
    if (!a.q || !a.out || !a.q_pos || (a.n_kv > 0 && (!kv || !a.kv_pos)))
        fail(LCTX_ERR_INVALID_ARG, "attention: null input");
    const int64_t width = static_cast<int64_t>(a.n_head) * a.head_dim;
    const int64_t row = a.k8 ? q8_row_bytes(a.head_dim) : a.head_dim;
    if (a.ldq < width || a.ldo < width || (a.n_kv > 0 && a.ld_kv < row))
        fail(LCTX_ERR_INVALID_ARG, "attention: row stride smaller than the row (ldq %lld, ldo %lld, ld_kv %lld)",
             static_cast<long long>(a.ldq), static_cast<long long>(a.ldo), static_cast<long long>(a.ld_kv));
}

float *grow(std::vector<float> &v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

// f16 or q8 storage: slots [j0, j1) of KV head g widened into thread-local
// f32 copies; the returned arguments read them at the same slot indices
// (head stride 0, rows of head_dim), so the f32 kernels run unchanged.
AttentionArgs widened(const KernelTable &kt, const AttentionArgs &a, int g, int64_t j0, int64_t j1) {
    thread_local std::vector<float> kbuf, vbuf;
    const int64_t hd = a.head_dim;
    float *k = grow(kbuf, static_cast<size_t>(j1 * hd)), *v = grow(vbuf, static_cast<size_t>(j1 * hd));
    if (a.k8) {
        const uint8_t *ks = a.k8 + g * a.kv_head_stride, *vs = a.v8 + g * a.kv_head_stride;
        for (int64_t j = j0; j < j1; ++j) {
            q8_dequantize_row(ks + j * a.ld_kv, hd, k + j * hd);
            q8_dequantize_row(vs + j * a.ld_kv, hd, v + j * hd);
        }
    } else {
        const uint16_t *ks = a.k16 + g * a.kv_head_stride, *vs = a.v16 + g * a.kv_head_stride;
        auto widen = [&](const uint16_t *src, float *dst, int64_t n) {
            if (!kt.dequant_row(GgmlType::F16, reinterpret_cast<const uint8_t *>(src), dst, n))
                for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
        };
        if (a.ld_kv == hd) {
            widen(ks + j0 * hd, k + j0 * hd, (j1 - j0) * hd);
            widen(vs + j0 * hd, v + j0 * hd, (j1 - j0) * hd);
        } else {
            for (int64_t j = j0; j < j1; ++j) {
                widen(ks + j * a.ld_kv, k + j * hd, hd);
                widen(vs + j * a.ld_kv, v + j * hd, hd);
            }
        }
    }
    AttentionArgs b = a;
    b.k = k;
    b.v = v;
    b.k16 = b.v16 = nullptr;
    b.k8 = b.v8 = nullptr;
    b.ld_kv = hd;
    b.kv_head_stride = 0;
    return b;
}

float scale_of(const AttentionArgs &a) {
    return a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
}

} // namespace

bool attention_bf16_available() { return active_kernels().attn_partial_bf16 != nullptr; }

// Largest [rows][n_kv] score buffer kept between the passes (floats).
constexpr int64_t kMaxRowScores = int64_t{1} << 24;

void attention(ThreadPool &pool, const AttentionArgs &args) {
    check(args);
    if (args.n_q == 0) return;
    AttentionArgs a = args;
    // Few rows per item (decode): keep the first pass's scores for the column
    // pass, which then skips the dot products (half of a full step's work).
    thread_local std::vector<float> row_scores_buf;
    a.row_scores = nullptr;
    if (a.col_sums && a.n_kv > 0 && a.obs_begin < a.n_q &&
        !attn_item_is_tiled(a.n_q * (a.n_head / a.n_head_kv)) && a.n_q * a.n_head * a.n_kv <= kMaxRowScores)
        a.row_scores = grow(row_scores_buf, static_cast<size_t>(a.n_q * a.n_head * a.n_kv));
    const KernelTable &kt = active_kernels();
    const bool bf16 = a.bf16 && kt.attn_partial_bf16;
    const float scale = scale_of(a);
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    // Large query blocks (the tiled kernel transposes each key block once per
    // call), but at least 4 items per thread.
    const int64_t want_items = 4 * pool.size();
    int64_t qblock = kMaxQueryBlock;
    while (qblock > kMinQueryBlock && a.n_head_kv * ((a.n_q + qblock - 1) / qblock) < want_items) qblock /= 2;
    const int64_t n_qb = (a.n_q + qblock - 1) / qblock;
    const int64_t base_items = a.n_head_kv * n_qb;
    int64_t n_split = 1;
    if (base_items < want_items && a.n_kv >= 2 * kMinKeysPerSplit) {
        const int64_t most = a.n_kv / kMinKeysPerSplit;
        n_split = std::min((want_items + base_items - 1) / base_items, most);
        // Equal shares per thread where the key count allows (decode: 3 KV
        // heads x 3 splits on 2 threads would leave one thread 5 items of 9).
        while (n_split < most && base_items * n_split % pool.size() != 0) ++n_split;
    }

    // Partial states, layout [split][kv head][query][head in group].
    const int64_t rows = a.n_q * a.n_head;
    // Every row of every item is written by attn_partial before the merge
    // reads it, so the buffers are reused across calls without clearing
    // (prefill: megabytes per layer).
    thread_local std::vector<float> po_buf, pm_buf, pl_buf;
    float *po = grow(po_buf, static_cast<size_t>(n_split * rows * hd));
    float *pm = grow(pm_buf, static_cast<size_t>(n_split * rows)), *pl = grow(pl_buf, static_cast<size_t>(n_split * rows));
    const int64_t scratch_n = attn_scratch_floats(a);
    // Later query blocks first: with causal positions they are the costly
    // ones (items claimed one at a time: their costs differ).
    parallel_claim(pool, base_items * n_split, [&](auto &&claim) { claim([&](int64_t item) {
        thread_local std::vector<float> scratch;
        if (static_cast<int64_t>(scratch.size()) < scratch_n) scratch.resize(scratch_n);
        const int64_t s = item % n_split, qb = n_qb - 1 - (item / n_split) / a.n_head_kv;
        const int g = static_cast<int>((item / n_split) % a.n_head_kv);
        const int64_t i0 = qb * qblock, i1 = std::min(a.n_q, i0 + qblock);
        const int64_t j0 = a.n_kv * s / n_split, j1 = a.n_kv * (s + 1) / n_split;
        const int64_t r0 = (s * a.n_head_kv + g) * a.n_q * ng + i0 * ng;
        // The key-at-a-time kernel (few rows) reads f16 and q8 storage in
        // place; the tiled ones need f32 rows, widened once per item.
        const bool tiled = attn_item_is_tiled((i1 - i0) * ng), narrow = a.k16 || a.k8;
        if (tiled && bf16) {
            const AttentionArgs b = narrow ? widened(kt, a, g, j0, j1) : a;
            kt.attn_partial_bf16(b, scale, g, i0, i1, j0, j1, po + r0 * hd, pm + r0, pl + r0, scratch.data());
        } else if (narrow && tiled) {
            const AttentionArgs b = widened(kt, a, g, j0, j1);
            kt.attn_partial(b, scale, g, i0, i1, j0, j1, po + r0 * hd, pm + r0, pl + r0, scratch.data());
        } else {
            kt.attn_partial(a, scale, g, i0, i1, j0, j1, po + r0 * hd, pm + r0, pl + r0, scratch.data());
        }
    }); });

    // Merge splits, normalise, write out; keep the final (m, l) per [query][head].
    std::vector<float> fm(a.col_sums ? rows : 0), fl(a.col_sums ? rows : 0);
    pool.parallel_for(a.n_q, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            for (int h = 0; h < a.n_head; ++h) {
                const int g = h / ng, u = h % ng;
                auto idx = [&](int64_t s) { return ((s * a.n_head_kv + g) * a.n_q + i) * ng + u; };
                float M = -INFINITY;
                for (int64_t s = 0; s < n_split; ++s)
                    if (pl[idx(s)] > 0.0f) M = std::max(M, pm[idx(s)]);
                float *out = a.out + i * a.ldo + static_cast<int64_t>(h) * hd;
                float L = 0.0f;
                for (int d = 0; d < hd; ++d) out[d] = 0.0f;
                for (int64_t s = 0; s < n_split && M != -INFINITY; ++s) {
                    if (!(pl[idx(s)] > 0.0f)) continue;
                    const float f = std::exp(pm[idx(s)] - M);
                    L += pl[idx(s)] * f;
                    const float *o = po + idx(s) * hd;
                    for (int d = 0; d < hd; ++d) out[d] += o[d] * f;
                }
                if (L > 0.0f)
                    for (int d = 0; d < hd; ++d) out[d] /= L;
                if (a.col_sums) {
                    fm[i * a.n_head + h] = M;
                    fl[i * a.n_head + h] = L;
                }
            }
    });

    if (!a.col_sums || a.n_kv == 0 || a.obs_begin >= a.n_q) return;
    const auto col_t0 = a.colsum_seconds ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    // Column sums: items own disjoint key ranges (no two threads write a column).
    const int64_t n_kb = (a.n_kv + kAttnKeyBlock - 1) / kAttnKeyBlock;
    const int64_t per_head = std::min(n_kb, std::max<int64_t>(1, (4 * pool.size() + a.n_head_kv - 1) / a.n_head_kv));
    pool.parallel_for(a.n_head_kv * per_head, [&](int64_t b, int64_t e, int) {
        thread_local std::vector<float> scratch;
        if (static_cast<int64_t>(scratch.size()) < scratch_n) scratch.resize(scratch_n);
        for (int64_t item = b; item < e; ++item) {
            const int g = static_cast<int>(item / per_head);
            const int64_t c = item % per_head;
            const int64_t j0 = n_kb * c / per_head * kAttnKeyBlock;
            const int64_t j1 = std::min(a.n_kv, n_kb * (c + 1) / per_head * kAttnKeyBlock);
            if ((a.k16 || a.k8) && !a.row_scores)
                kt.attn_colsum(widened(kt, a, g, j0, j1), scale, g, j0, j1, fm.data(), fl.data(), scratch.data());
            else kt.attn_colsum(a, scale, g, j0, j1, fm.data(), fl.data(), scratch.data());
        }
    });
    if (a.colsum_seconds)
        *a.colsum_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - col_t0).count();
}

void attention_ref(const AttentionArgs &a) {
    check(a);
    const float scale = scale_of(a);
    const int ng = a.n_head / a.n_head_kv, hd = a.head_dim;
    std::vector<double> p(a.n_kv), acc(hd);
    std::vector<float> row(static_cast<size_t>(hd));
    // Row j of KV head g of k or v in f32 (q8 and f16 rows widened exactly as stored).
    auto kv_row = [&](bool key, int g, int64_t j) -> const float * {
        const int64_t at = g * a.kv_head_stride + j * a.ld_kv;
        if (a.k8) q8_dequantize_row((key ? a.k8 : a.v8) + at, hd, row.data());
        else if (a.k16)
            for (int d = 0; d < hd; ++d) row[d] = fp16_to_fp32((key ? a.k16 : a.v16)[at + d]);
        else return (key ? a.k : a.v) + at;
        return row.data();
    };
    for (int64_t i = 0; i < a.n_q; ++i)
        for (int h = 0; h < a.n_head; ++h) {
            const int g = h / ng;
            const float *q = a.q + i * a.ldq + static_cast<int64_t>(h) * hd;
            double mx = -INFINITY;
            for (int64_t j = 0; j < a.n_kv; ++j) {
                if (!key_visible(a.kv_pos[g * a.kv_pos_head_stride + j], a.q_pos[i], a.window)) {
                    p[j] = -INFINITY;
                    continue;
                }
                const float *kj = kv_row(true, g, j);
                double s = 0.0;
                for (int d = 0; d < hd; ++d) s += static_cast<double>(q[d]) * kj[d];
                p[j] = s * scale;
                if (a.softcap > 0.0f) p[j] = a.softcap * std::tanh(p[j] / a.softcap);
                mx = std::max(mx, p[j]);
            }
            double sum = 0.0;
            for (int64_t j = 0; j < a.n_kv; ++j) {
                p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - mx);
                sum += p[j];
            }
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t j = 0; j < a.n_kv && sum > 0.0; ++j) {
                const float *vj = kv_row(false, g, j);
                for (int d = 0; d < hd; ++d) acc[d] += p[j] / sum * vj[d];
                if (a.col_sums && i >= a.obs_begin) {
                    float &c = a.col_sums[g * a.n_kv + j];
                    c = a.col_max ? std::max(c, static_cast<float>(p[j] / sum)) : c + static_cast<float>(p[j] / sum);
                }
            }
            float *out = a.out + i * a.ldo + static_cast<int64_t>(h) * hd;
            for (int d = 0; d < hd; ++d) out[d] = static_cast<float>(acc[d]);
        }
}

} // namespace lctx::cpu
