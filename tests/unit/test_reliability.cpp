// Reliability (issue 15): cancellation and progress at every point of every
// method, cancel-then-retry compared on the methods' cached state, pending
// cancels, negative knobs, and the log callback called without the log lock.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/log.h"
#include "engine_tiny_model.h"
#include "session/hash64.h"
#include "session/method_registry.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::random_tokens;
using ::testing::HasSubstr;

namespace {

struct Tiny {
    std::unique_ptr<Model> model;
    Tiny() {
        engine_test::TinyOptions o;
        o.n_layer = 2;
        o.n_ctx = 1024;
        auto bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 1);
    }
};

const Tiny &tiny() {
    static Tiny t;
    return t;
}

// Small sizes for every method: several chunks and batches for a 200-token document.
session_test::SessionParams small_params(lctx_method m) {
    session_test::SessionParams p;
    p.method = m;
    p.n_ctx = 256;
    p.n_threads = 1;
    p.n_batch = 16;
    p.reform_p.chunk = 32;
    p.reform_p.budget = 48;
    p.reform_p.recompute = 64;
    p.reform_p.sink = 4;
    p.reform_p.recent = 4;
    p.reform_p.obs = 8;
    p.reform_p.keep_first = 4;
    p.reform_p.keep_last = 4;
    p.reform_p.pool_half = 2;
    p.ilre_p.chunk = 32;
    p.ilre_p.window = 16;
    p.ilre_p.budget = 48;
    p.ilre_p.retrieval_layer = 1;
    p.reattention_p.n_global = 4;   // a middle from token 37 on, then 8-token steps
    p.reattention_p.n_local = 32;
    p.reattention_p.span = 4;
    p.reattention_p.top_k = 2;
    p.reattention_p.n_spans = 3;
    p.reattention_p.chunk = 8;
    p.kv_p.budget = m == LCTX_METHOD_INFLLM ? 64 : 48;
    p.kv_p.chunk = 32;
    p.kv_p.sink = 4;
    p.kv_p.recent = m == LCTX_METHOD_INFLLM ? 32 : 4;
    p.kv_p.obs = 8;
    p.infllm_p.block = 16;
    p.infllm_p.repr = 2;
    if (m == LCTX_METHOD_TRUNCATE) p.kv_p.budget = 120;   // build_index forwards 120 kept tokens in 8 batches
    return p;
}

std::vector<lctx_method> implemented_methods() {
    std::vector<lctx_method> out;
    for (const MethodInfo &m : methods())
        if (m.implemented()) out.push_back(m.id);
    return out;
}

lctx_sampling_params greedy() {
    lctx_sampling_params g;
    lctx_sampling_default_params(&g);
    return g;
}

// What a session holds after a document and one question.
struct Outcome {
    uint64_t digest = 0;            // method state after build_index
    std::vector<float> logits;      // after recompute
    std::vector<int32_t> answer;    // 4 greedy tokens
};

lctx_status status_of(const std::function<void()> &f) {
    try {
        f();
        return LCTX_OK;
    } catch (const Error &e) {
        return e.status();
    }
}

// Cancels at report numbers in `at` (1-based, counted over the session's life).
struct Canceller {
    std::set<int> at;
    int reports = 0;
    int cancels = 0;
    static int fn(float, void *ud) {
        auto *c = static_cast<Canceller *>(ud);
        if (c->at.count(++c->reports)) {
            ++c->cancels;
            return 1;
        }
        return 0;
    }
};

Outcome finish_question(Session &s, const std::vector<int32_t> &query) {
    Outcome o;
    o.digest = s.method().state_digest();
    auto sel = s.select(query.data(), query.size());
    s.recompute(*sel);
    o.logits.assign(s.logits(), s.logits() + tiny().model->hparams().n_vocab);
    for (int i = 0; i < 4; ++i) o.answer.push_back(s.decode(greedy()));
    return o;
}

Outcome run_plain(lctx_method m, const std::vector<int32_t> &doc, const std::vector<int32_t> &query) {
    Session s(*tiny().model, small_params(m));
    for (size_t at = 0; at < doc.size(); at += 50) s.feed(doc.data() + at, std::min<size_t>(50, doc.size() - at));
    s.build_index();
    return finish_question(s, query);
}

// The same document fed and indexed with cancels at the given reports; each
// cancelled call is retried (feed: with the tokens it did not keep).
Outcome run_cancelled(lctx_method m, const std::vector<int32_t> &doc, const std::vector<int32_t> &query,
                      std::set<int> at, int *cancels) {
    Canceller c;
    c.at = std::move(at);
    session_test::SessionParams p = small_params(m);
    p.progress = Canceller::fn;
    p.progress_user_data = &c;
    Session s(*tiny().model, p);
    for (size_t at0 = 0; at0 < doc.size(); at0 += 50) {
        const size_t end = std::min<size_t>(at0 + 50, doc.size());
        for (int tries = 0; s.n_fed() < int64_t(end); ++tries) {
            EXPECT_LT(tries, 100) << "feed makes no progress";
            if (tries >= 100) return {};
            const size_t from = static_cast<size_t>(s.n_fed());
            lctx_status st = status_of([&] { s.feed(doc.data() + from, end - from); });
            EXPECT_TRUE(st == LCTX_OK || st == LCTX_ERR_CANCELLED) << st;
        }
    }
    for (int tries = 0;; ++tries) {
        EXPECT_LT(tries, 100) << "build_index makes no progress";
        if (tries >= 100) return {};
        lctx_status st = status_of([&] { s.build_index(); });
        if (st == LCTX_OK) break;
        EXPECT_EQ(st, LCTX_ERR_CANCELLED);
        EXPECT_EQ(s.stage(), LCTX_STAGE_FEEDING);
    }
    c.at.clear();
    *cancels = c.cancels;
    return finish_question(s, query);
}

} // namespace

