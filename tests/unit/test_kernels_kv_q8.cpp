// q8 KV storage (LCTX_KV_Q8): the row quantizer against brute force, and
// attention over q8 rows in every SIMD variant against attention_ref, which
// widens each row on its own (code * scale in double-free f32, no SIMD).
// The tiled kernel widens q8 to f32 exactly, so it meets the f32 bounds; the
// few-row (decode) kernel scores keys in int16 x int8 integers, which adds
// the rounding of the query to 16 bits (relative 2^-16 of its largest
// element) and is held to a bound derived from that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

float scale_of_row(const std::vector<uint8_t> &row, int64_t d) { return q8_row_scale(row.data(), d); }

// Rows of d values stored as q8 rows ld bytes apart (ld >= q8_row_bytes(d)).
std::vector<uint8_t> quantize_rows(const std::vector<float> &x, int64_t n, int64_t d, int64_t ld) {
    std::vector<uint8_t> out(static_cast<size_t>(n * ld), 0xAB);
    for (int64_t i = 0; i < n; ++i) cpu::q8_quantize_row(x.data() + i * d, d, out.data() + i * ld);
    return out;
}

// Random keys in [-3, 3] and values in [-1, 1] for each of n_head_kv heads,
// quantized into k8 / v8 (rows ld bytes apart, heads stride bytes apart);
// plant(k) may change a head's keys before they are quantized.
void fill_q8_heads(int n_head_kv, int64_t n_kv, int hd, int64_t ld, int64_t stride, std::mt19937 &rng,
                   std::vector<uint8_t> &k8, std::vector<uint8_t> &v8,
                   const std::function<void(std::vector<float> &)> &plant = {}) {
    k8.assign(static_cast<size_t>(stride * n_head_kv), 0);
    v8.assign(k8.size(), 0);
    for (int g = 0; g < n_head_kv; ++g) {
        auto k = test::random_floats(n_kv * hd, rng, -3.0f, 3.0f);
        auto v = test::random_floats(n_kv * hd, rng, -1.0f, 1.0f);
        if (plant) plant(k);
        const auto kq = quantize_rows(k, n_kv, hd, ld), vq = quantize_rows(v, n_kv, hd, ld);
        std::copy(kq.begin(), kq.end(), k8.begin() + g * stride);
        std::copy(vq.begin(), vq.end(), v8.begin() + g * stride);
    }
}

// Attention arguments over q8 rows: queries q (ldq = n_head * hd), q_pos and
// kv_pos as given, rows ld bytes apart, heads stride bytes apart.
cpu::AttentionArgs q8_args(const std::vector<float> &q, const std::vector<uint8_t> &k8, const std::vector<uint8_t> &v8,
                           const std::vector<int32_t> &q_pos, const std::vector<int32_t> &kv_pos, int n_head,
                           int n_head_kv, int hd, int64_t ld, int64_t stride) {
    cpu::AttentionArgs a;
    a.q = q.data(); a.ldq = a.ldo = static_cast<int64_t>(n_head) * hd;
    a.k8 = k8.data(); a.v8 = v8.data(); a.ld_kv = ld; a.kv_head_stride = stride;
    a.n_q = static_cast<int64_t>(q_pos.size()); a.n_kv = static_cast<int64_t>(kv_pos.size());
    a.n_head = n_head; a.n_head_kv = n_head_kv; a.head_dim = hd;
    a.q_pos = q_pos.data(); a.kv_pos = kv_pos.data();
    return a;
}

} // namespace

