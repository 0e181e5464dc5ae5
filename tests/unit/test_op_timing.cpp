// OpTimingBackend (LCTX_PROFILE_OPS) and lctx_session_op_times: calls,
// seconds and bytes per op against a scripted inner backend whose ops take
// known times; a call nested in another (on its thread or on a worker of a
// parallel_for) counts in the outer one only; synchronize() ends every timed
// op; an op that throws is counted and rethrown. Through the C API on
// stories260K: the call counts follow from the model's shape, the seconds
// stay within the session's lifetime, and the errors are reported.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/op_timing_backend.h"
#include "common/error.h"
#include "lctx.h"
#include "session_test_util.h"

using ::testing::HasSubstr;

namespace lctx {
namespace {

// The CPU backend with scripted behaviour: matmul sleeps 5 ms, parallel_for
// runs its body on a new thread, topk_dot throws; synchronize() is counted.
class ScriptedBackend final : public ForwardingBackend {
public:
    ScriptedBackend() : ForwardingBackend(nullptr), cpu_(make_cpu_backend(1)) {}
    const char *name() const override { return "scripted"; }
    std::unique_ptr<Buffer> alloc(size_t bytes) override { return cpu_->alloc(bytes); }
    void to_host(void *d, const void *s, size_t n) override { std::memcpy(d, s, n); }
    void add(float *x, const float *y, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    }
    void matmul(const WeightView &, const float *, int64_t, int64_t, float *) override {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override {
        std::thread worker([&] { fn(0, n, 0); });
        worker.join();
    }
    void topk_dot(const TopkDotArgs &) override { fail(LCTX_ERR_INTERNAL, "scripted failure"); }
    void synchronize() override { ++syncs; }
    int syncs = 0;

private:
    std::unique_ptr<Backend> cpu_;
};

struct Timed {
    Timed() {
        auto s = std::make_unique<ScriptedBackend>();
        inner = s.get();
        backend = std::make_unique<OpTimingBackend>(std::move(s));
    }
    std::map<std::string, OpTimingBackend::Entry> by_op() const {
        std::map<std::string, OpTimingBackend::Entry> m;
        for (const auto &e : backend->entries()) m[e.op] = e;
        return m;
    }
    ScriptedBackend *inner;
    std::unique_ptr<OpTimingBackend> backend;
};

TEST(OpTiming, CountsCallsSecondsAndBytesPerOp) {
    Timed t;
    for (int i = 0; i < 3; ++i) t.backend->matmul(WeightView{}, nullptr, 0, 0, nullptr);
    char src[100] = {}, dst[100];
    t.backend->to_host(dst, src, 100);
    t.backend->to_host(dst, src, 60);
    const auto ops = t.by_op();
    ASSERT_EQ(ops.size(), 2u);   // ops never called are left out
    EXPECT_EQ(ops.at("matmul").calls, 3);
    EXPECT_GE(ops.at("matmul").seconds, 0.015);   // three sleeps of 5 ms
    EXPECT_LE(ops.at("matmul").seconds, t.backend->lifetime_s());
    EXPECT_EQ(ops.at("matmul").bytes, 0);
    EXPECT_EQ(ops.at("to_host").calls, 2);
    EXPECT_EQ(ops.at("to_host").bytes, 160);
    EXPECT_EQ(t.inner->syncs, 5);   // every timed op ends with synchronize()
    // Fixed order: the Op enumeration's, not the order of the first calls.
    const auto e = t.backend->entries();
    EXPECT_STREQ(e[0].op, "to_host");
    EXPECT_STREQ(e[1].op, "matmul");
}

TEST(OpTiming, NestedCallsCountInTheOuterOneOnly) {
    Timed t;
    std::vector<float> x(8, 1.0f), y(8, 2.0f);
    // The body runs on another thread (a pool worker) and calls the timed
    // backend again: its add is part of the parallel_for.
    t.backend->parallel_for(1, [&](int64_t, int64_t, int) {
        t.backend->add(x.data(), y.data(), 8);
        t.backend->matmul(WeightView{}, nullptr, 0, 0, nullptr);
    });
    const auto ops = t.by_op();
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops.at("parallel_for").calls, 1);
    EXPECT_GE(ops.at("parallel_for").seconds, 0.005);
    EXPECT_EQ(x[0], 3.0f);   // the nested op did run
    EXPECT_EQ(t.inner->syncs, 1);
    // Afterwards, on this thread, ops count again.
    t.backend->add(x.data(), y.data(), 8);
    EXPECT_EQ(t.by_op().at("add").calls, 1);
}

TEST(OpTiming, AnOpThatThrowsIsCountedAndRethrown) {
    Timed t;
    TopkDotArgs a{};
    EXPECT_THROW(t.backend->topk_dot(a), Error);
    const auto ops = t.by_op();
    ASSERT_EQ(ops.count("topk_dot"), 1u);
    EXPECT_EQ(ops.at("topk_dot").calls, 1);
    // The next op is timed normally (the nesting depth was restored).
    t.backend->matmul(WeightView{}, nullptr, 0, 0, nullptr);
    EXPECT_EQ(t.by_op().at("matmul").calls, 1);
}

TEST(OpTiming, RequestedByTheEnvironment) {
    const char *old = std::getenv("LCTX_PROFILE_OPS");
    const std::string saved = old ? old : "";
    unsetenv("LCTX_PROFILE_OPS");
    EXPECT_FALSE(OpTimingBackend::requested());
    setenv("LCTX_PROFILE_OPS", "", 1);
    EXPECT_FALSE(OpTimingBackend::requested());
    setenv("LCTX_PROFILE_OPS", "0", 1);
    EXPECT_FALSE(OpTimingBackend::requested());
    setenv("LCTX_PROFILE_OPS", "1", 1);
    EXPECT_TRUE(OpTimingBackend::requested());
    if (old) setenv("LCTX_PROFILE_OPS", saved.c_str(), 1);
    else unsetenv("LCTX_PROFILE_OPS");
}

// ---- through the C API ------------------------------------------------------------

class OpTimesApi : public ::testing::Test {
protected:
    void SetUp() override {
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 2;
        const std::string path = LCTX_TEST_DATA_DIR "/stories260K.gguf";   // one literal: GCC 12 warns falsely on the + of two
        ASSERT_EQ(lctx_model_load(path.c_str(), &mp, &model), LCTX_OK) << lctx_last_error();
    }
    void TearDown() override {
        lctx_model_free(model);
        unsetenv("LCTX_PROFILE_OPS");
    }
    lctx_session *make_full(bool profiled) {
        if (profiled) setenv("LCTX_PROFILE_OPS", "1", 1);
        else unsetenv("LCTX_PROFILE_OPS");
        session_test::SessionParams p;
        p.method = LCTX_METHOD_FULL;
        p.n_threads = 2;
        p.n_batch = 64;
        lctx_session *s = nullptr;
        EXPECT_EQ(lctx_session_create(model, &p, &s), LCTX_OK) << lctx_last_error();
        return s;
    }
    lctx_model *model = nullptr;
};

TEST_F(OpTimesApi, CallCountsFollowTheModelAndSecondsStayInTheLifetime) {
    lctx_session *s = make_full(true);
    ASSERT_TRUE(s);
    const std::vector<lctx_token> doc = session_test::random_tokens(200, 7);
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK) << lctx_session_last_error(s);
    size_t n = 0;
    double lifetime = 0;
    ASSERT_EQ(lctx_session_op_times(s, nullptr, 0, &n, &lifetime), LCTX_OK) << lctx_session_last_error(s);
    ASSERT_GT(n, 3u);
    std::vector<lctx_op_time> ops(n);
    size_t n2 = 0;
    ASSERT_EQ(lctx_session_op_times(s, ops.data(), ops.size(), &n2, nullptr), LCTX_OK);
    EXPECT_EQ(n2, n);
    std::map<std::string, lctx_op_time> by;
    double total = 0;
    for (const auto &o : ops) {
        by[o.op] = o;
        total += o.seconds;
        EXPECT_GT(o.calls, 0) << o.op;
        EXPECT_GE(o.seconds, 0.0) << o.op;
    }
    // 200 tokens in sub-batches of 64: 4 forward passes of n_layer layers,
    // one attention call per layer and pass but the last layer's: a fed
    // chunk reads no logits, so no row of the last layer is computed there
    // (docs/engine.md, "The last layer computes only the rows read").
    const int32_t n_layer = lctx_model_n_layer(model);
    ASSERT_EQ(by.count("attention"), 1u);
    EXPECT_EQ(by["attention"].calls, 4 * (n_layer - 1));
    EXPECT_LE(total, lifetime);
    // A smaller buffer: the first entries, and the full count.
    lctx_op_time one{};
    size_t n3 = 0;
    ASSERT_EQ(lctx_session_op_times(s, &one, 1, &n3, nullptr), LCTX_OK);
    EXPECT_EQ(n3, n);
    EXPECT_STREQ(one.op, ops[0].op);
    lctx_session_free(s);
}

TEST_F(OpTimesApi, ErrorsAreReported) {
    lctx_session *plain = make_full(false);
    ASSERT_TRUE(plain);
    size_t n = 0;
    EXPECT_EQ(lctx_session_op_times(plain, nullptr, 0, &n, nullptr), LCTX_ERR_UNSUPPORTED);
    EXPECT_THAT(lctx_session_last_error(plain), HasSubstr("LCTX_PROFILE_OPS"));
    lctx_session_free(plain);

    lctx_session *s = make_full(true);
    ASSERT_TRUE(s);
    EXPECT_EQ(lctx_session_op_times(s, nullptr, 0, nullptr, nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_session_op_times(s, nullptr, 4, &n, nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_session_op_times(nullptr, nullptr, 0, &n, nullptr), LCTX_ERR_INVALID_ARG);
    lctx_session_free(s);
}

} // namespace
} // namespace lctx