// Cancel-then-retry of feed_chunk and build_index, for every method, at many
// points: the cached state (digest of every cache slot, id and score) equals
// an uninterrupted run's, and so do the logits and the answer.
TEST(Reliability, CancelThenRetryKeepsTheCacheOfEveryMethod) {
    const auto doc = random_tokens(200, 7), query = random_tokens(5, 8);
    for (lctx_method m : implemented_methods()) {
        SCOPED_TRACE(method_name(m));
        const Outcome ref = run_plain(m, doc, query);
        for (const std::set<int> &at : {std::set<int>{1}, std::set<int>{2, 3}, std::set<int>{3, 7, 12, 18},
                                        std::set<int>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24}}) {
            int cancels = 0;
            const Outcome got = run_cancelled(m, doc, query, at, &cancels);
            EXPECT_GT(cancels, 0);
            EXPECT_EQ(got.digest, ref.digest) << "cached state differs after " << cancels << " cancels";
            EXPECT_EQ(got.logits, ref.logits);
            EXPECT_EQ(got.answer, ref.answer);
        }
    }
}

// build_index cancelled in its last steps and retried (the TRUNCATE defect:
// the kept tokens were forwarded again on top of the completed batches).
TEST(Reliability, CancelledBuildIndexRetriedDoesNotFeedTwice) {
    const auto doc = random_tokens(200, 11), query = random_tokens(5, 12);
    for (lctx_method m : implemented_methods()) {
        SCOPED_TRACE(method_name(m));
        const Outcome ref = run_plain(m, doc, query);
        // Count the reports of the feeds and of build_index, then cancel
        // build_index at each of its reports in turn (the last is done = 1.0).
        Canceller count;
        session_test::SessionParams p = small_params(m);
        p.progress = Canceller::fn;
        p.progress_user_data = &count;
        int feed_reports = 0, build_reports = 0;
        {
            Session s(*tiny().model, p);
            for (size_t at = 0; at < doc.size(); at += 50) s.feed(doc.data() + at, 50);
            feed_reports = count.reports;
            s.build_index();
            build_reports = count.reports - feed_reports;
        }
        ASSERT_GE(build_reports, 1);
        if (m == LCTX_METHOD_TRUNCATE) EXPECT_GE(build_reports, 8);   // one per batch of kept tokens
        for (int k = 1; k <= build_reports; ++k) {
            int cancels = 0;
            const Outcome got = run_cancelled(m, doc, query, {feed_reports + k}, &cancels);
            EXPECT_EQ(cancels, 1);
            EXPECT_EQ(got.digest, ref.digest) << "build_index cancelled at its report " << k << " of " << build_reports;
            EXPECT_EQ(got.answer, ref.answer);
        }
    }
}

namespace {
struct EndCanceller {
    bool armed = true;
    int reports = 0, ends = 0;
    static int fn(float done, void *ud) {
        auto *c = static_cast<EndCanceller *>(ud);
        ++c->reports;
        if (done >= 1.0f) ++c->ends;
        return c->armed && done >= 1.0f;
    }
};
} // namespace

// A callback that answers "stop" at done = 1.0 is obeyed by every call of
// every method (was ignored by TRUNCATE's feed and STREAMING's build_index,
// and FULL's build_index never reported at all); the session stays in its
// stage and the call can be made again.
TEST(Reliability, ProgressStopAtTheEndIsObeyedEverywhere) {
    const auto doc = random_tokens(120, 3), query = random_tokens(5, 4);
    for (lctx_method m : implemented_methods()) {
        SCOPED_TRACE(method_name(m));
        EndCanceller c;
        session_test::SessionParams p = small_params(m);
        p.progress = EndCanceller::fn;
        p.progress_user_data = &c;
        Session s(*tiny().model, p);
        c.armed = true;
        EXPECT_EQ(status_of([&] { s.feed(doc.data(), doc.size()); }), LCTX_ERR_CANCELLED);
        c.armed = false;
        if (s.n_fed() < int64_t(doc.size())) s.feed(doc.data() + s.n_fed(), doc.size() - size_t(s.n_fed()));
        ASSERT_EQ(s.n_fed(), int64_t(doc.size()));

        c.armed = true;
        const int ends_before = c.ends;
        EXPECT_EQ(status_of([&] { s.build_index(); }), LCTX_ERR_CANCELLED);
        EXPECT_EQ(c.ends, ends_before + 1) << "build_index must report done = 1.0 exactly once";
        EXPECT_EQ(s.stage(), LCTX_STAGE_FEEDING);
        c.armed = false;
        s.build_index();
        EXPECT_EQ(s.stage(), LCTX_STAGE_INDEXED);

        c.armed = true;
        EXPECT_EQ(status_of([&] { s.select(query.data(), query.size()); }), LCTX_ERR_CANCELLED);
        EXPECT_EQ(s.stage(), LCTX_STAGE_INDEXED);
        c.armed = false;
        auto sel = s.select(query.data(), query.size());
        c.armed = true;
        EXPECT_EQ(status_of([&] { s.recompute(*sel); }), LCTX_ERR_CANCELLED);
        EXPECT_EQ(s.stage(), LCTX_STAGE_SELECTED);
        EXPECT_EQ(s.logits(), nullptr);
        c.armed = false;
        s.recompute(*sel);
        EXPECT_EQ(s.stage(), LCTX_STAGE_DECODING);
        EXPECT_NO_THROW(s.decode(greedy()));
    }
}

