// CudaBackend (the real module, through the registry) against the CPU
// backend: the op checks of cuda_backend_checks.h, then a whole session
// through the C API. Needs a CUDA device: without one every test is SKIPPED
// with the reason (ctest label gpu). Without a GPU the same backend code runs
// on the emulated device (test_cuda_backend_emulated).
#include <cstdlib>

#include "backend/registry.h"
#include "cuda_backend_checks.h"
#include "engine_tiny_model.h"
#include "lctx.h"
#include "method_session.h"

std::unique_ptr<Backend> make_cuda_under_test(std::string *why) {
    // LCTX_TEST_CUDA_MODULE: the module when the test runs away from its build
    // tree (a GPU machine the build was copied to)
    const char *moved = std::getenv("LCTX_TEST_CUDA_MODULE");
    setenv("LCTX_BACKEND_PATH", moved && *moved ? moved : LCTX_CUDA_MODULE, 1);
    backends_rescan();
    std::unique_ptr<Backend> b = make_backend("cuda", 2);
    if (std::string(b->name()) == "cuda") return b;
    *why = "no usable CUDA device";
    for (const BackendInfo &i : backends_available())
        if (i.name == "cuda" && !i.note.empty()) *why += ": " + i.note;
    return nullptr;
}

TEST_F(CudaOps, AFullSessionAgreesWithTheCpu) {
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    std::vector<std::vector<float>> logits;
    for (const char *be : {"cpu", "cuda"}) {
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.backend = be;
        lctx_model *m = nullptr;
        ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_OK);
        lctx_session_params sp;
        lctx_session_default_params(&sp);
        sp.method = LCTX_METHOD_FULL;
        sp.n_ctx = 1024;
        lctx_session *s = nullptr;
        ASSERT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK);
        std::vector<lctx_token> doc;
        for (int i = 0; i < 700; ++i) doc.push_back(150 + (i * 37) % 149);   // a prefill > 512 (two sub-batches)
        ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
        ASSERT_EQ(lctx_build_index(s), LCTX_OK);
        const lctx_token q[] = {160, 170, 180};
        lctx_selection *sel = nullptr;
        ASSERT_EQ(lctx_select(s, q, 3, &sel), LCTX_OK);
        ASSERT_EQ(lctx_recompute(s, sel), LCTX_OK);
        const float *l = lctx_session_logits(s);
        logits.emplace_back(l, l + lctx_model_n_vocab(m));
        lctx_selection_free(sel);
        lctx_session_free(s);
        lctx_model_free(m);
    }
    EXPECT_LT(rel(logits[1], logits[0]), 1e-2);
}

// Every method through the C API on the real module: each stage succeeds and
// the first logits after recompute agree with the CPU (the GEMM rounds
// activations to f16, hence the same 2e-2 as the emulated test).
class CudaMethodsGpu : public ::testing::TestWithParam<int> {
protected:
    void SetUp() override {
        std::string why;
        if (!make_cuda_under_test(&why)) GTEST_SKIP() << why;
    }
};

TEST_P(CudaMethodsGpu, RunsAndAgreesWithTheCpu) {
    const auto method = static_cast<lctx_method>(GetParam());
    if (!lctx_method_is_implemented(method)) GTEST_SKIP() << lctx_method_name(method) << " is not implemented";
    const cuda_test::SessionRun cpu = cuda_test::run_session(method, "cpu");
    const cuda_test::SessionRun cuda = cuda_test::run_session(method, "cuda");
    EXPECT_EQ(cuda.backend, "cuda") << lctx_method_name(method) << " ran on another backend";
    ASSERT_FALSE(cpu.logits.empty());
    ASSERT_EQ(cuda.logits.size(), cpu.logits.size()) << lctx_method_name(method) << " failed on the cuda backend";
    EXPECT_LT(cuda_test::rel(cuda.logits, cpu.logits), 2e-2) << lctx_method_name(method);
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, CudaMethodsGpu, ::testing::Range(0, lctx_method_count()),
                         [](const ::testing::TestParamInfo<int> &i) {
                             return std::string(lctx_method_name(static_cast<lctx_method>(i.param)));
                         });