TEST(KvQ8, RowQuantizerMatchesBruteForce) {
    std::mt19937 rng(5);
    for (int64_t d : {1, 3, 8, 13, 64, 256}) {
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<float> x = test::random_floats(d, rng, -4.0f, 4.0f);
            if (trial == 1) x[static_cast<size_t>(d / 2)] = 300.0f;   // one outlier sets the scale
            std::vector<uint8_t> row(static_cast<size_t>(q8_row_bytes(d)), 0xAB);
            cpu::q8_quantize_row(x.data(), d, row.data());
            float amax = 0.0f;
            for (float v : x) amax = std::max(amax, std::fabs(v));
            const float scale = scale_of_row(row, d);
            ASSERT_EQ(scale, amax / 127.0f) << "d " << d;
            std::vector<float> back(static_cast<size_t>(d));
            cpu::q8_dequantize_row(row.data(), d, back.data());
            bool hit_127 = false;
            for (int64_t i = 0; i < d; ++i) {
                const int code = static_cast<int8_t>(row[static_cast<size_t>(i)]);
                ASSERT_LE(std::abs(code), 127);
                hit_127 = hit_127 || std::abs(code) == 127;
                // the nearest code: within half a step (and the next code is no nearer)
                ASSERT_LE(std::fabs(back[i] - x[i]), 0.5f * scale * (1.0f + 1e-5f)) << "d " << d << " i " << i;
                ASSERT_EQ(back[i], static_cast<float>(code) * scale);
            }
            EXPECT_TRUE(hit_127) << "the largest magnitude maps to +-127";
            for (int64_t i = d; i < q8_scale_offset(d); ++i) ASSERT_EQ(row[static_cast<size_t>(i)], 0) << "padding";
        }
    }
}

TEST(KvQ8, ZeroAndNonFiniteRows) {
    const int64_t d = 13;
    std::vector<uint8_t> row(static_cast<size_t>(q8_row_bytes(d)));
    std::vector<float> x(d, 0.0f), back(d, 1.0f);
    cpu::q8_quantize_row(x.data(), d, row.data());
    EXPECT_EQ(scale_of_row(row, d), 0.0f);
    cpu::q8_dequantize_row(row.data(), d, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f);
    for (float bad : {NAN, INFINITY, -INFINITY}) {
        x.assign(d, 1.0f);
        x[4] = bad;
        cpu::q8_quantize_row(x.data(), d, row.data());
        EXPECT_TRUE(std::isnan(scale_of_row(row, d))) << "a non-finite row stays non-finite (as the f32 cache would)";
        cpu::q8_dequantize_row(row.data(), d, back.data());
        for (float v : back) EXPECT_TRUE(std::isnan(v));
    }
}

namespace {

struct Q8Case {
    int n_head, n_head_kv, head_dim;
    int64_t n_q, n_kv, obs_begin;
};

void run_q8_case(const Q8Case &c, int cols, cpu::ThreadPool &pool, std::mt19937 &rng) {
    const int64_t ldq = c.n_head * c.head_dim, ld_kv = q8_row_bytes(c.head_dim) + 5;   // strided rows
    const int64_t stride = ld_kv * c.n_kv + 7;
    auto q = test::random_floats(ldq * c.n_q, rng, -2.0f, 2.0f);
    std::vector<uint8_t> k8, v8;
    fill_q8_heads(c.n_head_kv, c.n_kv, c.head_dim, ld_kv, stride, rng, k8, v8, [&](std::vector<float> &k) {
        for (int64_t j = 0; j < c.n_kv; j += 97) k[j * c.head_dim] = 25.0f;   // outlier channels
        for (int64_t j = 5; j < c.n_kv; j += 211) std::fill(k.begin() + j * c.head_dim, k.begin() + (j + 1) * c.head_dim, 0.0f);
    });
    std::vector<int32_t> kv_pos(c.n_kv), q_pos(c.n_q);
    std::iota(kv_pos.begin(), kv_pos.end(), 0);
    std::shuffle(kv_pos.begin(), kv_pos.end(), rng);
    for (int64_t i = 0; i < c.n_q; ++i) q_pos[i] = static_cast<int32_t>(c.n_kv - c.n_q + i);
    cpu::AttentionArgs a = q8_args(q, k8, v8, q_pos, kv_pos, c.n_head, c.n_head_kv, c.head_dim, ld_kv, stride);
    a.obs_begin = c.obs_begin;
    a.col_max = cols == 2;
    std::vector<float> ref(ldq * c.n_q), ref_cs(c.n_head_kv * c.n_kv, 0.0f);
    cpu::AttentionArgs r = a;
    r.out = ref.data();
    if (cols) r.col_sums = ref_cs.data();
    cpu::attention_ref(r);

    // Bound for the int16 query: each score moves by at most
    // scale * 0.5 * 2^-15 * max|q| * sum_d |code_d| * row scale; with the
    // scores' spread here that is < 1e-3 relative in the probabilities.
    const bool decode_rows = c.n_q * (c.n_head / c.n_head_kv) < cpu::kAttnTiledMinRows;
    const double max_abs = decode_rows ? 5e-5 : 2e-6, max_nmse = decode_rows ? 1e-8 : 1e-11;
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        std::vector<float> out(ref.size(), 7.0f), cs(ref_cs.size(), 0.0f);
        cpu::AttentionArgs f = a;
        f.out = out.data();
        if (cols) f.col_sums = cs.data();
        cpu::attention(pool, f);
        const std::string what = std::string(name) + " hd " + std::to_string(c.head_dim) + " n_q " +
                                 std::to_string(c.n_q) + " n_kv " + std::to_string(c.n_kv) + " cols " +
                                 std::to_string(cols);
        ASSERT_LE(test::max_abs_diff(out.data(), ref.data(), out.size()), max_abs) << what;
        EXPECT_LT(test::nmse(out.data(), ref.data(), out.size()), max_nmse) << what;
        if (cols) EXPECT_LE(test::max_abs_diff(cs.data(), ref_cs.data(), cs.size()), decode_rows ? 1e-4 : 1e-5) << what;
    });
}

} // namespace

