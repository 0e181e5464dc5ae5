// CudaBackend's own code (src/backend/cuda/cuda_backend.cpp: staging of host
// arguments, weight upload and lookup, GEMV/GEMM routing, key splits, top-k
// chunks) on the emulated device of tests/cuda/emulated_device.cpp, where the
// kernel bodies run on the launch emulator and every launch checks that its
// pointers are device memory. No GPU needed. The op checks are those the GPU
// test runs (cuda_backend_checks.h); then the engine's forward pass on the
// tiny model, prefill (GEMM path), decode (GEMV path) and column sums,
// against the same forward pass on the CPU backend.
#include "backend/cuda/cuda_backend.h"
#include "cuda_backend_checks.h"
#include "engine/forward.h"
#include "engine/kv_store.h"
#include "engine_tiny_model.h"
#include "model/model.h"

std::unique_ptr<Backend> make_cuda_under_test(std::string *) { return make_cuda_backend(2); }

TEST_F(CudaOps, DescriptionAndMemoryModel) {
    EXPECT_STREQ(gpu_->name(), "cuda");
    EXPECT_FALSE(gpu_->host_memory());
    EXPECT_NE(gpu_->description().find("emulated device"), std::string::npos) << gpu_->description();
    // copy handles overlapping regions of device memory
    std::vector<float> v(100);
    std::iota(v.begin(), v.end(), 0.0f);
    auto b = up(v);
    gpu_->copy(b->f32() + 10, b->f32(), 50 * sizeof(float));
    const auto r = down<float>(*b, 100);
    for (int i = 0; i < 60; ++i) EXPECT_EQ(r[i], i < 10 ? float(i) : float(i - 10)) << i;
}

TEST_F(CudaOps, ForwardPassOnTheTinyModelAgreesWithTheCpu) {
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    auto model = Model::load_memory(bytes.data(), bytes.size(), 2);
    const Hparams &hp = model->hparams();
    const int64_t n = 40;   // prefill of 40 tokens: the GEMM path
    std::vector<int32_t> tok(n + 3), pos(n + 3);
    for (int64_t i = 0; i < n + 3; ++i) {
        tok[i] = static_cast<int32_t>((i * 37 + 5) % hp.n_vocab);
        pos[i] = static_cast<int32_t>(i);
    }
    std::vector<std::vector<float>> logits(2), cols(2);
    std::vector<std::vector<std::vector<float>>> col_sums(2);
    Backend *bes[2] = {cpu_.get(), gpu_.get()};
    for (int b = 0; b < 2; ++b) {
        Forward fwd(*model, *bes[b]);
        KvStore cache(*bes[b], hp, n + 8);
        ForwardOptions opt;
        opt.logits = LogitsMode::ALL;
        ForwardHooks hooks;
        hooks.col_sums = &col_sums[b];
        hooks.obs_begin = n - 5;
        opt.hooks = &hooks;
        std::vector<float> l;
        fwd.run(tok.data(), pos.data(), n, cache, opt, l);
        logits[b] = l;
        opt.hooks = nullptr;
        opt.logits = LogitsMode::LAST;
        for (int64_t i = n; i < n + 3; ++i) {   // decode: the GEMV path
            fwd.run(tok.data() + i, pos.data() + i, 1, cache, opt, l);
            logits[b].insert(logits[b].end(), l.begin(), l.end());
        }
    }
    ASSERT_EQ(logits[1].size(), logits[0].size());
    EXPECT_LT(rel(logits[1], logits[0]), 1e-2);   // f16 activations in the GEMM
    ASSERT_EQ(col_sums[1].size(), col_sums[0].size());
    for (size_t l = 0; l < col_sums[0].size(); ++l) EXPECT_LT(rel(col_sums[1][l], col_sums[0][l]), 1e-2) << "layer " << l;
}
