// Checks of CudaBackend against the CPU backend, op by op on random inputs,
// with device buffers as the engine passes them and host pointers where the
// engine passes host memory. Shared by test_cuda_backend_gpu (the real
// module on a GPU) and test_cuda_backend_emulated (the same backend code on
// the emulated device, tests/cuda/emulated_device.cpp); each defines
// make_cuda_under_test().
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "common/ggml_type.h"
#include "test_kernels_util.h"

using namespace lctx;

// Defined by each test program: the CUDA backend to test, or null with the
// reason in *why (the test is then skipped).
std::unique_ptr<lctx::Backend> make_cuda_under_test(std::string *why);

class CudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        std::string why;
        gpu_ = make_cuda_under_test(&why);
        if (!gpu_) GTEST_SKIP() << why;
        cpu_ = make_cpu_backend(2);
    }
    // a device buffer holding v
    template <class T>
    std::unique_ptr<Buffer> up(const std::vector<T> &v) {
        auto b = gpu_->alloc(v.size() * sizeof(T));
        gpu_->from_host(b->data(), v.data(), v.size() * sizeof(T));
        return b;
    }
    template <class T>
    std::vector<T> down(Buffer &b, size_t n) {
        std::vector<T> v(n);
        gpu_->to_host(v.data(), b.data(), n * sizeof(T));
        return v;
    }
    static double rel(const std::vector<float> &a, const std::vector<float> &b) {
        double e = 0.0, s = 1e-6;
        for (size_t i = 0; i < a.size(); ++i) {
            e = std::max(e, std::fabs(double(a[i]) - b[i]));
            s = std::max(s, std::fabs(double(b[i])));
        }
        return e / s;
    }
    std::unique_ptr<Backend> gpu_, cpu_;
    std::mt19937 rng_{42};
};

TEST_F(CudaOps, NormActAddAndRopeMatchTheCpu) {
    const int64_t rows = 5, n = 1000;
    const auto x = test::random_floats(rows * n, rng_), w = test::random_floats(n, rng_);
    WeightView wv;
    wv.type = GgmlType::F32;
    wv.n_rows = 1;
    wv.n_cols = n;
    wv.row_bytes = n * 4;
    wv.data = reinterpret_cast<const uint8_t *>(w.data());
    std::vector<float> ref(rows * n);
    cpu_->rms_norm(x.data(), wv, ref.data(), rows, n, 1e-5f);
    auto xb = up(x), yb = gpu_->alloc(rows * n * 4);
    gpu_->rms_norm(xb->f32(), wv, yb->f32(), rows, n, 1e-5f);
    EXPECT_LT(rel(down<float>(*yb, rows * n), ref), 1e-5);

    const auto g = test::random_floats(rows * n, rng_);
    cpu_->swiglu(g.data(), x.data(), ref.data(), rows, n);
    auto gb = up(g);
    gpu_->swiglu(gb->f32(), xb->f32(), yb->f32(), rows, n);
    EXPECT_LT(rel(down<float>(*yb, rows * n), ref), 1e-5);
    cpu_->geglu(g.data(), x.data(), ref.data(), rows, n);
    gpu_->geglu(gb->f32(), xb->f32(), yb->f32(), rows, n);
    EXPECT_LT(rel(down<float>(*yb, rows * n), ref), 1e-5);
    std::vector<float> sc = g;
    cpu_->scale(sc.data(), -1.75f, rows * n);
    auto scb = up(g);
    gpu_->scale(scb->f32(), -1.75f, rows * n);
    EXPECT_EQ(down<float>(*scb, rows * n), sc);

    std::vector<float> s = x;
    cpu_->add(s.data(), g.data(), rows * n);
    gpu_->add(xb->f32(), gb->f32(), rows * n);
    EXPECT_EQ(down<float>(*xb, rows * n), s);

    Hparams hp;
    hp.head_dim = 64;
    hp.n_rot = 64;
    hp.rope_base = 10000.0f;
    const int64_t n_tok = 9, heads = 3;
    std::vector<int32_t> pos = {0, 1, 2, 100, 4096, 70000, 5, 6, 999999};   // host positions, as the engine passes
    auto v = test::random_floats(n_tok * heads * 64, rng_);
    auto vb = up(v);
    cpu_->rope(hp, v.data(), heads * 64, n_tok, heads, pos.data());
    gpu_->rope(hp, vb->f32(), heads * 64, n_tok, heads, pos.data());
    EXPECT_LT(rel(down<float>(*vb, v.size()), v), 1e-5);
}

