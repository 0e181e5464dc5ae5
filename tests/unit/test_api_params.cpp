// The ABI rule of the params structs and the method registry, through the C
// API on the tiny in-memory model:
//   - a struct cut short (a caller built against an older lctx.h) is read up
//     to its struct_size only (the structs are malloc'ed to exactly that size,
//     so ASan in scripts/test.sh catches any read past it) and its missing
//     tail takes the defaults; a full struct is read whole;
//   - struct_size 0, smaller than the struct_size field or larger than the
//     library's struct is refused with LCTX_ERR_INVALID_ARG;
//   - lctx_method_* lists exactly the enum of lctx.h, names round-trip, and
//     "implemented" agrees with lctx_session_create.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "api/handles.h"
#include "engine_tiny_model.h"
#include "lctx.h"
#include "session/method_infllm.h"
#include "session/method_recurrent.h"
#include "session/method_reform.h"
#include "session/session_params.h"

using ::testing::HasSubstr;

namespace {

// A params struct of exactly `bytes` bytes on the heap, filled with the
// defaults (as an older caller's default function would) and its
// struct_size set to `bytes`.
template <class T>
struct Cut {
    T *p;
    Cut(size_t bytes, void (*defaults)(T *)) {
        T full;
        defaults(&full);
        p = static_cast<T *>(std::malloc(bytes));
        std::memcpy(static_cast<void *>(p), &full, bytes);
        p->struct_size = static_cast<uint32_t>(bytes);
    }
    ~Cut() { std::free(p); }
    Cut(const Cut &) = delete;
    Cut &operator=(const Cut &) = delete;
    T *operator->() { return p; }
};

class ParamsAbi : public ::testing::Test {
protected:
    void SetUp() override {
        bytes_ = engine_test::make_tiny_llama();   // n_ctx_train 4096
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 1;
        ASSERT_EQ(lctx_model_load_from_memory(bytes_.data(), bytes_.size(), &mp, &model), LCTX_OK)
            << lctx_last_error();
    }
    void TearDown() override {
        lctx_session_free(session);   // sessions before their model
        lctx_model_free(model);
    }

    // The method of a session created with sp (fails the test when refused).
    template <class M>
    const M &method_of(const lctx_session_params *sp) {
        lctx_session_free(session);
        session = nullptr;
        EXPECT_EQ(lctx_session_create(model, sp, &session), LCTX_OK) << lctx_last_error();
        if (!session) throw std::runtime_error("no session");
        return dynamic_cast<const M &>(session->session->method());
    }

    lctx_status create(const lctx_session_params *sp) {
        lctx_session_free(session);
        session = nullptr;
        return lctx_session_create(model, sp, &session);
    }

    std::vector<uint8_t> bytes_;
    lctx_model *model = nullptr;
    lctx_session *session = nullptr;
};

lctx_session_params session_defaults(lctx_method m) {
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = m;
    sp.n_threads = 1;
    return sp;
}

} // namespace

// --- default functions ------------------------------------------------------

TEST(ParamsDefaults, SetStructSizeAndAcceptNull) {
    lctx_reform_params r;
    lctx_reform_default_params(&r);
    EXPECT_EQ(r.struct_size, sizeof r);
    EXPECT_EQ(r.chunk, 0);
    EXPECT_EQ(r.pool_half, 0);
    EXPECT_EQ(r.repeat_window, 0);
    EXPECT_FALSE(r.h2o_per_chunk);
    EXPECT_EQ(r.heads_path, nullptr);
    lctx_kv_params k;
    lctx_kv_default_params(&k);
    EXPECT_EQ(k.struct_size, sizeof k);
    EXPECT_EQ(k.budget, 0);
    EXPECT_EQ(k.infinipot_nuc_ratio, 0.0f);
    EXPECT_EQ(k.infinipot_catalyst, nullptr);
    lctx_infllm_params i;
    lctx_infllm_default_params(&i);
    EXPECT_EQ(i.struct_size, sizeof i);
    EXPECT_EQ(i.block, 0);
    lctx_session_params s;
    lctx_session_default_params(&s);
    EXPECT_EQ(s.reform, nullptr);
    EXPECT_EQ(s.kv, nullptr);
    EXPECT_EQ(s.infllm, nullptr);
    EXPECT_EQ(s.refreshkv, nullptr);
    lctx_refreshkv_params rk;
    lctx_refreshkv_default_params(&rk);
    EXPECT_EQ(rk.struct_size, sizeof rk);
    EXPECT_EQ(rk.partial, 0);
    EXPECT_EQ(rk.threshold, 0.0f);
    EXPECT_FALSE(rk.gathered);
    lctx_refreshkv_default_params(nullptr);
    lctx_reform_default_params(nullptr);
    lctx_kv_default_params(nullptr);
    lctx_infllm_default_params(nullptr);
}

