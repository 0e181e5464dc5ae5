// The CUDA kernel bodies (kernels/cuda/*.h) run by the launch emulator
// (kernels/cuda/emulate.h: every thread of a block a host thread, sync() a
// real barrier) with the launch geometry the GPU wrappers use, against the
// CPU references: rms_norm_ref, rope_ref, dequantize_row_ref, matmul_ref,
// attention_ref, topk_dot_ref, lctx::fp16 conversions, plain loops for the
// element-wise ops. Shapes are chosen off the tile sizes (rows of 1000
// floats, 300 keys over blocks of 128, 37 output rows, partial sub-blocks).
// No GPU needed; built whether or not the CUDA module is (docs/backends/cuda.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/ggml_type.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/elementwise.h"
#include "emulated_attention.h"
#include "kernels/cuda/emulate.h"
#include "kernels/cuda/kv_rows.h"
#include "kernels/cuda/rope_setup.h"
#include "kernels/cuda/topk.h"
#include "test_kernels_util.h"

using namespace lctx;
using namespace lctx::cuda;

namespace {

double max_rel_err(const float *a, const float *b, size_t n) {
    double scale = 1e-6, err = 0.0;
    for (size_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
    for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    return err / scale;
}

} // namespace

TEST(CudaEmulated, HalfConversionMatchesTheCoreOnEveryHalfAndRandomFloats) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float a = half_to_float(static_cast<uint16_t>(h)), b = fp16_to_fp32(static_cast<uint16_t>(h));
        uint32_t ua, ub;
        std::memcpy(&ua, &a, 4);
        std::memcpy(&ub, &b, 4);
        if (std::isnan(b)) ASSERT_TRUE(std::isnan(a)) << h;
        else ASSERT_EQ(ua, ub) << h;
    }
    std::mt19937 rng(1);
    std::uniform_int_distribution<uint32_t> bits;
    std::uniform_real_distribution<float> mag(-30.0f, 17.0f);
    for (int i = 0; i < 200000; ++i) {
        float f;
        if (i % 2) {
            const uint32_t u = bits(rng);
            std::memcpy(&f, &u, 4);
        } else {
            f = std::ldexp(1.0f + (bits(rng) % 1024) / 1024.0f, static_cast<int>(mag(rng))) * (i % 4 ? 1 : -1);
        }
        if (std::isnan(f)) continue;
        ASSERT_EQ(float_to_half(f), fp32_to_fp16(f)) << f;
    }
    for (float f : {65504.0f, 65519.0f, 65520.0f, 6.0e-8f, 2.98e-8f, 2.9802322e-8f, -0.0f})
        EXPECT_EQ(float_to_half(f), fp32_to_fp16(f)) << f;
}

TEST(CudaEmulated, RmsNormMatchesTheReference) {
    std::mt19937 rng(2);
    for (int64_t n : {1000, 64, 1}) {
        const int64_t rows = 3;
        const auto x = test::random_floats(rows * n, rng, -3.0f, 3.0f), w = test::random_floats(n, rng);
        for (bool with_w : {true, false}) {
            std::vector<float> y(rows * n, NAN), ref(rows * n);
            for (int64_t r = 0; r < rows; ++r)
                cpu::rms_norm_ref(x.data() + r * n, with_w ? w.data() : nullptr, ref.data() + r * n, n, 1e-5f);
            const RmsNormArgs a{x.data(), with_w ? w.data() : nullptr, y.data(), n, 1e-5f};
            emulate_launch(rms_norm_dims(rows), [&](HostCtx &c) { rms_norm_body(c, a); });
            EXPECT_LT(max_rel_err(y.data(), ref.data(), y.size()), 1e-5) << "n " << n;
        }
    }
}

TEST(CudaEmulated, GegluAndScaleMatchTheCpuKernels) {
    std::mt19937 rng(4);
    for (int64_t n : {1237, 5, 70000}) {
        const auto g = test::random_floats(n, rng, -6.0f, 6.0f), u = test::random_floats(n, rng);
        std::vector<float> out(n, NAN), ref(n, NAN);
        const SwigluArgs ga{g.data(), u.data(), out.data(), n};
        emulate_launch(elt_dims(n), [&](HostCtx &c) { geglu_body(c, ga); });
        cpu::geglu(g.data(), u.data(), ref.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], ref[i], 1e-6 + 1e-6 * std::fabs(ref[i])) << i;
        std::vector<float> x = g;
        const ScaleArgs sa{x.data(), 0.37f, n};
        emulate_launch(elt_dims(n), [&](HostCtx &c) { scale_body(c, sa); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], g[i] * 0.37f) << i;
    }
}

