// Flash attention of every SIMD variant against attention_ref (naive, double
// softmax): GQA shapes, non-contiguous positions, key splits (long n_kv, few
// queries), column sums, strided layouts and queries that see no key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

struct Case {
    int n_head, n_head_kv, head_dim;
    int64_t n_q, n_kv, obs_begin;
    int32_t window = 0;   // sliding window (0: none)
};

// Keys at shuffled, gapped positions; queries after a prefix of them.
// cols: 0 none, 1 column sums, 2 column maxima (RefreshKV's probabilities).
void run_case(const Case &c, cpu::ThreadPool &pool, std::mt19937 &rng, int cols) {
    const bool with_colsums = cols != 0;
    const int64_t ldq = c.n_head * c.head_dim + 3, ldo = c.n_head * c.head_dim + 1;
    const int64_t ld_kv = c.head_dim + 2, kv_head_stride = ld_kv * c.n_kv + 5;
    auto q = test::random_floats(ldq * c.n_q, rng, -2.0f, 2.0f);
    auto k = test::random_floats(kv_head_stride * c.n_head_kv, rng, -2.0f, 2.0f);
    auto v = test::random_floats(kv_head_stride * c.n_head_kv, rng);
    std::vector<int32_t> kv_pos(c.n_kv), q_pos(c.n_q);
    for (int64_t j = 0; j < c.n_kv; ++j) kv_pos[j] = static_cast<int32_t>(3 * j + 7);   // gaps
    std::shuffle(kv_pos.begin(), kv_pos.end(), rng);                                 // non-monotonic slots
    std::uniform_int_distribution<int32_t> qp(0, static_cast<int32_t>(3 * c.n_kv + 10));
    for (auto &p : q_pos) p = qp(rng);
    // With several queries the first sees no key (the first key position is
    // 7): its output must be zeros. A single query (decode) sees keys.
    const bool blind_first = c.n_q > 1;
    if (blind_first) q_pos[0] = 2;

    cpu::AttentionArgs a;
    a.q = q.data(); a.ldq = ldq;
    a.k = k.data(); a.v = v.data(); a.ld_kv = ld_kv; a.kv_head_stride = kv_head_stride;
    a.n_q = c.n_q; a.n_kv = c.n_kv;
    a.n_head = c.n_head; a.n_head_kv = c.n_head_kv; a.head_dim = c.head_dim;
    a.q_pos = q_pos.data(); a.kv_pos = kv_pos.data();
    a.obs_begin = c.obs_begin;
    a.col_max = cols == 2;

    a.window = c.window;

    std::vector<float> ref(ldo * c.n_q, 0.0f), ref_cs(c.n_head_kv * c.n_kv, 0.5f);
    cpu::AttentionArgs r = a;
    r.out = ref.data(); r.ldo = ldo;
    if (with_colsums) r.col_sums = ref_cs.data();
    if (c.window <= 0) {
        cpu::attention_ref(r);
    } else {
        // Window by construction, one query at a time: keys at pos_q - pos_k
        // >= window are moved after the query, and the causal-only reference
        // attends to the rest.
        r.window = 0;
        r.n_q = 1;
        for (int64_t i = 0; i < c.n_q; ++i) {
            std::vector<int32_t> moved(kv_pos);
            for (auto &p : moved)
                if (q_pos[i] - p >= c.window) p = q_pos[i] + 1;
            r.q = q.data() + i * ldq;
            r.q_pos = q_pos.data() + i;
            r.kv_pos = moved.data();
            r.out = ref.data() + i * ldo;
            r.obs_begin = i >= c.obs_begin ? 0 : 1;
            cpu::attention_ref(r);
        }
    }

    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        std::vector<float> out(ldo * c.n_q, 7.0f), cs(c.n_head_kv * c.n_kv, 0.5f);
        cpu::AttentionArgs f = a;
        f.out = out.data(); f.ldo = ldo;
        if (with_colsums) f.col_sums = cs.data();
        cpu::attention(pool, f);
        const std::string what = std::string(name) + " heads " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " hd " + std::to_string(c.head_dim) + " n_q " +
                                 std::to_string(c.n_q) + " n_kv " + std::to_string(c.n_kv) + " cols " + std::to_string(cols);
        for (int64_t i = 0; i < c.n_q; ++i) {
            ASSERT_LE(test::max_abs_diff(out.data() + i * ldo, ref.data() + i * ldo, c.n_head * c.head_dim), 2e-6)
                << what << " query " << i;
            ASSERT_EQ(out[i * ldo + c.n_head * c.head_dim], 7.0f) << "wrote past the row";
        }
        if (blind_first)
            for (int d = 0; d < c.n_head * c.head_dim; ++d) ASSERT_EQ(out[d], 0.0f) << "query seeing no key";
        std::vector<float> o_rows, r_rows;   // without the row padding
        for (int64_t i = 0; i < c.n_q; ++i) {
            o_rows.insert(o_rows.end(), out.begin() + i * ldo, out.begin() + i * ldo + c.n_head * c.head_dim);
            r_rows.insert(r_rows.end(), ref.begin() + i * ldo, ref.begin() + i * ldo + c.n_head * c.head_dim);
        }
        EXPECT_LT(test::nmse(o_rows.data(), r_rows.data(), o_rows.size()), 1e-11) << what;
        if (with_colsums) {
            EXPECT_LE(test::max_abs_diff(cs.data(), ref_cs.data(), cs.size()), 1e-5) << what;
            EXPECT_LT(test::nmse(cs.data(), ref_cs.data(), cs.size()), 1e-11) << what;
        }
    });
}

} // namespace