TEST_F(CudaOps, GetRowsAndMatmulMatchTheCpuForEveryTypeOnBothPaths) {
    for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K,
                       GgmlType::Q6_K}) {
        const int64_t n_rows = 300, n_cols = 512;
        test::RandomWeight w(t, n_rows, n_cols, rng_);
        const std::vector<int32_t> ids = {0, 299, 17, 17};
        std::vector<float> ref(ids.size() * n_cols);
        cpu_->get_rows(w.view, ids.data(), ids.size(), ref.data());
        auto ob = gpu_->alloc(ref.size() * 4);
        gpu_->get_rows(w.view, ids.data(), ids.size(), ob->f32());
        EXPECT_LT(rel(down<float>(*ob, ref.size()), ref), 1e-6) << ggml_type_name(t);
        for (int64_t n_tok : {1, 8, 37}) {   // GEMV, GEMV, cuBLAS GEMM (f16 activations)
            const auto x = test::random_floats(n_tok * n_cols, rng_);
            std::vector<float> y(n_tok * n_rows);
            cpu_->matmul(w.view, x.data(), n_cols, n_tok, y.data());
            auto xb = up(x), yb = gpu_->alloc(y.size() * 4);
            gpu_->matmul(w.view, xb->f32(), n_cols, n_tok, yb->f32());
            EXPECT_LT(rel(down<float>(*yb, y.size()), y), n_tok > 8 ? 2e-3 : 1e-5) << ggml_type_name(t) << " " << n_tok;
        }
    }
}

TEST_F(CudaOps, BiasRopeFactorsAndSoftCapMatchTheCpu) {
    // qwen2's bias add, llama3's rope_freqs, gemma2's attention soft-cap
    const int64_t rows = 7, n = 96;
    const auto x = test::random_floats(rows * n, rng_), bias = test::random_floats(n, rng_);
    WeightView bv;
    bv.type = GgmlType::F32;
    bv.n_rows = 1;
    bv.n_cols = n;
    bv.row_bytes = n * 4;
    bv.data = reinterpret_cast<const uint8_t *>(bias.data());
    std::vector<float> s = x;
    cpu_->add_bias(s.data(), bv, rows);
    auto xb = up(x);
    gpu_->add_bias(xb->f32(), bv, rows);
    EXPECT_EQ(down<float>(*xb, rows * n), s);

    Hparams hp;
    hp.head_dim = 64;
    hp.n_rot = 64;
    hp.rope_base = 500000.0f;
    std::vector<float> ff(32);
    for (int i = 0; i < 32; ++i) ff[i] = i < 8 ? 1.0f : (i < 16 ? 1.0f + 0.5f * (i - 7) : 8.0f);
    hp.rope_freq_factors = ff.data();
    const int64_t n_tok = 6, heads = 2;
    std::vector<int32_t> pos = {0, 3, 100, 8191, 70000, 131071};
    auto v = test::random_floats(n_tok * heads * 64, rng_);
    auto vb = up(v);
    const std::vector<float> v0 = v;
    cpu_->rope(hp, v.data(), heads * 64, n_tok, heads, pos.data());
    gpu_->rope(hp, vb->f32(), heads * 64, n_tok, heads, pos.data());
    EXPECT_LT(rel(down<float>(*vb, v.size()), v), 1e-5);
    EXPECT_GT(rel(v0, v), 1e-2);

    for (int64_t n_q : {7, 1, 40}) {   // 40: the tiled kernel (windows and soft cap on its scores)
        const int64_t n_kv = n_q == 1 ? 3000 : 300, hd = 64;
        const int32_t H = 4, Hk = 2;
        const auto q = test::random_floats(n_q * H * hd, rng_, -3.0f, 3.0f);
        const auto k = test::random_floats(Hk * n_kv * hd, rng_, -3.0f, 3.0f), vv = test::random_floats(Hk * n_kv * hd, rng_);
        std::vector<int32_t> kv_pos(n_kv), q_pos(n_q);
        std::iota(kv_pos.begin(), kv_pos.end(), 0);
        for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
        AttentionArgs a;
        a.ldq = a.ldo = H * hd;
        a.ld_kv = hd;
        a.kv_head_stride = n_kv * hd;
        a.n_q = n_q;
        a.n_kv = n_kv;
        a.n_head = H;
        a.n_head_kv = Hk;
        a.head_dim = hd;
        a.q_pos = q_pos.data();
        a.kv_pos = kv_pos.data();
        a.window = n_q == 1 ? 0 : 50;
        a.softcap = 4.0f;
        std::vector<float> out(n_q * H * hd), cols(Hk * n_kv, 0.0f), cols_gpu(Hk * n_kv, 0.0f);
        AttentionArgs c = a;
        c.q = q.data();
        c.k = k.data();
        c.v = vv.data();
        c.out = out.data();
        c.col_sums = cols.data();
        cpu_->attention(c);
        auto qb = up(q), ob = gpu_->alloc(out.size() * 4), kb = up(k), vvb = up(vv);
        AttentionArgs g = a;
        g.q = qb->f32();
        g.k = kb->data();
        g.v = vvb->data();
        g.out = ob->f32();
        g.col_sums = cols_gpu.data();
        gpu_->attention(g);
        EXPECT_LT(rel(down<float>(*ob, out.size()), out), 1e-4) << "n_q " << n_q;
        EXPECT_LT(rel(cols_gpu, cols), 1e-4) << "n_q " << n_q;
    }
}

