// Memory limits (issue 15): lctx_session_params.max_memory and
// lctx_model_params.max_memory. For every method: the peak of an unlimited
// run is measured; that peak as the limit lets the same run through; one
// byte less makes some call fail with LCTX_ERR_OUT_OF_MEMORY naming the
// sizes (never more than the limit is held, never a crash); a tiny limit
// refuses the session up front. And the model and index-load limits.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "api/handles.h"
#include "common/error.h"
#include "engine_tiny_model.h"
#include "session/method_registry.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::random_tokens;
using ::testing::HasSubstr;

namespace {

struct Tiny {
    std::unique_ptr<Model> model;
    std::vector<uint8_t> bytes;
    Tiny() {
        engine_test::TinyOptions o;
        o.n_layer = 2;
        o.n_ctx = 1024;
        bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 1);
    }
};

const Tiny &tiny() {
    static Tiny t;
    return t;
}

session_test::SessionParams params(lctx_method m, uint64_t max_memory) {
    session_test::SessionParams p;
    p.method = m;
    p.n_ctx = 400;   // FULL holds the 300-token document, the question and the answer
    p.n_threads = 1;
    p.n_batch = 32;
    p.reform_p.chunk = 64;
    p.reform_p.budget = 64;
    p.reform_p.recompute = 96;
    p.reform_p.obs = 16;
    p.kv_p.budget = 64;
    p.kv_p.chunk = 64;
    p.infllm_p.block = 16;
    p.max_memory = max_memory;
    return p;
}

// Feeds 300 tokens, builds, asks and decodes 4 tokens; returns the first
// failure's status (LCTX_OK if none) and its message.
lctx_status run(Session &s, std::string *message) {
    const auto doc = random_tokens(300, 3), q = random_tokens(6, 4);
    lctx_sampling_params g;
    lctx_sampling_default_params(&g);
    try {
        for (size_t at = 0; at < doc.size(); at += 100) s.feed(doc.data() + at, 100);
        s.build_index();
        auto sel = s.select(q.data(), q.size());
        s.recompute(*sel);
        for (int i = 0; i < 4; ++i) s.decode(g);
        return LCTX_OK;
    } catch (const Error &e) {
        *message = e.what();
        return e.status();
    }
}

std::vector<lctx_method> implemented() {
    std::vector<lctx_method> out;
    for (const MethodInfo &m : methods())
        if (m.implemented()) out.push_back(m.id);
    return out;
}

} // namespace

TEST(MemoryLimits, EveryMethodHonoursItsSessionLimit) {
    for (lctx_method m : implemented()) {
        SCOPED_TRACE(method_name(m));
        std::string msg;
        uint64_t peak = 0;
        {
            Session s(*tiny().model, params(m, 0));
            ASSERT_EQ(run(s, &msg), LCTX_OK) << msg;
            peak = s.memory().peak();
            EXPECT_GT(peak, 0u) << "nothing was charged to the session's budget";
        }
        {   // the measured peak as the limit: the same run goes through
            Session s(*tiny().model, params(m, peak));
            EXPECT_EQ(run(s, &msg), LCTX_OK) << msg;
            EXPECT_LE(s.memory().peak(), peak);
        }
        {   // one byte less: some call (or the creation) fails, naming the sizes
            lctx_status st = LCTX_OK;
            try {
                Session s(*tiny().model, params(m, peak - 1));
                st = run(s, &msg);
                EXPECT_LE(s.memory().peak(), peak - 1);
                EXPECT_LE(s.memory().used(), peak - 1);
            } catch (const Error &e) {
                st = e.status();
                msg = e.what();
            }
            EXPECT_EQ(st, LCTX_ERR_OUT_OF_MEMORY);
            EXPECT_THAT(msg, HasSubstr("max_memory"));
            EXPECT_THAT(msg, HasSubstr("MiB"));
        }
        {   // a tiny limit: refused when the session is created
            try {
                Session s(*tiny().model, params(m, 4096));
                ADD_FAILURE() << "a 4 KiB session was created";
            } catch (const Error &e) {
                EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY);
                EXPECT_THAT(e.what(), HasSubstr("needs"));
                EXPECT_THAT(e.what(), HasSubstr("max_memory is 0.00 MiB (4096 bytes)"));
            }
        }
    }
}