TEST(KernelsAttention, MatchesReference) {
    std::mt19937 rng(21);
    cpu::ThreadPool pool1(1), pool2(2), pool3(3);
    const Case cases[] = {
        {9, 3, 64, 1, 1, 0},      {9, 3, 64, 1, 300, 0},  {9, 3, 64, 3, 130, 1},  {9, 3, 64, 17, 200, 5},
        {9, 3, 64, 40, 77, 39},   {4, 2, 16, 64, 500, 0}, {4, 2, 16, 2, 9, 0},    {4, 4, 24, 5, 70, 2},
        {2, 1, 13, 6, 65, 3},     {8, 1, 128, 4, 129, 0},
        // Decode row counts against the value pass's register blocking (four
        // vectors of dimensions per pass where R * 4 + 5 registers fit): 2
        // rows (four with AVX2 too), 4 (Gemma 3's group), 7 (two on AVX-512).
        {4, 2, 64, 1, 300, 0},    {4, 1, 256, 1, 600, 0}, {7, 1, 64, 1, 200, 0},
    };
    for (const Case &c : cases)
        for (int cs : {0, 1, 2}) {
            run_case(c, c.n_q % 2 ? pool1 : pool3, rng, cs);
            run_case(c, pool2, rng, cs);
            if (HasFatalFailure()) return;
        }
}

TEST(KernelsAttention, SlidingWindowMatchesMaskedReference) {
    // Gemma 3's sliding layers: a key is visible iff 0 <= pos_q - pos_k < window.
    std::mt19937 rng(23);
    cpu::ThreadPool pool1(1), pool2(2);
    const Case cases[] = {
        {9, 3, 64, 1, 300, 0, 40}, {9, 3, 64, 17, 200, 5, 9}, {4, 2, 16, 64, 500, 0, 100},
        {4, 1, 256, 40, 300, 3, 30}, {2, 1, 13, 6, 65, 3, 1}, {8, 1, 128, 3, 9000, 1, 600},
    };
    for (const Case &c : cases)
        for (bool cs : {false, true}) {
            run_case(c, pool1, rng, cs);
            run_case(c, pool2, rng, cs);
            if (HasFatalFailure()) return;
        }
}

TEST(KernelsAttention, LongContextKeySplits) {
    // Few queries over many keys: the kernel splits the keys across threads
    // and merges the partial softmax states.
    std::mt19937 rng(22);
    cpu::ThreadPool pool(2), pool4(4);
    for (int cols : {1, 2}) {
        run_case({9, 3, 64, 1, 20000, 0}, pool, rng, cols);
        run_case({4, 2, 16, 3, 9000, 1}, pool4, rng, cols);
    }
}