TEST_F(CudaOps, AttentionWithColumnSumsMatchesTheCpu) {
    struct Shape {
        int64_t n_q, n_kv, hd;
    };
    // a short batch (one block per row), a decode step over a long cache
    // (keys split), prefill batches (the tiled kernel, at SmolLM2's and
    // Gemma 3's head dims)
    for (const Shape sh : {Shape{7, 1000, 64}, Shape{1, 3000, 64}, Shape{40, 600, 64}, Shape{20, 300, 256}})
    for (KvType kt : {KvType::F32, KvType::F16})
        for (bool col_max : {false, true}) {
            const int64_t n_q = sh.n_q, n_kv = sh.n_kv, hd = sh.hd;
            const int32_t H = 6, Hk = 2;
            const auto q = test::random_floats(n_q * H * hd, rng_, -2.0f, 2.0f);
            const auto k = test::random_floats(Hk * n_kv * hd, rng_), v = test::random_floats(Hk * n_kv * hd, rng_);
            std::vector<uint16_t> k16(k.size()), v16(v.size());
            for (size_t i = 0; i < k.size(); ++i) {
                k16[i] = fp32_to_fp16(k[i]);
                v16[i] = fp32_to_fp16(v[i]);
            }
            std::vector<int32_t> kv_pos(n_kv), q_pos(n_q);
            std::iota(kv_pos.begin(), kv_pos.end(), 0);
            std::shuffle(kv_pos.begin(), kv_pos.end(), rng_);
            for (int64_t i = 0; i < n_q; ++i) q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
            AttentionArgs a;
            a.ldq = H * hd;
            a.kv_type = kt;
            a.ld_kv = hd;
            a.kv_head_stride = n_kv * hd;
            a.ldo = H * hd;
            a.n_q = n_q;
            a.n_kv = n_kv;
            a.n_head = H;
            a.n_head_kv = Hk;
            a.head_dim = hd;
            a.q_pos = q_pos.data();
            a.kv_pos = kv_pos.data();
            a.obs_begin = n_q > 1 ? 2 : 0;
            a.col_max = col_max;
            std::vector<float> out(n_q * H * hd), cols(Hk * n_kv, 0.0f), cols_gpu(Hk * n_kv, 0.0f);
            AttentionArgs c = a;
            c.q = q.data();
            c.k = kt == KvType::F16 ? static_cast<const void *>(k16.data()) : k.data();
            c.v = kt == KvType::F16 ? static_cast<const void *>(v16.data()) : v.data();
            c.out = out.data();
            c.col_sums = cols.data();
            cpu_->attention(c);
            auto qb = up(q), ob = gpu_->alloc(out.size() * 4);
            auto kb = kt == KvType::F16 ? up(k16) : up(k), vb = kt == KvType::F16 ? up(v16) : up(v);
            AttentionArgs g = a;
            g.q = qb->f32();
            g.k = kb->data();
            g.v = vb->data();
            g.out = ob->f32();
            g.col_sums = cols_gpu.data();   // host, as the forward pass passes it
            gpu_->attention(g);
            EXPECT_LT(rel(down<float>(*ob, out.size()), out), 1e-4);
            EXPECT_LT(rel(cols_gpu, cols), 1e-4);
        }
}