// --- structs cut short: the tail takes the defaults ---------------------------

TEST(ParamsAbiRead, CutStructsKeepTheirHeadAndGetDefaultsForTheTail) {
    {
        Cut<lctx_session_params> c(offsetof(lctx_session_params, n_threads), lctx_session_default_params);
        c->method = LCTX_METHOD_H2O;
        c->n_ctx = 3000;
        const lctx_session_params r = lctx::read_session_params(c.p);
        EXPECT_EQ(r.struct_size, sizeof r);
        EXPECT_EQ(r.method, LCTX_METHOD_H2O);
        EXPECT_EQ(r.n_ctx, 3000);
        EXPECT_EQ(r.n_threads, 0);
        EXPECT_EQ(r.n_batch, 512);
        EXPECT_EQ(r.progress, nullptr);
        EXPECT_EQ(r.reform, nullptr);
        EXPECT_EQ(r.kv, nullptr);
        EXPECT_EQ(r.infllm, nullptr);
    }
    {
        Cut<lctx_session_params> c(sizeof(uint32_t), lctx_session_default_params);   // struct_size only
        const lctx_session_params r = lctx::read_session_params(c.p);
        EXPECT_EQ(r.method, LCTX_METHOD_REFORM);   // the library default
        EXPECT_EQ(r.n_batch, 512);
    }
    {
        Cut<lctx_sampling_params> c(offsetof(lctx_sampling_params, top_p), lctx_sampling_default_params);
        c->temperature = 0.5f;
        c->top_k = 7;
        const lctx_sampling_params r = lctx::read_sampling_params(c.p);
        EXPECT_EQ(r.struct_size, sizeof r);
        EXPECT_EQ(r.temperature, 0.5f);
        EXPECT_EQ(r.top_k, 7);
        EXPECT_EQ(r.top_p, 1.0f);
        EXPECT_EQ(r.repeat_penalty, 1.0f);
        EXPECT_EQ(r.repeat_last_n, 64);
        EXPECT_EQ(r.seed, 0u);
    }
    {
        Cut<lctx_reform_params> c(offsetof(lctx_reform_params, sink), lctx_reform_default_params);
        c->chunk = 64;
        c->recompute = 200;
        const lctx_reform_params r = lctx::read_reform_params(c.p);
        EXPECT_EQ(r.struct_size, sizeof r);
        EXPECT_EQ(r.chunk, 64);
        EXPECT_EQ(r.recompute, 200);
        EXPECT_EQ(r.sink, 0);
        EXPECT_EQ(r.heads_path, nullptr);
    }
    {
        Cut<lctx_kv_params> c(offsetof(lctx_kv_params, snapkv_kernel), lctx_kv_default_params);
        c->obs = 9;
        const lctx_kv_params r = lctx::read_kv_params(c.p);
        EXPECT_EQ(r.obs, 9);
        EXPECT_EQ(r.snapkv_kernel, 0);
        EXPECT_EQ(r.infinipot_catalyst, nullptr);
    }
    {
        Cut<lctx_infllm_params> c(offsetof(lctx_infllm_params, repr), lctx_infllm_default_params);
        c->block = 16;
        const lctx_infllm_params r = lctx::read_infllm_params(c.p);
        EXPECT_EQ(r.block, 16);
        EXPECT_EQ(r.repr, 0);
    }
}

TEST_F(ParamsAbi, ModelParamsCutShort) {
    Cut<lctx_model_params> c(offsetof(lctx_model_params, use_mmap), lctx_model_default_params);
    c->n_threads = 3;
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes_.data(), bytes_.size(), c.p, &m), LCTX_OK) << lctx_last_error();
    EXPECT_EQ(m->model->n_threads(), 3);
    lctx_model_free(m);
}