TEST(CudaEmulated, SwigluAndAddMatchPlainLoops) {
    std::mt19937 rng(3);
    for (int64_t n : {1237, 5, 70000}) {
        const auto g = test::random_floats(n, rng, -6.0f, 6.0f), u = test::random_floats(n, rng);
        std::vector<float> out(n, NAN);
        const SwigluArgs sa{g.data(), u.data(), out.data(), n};
        emulate_launch(elt_dims(n), [&](HostCtx &c) { swiglu_body(c, sa); });
        for (int64_t i = 0; i < n; ++i) {
            const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
            ASSERT_NEAR(out[i], ref, 1e-6 + 1e-6 * std::fabs(ref)) << i;
        }
        std::vector<float> x = g;
        const AddArgs aa{x.data(), u.data(), n};
        emulate_launch(elt_dims(n), [&](HostCtx &c) { add_body(c, aa); });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], g[i] + u[i]) << i;
    }
}

TEST(CudaEmulated, RopeMatchesTheReferenceInEveryLayoutAndScaling) {
    std::mt19937 rng(4);
    struct Case {
        RopeLayout layout;
        RopeScaling scaling;
        int head_dim, n_rot;
    };
    for (const Case &cs : {Case{RopeLayout::NORMAL, RopeScaling::NONE, 64, 64}, Case{RopeLayout::NEOX, RopeScaling::NONE, 80, 80},
                           Case{RopeLayout::NORMAL, RopeScaling::LINEAR, 64, 32}, Case{RopeLayout::NEOX, RopeScaling::YARN, 64, 48}}) {
        Hparams hp;
        hp.head_dim = cs.head_dim;
        hp.n_rot = cs.n_rot;
        hp.rope_layout = cs.layout;
        hp.rope_scaling = cs.scaling;
        hp.rope_base = 500000.0f;
        hp.rope_freq_scale = 0.25f;
        hp.n_ctx_train = 4096;
        hp.yarn_ext_factor = cs.scaling == RopeScaling::YARN ? 1.0f : 0.0f;
        const int64_t n_tok = 7, heads = 3, ld = heads * cs.head_dim + 5;
        std::vector<int32_t> pos = {0, 1, 17, 4095, 100000, 999999, -12};
        auto x = test::random_floats(n_tok * ld, rng);
        std::vector<float> ref = x;
        cpu::rope_ref(hp, ref.data(), ld, n_tok, heads, pos.data());
        const RopeArgs a{rope_setup(hp), x.data(), ld, pos.data()};
        emulate_launch(rope_dims(n_tok, heads), [&](HostCtx &c) { rope_body(c, a); });
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], ref[i], 2e-6) << "element " << i << " rot " << cs.n_rot;
    }
}

namespace {

struct TypeShape {
    GgmlType type;
    int64_t n_cols;
};
// Plain types with a partial last sub-block of 32; block types with several blocks.
const TypeShape kShapes[] = {{GgmlType::F32, 70}, {GgmlType::F16, 45},   {GgmlType::Q4_0, 96},
                             {GgmlType::Q4_1, 160}, {GgmlType::Q8_0, 96}, {GgmlType::Q4_K, 512},
                             {GgmlType::Q6_K, 768}};

} // namespace

