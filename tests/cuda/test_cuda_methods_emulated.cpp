// Every method through the C API on the CUDA backend's code running on the
// emulated device (the test module liblctx-cuda-emulated.so: host memory
// registered as device memory, kernel bodies on the launch emulator): each
// stage must succeed on a backend whose memory is not host memory, and the
// first logits after recompute must agree with the same session on the CPU.
// No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "engine_tiny_model.h"
#include "lctx.h"
#include "method_session.h"

namespace {

using cuda_test::SessionRun;
using cuda_test::rel;
using cuda_test::run_session;

class CudaMethodsEmulated : public ::testing::TestWithParam<int> {
protected:
    static void SetUpTestSuite() {
        setenv("LCTX_BACKEND_PATH", LCTX_CUDA_EMULATED_MODULE, 1);
        lctx::backends_rescan();
    }
    static void TearDownTestSuite() {
        unsetenv("LCTX_BACKEND_PATH");
        lctx::backends_rescan();
    }
};

} // namespace

TEST_P(CudaMethodsEmulated, RunsAndAgreesWithTheCpu) {
    const auto method = static_cast<lctx_method>(GetParam());
    if (!lctx_method_is_implemented(method)) GTEST_SKIP() << lctx_method_name(method) << " is not implemented";
    ASSERT_STREQ(lctx::make_backend("cuda", 1)->name(), "cuda") << "the emulated module did not load";
    const SessionRun cpu = run_session(method, "cpu");
    const SessionRun cuda = run_session(method, "cuda");
    EXPECT_EQ(cuda.backend, "cuda") << lctx_method_name(method) << " ran on another backend";
    ASSERT_FALSE(cpu.logits.empty());
    ASSERT_EQ(cuda.logits.size(), cpu.logits.size()) << lctx_method_name(method) << " failed on the emulated cuda backend";
    EXPECT_LT(rel(cuda.logits, cpu.logits), 2e-2) << lctx_method_name(method);
}

INSTANTIATE_TEST_SUITE_P(EveryMethod, CudaMethodsEmulated, ::testing::Range(0, lctx_method_count()),
                         [](const ::testing::TestParamInfo<int> &i) {
                             return std::string(lctx_method_name(static_cast<lctx_method>(i.param)));
                         });

// q8 KV storage has CPU kernels only: a session asking for it on the cuda
// backend is refused at creation, naming the type and what to use instead.
class CudaKvQ8Emulated : public CudaMethodsEmulated {};

TEST_F(CudaKvQ8Emulated, SessionIsRefusedWithAClearMessage) {
    ASSERT_STREQ(lctx::make_backend("cuda", 1)->name(), "cuda") << "the emulated module did not load";
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.backend = "cuda";
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_OK) << lctx_last_error();
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_FULL;
    sp.n_ctx = 256;
    sp.kv_type = LCTX_KV_Q8;
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(m, &sp, &s), LCTX_ERR_UNSUPPORTED);
    EXPECT_EQ(s, nullptr);
    const std::string msg = lctx_last_error();
    EXPECT_NE(msg.find("q8"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu backend"), std::string::npos) << msg;
    sp.kv_type = LCTX_KV_F16;   // the same session in f16 is fine
    ASSERT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK) << lctx_last_error();
    lctx_session_free(s);
    lctx_model_free(m);
}
