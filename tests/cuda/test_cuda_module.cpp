// The real liblctx-cuda.so through the registry and the C API on a machine
// without a CUDA device: the module loads (the CUDA runtime is linked
// statically, so no driver is needed to dlopen it), scores 0, the registry
// logs exactly one line naming it, and a session asked for "cuda" runs on
// the CPU with the CPU's answers. On a machine with a device the fallback
// does not apply and the test is skipped (test_cuda_backend_gpu runs there).
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend/module_abi.h"
#include "backend/registry.h"
#include "engine_tiny_model.h"
#include "lctx.h"

using namespace lctx;

namespace {

std::mutex g_mu;
std::vector<std::string> g_log;

void collect(lctx_log_level, const char *msg, void *) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_log.emplace_back(msg);
}

int lines_with(const std::string &part) {
    std::lock_guard<std::mutex> lock(g_mu);
    int n = 0;
    for (const std::string &l : g_log) n += l.find(part) != std::string::npos;
    return n;
}

// Greedy tokens and first logits of a FULL session on the tiny model, with
// the model's backend parameter set to `backend`.
std::pair<std::vector<lctx_token>, std::vector<float>> answer(const char *backend) {
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.backend = backend;
    mp.n_threads = 1;
    lctx_model *m = nullptr;
    EXPECT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_OK);
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_FULL;
    sp.n_ctx = 256;
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK);
    std::vector<lctx_token> doc;
    for (int i = 0; i < 100; ++i) doc.push_back(150 + (i * 37) % 149);
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    EXPECT_EQ(lctx_build_index(s), LCTX_OK);
    const lctx_token q[] = {160, 170};
    lctx_selection *sel = nullptr;
    EXPECT_EQ(lctx_select(s, q, 2, &sel), LCTX_OK);
    EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK);
    std::pair<std::vector<lctx_token>, std::vector<float>> a;
    const float *l = lctx_session_logits(s);
    a.second.assign(l, l + lctx_model_n_vocab(m));
    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    for (int i = 0; i < 4; ++i) {
        lctx_token t = 0;
        EXPECT_EQ(lctx_decode(s, &samp, &t), LCTX_OK);
        a.first.push_back(t);
    }
    lctx_selection_free(sel);
    lctx_session_free(s);
    lctx_model_free(m);
    return a;
}

} // namespace

TEST(CudaModule, WithoutADeviceItScoresZeroAndSessionsFallBackToTheCpu) {
    lctx_log_set(collect, LCTX_LOG_DEBUG, nullptr);
    setenv("LCTX_BACKEND_PATH", LCTX_CUDA_MODULE, 1);
    unsetenv("LCTX_BACKEND");
    backends_rescan();
    const std::vector<BackendInfo> list = backends_available();
    const BackendInfo *cuda = nullptr;
    for (const BackendInfo &b : list)
        if (b.path == LCTX_CUDA_MODULE) cuda = &b;
    ASSERT_NE(cuda, nullptr) << "the module is not listed";
    ASSERT_EQ(cuda->name, "cuda") << "the module did not load: " << cuda->note;
    if (cuda->score > 0) GTEST_SKIP() << "a CUDA device is present (score " << cuda->score << "): no fallback to test";
    EXPECT_EQ(cuda->score, 0);
    EXPECT_NE(cuda->note.find("cannot run on this machine"), std::string::npos) << cuda->note;
    EXPECT_EQ(lines_with("liblctx-cuda"), 1) << "one log line at the scan";
    EXPECT_EQ(lines_with("cannot run on this machine"), 1);

    EXPECT_STREQ(make_backend("cuda", 1)->name(), "cpu");
    // the fallback line names the module and why it cannot run
    const std::string fallback = std::string("backend 'cuda' is not available on this machine (module ") +
                                 LCTX_CUDA_MODULE + ": cannot run on this machine (no device or driver)); using the CPU";
    EXPECT_EQ(lines_with(fallback), 1);
    EXPECT_STREQ(make_backend("", 1)->name(), "cpu");   // auto: the CPU, no further line
    EXPECT_EQ(lines_with("backend 'cuda'"), 1);
    EXPECT_NE(std::string(lctx_build_info()).find("cuda (unusable: cannot run on this machine"), std::string::npos)
        << lctx_build_info();

    // the C API: a model asking for "cuda" gives the CPU's answers
    const auto on_cpu = answer("cpu");
    const auto on_cuda = answer("cuda");
    EXPECT_EQ(on_cuda.first, on_cpu.first);
    EXPECT_EQ(on_cuda.second, on_cpu.second);
    EXPECT_GE(lines_with(fallback), 2);

    unsetenv("LCTX_BACKEND_PATH");
    backends_rescan();
    lctx_log_set(nullptr, LCTX_LOG_WARN, nullptr);
}

// The module's create() called directly, as if the registry ignored the
// score: without a device it refuses with a message, it does not crash.
TEST(CudaModule, CreateWithoutADeviceFailsWithAMessage) {
    void *h = dlopen(LCTX_CUDA_MODULE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    auto get = reinterpret_cast<lctx_backend_module_get_fn>(dlsym(h, LCTX_BACKEND_MODULE_SYMBOL));
    ASSERT_NE(get, nullptr);
    const lctx_backend_module *t = get();
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->api_version, static_cast<uint32_t>(LCTX_BACKEND_API_VERSION));
    EXPECT_STREQ(t->name, "cuda");
    if (t->score() > 0) GTEST_SKIP() << "a CUDA device is present";
    char err[512] = "";
    void *b = t->create(1, err, sizeof err);
    EXPECT_EQ(b, nullptr);
    EXPECT_NE(std::string(err).find("cuda"), std::string::npos) << err;
    if (b) t->destroy(b);
}