TEST(CudaEmulated, GetRowsDequantizesLikeTheReferenceForEveryType) {
    std::mt19937 rng(5);
    for (const TypeShape &s : kShapes) {
        const int64_t n_rows = 11;
        test::RandomWeight w(s.type, n_rows, s.n_cols, rng);
        const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
        const int64_t n = static_cast<int64_t>(ids.size());
        std::vector<float> out(n * s.n_cols, NAN), ref(n * s.n_cols);
        for (int64_t t = 0; t < n; ++t) dequantize_row_ref(s.type, w.view.row(ids[t]), ref.data() + t * s.n_cols, s.n_cols);
        const DequantRowsArgs a{static_cast<uint32_t>(s.type), w.view.data, w.view.row_bytes, s.n_cols, ids.data(),
                                out.data(), false};
        emulate_launch(dequant_rows_dims(n), [&](HostCtx &c) { dequant_rows_body(c, a); });
        EXPECT_LT(max_rel_err(out.data(), ref.data(), out.size()), 1e-6) << ggml_type_name(s.type);

        // the f16 copy of the whole weight (cuBLAS GEMM input)
        std::vector<uint16_t> h(n_rows * s.n_cols, 0xffff);
        const DequantRowsArgs ah{static_cast<uint32_t>(s.type), w.view.data, w.view.row_bytes, s.n_cols, nullptr,
                                 h.data(), true};
        emulate_launch(dequant_rows_dims(n_rows), [&](HostCtx &c) { dequant_rows_body(c, ah); });
        std::vector<float> row(s.n_cols);
        for (int64_t r = 0; r < n_rows; ++r) {
            dequantize_row_ref(s.type, w.view.row(r), row.data(), s.n_cols);
            for (int64_t c = 0; c < s.n_cols; ++c)
                ASSERT_EQ(h[r * s.n_cols + c], fp32_to_fp16(row[c])) << ggml_type_name(s.type) << " " << r << "," << c;
        }
    }
}

TEST(CudaEmulated, QuantizedGemvMatchesMatmulRefForEveryTypeAndTokenCount) {
    std::mt19937 rng(6);
    // short rows share a block (16 or 32 threads a row); long ones take all 128
    std::vector<TypeShape> shapes(std::begin(kShapes), std::end(kShapes));
    shapes.push_back({GgmlType::Q8_0, 3200});
    shapes.push_back({GgmlType::F32, 4100});
    for (const TypeShape &s : shapes) {
        const int64_t n_rows = 37;
        test::RandomWeight w(s.type, n_rows, s.n_cols, rng);
        for (int64_t n_tok : {int64_t{1}, int64_t{3}, int64_t{kGemvMaxTok}}) {
            const int64_t ldx = s.n_cols + 3;
            const auto x = test::random_floats(n_tok * ldx, rng);
            std::vector<float> y(n_tok * n_rows, NAN), ref(n_tok * n_rows);
            cpu::matmul_ref(w.view, x.data(), ldx, n_tok, ref.data());
            const GemvArgs a{static_cast<uint32_t>(s.type), w.view.data, w.view.row_bytes, n_rows, s.n_cols,
                             x.data(), ldx, n_tok, y.data(), gemv_threads_per_row(s.n_cols)};
            emulate_launch(gemv_dims(n_rows, a.threads_per_row), [&](HostCtx &c) { gemv_body(c, a); });
            EXPECT_LT(test::nmse(y.data(), ref.data(), y.size()), 1e-10) << ggml_type_name(s.type) << " tokens " << n_tok;
            EXPECT_LT(max_rel_err(y.data(), ref.data(), y.size()), 1e-5) << ggml_type_name(s.type) << " tokens " << n_tok;
        }
    }
}

