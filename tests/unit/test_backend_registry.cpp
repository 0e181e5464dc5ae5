// Run-time loading of backend modules (src/backend/registry.h) with the
// test-only modules of tests/backend_module/: a good module is picked by
// default (highest score) and by name, and a session on it gives the CPU's
// answers exactly; a module with another API version, a score of 0, a failing
// create() or no table is skipped with a log line, and the session runs on
// the CPU. Also: the registry lists what it found, and asking for a backend
// that does not exist falls back to the CPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "engine_tiny_model.h"
#include "lctx.h"

using namespace lctx;

namespace {

std::string module(const char *name) { return std::string(LCTX_TEST_MODULE_DIR) + "/" + name; }

std::mutex g_log_mu;
std::vector<std::string> g_log;

void collect(lctx_log_level, const char *msg, void *) {
    std::lock_guard<std::mutex> lock(g_log_mu);
    g_log.emplace_back(msg);
}

bool logged(const std::string &part) {
    std::lock_guard<std::mutex> lock(g_log_mu);
    for (const std::string &l : g_log)
        if (l.find(part) != std::string::npos) return true;
    return false;
}

// Greedy answer (8 tokens) and the first logits of a FULL session on the tiny model.
struct Answer {
    std::vector<lctx_token> tokens;
    std::vector<float> logits;
};

Answer answer() {
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    lctx_model *m = nullptr;
    EXPECT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_FULL;
    sp.n_ctx = 512;
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK);
    std::vector<lctx_token> doc;
    for (int i = 0; i < 300; ++i) doc.push_back(150 + (i * 37) % 149);
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    EXPECT_EQ(lctx_build_index(s), LCTX_OK);
    const lctx_token q[] = {160, 170, 180};
    lctx_selection *sel = nullptr;
    EXPECT_EQ(lctx_select(s, q, 3, &sel), LCTX_OK);
    EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK);
    Answer a;
    const float *l = lctx_session_logits(s);
    a.logits.assign(l, l + lctx_model_n_vocab(m));
    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    for (int i = 0; i < 8; ++i) {
        lctx_token t = 0;
        EXPECT_EQ(lctx_decode(s, &samp, &t), LCTX_OK);
        a.tokens.push_back(t);
    }
    lctx_selection_free(sel);
    lctx_session_free(s);
    lctx_model_free(m);
    return a;
}

class BackendRegistry : public ::testing::Test {
protected:
    void SetUp() override {
        g_log.clear();
        lctx_log_set(collect, LCTX_LOG_DEBUG, nullptr);
    }
    void TearDown() override {
        unsetenv("LCTX_BACKEND_PATH");
        unsetenv("LCTX_BACKEND");
        backends_rescan();
        lctx_log_set(nullptr, LCTX_LOG_WARN, nullptr);
    }
    static void use(const std::string &path, const char *backend = nullptr) {
        setenv("LCTX_BACKEND_PATH", path.c_str(), 1);
        if (backend) setenv("LCTX_BACKEND", backend, 1);
        else unsetenv("LCTX_BACKEND");
        backends_rescan();
    }
};

} // namespace

TEST_F(BackendRegistry, CpuAlwaysThere) {
    use("");
    const auto list = backends_available();
    ASSERT_FALSE(list.empty());
    EXPECT_EQ(list[0].name, "cpu");
    EXPECT_STREQ(make_backend("", 1)->name(), "cpu");
    EXPECT_STREQ(make_backend("cpu", 1)->name(), "cpu");
    EXPECT_NE(std::string(lctx_build_info()).find("backends: cpu"), std::string::npos) << lctx_build_info();
}

TEST_F(BackendRegistry, GoodModuleIsPickedAndGivesTheCpuAnswers) {
    use("");
    const Answer on_cpu = answer();
    use(module("liblctx-testcpu.so"));
    const auto list = backends_available();
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[1].name, "testcpu");
    EXPECT_EQ(list[1].score, 5);
    EXPECT_STREQ(make_backend("", 1)->name(), "testcpu");          // best score by default
    EXPECT_STREQ(make_backend("testcpu", 1)->name(), "testcpu");   // by name
    EXPECT_STREQ(make_backend("cpu", 1)->name(), "cpu");           // the CPU on request
    const Answer on_module = answer();   // sessions get the module by default
    EXPECT_EQ(on_module.tokens, on_cpu.tokens);
    EXPECT_EQ(on_module.logits, on_cpu.logits);
}

TEST_F(BackendRegistry, UnknownNameFallsBackWithOneLine) {
    use("");
    EXPECT_STREQ(make_backend("nosuch", 1)->name(), "cpu");
    EXPECT_TRUE(logged("backend 'nosuch' is not available on this machine (no module provides it; found: cpu"))
        << "no log line, or one that does not say why";
    use("", "nosuch");   // the environment variable, through a whole session
    const Answer a = answer();
    EXPECT_EQ(a.tokens.size(), 8u);
}

TEST_F(BackendRegistry, BrokenModulesAreSkipped) {
    struct Case {
        const char *file, *why;
    } cases[] = {
        {"liblctx-testcpu-oldapi.so", "backend API version"},
        {"liblctx-testcpu-noscore.so", "cannot run on this machine"},
        {"liblctx-testcpu-notable.so", "no lctx_backend_module_get table"},
        {"liblctx-does-not-exist.so", "cannot load"},
    };
    for (const Case &c : cases) {
        g_log.clear();
        use(module(c.file));
        EXPECT_TRUE(logged(c.why)) << c.file << ": expected a log line with '" << c.why << "'";
        EXPECT_STREQ(make_backend("", 1)->name(), "cpu") << c.file;
        EXPECT_STREQ(make_backend("testcpu", 1)->name(), "cpu") << c.file;
    }
    // Asked for by name, the fallback line names the module and why: a
    // loaded module by its table's name, one that did not load by its file's.
    use(module("liblctx-testcpu-noscore.so"));
    EXPECT_STREQ(make_backend("testcpu", 1)->name(), "cpu");
    EXPECT_TRUE(logged("backend 'testcpu' is not available on this machine (module " +
                       module("liblctx-testcpu-noscore.so") + ": cannot run on this machine"));
    use(module("liblctx-does-not-exist.so"));
    EXPECT_STREQ(make_backend("does-not-exist", 1)->name(), "cpu");
    EXPECT_TRUE(logged("backend 'does-not-exist' is not available on this machine (module " +
                       module("liblctx-does-not-exist.so") + ": cannot load: "));
    g_log.clear();
    use(module("liblctx-testcpu-failcreate.so"));
    EXPECT_STREQ(make_backend("", 1)->name(), "cpu");
    EXPECT_TRUE(logged("refusing to start"));
    const Answer a = answer();   // a session still works, on the CPU
    EXPECT_EQ(a.tokens.size(), 8u);
}