// lctx_session_cancel with no call running is not lost: the next long call
// (or decode) returns LCTX_ERR_CANCELLED and consumes it; the one after runs.
TEST(Reliability, CancelBeforeACallSticks) {
    const auto doc = random_tokens(100, 5), query = random_tokens(5, 6);
    for (lctx_method m : {LCTX_METHOD_FULL, LCTX_METHOD_REFORM, LCTX_METHOD_TRUNCATE, LCTX_METHOD_H2O}) {
        SCOPED_TRACE(method_name(m));
        const Outcome ref = run_plain(m, doc, query);
        Session s(*tiny().model, small_params(m));
        s.cancel();
        EXPECT_EQ(status_of([&] { s.feed(doc.data(), 50); }), LCTX_ERR_CANCELLED);
        EXPECT_EQ(s.n_fed(), 0);
        for (size_t at = 0; at < doc.size(); at += 50) s.feed(doc.data() + at, 50);
        s.cancel();
        EXPECT_EQ(status_of([&] { s.build_index(); }), LCTX_ERR_CANCELLED);
        s.build_index();
        EXPECT_EQ(s.method().state_digest(), ref.digest);
        s.cancel();
        EXPECT_EQ(status_of([&] { s.select(query.data(), query.size()); }), LCTX_ERR_CANCELLED);
        auto sel = s.select(query.data(), query.size());
        s.cancel();
        EXPECT_EQ(status_of([&] { s.recompute(*sel); }), LCTX_ERR_CANCELLED);
        s.recompute(*sel);
        std::vector<int32_t> answer{s.decode(greedy())};
        s.cancel();
        EXPECT_EQ(status_of([&] { s.decode(greedy()); }), LCTX_ERR_CANCELLED);
        for (int i = 0; i < 3; ++i) answer.push_back(s.decode(greedy()));
        EXPECT_EQ(answer, ref.answer);
    }
}