namespace {

struct AttnCase {
    int64_t n_q, n_kv;
    int32_t n_head, n_head_kv, head_dim;
    bool f16, per_head_pos, col_max, with_cols;
    int64_t obs_begin;
    int32_t window = 0;   // > 0: sliding-window mask (Gemma 3's local layers)
    bool in_order = false;   // slots at positions 0..n_kv-1 in order (a prefill's causal mask), not shuffled
    float softcap = 0.0f;
};

void check_attention(const AttnCase &t, uint32_t seed, int32_t n_split = 1) {
    std::mt19937 rng(seed);
    const int64_t hd = t.head_dim, ldq = t.n_head * hd + 3, ld_kv = hd + 2, head_stride = ld_kv * t.n_kv + 7;
    const auto q = test::random_floats(t.n_q * ldq, rng, -2.0f, 2.0f);
    const auto k32 = test::random_floats(t.n_head_kv * head_stride, rng), v32 = test::random_floats(t.n_head_kv * head_stride, rng);
    std::vector<uint16_t> k16(k32.size()), v16(v32.size());
    for (size_t i = 0; i < k32.size(); ++i) {
        k16[i] = fp32_to_fp16(k32[i]);
        v16[i] = fp32_to_fp16(v32[i]);
    }
    // slots hold shuffled positions 0..n_kv-1 (evicted / reordered caches); queries
    // at the last positions, the first one below every slot (sees nothing)
    const int64_t pos_stride = t.per_head_pos ? t.n_kv + 5 : 0;
    std::vector<int32_t> kv_pos(t.per_head_pos ? t.n_head_kv * pos_stride : t.n_kv);
    for (int32_t g = 0; g < (t.per_head_pos ? t.n_head_kv : 1); ++g) {
        std::vector<int32_t> p(t.n_kv);
        std::iota(p.begin(), p.end(), 0);
        if (!t.in_order) std::shuffle(p.begin(), p.end(), rng);
        std::copy(p.begin(), p.end(), kv_pos.begin() + g * pos_stride);
    }
    std::vector<int32_t> q_pos(t.n_q);
    for (int64_t i = 0; i < t.n_q; ++i) q_pos[i] = static_cast<int32_t>(t.n_kv - t.n_q + i);
    q_pos[0] = -1;
    const int64_t ldo = t.n_head * hd + 1;
    std::vector<float> out(t.n_q * ldo, 0.0f), ref(t.n_q * ldo, 0.0f);
    std::vector<float> cols(t.n_head_kv * t.n_kv, 0.0f), cols_ref(cols.size(), 0.0f);

    cpu::AttentionArgs r;
    r.q = q.data(); r.ldq = ldq;
    if (t.f16) { r.k16 = k16.data(); r.v16 = v16.data(); } else { r.k = k32.data(); r.v = v32.data(); }
    r.ld_kv = ld_kv; r.kv_head_stride = head_stride;
    r.out = ref.data(); r.ldo = ldo;
    r.n_q = t.n_q; r.n_kv = t.n_kv; r.n_head = t.n_head; r.n_head_kv = t.n_head_kv; r.head_dim = t.head_dim;
    r.q_pos = q_pos.data(); r.kv_pos = kv_pos.data(); r.kv_pos_head_stride = pos_stride;
    r.col_sums = t.with_cols ? cols_ref.data() : nullptr; r.obs_begin = t.obs_begin; r.col_max = t.col_max;
    r.window = t.window;
    r.softcap = t.softcap;
    cpu::attention_ref(r);

    AttnArgs a{};
    a.q = q.data(); a.ldq = ldq;
    a.k = t.f16 ? static_cast<const void *>(k16.data()) : k32.data();
    a.v = t.f16 ? static_cast<const void *>(v16.data()) : v32.data();
    a.kv_f16 = t.f16; a.ld_kv = ld_kv; a.kv_head_stride = head_stride;
    a.out = out.data(); a.ldo = ldo;
    a.n_q = t.n_q; a.n_kv = t.n_kv; a.n_head = t.n_head; a.n_head_kv = t.n_head_kv; a.head_dim = t.head_dim;
    a.q_pos = q_pos.data(); a.kv_pos = kv_pos.data(); a.kv_pos_head_stride = pos_stride;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.col_sums = t.with_cols ? cols.data() : nullptr; a.obs_begin = t.obs_begin; a.col_max = t.col_max;
    a.window = t.window;
    a.softcap = t.softcap;
    std::vector<float> part(t.n_q * t.n_head * n_split * (hd + 2), NAN), row_ml(t.n_q * t.n_head * 2, NAN);
    a.n_split = n_split;
    a.tiled = attention_tiled_fits(t.n_q, t.head_dim);   // as the backend chooses
    if (n_split > 1) a.part = part.data();
    if (attention_needs_row_ml(a)) a.row_ml = row_ml.data();
    emulate_attention(a);

    EXPECT_LT(max_rel_err(out.data(), ref.data(), out.size()), 2e-5);
    for (int64_t d = 0; d < t.n_head * hd; ++d) EXPECT_EQ(out[d], 0.0f) << "the first query sees no slot";
    if (t.with_cols) EXPECT_LT(max_rel_err(cols.data(), cols_ref.data(), cols.size()), 2e-5);
}

} // namespace