TEST(KvQ8, AttentionMatchesTheReferenceOverTheSameCodes) {
    std::mt19937 rng(41);
    cpu::ThreadPool pool2(2), pool3(3);
    const Q8Case cases[] = {
        {9, 3, 64, 1, 5000, 0},  // decode: int16 scoring, key splits
        {9, 3, 64, 1, 1001, 0},  // an odd last block
        {7, 1, 64, 1, 333, 0},   // 7 rows of a group: the most the shared value pass takes
        {4, 2, 32, 1, 129, 0},   // 2 rows, hd 32: two vectors of dims per value pass on AVX-512
        {9, 3, 64, 2, 700, 1},   // 6 rows: still the few-row kernel
        {8, 1, 128, 1, 2100, 0}, {4, 4, 256, 1, 900, 0},
        {4, 2, 13, 1, 300, 0},   // head_dim not a multiple of the vector: the f32 path on q8 codes
        {6, 2, 72, 1, 1100, 0},  // 72 % 32 != 0 on AVX-512: the f32 path
        {9, 3, 64, 40, 900, 30}, // tiled: widened rows
        {2, 1, 13, 17, 200, 5},
    };
    for (const Q8Case &c : cases)
        for (int cols : {0, 1, 2}) {
            run_q8_case(c, cols, c.n_q % 2 ? pool3 : pool2, rng);
            if (HasFatalFailure()) return;
        }
}

TEST(KvQ8, AttentionRejectsTwoElementTypesAndShortRows) {
    cpu::ThreadPool pool(1);
    std::vector<float> buf(64);
    std::vector<uint8_t> rows(256);
    int32_t pos = 0;
    cpu::AttentionArgs a;
    a.q = buf.data(); a.out = buf.data();
    a.k8 = rows.data(); a.v8 = rows.data();
    a.q_pos = a.kv_pos = &pos;
    a.n_q = a.n_kv = 1;
    a.n_head = a.n_head_kv = 1;
    a.head_dim = 16;
    a.ldq = a.ldo = 16;
    a.ld_kv = 16;   // a q8 row of 16 values takes 20 bytes
    EXPECT_THROW(cpu::attention(pool, a), Error);
    a.ld_kv = q8_row_bytes(16);
    a.k = buf.data();   // f32 keys as well
    EXPECT_THROW(cpu::attention(pool, a), Error);
    a.k = nullptr;
    EXPECT_NO_THROW(cpu::attention(pool, a));
}