TEST_F(ParamsAbi, SessionParamsOfAnOlderHeaderCreateSessions) {
    // An lctx.h before the method structs: the struct ends after
    // progress_user_data; every method knob takes its default.
    Cut<lctx_session_params> c(offsetof(lctx_session_params, reform), lctx_session_default_params);
    c->method = LCTX_METHOD_H2O;
    c->n_ctx = 3000;
    c->n_threads = 1;
    const auto &h2o = method_of<lctx::RecurrentMethod>(c.p);
    EXPECT_EQ(h2o.params().n_ctx, 3000);
    EXPECT_EQ(h2o.params().budget, 1024);   // n_ctx_train / 4
    EXPECT_EQ(h2o.params().obs, 128);
    c->method = LCTX_METHOD_REFORM;
    c->n_ctx = 0;
    const auto &reform = method_of<lctx::ReformMethod>(c.p);
    EXPECT_EQ(reform.params().chunk, 1024);
    EXPECT_EQ(reform.params().recompute, 2048);
    EXPECT_EQ(reform.params().n_ctx, 4096);
    // Only struct_size and the method; a method value outside the enum is still seen.
    Cut<lctx_session_params> m(offsetof(lctx_session_params, n_ctx), lctx_session_default_params);
    m->method = static_cast<lctx_method>(77);
    EXPECT_EQ(create(m.p), LCTX_ERR_INVALID_ARG);
    m->method = LCTX_METHOD_FULL;
    EXPECT_EQ(create(m.p), LCTX_OK) << lctx_last_error();
    // The head of the struct is read: n_ctx = 16 holds 16 tokens, not 17.
    Cut<lctx_session_params> f(offsetof(lctx_session_params, n_threads), lctx_session_default_params);
    f->method = LCTX_METHOD_FULL;
    f->n_ctx = 16;
    ASSERT_EQ(create(f.p), LCTX_OK) << lctx_last_error();
    std::vector<lctx_token> doc(17, 5);
    EXPECT_EQ(lctx_feed_chunk(session, doc.data(), 16), LCTX_OK) << lctx_session_last_error(session);
    EXPECT_EQ(lctx_feed_chunk(session, doc.data(), 1), LCTX_ERR_CONTEXT_FULL);
}

TEST_F(ParamsAbi, ReformParamsCutShortAndFull) {
    lctx_session_params sp = session_defaults(LCTX_METHOD_REFORM);
    sp.n_ctx = 1024;
    Cut<lctx_reform_params> c(offsetof(lctx_reform_params, sink), lctx_reform_default_params);
    c->chunk = 64;
    c->budget = 96;
    c->recompute = 200;
    sp.reform = c.p;
    const lctx::ReformParams &p = method_of<lctx::ReformMethod>(&sp).params();
    EXPECT_EQ(p.chunk, 64);
    EXPECT_EQ(p.budget, 96);
    EXPECT_EQ(p.recompute, 200);
    EXPECT_EQ(p.sink, 12);         // min(256, budget / 8): derived, as for a 0
    EXPECT_EQ(p.recent, 12);
    EXPECT_EQ(p.obs, 64);          // min(128, chunk)
    EXPECT_EQ(p.keep_first, 25);   // min(256, recompute / 8)
    EXPECT_EQ(p.keep_last, 25);
    EXPECT_EQ(p.pool_half, 64);
    EXPECT_EQ(p.repeat_window, 16);
    EXPECT_TRUE(p.h2o_accumulate);

    // A full struct is read to its last field.
    lctx_reform_params full;
    lctx_reform_default_params(&full);
    full.chunk = 64;
    full.budget = 96;
    full.recompute = 200;
    full.sink = 4;
    full.recent = 5;
    full.obs = 16;
    full.keep_first = 6;
    full.keep_last = 7;
    full.pool_half = -1;
    full.h2o_per_chunk = true;
    sp.reform = &full;
    const lctx::ReformParams &q = method_of<lctx::ReformMethod>(&sp).params();
    EXPECT_EQ(q.sink, 4);
    EXPECT_EQ(q.recent, 5);
    EXPECT_EQ(q.obs, 16);
    EXPECT_EQ(q.keep_first, 6);
    EXPECT_EQ(q.keep_last, 7);
    EXPECT_EQ(q.pool_half, 0);
    EXPECT_EQ(q.repeat_window, 16);   // 0: the default
    EXPECT_FALSE(q.h2o_accumulate);
    full.repeat_window = -1;
    EXPECT_EQ(method_of<lctx::ReformMethod>(&sp).params().repeat_window, 0);   // off
    full.repeat_window = 40;
    EXPECT_EQ(method_of<lctx::ReformMethod>(&sp).params().repeat_window, 40);
    full.repeat_window = 1;   // a window of one token would mark every repeated token
    EXPECT_EQ(create(&sp), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("repeat window"));
    full.repeat_window = 0;
    full.heads_path = "/nonexistent/lctx-profile.json";
    EXPECT_EQ(create(&sp), LCTX_ERR_IO);
    EXPECT_THAT(lctx_last_error(), HasSubstr("/nonexistent/lctx-profile.json"));
}