TEST(CudaEmulated, FlashAttentionMatchesTheReference) {
    // n_kv 300: two full key blocks of 128 and a partial one; GQA 6/2 and 4/4
    check_attention({5, 300, 6, 2, 40, false, false, false, false, 0}, 7);
    check_attention({5, 300, 6, 2, 64, true, false, false, false, 0}, 8);
    check_attention({1, 77, 4, 4, 32, false, true, false, false, 0}, 9);
    check_attention({3, 129, 3, 1, 160, false, false, false, false, 0}, 10);   // head_dim > threads
}

TEST(CudaEmulated, FlashAttentionSlidingWindowMatchesTheReference) {
    // windows shorter than the spread of positions, so queries lose keys at both ends
    check_attention({5, 300, 6, 2, 40, false, false, false, false, 0, 37}, 31);
    check_attention({4, 300, 6, 2, 64, true, true, false, true, 1, 120}, 32);   // per-head positions, column sums
    check_attention({1, 1000, 4, 1, 64, false, false, true, true, 0, 200}, 33, 5);   // decode, key split, col_max
}

TEST(CudaEmulated, FlashAttentionColumnSumsAndMaximaMatchTheReference) {
    check_attention({6, 300, 6, 2, 40, false, false, false, true, 2}, 11);
    check_attention({6, 300, 6, 2, 40, true, true, false, true, 0}, 12);
    check_attention({6, 300, 6, 2, 40, false, false, true, true, 3}, 13);   // col_max
    check_attention({1, 200, 4, 1, 64, true, false, true, true, 0}, 14);    // decode, group max
}

TEST(CudaEmulated, FlashAttentionKeySplitMatchesTheReference) {
    // 300 keys in 3 ranges of 128/128/44; 1000 keys in 5 ranges of 256 (the last empty)
    check_attention({5, 300, 6, 2, 40, false, false, false, false, 0}, 21, 3);
    check_attention({1, 1000, 4, 1, 64, true, false, false, true, 0}, 22, 5);    // decode with column sums
    check_attention({3, 1000, 6, 2, 40, false, true, true, true, 1}, 23, 5);     // col_max, per-head positions
    check_attention({2, 130, 3, 3, 160, false, false, false, true, 0}, 24, 2);   // head_dim > threads
    // the split rule: many rows or few keys, no split; a decode row over a long cache, many
    EXPECT_EQ(attention_splits(600, 100000, 528), 1);
    EXPECT_EQ(attention_splits(9, 300, 528), 1);
    EXPECT_EQ(attention_splits(9, 100000, 528), 59);
    EXPECT_EQ(attention_splits(1, 4096, 528), 8);
}

TEST(CudaEmulated, TiledAttentionMatchesTheReference) {
    // Many queries: attention_tiled_body (attention_tiled.h), one variant per
    // head-dim range, with partial query blocks and key tiles (70 queries
    // over blocks of 64 or 32, 300 keys over tiles of 32).
    EXPECT_TRUE(attention_tiled_fits(16, 64));
    EXPECT_FALSE(attention_tiled_fits(15, 64));
    EXPECT_FALSE(attention_tiled_fits(600, 257));
    EXPECT_FALSE(attention_use_tiled(AttnArgs{.n_q = 600, .head_dim = 64}));   // tiled unset (LCTX_CUDA_ATTENTION=flat)
    EXPECT_FALSE(attention_use_tiled(AttnArgs{.n_q = 600, .head_dim = 300, .tiled = true}));
    check_attention({70, 300, 6, 2, 64, false, false, false, false, 0}, 41);
    check_attention({70, 300, 6, 2, 40, true, true, false, false, 0}, 42);    // f16, per-head positions, 40 dims
    check_attention({37, 300, 4, 1, 100, false, false, false, false, 0}, 43); // two chunks, the second partial
    check_attention({33, 130, 2, 1, 256, true, false, false, false, 0}, 44);  // Gemma 3's head dim
    check_attention({20, 90, 3, 3, 160, false, false, false, false, 0}, 45);
}

