// The tiled attention path (many query rows: prefill) against attention_ref
// on causal, contiguous positions as the forward pass produces them: a
// cached prefix plus a batch whose later keys are invisible to its earlier
// queries (whole key blocks skipped, diagonal blocks masked), head dims that
// are not a multiple of the SIMD width, row counts that leave 1 to 3 rows
// in the last tile, and column sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "test_kernels_util.h"

using namespace lctx;

namespace {

struct CausalCase {
    int n_head, n_head_kv, head_dim;
    int64_t n_past, n_q;   // keys = n_past cached + n_q of the batch
};

// Random q, k, v at contiguous causal positions (keys ld_kv floats apart, 3
// spare rows per KV head) and the arguments that read them; not copyable,
// the arguments point into the vectors.
struct CausalInputs {
    std::vector<float> q, k, v;
    std::vector<int32_t> kv_pos, q_pos;
    cpu::AttentionArgs args;
    CausalInputs(const CausalCase &c, int64_t ld_kv, std::mt19937 &rng) {
        const int64_t n_kv = c.n_past + c.n_q, ldq = c.n_head * c.head_dim, stride = ld_kv * (n_kv + 3);
        q = test::random_floats(static_cast<size_t>(ldq * c.n_q), rng, -2.0f, 2.0f);
        k = test::random_floats(static_cast<size_t>(stride * c.n_head_kv), rng, -2.0f, 2.0f);
        v = test::random_floats(static_cast<size_t>(stride * c.n_head_kv), rng);
        kv_pos.resize(static_cast<size_t>(n_kv));
        q_pos.resize(static_cast<size_t>(c.n_q));
        for (int64_t j = 0; j < n_kv; ++j) kv_pos[j] = static_cast<int32_t>(j);
        for (int64_t i = 0; i < c.n_q; ++i) q_pos[i] = static_cast<int32_t>(c.n_past + i);
        args.q = q.data(); args.ldq = ldq;
        args.k = k.data(); args.v = v.data(); args.ld_kv = ld_kv; args.kv_head_stride = stride;
        args.n_q = c.n_q; args.n_kv = n_kv;
        args.n_head = c.n_head; args.n_head_kv = c.n_head_kv; args.head_dim = c.head_dim;
        args.q_pos = q_pos.data(); args.kv_pos = kv_pos.data();
    }
    CausalInputs(const CausalInputs &) = delete;
    CausalInputs &operator=(const CausalInputs &) = delete;
};

// shuffle_keys: the key positions permuted (a compacted cache, as REFORM's,
// holds keys out of position order), so that a row tile sees keys scattered
// over a block, not a prefix of it.
void run_causal(const CausalCase &c, cpu::ThreadPool &pool, std::mt19937 &rng, bool shuffle_keys = false) {
    const int64_t n_kv = c.n_past + c.n_q, ldq = c.n_head * c.head_dim;
    CausalInputs in(c, c.head_dim, rng);
    if (shuffle_keys) std::shuffle(in.kv_pos.begin(), in.kv_pos.end(), rng);
    cpu::AttentionArgs a = in.args;
    a.obs_begin = c.n_q / 2;

    std::vector<float> ref(static_cast<size_t>(ldq * c.n_q)), ref_cs(static_cast<size_t>(c.n_head_kv * n_kv), 0.0f);
    cpu::AttentionArgs r = a;
    r.out = ref.data(); r.ldo = ldq; r.col_sums = ref_cs.data();
    cpu::attention_ref(r);

    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        std::vector<float> out(ref.size(), 7.0f), cs(ref_cs.size(), 0.0f);
        cpu::AttentionArgs f = a;
        f.out = out.data(); f.ldo = ldq; f.col_sums = cs.data();
        cpu::attention(pool, f);
        const std::string what = std::string(name) + (shuffle_keys ? " shuffled" : "") + " heads " + std::to_string(c.n_head) + "/" +
                                 std::to_string(c.n_head_kv) + " hd " + std::to_string(c.head_dim) + " past " +
                                 std::to_string(c.n_past) + " n_q " + std::to_string(c.n_q);
        EXPECT_LE(test::max_abs_diff(out.data(), ref.data(), out.size()), 2e-6) << what;
        EXPECT_LT(test::nmse(out.data(), ref.data(), out.size()), 1e-11) << what;
        EXPECT_LE(test::max_abs_diff(cs.data(), ref_cs.data(), cs.size()), 1e-5) << what;
    });
}

} // namespace

