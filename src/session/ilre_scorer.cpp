#include "session/ilre_scorer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"
#include "common/ggml_type.h"

namespace lctx {

std::vector<KeySegment> ilre_dca_segments(int64_t n, int64_t sink, int64_t chunk) {
    std::vector<KeySegment> segs;
    if (n <= 0) return segs;
    for (int64_t b = 0; b < n;) {
        const int64_t e = std::min(n, b == 0 ? sink + chunk : b + chunk);
        segs.push_back({b, e, 0});
        b = e;
    }
    const int64_t nc = static_cast<int64_t>(segs.size());
    for (int64_t i = 0; i + 2 < nc; ++i) segs[static_cast<size_t>(i)].shift = (nc - 2 - i) * chunk;
    return segs;
}

void ilre_scores(Backend &be, const Hparams &hp, const IlreScoreArgs &a, float *out,
                 const std::function<bool()> &keep_going) {
    const int32_t H = hp.n_head, G = hp.n_head_kv, D = hp.head_dim, rep = H / G;
    const int64_t N = a.n_keys, nq = a.n_q, R = int64_t(rep) * nq;   // rows per KV head
    if (static_cast<int32_t>(a.keys.size()) != G) fail(LCTX_ERR_INTERNAL, "ILRe scores: %zu key stores for %d KV heads", a.keys.size(), G);
    if (N <= 0) return;
    if (nq <= 0) {
        std::fill(out, out + N, 0.0f);
        return;
    }
    const bool fixed = a.fixed_distance >= 0;
    if (fixed && !a.segments.empty()) fail(LCTX_ERR_INTERNAL, "ILRe scores: DCA segments with a fixed distance");
    std::vector<KeySegment> segs = a.segments;
    if (segs.empty()) segs.push_back({0, N, 0});
    if (segs.front().begin != 0 || segs.back().end != N)
        fail(LCTX_ERR_INTERNAL, "ILRe scores: segments do not cover the %lld keys", (long long)N);

    // Queries per KV head g and shift, scaled: rows r = i * nq + j for the
    // group's i-th query head and question token j, [R][D] in backend memory.
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const Hparams rot = rope_delta_hparams(hp);
    std::map<int64_t, std::unique_ptr<Buffer>> grouped;   // shift -> [G][R][D]
    for (const KeySegment &s : segs) {
        if (grouped.count(s.shift)) continue;
        std::vector<float> q(a.queries, a.queries + nq * H * D);
        if (s.shift != 0 || fixed) {
            // Back by `shift` positions: exact, R(a)^T R(b) = R(b - a). With a
            // fixed distance, every question token goes to that position (the
            // keys are rotated back to 0 below).
            std::vector<int32_t> pos(static_cast<size_t>(nq), static_cast<int32_t>(-s.shift));
            if (fixed)
                for (int64_t j = 0; j < nq; ++j)
                    pos[static_cast<size_t>(j)] = static_cast<int32_t>(a.fixed_distance - (a.query_pos0 + j));
            std::unique_ptr<Buffer> tmp = be.alloc(q.size() * sizeof(float));
            be.from_host(tmp->data(), q.data(), q.size() * sizeof(float));
            be.rope(rot, tmp->f32(), int64_t(H) * D, nq, H, pos.data());
            be.to_host(q.data(), tmp->data(), q.size() * sizeof(float));
        }
        std::vector<float> g_rows(static_cast<size_t>(G * R * D));
        for (int32_t g = 0; g < G; ++g)
            for (int32_t i = 0; i < rep; ++i)
                for (int64_t j = 0; j < nq; ++j) {
                    const float *src = q.data() + (j * H + g * rep + i) * D;
                    float *dst = g_rows.data() + ((int64_t(g) * R) + i * nq + j) * D;
                    for (int32_t d = 0; d < D; ++d) dst[d] = src[d] * scale;
                }
        std::unique_ptr<Buffer> b = be.alloc(g_rows.size() * sizeof(float));
        be.from_host(b->data(), g_rows.data(), g_rows.size() * sizeof(float));
        grouped[s.shift] = std::move(b);
    }

    // Tiles of T keys: a [R][T] block of products per KV head.
    int64_t T = 4096;
    while (T > 64 && R * T > (int64_t(1) << 21)) T /= 2;
    std::unique_ptr<Buffer> ybuf = be.alloc(static_cast<size_t>(R * T) * sizeof(float));
    std::vector<float> yh(static_cast<size_t>(R * T));
    const float ninf = -std::numeric_limits<float>::infinity();
    // Fixed distance: one tile of keys of every KV head as f32, [T][G][D],
    // rotated back to position 0 in one call (one sin/cos table per token).
    std::vector<float> kh(fixed ? static_cast<size_t>(T * G * D) : 0);
    std::unique_ptr<Buffer> kbuf = fixed ? be.alloc(kh.size() * sizeof(float)) : nullptr;
    std::vector<int32_t> kpos(fixed ? static_cast<size_t>(T) : 0);

    // Visits every tile: fn(g, t0, len, products [R][len] on the host).
    auto for_each_tile = [&](const std::function<void(int32_t, int64_t, int64_t, const float *)> &fn) {
        for (const KeySegment &s : segs) {
            for (int64_t t0 = s.begin; t0 < s.end;) {
                if (keep_going && !keep_going()) fail(LCTX_ERR_CANCELLED, "ILRe: scoring cancelled");
                int64_t len = std::min(T, s.end - t0);
                for (int32_t g = 0; g < G; ++g) len = std::min(len, a.keys[static_cast<size_t>(g)]->contiguous_from(t0));
                if (fixed) {
                    for (int32_t g = 0; g < G; ++g) {
                        const uint16_t *src = a.keys[static_cast<size_t>(g)]->row(t0);
                        for (int64_t t = 0; t < len; ++t)
                            for (int32_t d = 0; d < D; ++d)
                                kh[static_cast<size_t>((t * G + g) * D + d)] = fp16_to_fp32(src[t * D + d]);
                    }
                    for (int64_t t = 0; t < len; ++t) kpos[static_cast<size_t>(t)] = static_cast<int32_t>(-(t0 + t));
                    const size_t bytes = static_cast<size_t>(len * G * D) * sizeof(float);
                    be.from_host(kbuf->data(), kh.data(), bytes);
                    be.rope(rot, kbuf->f32(), int64_t(G) * D, len, G, kpos.data());
                    be.to_host(kh.data(), kbuf->data(), bytes);
                }
                for (int32_t g = 0; g < G; ++g) {
                    WeightView W;
                    W.type = GgmlType::F16;
                    W.n_cols = D;
                    W.n_rows = len;
                    W.row_bytes = static_cast<size_t>(D) * sizeof(uint16_t);
                    W.data = reinterpret_cast<const uint8_t *>(a.keys[static_cast<size_t>(g)]->row(t0));
                    if (fixed) {   // rows of head g in the [T][G][D] tile
                        W.type = GgmlType::F32;
                        W.row_bytes = static_cast<size_t>(G * D) * sizeof(float);
                        W.data = reinterpret_cast<const uint8_t *>(kh.data() + int64_t(g) * D);
                    }
                    const float *q = grouped[s.shift]->f32() + int64_t(g) * R * D;
                    be.matmul(W, q, D, R, ybuf->f32());
                    const float *y = ybuf->f32();
                    if (!be.host_memory()) {
                        be.to_host(yh.data(), ybuf->data(), static_cast<size_t>(R * len) * sizeof(float));
                        y = yh.data();
                    }
                    fn(g, t0, len, y);
                }
                t0 += len;
            }
        }
    };

    // Pass 1: online log-sum-exp of every row (g, r); rows are independent.
    std::vector<float> row_max(static_cast<size_t>(G * R), ninf);
    std::vector<double> row_sum(static_cast<size_t>(G * R), 0.0);
    for_each_tile([&](int32_t g, int64_t, int64_t len, const float *y) {
        be.parallel_for(R, [&](int64_t r0, int64_t r1, int) {
            for (int64_t r = r0; r < r1; ++r) {
                const float *row = y + r * len;
                float mx = row[0];
                for (int64_t c = 1; c < len; ++c) mx = std::max(mx, row[c]);
                float &m = row_max[static_cast<size_t>(g * R + r)];
                double &sum = row_sum[static_cast<size_t>(g * R + r)];
                if (mx > m) {
                    sum *= std::exp(double(m) - double(mx));
                    m = mx;
                }
                float s = 0.0f;
                for (int64_t c = 0; c < len; ++c) s += std::exp(row[c] - m);
                sum += s;
            }
        });
    });
    std::vector<float> lse(static_cast<size_t>(G * R));
    for (size_t i = 0; i < lse.size(); ++i) lse[i] = static_cast<float>(double(row_max[i]) + std::log(row_sum[i]));

    // Pass 2: a[t] = exp(max over rows of (product - lse)).
    std::vector<float> best(static_cast<size_t>(N), ninf);
    for_each_tile([&](int32_t g, int64_t t0, int64_t len, const float *y) {
        be.parallel_for(len, [&](int64_t c0, int64_t c1, int) {
            float *b = best.data() + t0;
            for (int64_t r = 0; r < R; ++r) {
                const float *row = y + r * len;
                const float l = lse[static_cast<size_t>(g * R + r)];
                for (int64_t c = c0; c < c1; ++c) b[c] = std::max(b[c], row[c] - l);
            }
        });
    });
    for (int64_t t = 0; t < N; ++t) out[t] = std::exp(best[static_cast<size_t>(t)]);
}

} // namespace lctx