TEST(CudaEmulated, TiledAttentionCausalPrefillWindowsAndSoftcap) {
    // A prefill (queries at every slot's position, in order): key tiles after
    // a query block's last position are skipped; sliding windows drop tiles
    // before it too.
    AttnCase prefill{200, 200, 6, 2, 64, false, false, false, false, 0};
    prefill.in_order = true;
    check_attention(prefill, 51);
    // one cached slot before the batch: a query block's last position (64)
    // is the first key of a tile, the one key of it that the block sees
    AttnCase shifted{200, 201, 6, 2, 64, false, false, false, false, 0};
    shifted.in_order = true;
    check_attention(shifted, 54);
    AttnCase windowed = prefill;
    windowed.window = 45;
    check_attention(windowed, 52);
    AttnCase capped{40, 300, 4, 2, 64, false, false, false, false, 0};
    capped.softcap = 30.0f;   // gemma2's soft cap, scores large enough to bend
    check_attention(capped, 53);
}

TEST(CudaEmulated, TiledAttentionKeySplitMatchesTheReference) {
    // The split rule: a 512-token batch of SmolLM2 (72 blocks) over 32K keys
    // on 132 SMs, four ranges; fewer keys, fewer ranges; enough blocks, none.
    EXPECT_EQ(attention_tiled_splits(512, 9, 64, 32768, 132), 4);
    EXPECT_EQ(attention_tiled_splits(512, 9, 64, 2048, 132), 2);
    EXPECT_EQ(attention_tiled_splits(4096, 9, 64, 32768, 132), 1);
    EXPECT_EQ(attention_tiled_splits(64, 4, 256, 500, 132), 1);
    EXPECT_EQ(attention_tiled_splits(16, 1, 64, 1 << 20, 132), 64);
    // 1000 keys in 3 ranges of 352/352/296, 4 ranges of 256
    check_attention({70, 1000, 6, 2, 64, false, false, false, false, 0}, 71, 3);
    check_attention({40, 1000, 6, 2, 40, true, true, false, true, 5}, 72, 4);      // f16, per-head positions, column sums
    check_attention({33, 1000, 4, 1, 100, false, false, true, true, 0}, 73, 3);    // col_max, two chunks
    AttnCase prefill{300, 300, 4, 2, 64, false, false, false, true, 250};
    prefill.in_order = true;   // the first query block sees nothing of the later ranges
    check_attention(prefill, 74, 3);
}

TEST(CudaEmulated, TiledAttentionColumnSumsAndMaxima) {
    // The tiled kernel writes each row's final (m, l) for attn_cols_body.
    check_attention({40, 300, 6, 2, 40, false, false, false, true, 25}, 61);
    check_attention({40, 300, 6, 2, 64, true, true, true, true, 0}, 62);   // col_max, f16, per-head positions
    AttnCase prefill{100, 100, 4, 2, 64, false, false, false, true, 80};
    prefill.in_order = true;
    check_attention(prefill, 63);
}