TEST_F(CudaOps, KvRowsAndTopkDotMatchTheCpu) {
    for (KvType kt : {KvType::F32, KvType::F16}) {
        const int64_t n = 50, row = 64, es = kv_type_size(kt);
        const auto x = test::random_floats(n * row, rng_);
        std::vector<uint8_t> ref(n * row * es);
        cpu_->store_rows(kt, ref.data(), row, x.data(), row, n, row);
        auto xb = up(x), sb = gpu_->alloc(ref.size());
        gpu_->store_rows(kt, sb->data(), row, xb->f32(), row, n, row);
        EXPECT_EQ(down<uint8_t>(*sb, ref.size()), ref);
        std::vector<int64_t> keep = {0, 3, 4, 10, 49};   // in-place compaction
        cpu_->gather_rows(kt, ref.data(), ref.data(), keep.data(), keep.size(), row);
        gpu_->gather_rows(kt, sb->data(), sb->data(), keep.data(), keep.size(), row);
        EXPECT_EQ(down<uint8_t>(*sb, keep.size() * row * es),
                  std::vector<uint8_t>(ref.begin(), ref.begin() + keep.size() * row * es));
        std::vector<float> l_cpu(keep.size() * row), l_gpu(keep.size() * row);
        cpu_->load_rows(kt, l_cpu.data(), row, ref.data(), row, keep.size(), row);
        gpu_->load_rows(kt, l_gpu.data(), row, sb->data(), row, keep.size(), row);   // host destination
        EXPECT_EQ(l_gpu, l_cpu);
    }
    // top-k of dot products on small integers (exact in any order: equal lists)
    std::uniform_int_distribution<int> small(-3, 3);
    const int32_t dim = 64, k = 16;
    const int64_t R = 8, nk = 70000;   // more than one chunk of 64K keys
    std::vector<float> q(R * dim), keys(nk * dim);
    for (auto &v : q) v = float(small(rng_));
    for (auto &v : keys) v = float(small(rng_));
    for (bool tile_max : {false, true}) {
        TopkKeySegment seg{keys.data(), nk, 256};
        TopkDotArgs a;
        a.q = q.data();
        a.ldq = dim;
        a.n_rows = R;
        a.segments = &seg;
        a.n_segments = 1;
        a.ld_keys = dim;
        a.dim = dim;
        a.k = k;
        a.tile_max = tile_max;
        std::vector<float> s1(R * k, -INFINITY), s2 = s1;
        std::vector<int64_t> i1(R * k, -1), i2 = i1;
        a.best_score = s1.data();
        a.best_index = i1.data();
        cpu_->topk_dot(a);
        a.best_score = s2.data();
        a.best_index = i2.data();
        gpu_->topk_dot(a);
        EXPECT_EQ(i2, i1) << "tile_max " << tile_max;
        EXPECT_EQ(s2, s1) << "tile_max " << tile_max;
    }
}