TEST_F(ParamsAbi, KvParamsCutShortAndFull) {
    lctx_session_params sp = session_defaults(LCTX_METHOD_H2O);
    sp.n_ctx = 1024;
    Cut<lctx_kv_params> c(offsetof(lctx_kv_params, obs), lctx_kv_default_params);
    c->budget = 64;
    c->chunk = 200;
    c->sink = 4;
    c->recent = -1;
    sp.kv = c.p;
    const lctx::BaselineParams &p = method_of<lctx::RecurrentMethod>(&sp).params();
    EXPECT_EQ(p.budget, 64);
    EXPECT_EQ(p.chunk, 200);
    EXPECT_EQ(p.sink, 4);
    EXPECT_EQ(p.recent, 0);
    EXPECT_EQ(p.obs, 128);          // H2O's default
    EXPECT_EQ(p.snapkv_kernel, 7);
    EXPECT_EQ(p.nuc_ratio, 0.25f);
    EXPECT_EQ(p.catalyst, lctx::kDefaultCatalystPrompt);

    lctx_kv_params full;
    lctx_kv_default_params(&full);
    full.budget = 64;
    full.chunk = 48;
    full.sink = 4;
    full.recent = 4;
    full.obs = 16;
    full.snapkv_kernel = 5;
    full.infinipot_nuc_ratio = 0.5f;
    char catalyst[] = "Remember the numbers.";
    full.infinipot_catalyst = catalyst;
    sp.kv = &full;
    sp.method = LCTX_METHOD_INFINIPOT;
    const lctx::BaselineParams &q = method_of<lctx::RecurrentMethod>(&sp).params();
    std::memset(catalyst, 'x', sizeof catalyst - 1);   // the library kept a copy
    EXPECT_EQ(q.budget, 64);
    EXPECT_EQ(q.chunk, 48);
    EXPECT_EQ(q.snapkv_kernel, 5);
    EXPECT_EQ(q.nuc_ratio, 0.5f);
    EXPECT_EQ(q.catalyst, "Remember the numbers.");
}

TEST_F(ParamsAbi, InfllmParamsCutShortAndFull) {
    lctx_session_params sp = session_defaults(LCTX_METHOD_INFLLM);
    Cut<lctx_infllm_params> c(offsetof(lctx_infllm_params, repr), lctx_infllm_default_params);
    c->block = 16;
    sp.infllm = c.p;
    const lctx::InfllmParams &p = method_of<lctx::InfllmMethod>(&sp).params();
    EXPECT_EQ(p.block, 16);
    EXPECT_EQ(p.repr, 4);
    EXPECT_EQ(p.memory, 1024);   // kv = NULL: n_ctx_train / 4
    lctx_infllm_params full;
    lctx_infllm_default_params(&full);
    full.block = 32;
    full.repr = 2;
    sp.infllm = &full;
    const lctx::InfllmParams &q = method_of<lctx::InfllmMethod>(&sp).params();
    EXPECT_EQ(q.block, 32);
    EXPECT_EQ(q.repr, 2);
}

TEST_F(ParamsAbi, SamplingParamsCutShort) {
    lctx_session_params sp = session_defaults(LCTX_METHOD_FULL);
    sp.n_ctx = 64;
    auto greedy_tokens = [&](const lctx_sampling_params *sampling) {
        EXPECT_EQ(create(&sp), LCTX_OK) << lctx_last_error();
        const lctx_token doc[] = {1, 40, 41, 42, 43}, q[] = {44, 45};
        EXPECT_EQ(lctx_feed_chunk(session, doc, 5), LCTX_OK);
        EXPECT_EQ(lctx_build_index(session), LCTX_OK);
        lctx_selection *sel = nullptr;
        EXPECT_EQ(lctx_select(session, q, 2, &sel), LCTX_OK);
        EXPECT_EQ(lctx_recompute(session, sel), LCTX_OK);
        lctx_selection_free(sel);
        std::vector<lctx_token> out;
        for (int i = 0; i < 4; ++i) {
            lctx_token t = -1;
            EXPECT_EQ(lctx_decode(session, sampling, &t), LCTX_OK) << lctx_session_last_error(session);
            out.push_back(t);
        }
        return out;
    };
    Cut<lctx_sampling_params> c(offsetof(lctx_sampling_params, top_k), lctx_sampling_default_params);
    c->temperature = 0.0f;
    EXPECT_EQ(greedy_tokens(c.p), greedy_tokens(nullptr));
}