TEST(CudaEmulated, KvRowsGatherStoreLoadMatchTheCpuBackendSemantics) {
    std::mt19937 rng(15);
    const int64_t row = 70, n_src = 40;
    const auto src = test::random_floats(n_src * row, rng, -70000.0f, 70000.0f);   // some overflow f16
    std::vector<uint16_t> src16(src.size());
    for (size_t i = 0; i < src.size(); ++i) src16[i] = fp32_to_fp16(src[i] * 1e-3f);
    const std::vector<int64_t> idx = {39, 0, 5, 5, 17, 38, 1};
    const int64_t n = static_cast<int64_t>(idx.size());
    // gather, both element sizes
    std::vector<float> g32(n * row, NAN);
    const GatherArgs ga{g32.data(), src.data(), idx.data(), row, 4};
    emulate_launch(kv_rows_dims(n), [&](HostCtx &c) { gather_rows_body(c, ga); });
    std::vector<uint16_t> g16(n * row, 0xffff);
    const GatherArgs gb{g16.data(), src16.data(), idx.data(), row, 2};
    emulate_launch(kv_rows_dims(n), [&](HostCtx &c) { gather_rows_body(c, gb); });
    for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < row; ++e) {
            ASSERT_EQ(g32[i * row + e], src[idx[i] * row + e]);
            ASSERT_EQ(g16[i * row + e], src16[idx[i] * row + e]);
        }
    // store f32 -> f16 with strides, then load back to f32
    const int64_t ld_src = row + 6, ld_dst = row + 2, m = 9;
    const auto x = test::random_floats(m * ld_src, rng, -70000.0f, 70000.0f);
    std::vector<uint16_t> st(m * ld_dst, 0x1234);
    const RowConvertArgs sa{st.data(), ld_dst, true, x.data(), ld_src, false, row};
    emulate_launch(kv_rows_dims(m), [&](HostCtx &c) { convert_rows_body(c, sa); });
    std::vector<float> back(m * ld_src, -1.0f);
    const RowConvertArgs la{back.data(), ld_src, false, st.data(), ld_dst, true, row};
    emulate_launch(kv_rows_dims(m), [&](HostCtx &c) { convert_rows_body(c, la); });
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t e = 0; e < row; ++e) {
            ASSERT_EQ(st[i * ld_dst + e], fp32_to_fp16(x[i * ld_src + e]));
            const float want = fp16_to_fp32(fp32_to_fp16(x[i * ld_src + e]));
            ASSERT_TRUE(back[i * ld_src + e] == want || (std::isinf(want) && back[i * ld_src + e] == want));
        }
        for (int64_t e = row; e < ld_dst; ++e) ASSERT_EQ(st[i * ld_dst + e], 0x1234) << "padding untouched";
        for (int64_t e = row; e < ld_src; ++e) ASSERT_EQ(back[i * ld_src + e], -1.0f) << "padding untouched";
    }
    // f32 -> f32 store is a copy
    std::vector<float> cp(m * ld_dst, 0.0f);
    const RowConvertArgs ca{cp.data(), ld_dst, false, x.data(), ld_src, false, row};
    emulate_launch(kv_rows_dims(m), [&](HostCtx &c) { convert_rows_body(c, ca); });
    for (int64_t i = 0; i < m; ++i)
        for (int64_t e = 0; e < row; ++e) ASSERT_EQ(cp[i * ld_dst + e], x[i * ld_src + e]);
}

namespace {

// Scores on the emulated GPU + row top-k + host merge, segment by segment,
// as CudaBackend::topk_dot runs them.
void emulated_topk_dot(const cpu::TopkDotArgs &a) {
    const int64_t R = a.n_rows, k = a.k;
    std::vector<float> cs(R * k);
    std::vector<int64_t> ci(R * k);
    for (int64_t s = 0; s < a.n_segments; ++s) {
        const auto &seg = a.segments[s];
        if (seg.n == 0) continue;
        std::vector<float> scores(R * seg.n, NAN);
        const DotScoresArgs d{a.q, a.ldq, seg.keys, a.keys_f16, a.ld_keys, seg.n, a.dim, scores.data()};
        emulate_launch(dot_scores_dims(seg.n, R, a.dim), [&](HostCtx &c) { dot_scores_body(c, d); });
        const RowTopkArgs t{scores.data(), seg.n, seg.index_base, a.tile_max, a.k, cs.data(), ci.data()};
        emulate_launch(row_topk_dims(R), [&](HostCtx &c) { row_topk_body(c, t); });
        for (int64_t r = 0; r < R; ++r)
            merge_topk(a.best_score + r * k, a.best_index + r * k, cs.data() + r * k, ci.data() + r * k, a.k);
    }
}

} // namespace