TEST(KernelsAttention, F16StorageEqualsItsWidenedCopy) {
    // f16 K/V is read in place by the few-rows (decode) kernel and widened
    // for the tiled one; either way every output and column sum must equal,
    // bit for bit, attention over the same values stored as f32 (f16 -> f32
    // is exact, and the summation order is the same). Also near the
    // reference, which reads the f16 storage itself.
    std::mt19937 rng(31);
    cpu::ThreadPool pool2(2), pool3(3);
    const Case cases[] = {
        {9, 3, 64, 1, 5000, 0}, {9, 3, 64, 2, 700, 1}, {4, 2, 13, 1, 300, 0},   {8, 1, 128, 1, 2100, 0},
        {6, 2, 72, 1, 1100, 0}, {4, 4, 24, 3, 650, 2}, {9, 3, 64, 40, 900, 30}, {2, 1, 13, 17, 200, 5},
    };
    for (const Case &c : cases)
        for (int cols : {0, 1, 2}) {
            const int64_t ldq = c.n_head * c.head_dim, ld_kv = c.head_dim + 3, stride = ld_kv * c.n_kv + 2;
            auto q = test::random_floats(ldq * c.n_q, rng, -2.0f, 2.0f);
            std::vector<uint16_t> k16(stride * c.n_head_kv), v16(k16.size());
            std::vector<float> k(k16.size()), v(k16.size());
            std::uniform_real_distribution<float> u(-3.0f, 3.0f);
            for (size_t i = 0; i < k16.size(); ++i) {
                k16[i] = fp32_to_fp16(u(rng));
                v16[i] = fp32_to_fp16(u(rng));
                k[i] = fp16_to_fp32(k16[i]);
                v[i] = fp16_to_fp32(v16[i]);
            }
            std::vector<int32_t> kv_pos(c.n_kv), q_pos(c.n_q);
            std::iota(kv_pos.begin(), kv_pos.end(), 0);
            std::shuffle(kv_pos.begin(), kv_pos.end(), rng);
            for (int64_t i = 0; i < c.n_q; ++i) q_pos[i] = static_cast<int32_t>(c.n_kv - c.n_q + i);
            cpu::AttentionArgs a;
            a.q = q.data(); a.ldq = ldq; a.ldo = ldq;
            a.ld_kv = ld_kv; a.kv_head_stride = stride;
            a.n_q = c.n_q; a.n_kv = c.n_kv;
            a.n_head = c.n_head; a.n_head_kv = c.n_head_kv; a.head_dim = c.head_dim;
            a.q_pos = q_pos.data(); a.kv_pos = kv_pos.data();
            a.obs_begin = c.obs_begin;
            a.col_max = cols == 2;
            std::vector<float> ref(ldq * c.n_q), ref_cs(c.n_head_kv * c.n_kv, 0.0f);
            cpu::AttentionArgs r = a;
            r.k16 = k16.data(); r.v16 = v16.data();
            r.out = ref.data();
            if (cols) r.col_sums = ref_cs.data();
            cpu::attention_ref(r);
            test::for_each_variant([&](cpu::SimdVariant, const char *name) {
                std::vector<float> o16(ref.size()), o32(ref.size());
                std::vector<float> c16(ref_cs.size(), 0.0f), c32(ref_cs.size(), 0.0f);
                cpu::AttentionArgs h = a, f = a;
                h.k16 = k16.data(); h.v16 = v16.data(); h.out = o16.data();
                f.k = k.data(); f.v = v.data(); f.out = o32.data();
                if (cols) { h.col_sums = c16.data(); f.col_sums = c32.data(); }
                cpu::attention(c.n_q % 2 ? pool3 : pool2, h);
                cpu::attention(c.n_q % 2 ? pool3 : pool2, f);
                const std::string what = std::string(name) + " hd " + std::to_string(c.head_dim) + " n_q " +
                                         std::to_string(c.n_q) + " n_kv " + std::to_string(c.n_kv) + " cols " +
                                         std::to_string(cols);
                ASSERT_EQ(0, std::memcmp(o16.data(), o32.data(), o16.size() * sizeof(float))) << what;
                ASSERT_EQ(0, std::memcmp(c16.data(), c32.data(), c16.size() * sizeof(float))) << what;
                EXPECT_LT(test::nmse(o16.data(), ref.data(), ref.size()), 1e-11) << what;
                if (cols) EXPECT_LE(test::max_abs_diff(c16.data(), ref_cs.data(), c16.size()), 1e-5) << what;
            });
            if (HasFatalFailure()) return;
        }
}

TEST(KernelsAttention, RejectsBadShapes) {
    cpu::ThreadPool pool(1);
    std::vector<float> buf(64);
    int32_t pos = 0;
    cpu::AttentionArgs a;
    a.q = a.k = a.v = buf.data();
    a.out = buf.data();
    a.q_pos = a.kv_pos = &pos;
    a.n_q = a.n_kv = 1;
    a.n_head = 3;
    a.n_head_kv = 2;   // not a divisor
    a.head_dim = 8;
    a.ldq = a.ldo = 24;
    a.ld_kv = 8;
    EXPECT_THROW(cpu::attention(pool, a), Error);
    a.n_head_kv = 1;
    a.ldq = 8;   // shorter than a row
    EXPECT_THROW(cpu::attention(pool, a), Error);
    a.ldq = 24;
    a.q = nullptr;
    EXPECT_THROW(cpu::attention_ref(a), Error);
}