// --- struct_size out of range -------------------------------------------------

namespace {

// A struct of `alloc` bytes with struct_size = size (the rest zero).
template <class T>
std::vector<unsigned char> raw(uint32_t size, size_t alloc = sizeof(T) + 16) {
    std::vector<unsigned char> b(alloc, 0);
    std::memcpy(b.data(), &size, sizeof size);
    return b;
}

std::vector<uint32_t> bad_sizes(size_t ours) { return {0u, 1u, 3u, uint32_t(ours + 1), uint32_t(ours + 8)}; }

} // namespace

TEST_F(ParamsAbi, BadStructSizesAreRefused) {
    for (uint32_t n : bad_sizes(sizeof(lctx_model_params))) {
        auto b = raw<lctx_model_params>(n);
        lctx_model *m = reinterpret_cast<lctx_model *>(0x1);
        EXPECT_EQ(lctx_model_load_from_memory(bytes_.data(), bytes_.size(),
                                              reinterpret_cast<lctx_model_params *>(b.data()), &m),
                  LCTX_ERR_INVALID_ARG) << n;
        EXPECT_EQ(m, nullptr);
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_model_params.struct_size is " + std::to_string(n)));
    }
    for (uint32_t n : bad_sizes(sizeof(lctx_session_params))) {
        auto b = raw<lctx_session_params>(n);
        const auto *p = reinterpret_cast<lctx_session_params *>(b.data());
        EXPECT_EQ(create(p), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_EQ(session, nullptr);
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_session_params.struct_size is " + std::to_string(n)));
        lctx_session *s = nullptr;
        EXPECT_EQ(lctx_session_load_index(model, "/nonexistent/index", p, &s), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_session_params.struct_size"));
    }
    EXPECT_THAT(lctx_last_error(), HasSubstr("newer lctx.h"));
    lctx_session_params sp = session_defaults(LCTX_METHOD_REFORM);
    for (uint32_t n : bad_sizes(sizeof(lctx_reform_params))) {
        auto b = raw<lctx_reform_params>(n);
        sp.reform = reinterpret_cast<lctx_reform_params *>(b.data());
        EXPECT_EQ(create(&sp), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_reform_params.struct_size is " + std::to_string(n)));
    }
    sp = session_defaults(LCTX_METHOD_REFRESHKV);
    for (uint32_t n : bad_sizes(sizeof(lctx_refreshkv_params))) {
        auto b = raw<lctx_refreshkv_params>(n);
        sp.refreshkv = reinterpret_cast<lctx_refreshkv_params *>(b.data());
        EXPECT_EQ(create(&sp), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_refreshkv_params.struct_size is " + std::to_string(n)));
    }
    sp = session_defaults(LCTX_METHOD_SNAPKV);
    for (uint32_t n : bad_sizes(sizeof(lctx_kv_params))) {
        auto b = raw<lctx_kv_params>(n);
        sp.kv = reinterpret_cast<lctx_kv_params *>(b.data());
        EXPECT_EQ(create(&sp), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_kv_params.struct_size is " + std::to_string(n)));
    }
    sp = session_defaults(LCTX_METHOD_INFLLM);
    for (uint32_t n : bad_sizes(sizeof(lctx_infllm_params))) {
        auto b = raw<lctx_infllm_params>(n);
        sp.infllm = reinterpret_cast<lctx_infllm_params *>(b.data());
        EXPECT_EQ(create(&sp), LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_last_error(), HasSubstr("lctx_infllm_params.struct_size is " + std::to_string(n)));
    }
    // Sampling: refused by lctx_decode, the session stays usable.
    sp = session_defaults(LCTX_METHOD_FULL);
    sp.n_ctx = 32;
    ASSERT_EQ(create(&sp), LCTX_OK) << lctx_last_error();
    const lctx_token doc[] = {1, 40, 41}, q[] = {42};
    ASSERT_EQ(lctx_feed_chunk(session, doc, 3), LCTX_OK);
    ASSERT_EQ(lctx_build_index(session), LCTX_OK);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(session, q, 1, &sel), LCTX_OK);
    ASSERT_EQ(lctx_recompute(session, sel), LCTX_OK);
    lctx_selection_free(sel);
    lctx_token t = -1;
    for (uint32_t n : bad_sizes(sizeof(lctx_sampling_params))) {
        auto b = raw<lctx_sampling_params>(n);
        EXPECT_EQ(lctx_decode(session, reinterpret_cast<lctx_sampling_params *>(b.data()), &t),
                  LCTX_ERR_INVALID_ARG) << n;
        EXPECT_THAT(lctx_session_last_error(session),
                    HasSubstr("lctx_sampling_params.struct_size is " + std::to_string(n)));
    }
    EXPECT_EQ(lctx_decode(session, nullptr, &t), LCTX_OK) << lctx_session_last_error(session);
}

// --- the method registry ------------------------------------------------------

namespace {

// LCTX_METHOD_<NAME> = <value> pairs of include/lctx.h.
std::vector<std::pair<std::string, int>> header_methods() {
    std::ifstream f(std::string(LCTX_SOURCE_DIR) + "/include/lctx.h");
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    std::vector<std::pair<std::string, int>> out;
    const std::regex re(R"(\bLCTX_METHOD_(\w+)\s*=\s*(\d+))");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
        out.emplace_back((*it)[1].str(), std::stoi((*it)[2].str()));
    return out;
}

std::string lower(std::string s) {
    for (char &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

} // namespace

TEST(MethodRegistry, ListsExactlyTheHeaderEnum) {
    const auto enums = header_methods();
    ASSERT_GE(enums.size(), 12u);
    ASSERT_EQ(lctx_method_count(), static_cast<int32_t>(enums.size()));
    for (const auto &[suffix, value] : enums) {
        const auto m = static_cast<lctx_method>(value);
        ASSERT_NE(lctx_method_name(m), nullptr) << suffix;
        EXPECT_EQ(lctx_method_name(m), lower(suffix));
        const char *d = lctx_method_description(m);
        ASSERT_NE(d, nullptr) << suffix;
        EXPECT_GT(std::strlen(d), 10u) << suffix;
        EXPECT_EQ(std::strchr(d, '\n'), nullptr) << suffix;
        lctx_method back = LCTX_METHOD_FULL;
        ASSERT_EQ(lctx_method_from_name(lower(suffix).c_str(), &back), LCTX_OK) << suffix;
        EXPECT_EQ(back, m);
        back = LCTX_METHOD_FULL;
        ASSERT_EQ(lctx_method_from_name(suffix.c_str(), &back), LCTX_OK) << suffix;   // any case
        EXPECT_EQ(back, m);
    }
    // Every method of the registry is implemented.
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_ILRE));
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_REATTENTION));
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_REFRESHKV));
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_FULL));
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_REFORM));
    EXPECT_TRUE(lctx_method_is_implemented(LCTX_METHOD_INFLLM));
}