TEST(KernelsAttentionTiled, CausalPrefillMatchesReference) {
    std::mt19937 rng(77);
    cpu::ThreadPool pool1(1), pool2(2), pool3(3);
    const CausalCase cases[] = {
        {9, 3, 64, 0, 200},    // first batch: key blocks after a query block are skipped
        {9, 3, 64, 130, 77},   // cached prefix not a multiple of the key block
        {9, 3, 64, 1, 128},    // a key block starting at the last query's position (1 visible key)
        {9, 3, 64, 33, 64},
        {6, 2, 40, 64, 65},    // head dim 40: partial vectors in P.V and scores
        {3, 1, 7, 5, 11},      // 33 rows: last tile of 1 row, tiny head dim
        {4, 2, 128, 300, 26},  // two P.V head-dim tiles; 52 rows
        {2, 2, 16, 0, 5},      // 5 rows per KV head: the key-at-a-time path
    };
    for (const CausalCase &c : cases) {
        run_causal(c, pool1, rng);
        run_causal(c, pool2, rng);
        run_causal(c, pool3, rng);
        if (HasFatalFailure()) return;
    }
}

// Key positions in no order: the tiled kernel trims a diagonal block to the
// keys up to the last one a row tile sees, and must still mask the ones
// before it that the tile may not see.
TEST(KernelsAttentionTiled, KeysOutOfPositionOrderMatchReference) {
    std::mt19937 rng(78);
    cpu::ThreadPool pool2(2);
    const CausalCase cases[] = {
        {9, 3, 64, 0, 200},
        {9, 3, 64, 130, 77},
        {6, 2, 40, 64, 65},
        {3, 1, 7, 5, 11},
    };
    for (const CausalCase &c : cases) {
        run_causal(c, pool2, rng, true);
        if (HasFatalFailure()) return;
    }
}

// AttentionArgs::bf16 (simd_bf16.h). Where the CPU has AVX512_BF16 the
// AVX-512 variant multiplies in bf16: its output is checked against
// attention_ref run on q, k, v rounded to bf16 beforehand (the products are
// then exact in f32; what remains is the rounding of the probabilities, at
// most 2^-9 relative each), and it must differ from the f32 kernel's (the
// bf16 kernel ran). Every other variant, and CPUs without the instructions,
// must give the f32 kernel's output bit for bit.
TEST(KernelsAttentionTiled, Bf16DotProductsStayWithinBf16Rounding) {
    std::mt19937 rng(91);
    cpu::ThreadPool pool(2);
    const CausalCase cases[] = {
        {9, 3, 64, 0, 200}, {9, 3, 64, 130, 77}, {6, 2, 40, 64, 65}, {3, 1, 7, 5, 11}, {4, 2, 128, 300, 26},
        {4, 1, 256, 17, 40},   // Gemma 3's head dim
    };
    auto round_bf16 = [](std::vector<float> &x) {
        for (float &f : x) f = bf16_to_fp32(fp32_to_bf16(f));
    };
    for (const CausalCase &c : cases) {
        const int64_t ldq = c.n_head * c.head_dim;
        const CausalInputs in(c, c.head_dim + 3, rng);
        const cpu::AttentionArgs &a = in.args;

        std::vector<float> qr = in.q, kr = in.k, vr = in.v, ref(static_cast<size_t>(ldq * c.n_q));
        round_bf16(qr); round_bf16(kr); round_bf16(vr);
        cpu::AttentionArgs r = a;
        r.q = qr.data(); r.k = kr.data(); r.v = vr.data();
        r.out = ref.data(); r.ldo = ldq;
        cpu::attention_ref(r);

        test::for_each_variant([&](cpu::SimdVariant variant, const char *name) {
            std::vector<float> exact(ref.size()), lossy(ref.size());
            cpu::AttentionArgs f = a;
            f.out = exact.data(); f.ldo = ldq;
            cpu::attention(pool, f);
            f.out = lossy.data();
            f.bf16 = true;
            cpu::attention(pool, f);
            const std::string what = std::string(name) + " hd " + std::to_string(c.head_dim) + " n_q " +
                                     std::to_string(c.n_q) + " past " + std::to_string(c.n_past);
            if (variant == cpu::SimdVariant::AVX512 && cpu::cpu_has_avx512_bf16()) {
                // measured: 0.0004-0.0012 max, nmse ~1e-6
                EXPECT_NE(test::max_abs_diff(lossy.data(), exact.data(), lossy.size()), 0.0) << what;
                EXPECT_LE(test::max_abs_diff(lossy.data(), ref.data(), lossy.size()), 4e-3) << what;
                EXPECT_LT(test::nmse(lossy.data(), ref.data(), lossy.size()), 1e-5) << what;
            } else {
                EXPECT_EQ(test::max_abs_diff(lossy.data(), exact.data(), lossy.size()), 0.0) << what;
            }
        });
        if (HasFatalFailure()) return;
    }
}