TEST(KernelsAttention, SoftCapMatchesBruteForce) {
    // Gemma 2: every scaled score s becomes cap * tanh(s / cap) before the
    // softmax. Brute force here, against every variant (few rows and the
    // tiled kernel) and attention_ref; scores are large so the cap bends them.
    std::mt19937 rng(29);
    cpu::ThreadPool pool(2);
    for (auto [n_q, window] : {std::pair<int64_t, int32_t>{1, 0}, {3, 0}, {40, 0}, {40, 9}}) {
        const int H = 4, Hkv = 2, hd = 16;
        const int64_t n_kv = 70, ld = H * hd;
        const float cap = 5.0f, scale = 0.25f;
        auto q = test::random_floats(n_q * ld, rng, -3.0f, 3.0f);
        auto k = test::random_floats(n_kv * Hkv * hd, rng, -3.0f, 3.0f);
        auto v = test::random_floats(n_kv * Hkv * hd, rng);
        std::vector<int32_t> kv_pos(n_kv), q_pos(n_q);
        std::iota(kv_pos.begin(), kv_pos.end(), 0);
        for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
        std::vector<double> want(n_q * ld, 0.0);
        for (int64_t i = 0; i < n_q; ++i)
            for (int h = 0; h < H; ++h) {
                const int g = h / (H / Hkv);
                std::vector<double> p(n_kv, 0.0);
                double mx = -INFINITY, sum = 0.0;
                for (int64_t j = 0; j < n_kv; ++j) {
                    if (kv_pos[j] > q_pos[i] || (window > 0 && q_pos[i] - kv_pos[j] >= window)) continue;
                    double s = 0.0;
                    for (int d = 0; d < hd; ++d) s += double(q[i * ld + h * hd + d]) * k[(g * n_kv + j) * hd + d];
                    p[j] = cap * std::tanh(s * scale / cap);
                    mx = std::max(mx, p[j]);
                }
                for (int64_t j = 0; j < n_kv; ++j) {
                    const bool vis = kv_pos[j] <= q_pos[i] && !(window > 0 && q_pos[i] - kv_pos[j] >= window);
                    p[j] = vis ? std::exp(p[j] - mx) : 0.0;
                    sum += p[j];
                }
                for (int64_t j = 0; j < n_kv; ++j)
                    for (int d = 0; d < hd; ++d) want[i * ld + h * hd + d] += p[j] / sum * v[(g * n_kv + j) * hd + d];
            }
        cpu::AttentionArgs a;
        a.q = q.data(); a.ldq = ld;
        a.k = k.data(); a.v = v.data(); a.ld_kv = hd; a.kv_head_stride = n_kv * hd;
        a.n_q = n_q; a.n_kv = n_kv; a.n_head = H; a.n_head_kv = Hkv; a.head_dim = hd;
        a.q_pos = q_pos.data(); a.kv_pos = kv_pos.data();
        a.scale = scale; a.window = window; a.softcap = cap; a.ldo = ld;
        std::vector<float> out(n_q * ld);
        a.out = out.data();
        cpu::attention_ref(a);
        for (size_t x = 0; x < out.size(); ++x) ASSERT_NEAR(out[x], want[x], 1e-5) << "ref n_q " << n_q << " at " << x;
        test::for_each_variant([&](cpu::SimdVariant, const char *name) {
            std::fill(out.begin(), out.end(), 0.0f);
            cpu::attention(pool, a);
            for (size_t x = 0; x < out.size(); ++x)
                ASSERT_NEAR(out[x], want[x], 1e-5) << name << " n_q " << n_q << " at " << x;
        });
        // the cap changes the result (the test would not notice a missing cap otherwise)
        cpu::AttentionArgs b = a;
        b.softcap = 0.0f;
        std::vector<float> uncapped(n_q * ld);
        b.out = uncapped.data();
        cpu::attention_ref(b);
        double d = 0;
        for (size_t x = 0; x < out.size(); ++x) d = std::max(d, std::fabs(double(uncapped[x]) - want[x]));
        EXPECT_GT(d, 1e-2);
    }
}