// Negative values of size knobs whose comment in lctx.h gives negatives no
// meaning are refused with the field's name (they were taken as "derived").
TEST(Reliability, NegativeKnobsAreRefused) {
    const Model &model = *tiny().model;
    struct Case {
        lctx_method method;
        const char *field;
        std::function<void(session_test::SessionParams &)> set;
    };
    const std::vector<Case> cases = {
        {LCTX_METHOD_REFORM, "lctx_reform_params.chunk", [](auto &p) { p.reform_p.chunk = -5; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.budget", [](auto &p) { p.reform_p.budget = -1; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.sink", [](auto &p) { p.reform_p.sink = -1; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.recent", [](auto &p) { p.reform_p.recent = -1; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.obs", [](auto &p) { p.reform_p.obs = -2; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.recompute", [](auto &p) { p.reform_p.recompute = -1; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.keep_first", [](auto &p) { p.reform_p.keep_first = -1; }},
        {LCTX_METHOD_REFORM, "lctx_reform_params.keep_last", [](auto &p) { p.reform_p.keep_last = -1; }},
        {LCTX_METHOD_ILRE, "chunk", [](auto &p) { p.ilre_p.chunk = -5; }},
        {LCTX_METHOD_ILRE, "budget", [](auto &p) { p.ilre_p.budget = -1; }},
        {LCTX_METHOD_ILRE, "window", [](auto &p) { p.ilre_p.window = -1; }},
        {LCTX_METHOD_REATTENTION, "n_local", [](auto &p) { p.reattention_p.n_local = -3; }},
        {LCTX_METHOD_REATTENTION, "chunk", [](auto &p) { p.reattention_p.chunk = -2; }},
        {LCTX_METHOD_REATTENTION, "n_spans", [](auto &p) { p.reattention_p.n_spans = -7; }},
        {LCTX_METHOD_H2O, "lctx_kv_params.budget", [](auto &p) { p.kv_p.budget = -1; }},
        {LCTX_METHOD_STREAMING, "lctx_kv_params.chunk", [](auto &p) { p.kv_p.chunk = -3; }},
        {LCTX_METHOD_TRUNCATE, "lctx_kv_params.budget", [](auto &p) { p.kv_p.budget = -100; }},
        {LCTX_METHOD_H2O, "lctx_kv_params.obs", [](auto &p) { p.kv_p.obs = -1; }},
        {LCTX_METHOD_SNAPKV, "lctx_kv_params.snapkv_kernel", [](auto &p) { p.kv_p.snapkv_kernel = -1; }},
        {LCTX_METHOD_INFLLM, "kv_budget", [](auto &p) { p.kv_p.budget = -1; }},
        {LCTX_METHOD_INFLLM, "infllm_block", [](auto &p) { p.infllm_p.block = -1; }},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.field);
        session_test::SessionParams p = small_params(c.method);
        c.set(p);
        try {
            Session s(model, p);
            ADD_FAILURE() << "accepted a negative " << c.field;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG);
            EXPECT_THAT(e.what(), HasSubstr(c.field));
        }
    }
    // The documented negatives still mean what lctx.h says.
    session_test::SessionParams p = small_params(LCTX_METHOD_H2O);
    p.kv_p.sink = -1;      // none
    p.kv_p.recent = -1;    // none
    EXPECT_NO_THROW(Session(model, p));
    p = small_params(LCTX_METHOD_REFORM);
    p.reform_p.pool_half = -1;   // no pooling
    p.n_threads = -1;            // the model's
    EXPECT_NO_THROW(Session(model, p));
    p = small_params(LCTX_METHOD_H2O);
    p.kv_p.snapkv_kernel = -1;   // not used by H2O: ignored
    EXPECT_NO_THROW(Session(model, p));
}

namespace {
// A stand-in for Python's GIL: the log callback takes it, as the binding's
// trampoline does, and the thread that calls lctx_log_set holds it.
std::timed_mutex g_gil;
std::atomic<bool> g_in_callback{false}, g_got_gil{false};

void gil_taking_callback(lctx_log_level, const char *, void *) {
    g_in_callback = true;
    if (g_gil.try_lock_for(std::chrono::seconds(3))) {   // deadlocked before the fix: gives up after 3 s
        g_got_gil = true;
        g_gil.unlock();
    }
}
void silent(lctx_log_level, const char *, void *) {}
} // namespace

// lctx::log must not hold its mutex while the user's callback runs: a thread
// that holds the callback's own lock and calls lctx_log_set would deadlock.
TEST(Reliability, LogCallbackRunsWithoutTheLogLock) {
    lctx_log_set(gil_taking_callback, LCTX_LOG_DEBUG, nullptr);
    g_in_callback = false;
    g_got_gil = false;
    g_gil.lock();   // "holding the GIL"
    std::thread logger([] { lctx::log(LCTX_LOG_ERROR, "message from a worker thread"); });
    while (!g_in_callback) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    lctx_log_set(silent, LCTX_LOG_ERROR, nullptr);   // blocked on the log mutex before the fix
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_gil.unlock();
    logger.join();
    lctx_log_set(nullptr, LCTX_LOG_WARN, nullptr);
    EXPECT_TRUE(g_got_gil) << "the callback could not take its lock: lctx_log_set waited on the log mutex";
    EXPECT_LT(waited, 1.0);
}

// --- index files: durable saves, checks before allocation -------------------

namespace {

namespace fs = std::filesystem;

// A fresh directory for one test.
fs::path temp_dir(const std::string &name) {
    fs::path d = fs::path(::testing::TempDir().empty() ? "/tmp" : ::testing::TempDir()) /
                 ("lctx_rel_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

std::string read_all(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const fs::path &p, const std::string &bytes) { std::ofstream(p, std::ios::binary) << bytes; }

std::vector<std::string> names_in(const fs::path &d) {
    std::vector<std::string> out;
    for (const auto &e : fs::directory_iterator(d)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// An indexed REFORM session over n random tokens.
std::unique_ptr<Session> indexed_reform(int n, uint32_t seed) {
    auto s = std::make_unique<Session>(*tiny().model, small_params(LCTX_METHOD_REFORM));
    const auto doc = random_tokens(n, seed);
    s->feed(doc.data(), doc.size());
    s->build_index();
    return s;
}

lctx_status load_status(const fs::path &p, std::string *message = nullptr) {
    try {
        Session l(*tiny().model, small_params(LCTX_METHOD_REFORM));
        l.load_index(p.string());
        return LCTX_OK;
    } catch (const Error &e) {
        if (message) *message = e.what();
        return e.status();
    }
}

uint64_t loaded_digest(const fs::path &p) {
    Session l(*tiny().model, small_params(LCTX_METHOD_REFORM));
    l.load_index(p.string());
    return l.method().state_digest();
}

} // namespace

// The save went to a fixed "<path>.tmp" and followed a symbolic link there
// (overwriting the link's target). Now: a unique name created with O_EXCL,
// and a link at the target itself is replaced, never followed.
TEST(ReliabilityIndex, SaveFollowsNoSymlink) {
    const fs::path d = temp_dir("symlink");
    write_all(d / "victim", "precious");
    fs::create_symlink(d / "victim", d / "idx.lctx.tmp");
    fs::create_symlink(d / "victim", d / "link.lctx");
    auto s = indexed_reform(150, 21);
    s->save_index((d / "idx.lctx").string());
    s->save_index((d / "link.lctx").string());
    EXPECT_EQ(read_all(d / "victim"), "precious");
    EXPECT_TRUE(fs::is_symlink(d / "idx.lctx.tmp"));
    EXPECT_FALSE(fs::is_symlink(d / "link.lctx"));
    EXPECT_EQ(loaded_digest(d / "idx.lctx"), s->method().state_digest());
    EXPECT_EQ(loaded_digest(d / "link.lctx"), s->method().state_digest());
    // No temporary file is left behind.
    EXPECT_EQ(names_in(d), (std::vector<std::string>{"idx.lctx", "idx.lctx.tmp", "link.lctx", "victim"}));
    fs::remove_all(d);
}

// A save that fails part way (here the file size limit, as a full disk
// would) reports LCTX_ERR_IO and leaves the previous index whole and loadable.
TEST(ReliabilityIndex, FailedSaveLeavesThePreviousIndexIntact) {
    const fs::path d = temp_dir("failed_save");
    const fs::path path = d / "doc.lctx";
    auto small = indexed_reform(60, 31);
    small->save_index(path.string());
    const std::string before = read_all(path);
    auto big = indexed_reform(400, 32);
    struct rlimit old {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);   // writes past the limit fail with EFBIG instead
    struct rlimit lim = old;
    lim.rlim_cur = before.size() + 100;   // room for the small index, not for the big one
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
    lctx_status st = status_of([&] { big->save_index(path.string()); });
    ::setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_EQ(st, LCTX_ERR_IO);
    EXPECT_EQ(read_all(path), before);
    EXPECT_EQ(loaded_digest(path), small->method().state_digest());
    EXPECT_EQ(names_in(d), std::vector<std::string>{"doc.lctx"});   // the temporary file is removed
    // A directory that does not exist: LCTX_ERR_IO, nothing created.
    EXPECT_EQ(status_of([&] { big->save_index((d / "no" / "such.lctx").string()); }), LCTX_ERR_IO);
    // And a save that succeeds replaces it.
    big->save_index(path.string());
    EXPECT_EQ(loaded_digest(path), big->method().state_digest());
    fs::remove_all(d);
}

// Every single-byte change of the first kilobyte (the header: version, kind,
// size, fingerprint, profile, encoder sizes, dimensions, counts) is refused.
TEST(ReliabilityIndex, EveryHeaderByteIsChecked) {
    const fs::path d = temp_dir("header");
    auto s = indexed_reform(150, 41);
    s->save_index((d / "good.lctx").string());
    const std::string good = read_all(d / "good.lctx");
    ASSERT_GT(good.size(), 1024u);
    const fs::path bad = d / "bad.lctx";
    int accepted = 0;
    for (size_t at = 0; at < 1024; ++at)
        for (unsigned char x : {0x01, 0xFF}) {
            std::string b = good;
            b[at] = char(b[at] ^ x);
            write_all(bad, b);
            if (load_status(bad) == LCTX_OK) {
                ++accepted;
                ADD_FAILURE() << "byte " << at << " ^ " << int(x) << " was accepted";
            }
        }
    EXPECT_EQ(accepted, 0);
    fs::remove_all(d);
}

// The encoder sizes of the header edited to 2^24 were allocated (about
// 12 GiB) before the checksum was looked at; now the checksum of the whole
// file is verified first, in a fixed buffer.
TEST(ReliabilityIndex, HugeSizesInAnAlteredHeaderAreRefusedBeforeAllocation) {
    const fs::path d = temp_dir("huge");
    auto s = indexed_reform(150, 51);
    s->save_index((d / "good.lctx").string());
    const std::string good = read_all(d / "good.lctx");
    uint32_t pj_len = 0;
    std::memcpy(&pj_len, good.data() + 24 + 8, 4);
    const size_t chunk_at = 24 + 8 + 4 + pj_len, budget_at = chunk_at + 8;
    for (size_t at : {chunk_at, budget_at}) {
        std::string b = good;
        const int64_t huge = int64_t(1) << 24;
        std::memcpy(b.data() + at, &huge, 8);
        write_all(d / "bad.lctx", b);
        std::string msg;
        EXPECT_EQ(load_status(d / "bad.lctx", &msg), LCTX_ERR_FORMAT);
        EXPECT_THAT(msg, HasSubstr("checksum mismatch"));
    }
    fs::remove_all(d);
}

// Version 1 files (and other kinds of payload) are refused with a clear message.
TEST(ReliabilityIndex, OldVersionsAndOtherKindsAreRefused) {
    const fs::path d = temp_dir("version");
    auto s = indexed_reform(100, 61);
    s->save_index((d / "good.lctx").string());
    std::string b = read_all(d / "good.lctx");
    b[8] = 1;   // version 1
    write_all(d / "old.lctx", b);
    std::string msg;
    EXPECT_EQ(load_status(d / "old.lctx", &msg), LCTX_ERR_FORMAT);
    EXPECT_THAT(msg, HasSubstr("format version 1"));
    EXPECT_THAT(msg, HasSubstr("rebuild the index"));
    b = read_all(d / "good.lctx");
    b[12] = 7;   // payload kind 7
    write_all(d / "kind.lctx", b);
    EXPECT_EQ(load_status(d / "kind.lctx", &msg), LCTX_ERR_FORMAT);
    EXPECT_THAT(msg, HasSubstr("kind 7"));
    fs::remove_all(d);
}

// --- params structs of every size -----------------------------------------

namespace {
// A heap block of exactly `size` bytes holding the first bytes of *full
// (ASan catches any read past it: the over-read of lctx_session_create and
// lctx_decode that copied the whole struct before checking struct_size).
template <class T> std::unique_ptr<unsigned char[]> cut(const T &full, uint32_t size) {
    std::unique_ptr<unsigned char[]> b(new unsigned char[size]);
    std::memcpy(b.get(), &full, std::min<size_t>(size, sizeof full));
    std::memcpy(b.get(), &size, sizeof size);
    return b;
}
} // namespace

// Every struct_size from 4 to sizeof: a size on a field boundary (an older
// lctx.h) is accepted, one inside a field is refused with the field's name
// (half a pointer was copied and dereferenced: found by fuzz_api).
TEST(Reliability, StructSizesInsideAFieldAreRefused) {
    engine_test::TinyOptions o;
    const auto bytes = engine_test::make_tiny_llama(o);
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    session_test::SessionParams full = small_params(LCTX_METHOD_FULL);   // method structs read, not needed
    full.n_ctx = 128;
    auto inside = [](size_t size, std::initializer_list<std::pair<size_t, size_t>> fields) {
        for (auto [off, len] : fields)
            if (size > off && size < off + len) return true;
        return false;
    };
    using P = lctx_session_params;
    int accepted = 0, refused = 0;
    for (uint32_t size = 4; size <= sizeof(P); ++size) {
        auto b = cut(static_cast<const P &>(full), size);
        lctx_session *s = nullptr;
        const lctx_status st = lctx_session_create(m, reinterpret_cast<const P *>(b.get()), &s);
        const bool bad = inside(size, {{offsetof(P, progress), 8}, {offsetof(P, progress_user_data), 8},
                                       {offsetof(P, reform), 8}, {offsetof(P, kv), 8}, {offsetof(P, infllm), 8},
                                       {offsetof(P, ilre), 8}, {offsetof(P, max_memory), 8}, {offsetof(P, reattention), 8},
                                       {offsetof(P, refreshkv), 8}, {offsetof(P, method), 4}, {offsetof(P, n_ctx), 4},
                                       {offsetof(P, n_threads), 4}, {offsetof(P, n_batch), 4},
                                       {offsetof(P, kv_type), 4}, {offsetof(P, attn_precision), 4},
                                       {offsetof(P, matmul_precision), 4}});
        if (bad) {
            EXPECT_EQ(st, LCTX_ERR_INVALID_ARG) << "size " << size;
            EXPECT_THAT(lctx_last_error(), HasSubstr("ends inside the field"));
            ++refused;
        } else {
            EXPECT_EQ(st, LCTX_OK) << "size " << size << ": " << lctx_last_error();
            ++accepted;
        }
        lctx_session_free(s);
    }
    EXPECT_GT(refused, 30);
    EXPECT_GT(accepted, 10);
    // Sampling params through lctx_decode, every size.
    lctx_session *s = nullptr;
    ASSERT_EQ(lctx_session_create(m, &full, &s), LCTX_OK);
    const auto doc = random_tokens(20, 1);
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, doc.data(), 3, &sel), LCTX_OK);
    ASSERT_EQ(lctx_recompute(s, sel), LCTX_OK);
    lctx_selection_free(sel);
    lctx_sampling_params sp;
    lctx_sampling_default_params(&sp);
    for (uint32_t size = 4; size <= sizeof sp; ++size) {
        auto b = cut(sp, size);
        lctx_token t = -1;
        const lctx_status st = lctx_decode(s, reinterpret_cast<const lctx_sampling_params *>(b.get()), &t);
        EXPECT_TRUE(st == LCTX_OK || st == LCTX_ERR_INVALID_ARG) << size;
        if (st == LCTX_ERR_INVALID_ARG) EXPECT_THAT(lctx_last_error(), HasSubstr("ends inside the field"));
    }
    lctx_session_free(s);
    lctx_model_free(m);
}

namespace {
// Rewrites the checksum of an index file image (as a forger would).
void reseal(std::string &b) {
    Hash64 h;
    h.update(b.data(), b.size() - 8);
    const uint64_t sum = h.digest();
    std::memcpy(b.data() + b.size() - 8, &sum, 8);
}
} // namespace

// A file forged with a valid checksum: sizes whose sum overflows are refused
// (signed overflow, found by fuzz_index), and sizes in range but too large
// for the session's max_memory are refused before the allocation.
TEST(ReliabilityIndex, ForgedSizesWithAValidChecksumAreRefused) {
    const fs::path d = temp_dir("forged");
    auto s = indexed_reform(150, 71);
    s->save_index((d / "good.lctx").string());
    const std::string good = read_all(d / "good.lctx");
    uint32_t pj_len = 0;
    std::memcpy(&pj_len, good.data() + 24 + 8, 4);
    const size_t chunk_at = 24 + 8 + 4 + pj_len, budget_at = chunk_at + 8, sink_at = chunk_at + 16,
                 recent_at = chunk_at + 24;
    std::string b = good;
    const int64_t big = int64_t(1) << 62;
    std::memcpy(b.data() + sink_at, &big, 8);
    std::memcpy(b.data() + recent_at, &big, 8);
    reseal(b);
    write_all(d / "overflow.lctx", b);
    std::string msg;
    EXPECT_EQ(load_status(d / "overflow.lctx", &msg), LCTX_ERR_FORMAT);
    EXPECT_THAT(msg, HasSubstr("invalid encoder sizes"));

    b = good;
    const int64_t huge = int64_t(1) << 24;
    std::memcpy(b.data() + chunk_at, &huge, 8);
    std::memcpy(b.data() + budget_at, &huge, 8);
    reseal(b);
    write_all(d / "huge.lctx", b);
    session_test::SessionParams p = small_params(LCTX_METHOD_REFORM);
    p.max_memory = uint64_t(64) << 20;
    try {
        Session l(*tiny().model, p);
        l.load_index((d / "huge.lctx").string());
        ADD_FAILURE() << "a 2^24-slot encoder was allocated";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY) << e.what();
        EXPECT_THAT(e.what(), HasSubstr("KV cache of 33554432 slots"));
    }
    fs::remove_all(d);
}

// lctx_session_logits is NULL outside the decoding stage: a new select
// drops the previous answer's logits (they stayed readable after select,
// found by fuzz_api), a failed select keeps them.
TEST(Reliability, LogitsOnlyWhileDecoding) {
    const auto doc = random_tokens(100, 81), q = random_tokens(5, 82);
    for (lctx_method m : implemented_methods()) {
        SCOPED_TRACE(method_name(m));
        Session s(*tiny().model, small_params(m));
        s.feed(doc.data(), doc.size());
        s.build_index();
        auto sel = s.select(q.data(), q.size());
        EXPECT_EQ(s.logits(), nullptr);
        s.recompute(*sel);
        ASSERT_NE(s.logits(), nullptr);
        s.decode(greedy());
        s.cancel();
        EXPECT_EQ(status_of([&] { s.select(q.data(), q.size()); }), LCTX_ERR_CANCELLED);
        EXPECT_EQ(s.stage(), LCTX_STAGE_DECODING);
        EXPECT_NE(s.logits(), nullptr);
        auto sel2 = s.select(q.data(), q.size());
        EXPECT_EQ(s.stage(), LCTX_STAGE_SELECTED);
        EXPECT_EQ(s.logits(), nullptr);
        s.recompute(*sel2);
        EXPECT_NE(s.logits(), nullptr);
    }
}

// kv_type LCTX_KV_Q8 (docs/kv-storage.md): accepted by every method through
// the whole session (feed, index, select, recompute, decode), a value
// outside the enum is refused naming the three, and FULL's logits after a
// 200-token prompt stay near the f32 cache's (one int8 rounding per stored
// key and value: about 0.4% of each row's largest element).
TEST(Reliability, KvQ8RunsEveryMethodAndStaysClose) {
    engine_test::TinyOptions o;
    const auto bytes = engine_test::make_tiny_llama(o);
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    const int n_vocab = lctx_model_n_vocab(m);
    const auto doc = random_tokens(200, 7), q = random_tokens(4, 8);
    session_test::SessionParams bad_p = small_params(LCTX_METHOD_FULL);
    int32_t bad = 3;
    std::memcpy(&bad_p.kv_type, &bad, sizeof bad);
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(m, &bad_p, &s), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("LCTX_KV_Q8"));
    EXPECT_EQ(s, nullptr);

    auto first_logits = [&](lctx_method method, lctx_kv_type type, std::vector<lctx_token> *decoded) {
        session_test::SessionParams p = small_params(method);
        p.kv_type = type;
        std::vector<float> out;
        lctx_session *t = nullptr;
        EXPECT_EQ(lctx_session_create(m, &p, &t), LCTX_OK) << lctx_last_error();
        if (!t) return out;
        lctx_selection *sel = nullptr;
        const bool ok = lctx_feed_chunk(t, doc.data(), doc.size()) == LCTX_OK && lctx_build_index(t) == LCTX_OK &&
                        lctx_select(t, q.data(), q.size(), &sel) == LCTX_OK && lctx_recompute(t, sel) == LCTX_OK;
        EXPECT_TRUE(ok) << method_name(method) << ": " << lctx_session_last_error(t);
        if (ok) {
            const float *l = lctx_session_logits(t);
            out.assign(l, l + n_vocab);
            lctx_sampling_params samp;
            lctx_sampling_default_params(&samp);
            for (int i = 0; i < 4; ++i) {
                lctx_token tok = -1;
                EXPECT_EQ(lctx_decode(t, &samp, &tok), LCTX_OK) << method_name(method) << ": " << lctx_session_last_error(t);
                if (decoded) decoded->push_back(tok);
            }
        }
        lctx_selection_free(sel);
        lctx_session_free(t);
        return out;
    };
    for (lctx_method method : implemented_methods()) {
        SCOPED_TRACE(method_name(method));
        std::vector<lctx_token> toks;
        EXPECT_EQ(first_logits(method, LCTX_KV_Q8, &toks).size(), static_cast<size_t>(n_vocab));
        EXPECT_EQ(toks.size(), 4u);
    }
    const std::vector<float> f32 = first_logits(LCTX_METHOD_FULL, LCTX_KV_F32, nullptr);
    const std::vector<float> q8 = first_logits(LCTX_METHOD_FULL, LCTX_KV_Q8, nullptr);
    ASSERT_EQ(f32.size(), q8.size());
    double max_abs = 0, max_diff = 0;
    for (int i = 0; i < n_vocab; ++i) {
        max_abs = std::max(max_abs, double(std::fabs(f32[i])));
        max_diff = std::max(max_diff, double(std::fabs(f32[i] - q8[i])));
    }
    EXPECT_GT(max_diff, 0.0) << "q8 storage rounds: the logits cannot be the f32 ones";
    EXPECT_LT(max_diff, 0.05 * std::max(1.0, max_abs));
    lctx_model_free(m);
}

// The logits after a FULL prompt of `doc` with params p (fails the test and
// returns an empty vector on any error).
static std::vector<float> full_prompt_logits(lctx_model *m, const session_test::SessionParams &p,
                                      const std::vector<lctx_token> &doc) {
    lctx_session *s = nullptr;
    if (lctx_session_create(m, &p, &s) != LCTX_OK) {
        ADD_FAILURE() << lctx_last_error();
        return {};
    }
    std::vector<float> out;
    lctx_selection *sel = nullptr;
    if (lctx_feed_chunk(s, doc.data(), doc.size()) == LCTX_OK && lctx_build_index(s) == LCTX_OK &&
        lctx_select(s, doc.data(), 3, &sel) == LCTX_OK && lctx_recompute(s, sel) == LCTX_OK) {
        if (const float *l = lctx_session_logits(s)) out.assign(l, l + lctx_model_n_vocab(m));
    }
    if (out.empty()) ADD_FAILURE() << lctx_session_last_error(s);
    lctx_selection_free(sel);
    lctx_session_free(s);
    return out;
}

// matmul_precision = LCTX_PRECISION_INT8 (docs/int8.md) on a tiny model
// with Q4_1 matrices: attention refuses it by name; the logits after a
// 200-token FULL prompt (16-token batches: the GEMM) move by no more than the
// activations' int8 rounding, and equal the exact ones where the CPU has no
// AVX2 (the session then warns and stays f32).
TEST(Reliability, PrecisionInt8IsOptInAndClose) {
    engine_test::TinyOptions o;
    o.q4_1 = true;
    const auto bytes = engine_test::make_tiny_llama(o);
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    session_test::SessionParams p = small_params(LCTX_METHOD_FULL);
    lctx_session *s = nullptr;
    p.attn_precision = LCTX_PRECISION_INT8;
    EXPECT_EQ(lctx_session_create(m, &p, &s), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("attn_precision"));
    EXPECT_THAT(lctx_last_error(), HasSubstr("matmul_precision only"));
    EXPECT_EQ(s, nullptr);
    p.attn_precision = LCTX_PRECISION_F32;

    const auto doc = random_tokens(200, 9);
    const int n_vocab = lctx_model_n_vocab(m);
    std::vector<std::vector<float>> logits;
    for (lctx_precision matmul : {LCTX_PRECISION_F32, LCTX_PRECISION_INT8}) {
        p.matmul_precision = matmul;
        logits.push_back(full_prompt_logits(m, p, doc));
        ASSERT_EQ(logits.back().size(), static_cast<size_t>(n_vocab));
    }
    double max_abs = 0, max_diff = 0;
    for (int i = 0; i < n_vocab; ++i) {
        max_abs = std::max(max_abs, double(std::fabs(logits[0][i])));
        max_diff = std::max(max_diff, double(std::fabs(logits[0][i] - logits[1][i])));
    }
    if (lctx::cpu_backend_int8_available()) {
        EXPECT_GT(max_diff, 0.0);
        EXPECT_LT(max_diff, 0.05 * std::max(1.0, max_abs));
    } else {
        EXPECT_EQ(max_diff, 0.0);
    }
    lctx_model_free(m);
}

// attn_precision and matmul_precision (docs/bf16.md): a value outside the
// enum is refused by name; LCTX_PRECISION_BF16 is accepted everywhere, and
// the logits after a 200-token FULL prompt (16-token batches: the tiled
// attention kernel and the GEMM) stay within bf16 rounding of the exact
// ones, or equal them where the CPU has no AVX512_BF16.
TEST(Reliability, PrecisionBf16IsOptInAndClose) {
    engine_test::TinyOptions o;
    const auto bytes = engine_test::make_tiny_llama(o);
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    session_test::SessionParams p = small_params(LCTX_METHOD_FULL);
    lctx_session *s = nullptr;
    int32_t bad = 7, zero = 0;
    std::memcpy(&p.attn_precision, &bad, sizeof bad);
    EXPECT_EQ(lctx_session_create(m, &p, &s), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("attn_precision 7"));
    EXPECT_EQ(s, nullptr);
    std::memcpy(&p.attn_precision, &zero, sizeof zero);
    std::memcpy(&p.matmul_precision, &bad, sizeof bad);
    EXPECT_EQ(lctx_session_create(m, &p, &s), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("matmul_precision 7"));
    EXPECT_EQ(s, nullptr);

    const auto doc = random_tokens(200, 5);
    const int n_vocab = lctx_model_n_vocab(m);
    // exact, bf16 attention, bf16 matmuls
    const lctx_precision F = LCTX_PRECISION_F32, B = LCTX_PRECISION_BF16;
    const std::pair<lctx_precision, lctx_precision> settings[] = {{F, F}, {B, F}, {F, B}};
    std::vector<std::vector<float>> logits;
    for (auto [attn, matmul] : settings) {
        p.attn_precision = attn;
        p.matmul_precision = matmul;
        logits.push_back(full_prompt_logits(m, p, doc));
        ASSERT_EQ(logits.back().size(), static_cast<size_t>(n_vocab));
    }
    double max_abs = 0;
    for (int i = 0; i < n_vocab; ++i) max_abs = std::max(max_abs, double(std::fabs(logits[0][i])));
    for (int k = 1; k <= 2; ++k) {
        double max_diff = 0;
        for (int i = 0; i < n_vocab; ++i) max_diff = std::max(max_diff, double(std::fabs(logits[0][i] - logits[k][i])));
        if (lctx::cpu_backend_bf16_available()) {
            EXPECT_GT(max_diff, 0.0) << "setting " << k;
            EXPECT_LT(max_diff, 0.02 * std::max(1.0, max_abs)) << "setting " << k;
        } else {
            EXPECT_EQ(max_diff, 0.0) << "setting " << k;
        }
    }
    lctx_model_free(m);
}