TEST(CudaEmulated, TopkDotMatchesTheReferenceWithTiesTilesAndSegments) {
    std::mt19937 rng(16);
    std::uniform_int_distribution<int> small(-3, 3);
    const int32_t dim = 24;
    const int64_t R = 5, ldq = dim + 1, ld_keys = dim + 3;
    // small integers: every dot product is exact in any order, so the lists
    // must agree entry for entry, ties (many) included
    std::vector<float> q(R * ldq);
    for (auto &v : q) v = static_cast<float>(small(rng));
    const int64_t seg_n[] = {300, 128, 45};
    const int64_t seg_base[] = {0, 384, 1000};   // tile-aligned starts, gaps between
    std::vector<std::vector<float>> k32(3);
    std::vector<std::vector<uint16_t>> k16(3);
    for (int s = 0; s < 3; ++s) {
        k32[s].resize(seg_n[s] * ld_keys);
        k16[s].resize(k32[s].size());
        for (size_t i = 0; i < k32[s].size(); ++i) {
            k32[s][i] = static_cast<float>(small(rng));
            k16[s][i] = fp32_to_fp16(k32[s][i]);
        }
    }
    k32[0][5 * ld_keys] = NAN;   // a NaN score is never selected
    for (bool f16 : {false, true})
        for (bool tile_max : {false, true})
            for (int32_t k : {1, 5, 64}) {
                std::vector<cpu::TopkDotArgs::Segment> segs(3);
                for (int s = 0; s < 3; ++s)
                    segs[s] = {f16 ? static_cast<const void *>(k16[s].data()) : k32[s].data(), seg_n[s], seg_base[s]};
                cpu::TopkDotArgs a;
                a.q = q.data(); a.ldq = ldq; a.n_rows = R;
                a.segments = segs.data(); a.n_segments = 3;
                a.keys_f16 = f16; a.ld_keys = ld_keys; a.dim = dim; a.k = k; a.tile_max = tile_max;
                // both start from the same partly filled lists (a previous block)
                std::vector<float> s_ref(R * k, -INFINITY), s_emu;
                std::vector<int64_t> i_ref(R * k, -1), i_emu;
                for (int64_t r = 0; r < R; ++r) {
                    s_ref[r * k] = 20.0f;
                    i_ref[r * k] = 5000 + r;
                }
                s_emu = s_ref;
                i_emu = i_ref;
                a.best_score = s_ref.data(); a.best_index = i_ref.data();
                cpu::topk_dot_ref(a);
                a.best_score = s_emu.data(); a.best_index = i_emu.data();
                emulated_topk_dot(a);
                for (int64_t e = 0; e < R * k; ++e) {
                    ASSERT_EQ(i_emu[e], i_ref[e]) << "f16 " << f16 << " tile_max " << tile_max << " k " << k << " entry " << e;
                    if (i_ref[e] >= 0) ASSERT_EQ(s_emu[e], s_ref[e]);
                    else ASSERT_TRUE(std::isinf(s_emu[e]) && s_emu[e] < 0);
                }
            }
}

// The harness itself: a body that reads a neighbour's shared-memory write
// without a sync() between must give a wrong answer, a divergent barrier
// must be reported, and OS-thread mode must agree with the fibers.
TEST(CudaEmulator, CatchesAMissingSyncAndADivergentBarrier) {
    if (kDefaultEmulateMode != EmulateMode::Fibers) GTEST_SKIP() << "fibers are off under ThreadSanitizer";
    const int n = 64;
    std::vector<float> out(n, 0.0f);
    auto neighbour = [&](HostCtx &c, bool with_sync) {
        float *s = reinterpret_cast<float *>(c.shared());
        s[c.tid()] = static_cast<float>(c.tid());
        if (with_sync) c.sync();
        out[c.tid()] = s[(c.tid() + 1) % c.nthreads()];
    };
    emulate_launch(Dim3{1, 1, 1}, n, n * sizeof(float), [&](HostCtx &c) { neighbour(c, true); });
    for (int t = 0; t < n; ++t) EXPECT_EQ(out[t], static_cast<float>((t + 1) % n));
    emulate_launch(Dim3{1, 1, 1}, n, n * sizeof(float), [&](HostCtx &c) { neighbour(c, false); });
    int wrong = 0;
    for (int t = 0; t < n; ++t) wrong += !(out[t] == static_cast<float>((t + 1) % n));
    EXPECT_GT(wrong, 0) << "a missing sync went unnoticed";

    EXPECT_THROW(emulate_launch(Dim3{2, 1, 1}, 8, 0,
                                [&](HostCtx &c) {
                                    if (c.tid() < 4) c.sync();
                                }),
                 std::logic_error);
}

TEST(CudaEmulator, OsThreadModeAgreesWithFibers) {
    std::mt19937 rng(17);
    const int64_t rows = 2, n = 300;
    const auto x = test::random_floats(rows * n, rng);
    std::vector<float> a(rows * n), b(rows * n);
    const RmsNormArgs ra{x.data(), nullptr, a.data(), n, 1e-5f}, rb{x.data(), nullptr, b.data(), n, 1e-5f};
    emulate_launch(rms_norm_dims(rows), [&](HostCtx &c) { rms_norm_body(c, ra); });
    emulate_launch(rms_norm_dims(rows), [&](HostCtx &c) { rms_norm_body(c, rb); }, EmulateMode::Threads);
    EXPECT_EQ(a, b);
}