// The AVX512-VNNI scoring of q8 keys (simd_attn_q8_vnni.h) computes the same
// integer dot products as the int16 path, so turning it off must leave every
// output bit as it is: groups of rows past one pass (7 rows), head_dim 256,
// short last groups, windows that hide whole groups of keys, several queries
// and soft-capping.
TEST(KvQ8, VnniScoresMatchTheInt16PathBitForBit) {
    if (!cpu::cpu_has_avx512_vnni()) GTEST_SKIP() << "this CPU has no AVX512_VNNI";
    struct Case {
        int n_head, n_head_kv, head_dim;
        int64_t n_q, n_kv;
        int32_t window;
        float softcap;
        bool shuffled;
    };
    const Case cases[] = {
        {9, 3, 64, 1, 5000, 0, 0.0f, true},  {4, 1, 256, 1, 1000, 0, 0.0f, true},
        {7, 1, 64, 1, 333, 0, 0.0f, true},   {5, 1, 128, 1, 77, 0, 0.0f, false},
        {8, 2, 64, 1, 2000, 300, 0.0f, false}, {9, 3, 64, 2, 700, 0, 0.0f, false},
        {4, 2, 64, 1, 900, 0, 30.0f, true},  {6, 1, 192, 1, 150, 40, 0.0f, false},
    };
    std::mt19937 rng(7);
    cpu::ThreadPool pool(2);
    const cpu::SimdVariant saved = cpu::active_variant();
    cpu::set_simd_variant_for_testing(cpu::SimdVariant::AVX512);
    for (const Case &c : cases) {
        const int64_t ldq = c.n_head * c.head_dim, ld_kv = q8_row_bytes(c.head_dim) + 3, stride = ld_kv * c.n_kv;
        auto q = test::random_floats(ldq * c.n_q, rng, -2.0f, 2.0f);
        for (int64_t i = 0; i < ldq * c.n_q; i += 37) q[i] = -9.0f;   // the largest magnitude negative: q16 = -32767
        std::vector<uint8_t> k8, v8;
        fill_q8_heads(c.n_head_kv, c.n_kv, c.head_dim, ld_kv, stride, rng, k8, v8);
        std::vector<int32_t> kv_pos(c.n_kv), q_pos(c.n_q);
        std::iota(kv_pos.begin(), kv_pos.end(), 0);
        if (c.shuffled) std::shuffle(kv_pos.begin(), kv_pos.end(), rng);
        for (int64_t i = 0; i < c.n_q; ++i) q_pos[i] = static_cast<int32_t>(c.n_kv - c.n_q + i);
        cpu::AttentionArgs a = q8_args(q, k8, v8, q_pos, kv_pos, c.n_head, c.n_head_kv, c.head_dim, ld_kv, stride);
        a.window = c.window; a.softcap = c.softcap;
        auto run = [&](bool vnni, std::vector<float> &out, std::vector<float> &cs) {
            cpu::set_q8_vnni_for_testing(vnni);
            out.assign(static_cast<size_t>(ldq * c.n_q), 7.0f);
            cs.assign(static_cast<size_t>(c.n_head_kv * c.n_kv), 0.0f);
            cpu::AttentionArgs f = a;
            f.out = out.data();
            f.col_sums = cs.data();
            cpu::attention(pool, f);
        };
        std::vector<float> on, on_cs, off, off_cs;
        run(true, on, on_cs);
        run(false, off, off_cs);
        cpu::set_q8_vnni_for_testing(true);
        const std::string what = "hd " + std::to_string(c.head_dim) + " heads " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " n_q " + std::to_string(c.n_q) + " n_kv " +
                                 std::to_string(c.n_kv) + " window " + std::to_string(c.window);
        EXPECT_EQ(0, std::memcmp(on.data(), off.data(), on.size() * sizeof(float))) << what;
        EXPECT_EQ(0, std::memcmp(on_cs.data(), off_cs.data(), on_cs.size() * sizeof(float))) << what;
        bool finite = true;
        for (float x : on) finite = finite && std::isfinite(x);
        EXPECT_TRUE(finite) << what;
    }
    cpu::set_simd_variant_for_testing(saved);
}