// Methods that allocate at creation (FULL) are refused there; methods that
// grow with the document (INFLLM's memory store) fail the call that would
// pass the limit, hold no more than the limit, and stay in their stage.
TEST(MemoryLimits, FailedAllocationLeavesTheSessionValid) {
    Session big(*tiny().model, params(LCTX_METHOD_FULL, 0));
    std::string msg;
    ASSERT_EQ(run(big, &msg), LCTX_OK);
    const uint64_t full_peak = big.memory().peak();
    // FULL allocates its cache at creation: a limit below it is refused there,
    // a limit above lets everything through.
    EXPECT_THROW(Session(*tiny().model, params(LCTX_METHOD_FULL, full_peak / 2)), Error);
    // INFLLM grows its memory store with the document: cut it at the first page.
    Session inf0(*tiny().model, params(LCTX_METHOD_INFLLM, 0));
    const uint64_t at_create = inf0.memory().used();
    ASSERT_EQ(run(inf0, &msg), LCTX_OK) << msg;
    ASSERT_GT(inf0.memory().peak(), at_create);
    Session inf(*tiny().model, params(LCTX_METHOD_INFLLM, at_create + 1));
    const auto doc = random_tokens(300, 3);
    try {
        inf.feed(doc.data(), doc.size());
        inf.build_index();
        ADD_FAILURE() << "the store grew past max_memory";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("max_memory"));
    }
    EXPECT_LE(inf.memory().peak(), at_create + 1);
    EXPECT_EQ(inf.stage(), LCTX_STAGE_FEEDING);
}

// Through the C API: the model limit (file and buffer), the session limit,
// and an index load whose sizes do not fit the loading session's limit.
TEST(MemoryLimits, CApiModelSessionAndIndexLoad) {
    const std::vector<uint8_t> &bytes = tiny().bytes;
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = 1;
    mp.max_memory = bytes.size() - 1;
    lctx_model *m = nullptr;
    EXPECT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(m, nullptr);
    EXPECT_THAT(lctx_last_error(), HasSubstr("max_memory"));
    const std::string path = std::string(LCTX_TEST_DATA_DIR) + "/stories260K.gguf";
    mp.max_memory = std::filesystem::file_size(path) / 2;
    EXPECT_EQ(lctx_model_load(path.c_str(), &mp, &m), LCTX_ERR_OUT_OF_MEMORY);
    EXPECT_THAT(lctx_last_error(), HasSubstr("stories260K.gguf"));
    mp.max_memory = bytes.size();
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_OK) << lctx_last_error();

    session_test::SessionParams sp = params(LCTX_METHOD_FULL, 1000);
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(m, &sp, &s), LCTX_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(s, nullptr);
    EXPECT_THAT(lctx_last_error(), HasSubstr("KV cache of 400 slots"));

    // An index of a 600-token document, loaded by a session whose limit
    // holds a fresh REFORM session but not the index's store and cache.
    session_test::SessionParams rp = params(LCTX_METHOD_REFORM, 0);
    rp.reform_p.budget = 200;
    ASSERT_EQ(lctx_session_create(m, &rp, &s), LCTX_OK) << lctx_last_error();
    const auto doc = random_tokens(600, 9);
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    const std::string index = (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) +
                              "lctx_mem_" + std::to_string(::getpid()) + ".lctx";
    ASSERT_EQ(lctx_index_save(s, index.c_str()), LCTX_OK) << lctx_session_last_error(s);
    lctx_session_free(s);
    session_test::SessionParams lp = params(LCTX_METHOD_REFORM, 0);
    uint64_t fresh = 0;
    {
        Session probe(*m->model, lp);
        fresh = probe.memory().used();
    }
    lp.max_memory = fresh + 1024;   // the default encoder fits, the index's (budget 200) does not
    lctx_session *l = nullptr;
    EXPECT_EQ(lctx_session_load_index(m, index.c_str(), &lp, &l), LCTX_ERR_OUT_OF_MEMORY);
    EXPECT_EQ(l, nullptr);
    EXPECT_THAT(lctx_last_error(), HasSubstr("max_memory"));
    lp.max_memory = 0;
    EXPECT_EQ(lctx_session_load_index(m, index.c_str(), &lp, &l), LCTX_OK) << lctx_last_error();
    lctx_session_free(l);
    std::remove(index.c_str());
    lctx_model_free(m);
}