TEST(MethodRegistry, UnknownValuesAndNames) {
    for (int v : {-1, lctx_method_count(), 77}) {
        const auto m = static_cast<lctx_method>(v);
        EXPECT_EQ(lctx_method_name(m), nullptr) << v;
        EXPECT_EQ(lctx_method_description(m), nullptr) << v;
        EXPECT_FALSE(lctx_method_is_implemented(m)) << v;
    }
    lctx_method out = LCTX_METHOD_TOVA;
    EXPECT_EQ(lctx_method_from_name("reformer", &out), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(out, LCTX_METHOD_TOVA);
    EXPECT_THAT(lctx_last_error(), HasSubstr("reformer"));
    EXPECT_THAT(lctx_last_error(), HasSubstr("full, reform, ilre"));
    EXPECT_EQ(lctx_method_from_name("", &out), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_method_from_name(nullptr, &out), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_method_from_name("full", nullptr), LCTX_ERR_INVALID_ARG);
}

TEST_F(ParamsAbi, ImplementedAgreesWithSessionCreate) {
    for (int32_t v = 0; v < lctx_method_count(); ++v) {
        const auto m = static_cast<lctx_method>(v);
        const lctx_session_params sp = session_defaults(m);
        const lctx_status st = create(&sp);
        if (lctx_method_is_implemented(m)) {
            EXPECT_EQ(st, LCTX_OK) << lctx_method_name(m) << ": " << lctx_last_error();
        } else {
            EXPECT_EQ(st, LCTX_ERR_UNSUPPORTED) << lctx_method_name(m);
            EXPECT_THAT(lctx_last_error(), HasSubstr(std::string("method '") + lctx_method_name(m) +
                                                     "' is not implemented yet"));
        }
    }
}
