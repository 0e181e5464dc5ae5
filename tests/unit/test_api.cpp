// The C API on a real model (stories260K): the stage machine, misuse of
// every kind (NULL handles, wrong order, bad ids, small buffers, full
// context, cancellation) returning the right status with a message, and
// the session staying usable afterwards.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "lctx.h"

using ::testing::HasSubstr;

namespace {

std::string stories_path() { return std::string(LCTX_TEST_DATA_DIR) + "/stories260K.gguf"; }

class Api : public ::testing::Test {
protected:
    void SetUp() override {
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 2;
        ASSERT_EQ(lctx_model_load(stories_path().c_str(), &mp, &model), LCTX_OK) << lctx_last_error();
    }
    void TearDown() override { lctx_model_free(model); }

    lctx_session *new_session(int32_t n_ctx = 256, lctx_progress_fn progress = nullptr, void *ud = nullptr) {
        lctx_session_params sp;
        lctx_session_default_params(&sp);
        sp.method = LCTX_METHOD_FULL;   // these tests mean FULL (the library default is REFORM)
        sp.n_ctx = n_ctx;
        sp.n_batch = 16;
        sp.progress = progress;
        sp.progress_user_data = ud;
        lctx_session *s = nullptr;
        EXPECT_EQ(lctx_session_create(model, &sp, &s), LCTX_OK) << lctx_last_error();
        return s;
    }

    std::vector<lctx_token> tok(const std::string &text, bool add_special = true) {
        std::vector<lctx_token> ids(text.size() + 4);
        size_t n = 0;
        EXPECT_EQ(lctx_tokenize(model, text.data(), text.size(), add_special, false, ids.data(), ids.size(), &n),
                  LCTX_OK);
        ids.resize(n);
        return ids;
    }

    // Runs select -> recompute -> n greedy decodes; returns the tokens.
    std::vector<lctx_token> ask(lctx_session *s, const std::vector<lctx_token> &q, int n, uint64_t seed = 0,
                                float temp = 0.0f) {
        lctx_selection *sel = nullptr;
        EXPECT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
        EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK) << lctx_session_last_error(s);
        lctx_selection_free(sel);
        lctx_sampling_params sp;
        lctx_sampling_default_params(&sp);
        sp.temperature = temp;
        sp.seed = seed;
        std::vector<lctx_token> out;
        for (int i = 0; i < n; ++i) {
            lctx_token t = -1;
            EXPECT_EQ(lctx_decode(s, &sp, &t), LCTX_OK) << lctx_session_last_error(s);
            out.push_back(t);
        }
        return out;
    }

    lctx_model *model = nullptr;
};

} // namespace

TEST(ApiNoModel, VersionAndStatusStrings) {
    EXPECT_EQ(lctx_version_number(), LCTX_VERSION_NUMBER);
    EXPECT_STREQ(lctx_version(), "0.1.0");
    EXPECT_NE(std::strlen(lctx_build_info()), 0u);
    EXPECT_STREQ(lctx_status_string(LCTX_OK), "ok");
    EXPECT_STREQ(lctx_status_string(LCTX_ERR_STATE), "call made in the wrong stage");
    EXPECT_STREQ(lctx_status_string(static_cast<lctx_status>(-999)), "unknown status");
}

TEST(ApiNoModel, LoadFailuresAreReported) {
    lctx_model *m = reinterpret_cast<lctx_model *>(0x1);
    EXPECT_EQ(lctx_model_load(nullptr, nullptr, &m), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(m, nullptr);
    EXPECT_THAT(lctx_last_error(), HasSubstr("path is NULL"));
    EXPECT_EQ(lctx_model_load("/nonexistent/model.gguf", nullptr, &m), LCTX_ERR_IO);
    EXPECT_THAT(lctx_last_error(), HasSubstr("/nonexistent/model.gguf"));
    EXPECT_EQ(lctx_model_load("x", nullptr, nullptr), LCTX_ERR_INVALID_ARG);
    const char junk[] = "this is not a gguf file at all, just some bytes";
    EXPECT_EQ(lctx_model_load_from_memory(junk, sizeof junk, nullptr, &m), LCTX_ERR_FORMAT);
    EXPECT_EQ(m, nullptr);
    lctx_model_params bad;
    lctx_model_default_params(&bad);
    bad.struct_size = 3;
    EXPECT_EQ(lctx_model_load(stories_path().c_str(), &bad, &m), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("struct_size"));
}

TEST(ApiNoModel, FreeAcceptsNullAndGettersTolerateNull) {
    lctx_model_free(nullptr);
    lctx_session_free(nullptr);
    lctx_selection_free(nullptr);
    lctx_session_cancel(nullptr);
    EXPECT_EQ(lctx_model_n_layer(nullptr), 0);
    EXPECT_STREQ(lctx_model_architecture(nullptr), "");
    EXPECT_STREQ(lctx_session_last_error(nullptr), "");
    EXPECT_EQ(lctx_selection_size(nullptr), 0);
    EXPECT_EQ(lctx_session_logits(nullptr), nullptr);
    lctx_token t;
    EXPECT_EQ(lctx_feed_chunk(nullptr, &t, 1), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("session is NULL"));
    EXPECT_EQ(lctx_build_index(nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_decode(nullptr, nullptr, &t), LCTX_ERR_INVALID_ARG);
}

TEST_F(Api, ModelInfo) {
    EXPECT_STREQ(lctx_model_architecture(model), "llama");
    EXPECT_EQ(lctx_model_n_layer(model), 5);
    EXPECT_EQ(lctx_model_n_embd(model), 64);
    EXPECT_EQ(lctx_model_n_head(model), 8);
    EXPECT_EQ(lctx_model_n_head_kv(model), 4);
    EXPECT_EQ(lctx_model_head_dim(model), 8);
    EXPECT_EQ(lctx_model_n_vocab(model), 512);
    EXPECT_GT(lctx_model_n_params(model), 0u);
    char buf[64];
    EXPECT_EQ(lctx_model_meta_string(model, "general.architecture", buf, sizeof buf), 5);
    EXPECT_STREQ(buf, "llama");
    EXPECT_EQ(lctx_model_meta_string(model, "no.such.key", buf, sizeof buf), -1);
}

TEST_F(Api, TokenizeBufferTooSmallReportsTheNeededSize) {
    const char *text = "Once upon a time there was a little girl";
    size_t n = 0;
    lctx_token one[1];
    EXPECT_EQ(lctx_tokenize(model, text, std::strlen(text), true, false, one, 1, &n), LCTX_ERR_BUFFER_TOO_SMALL);
    EXPECT_GT(n, 1u);
    std::vector<lctx_token> ids(n);
    EXPECT_EQ(lctx_tokenize(model, text, std::strlen(text), true, false, ids.data(), ids.size(), &n), LCTX_OK);
    char small[2];
    size_t need = 0;
    EXPECT_EQ(lctx_detokenize(model, ids.data(), ids.size(), false, small, sizeof small, &need),
              LCTX_ERR_BUFFER_TOO_SMALL);
    std::vector<char> buf(need + 1);
    EXPECT_EQ(lctx_detokenize(model, ids.data(), ids.size(), false, buf.data(), buf.size(), &need), LCTX_OK);
    EXPECT_THAT(std::string(buf.data()), HasSubstr("Once upon a time there was a little girl"));
    EXPECT_EQ(lctx_token_to_piece(model, 100000, false, small, sizeof small, &need), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_token_to_piece(model, -1, false, small, sizeof small, &need), LCTX_ERR_INVALID_ARG);
    lctx_token bad[] = {1, 9999};
    EXPECT_EQ(lctx_detokenize(model, bad, 2, false, buf.data(), buf.size(), &need), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_last_error(), HasSubstr("9999"));
}

TEST_F(Api, MethodValuesOutsideTheEnumAreRefused) {
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    lctx_session *s = nullptr;
    sp.method = static_cast<lctx_method>(77);
    EXPECT_EQ(lctx_session_create(model, &sp, &s), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_session_create(nullptr, nullptr, &s), LCTX_ERR_INVALID_ARG);
}

TEST_F(Api, WrongStageOrderIsRefusedAndHarmless) {
    lctx_session *s = new_session();
    auto doc = tok("Once upon a time, there was a cat.");
    auto q = tok(" The cat", false);
    lctx_selection *sel = nullptr;
    lctx_token t;
    EXPECT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_ERR_STATE);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("lctx_build_index"));
    EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_ERR_STATE);
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    EXPECT_EQ(lctx_session_n_fed(s), static_cast<int64_t>(doc.size()));
    EXPECT_EQ(lctx_build_index(s), LCTX_OK);
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_ERR_STATE);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("sealed"));
    EXPECT_EQ(lctx_build_index(s), LCTX_ERR_STATE);
    EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_ERR_STATE);
    EXPECT_EQ(lctx_session_stage(s), LCTX_STAGE_INDEXED);
    // FULL selects every document position.
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK);
    ASSERT_EQ(lctx_selection_size(sel), static_cast<int64_t>(doc.size()));
    std::vector<int64_t> pos(doc.size());
    EXPECT_EQ(lctx_selection_positions(sel, pos.data(), pos.size()), static_cast<int64_t>(doc.size()));
    for (size_t i = 0; i < pos.size(); ++i) EXPECT_EQ(pos[i], static_cast<int64_t>(i));
    EXPECT_EQ(lctx_session_stage(s), LCTX_STAGE_SELECTED);
    EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_ERR_STATE);
    EXPECT_EQ(lctx_recompute(s, nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK);
    EXPECT_NE(lctx_session_logits(s), nullptr);
    EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_OK);
    EXPECT_EQ(lctx_decode(s, nullptr, nullptr), LCTX_ERR_INVALID_ARG);
    lctx_selection_free(sel);
    lctx_session_free(s);
}

TEST_F(Api, BadTokenIdsLeaveTheSessionIntact) {
    lctx_session *s = new_session();
    auto doc = tok("Once upon a time");
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    std::vector<lctx_token> bad = {5, 6, 512, 7};
    EXPECT_EQ(lctx_feed_chunk(s, bad.data(), bad.size()), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("512"));
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("index 2"));
    bad = {-4};
    EXPECT_EQ(lctx_feed_chunk(s, bad.data(), bad.size()), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_feed_chunk(s, nullptr, 3), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_session_n_fed(s), static_cast<int64_t>(doc.size()));
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    lctx_selection *sel = nullptr;
    EXPECT_EQ(lctx_select(s, bad.data(), bad.size(), &sel), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_select(s, doc.data(), 0, &sel), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(ask(s, tok(" there", false), 3).size(), 3u);
    lctx_session_free(s);
}

TEST_F(Api, SelectionFromAnotherSessionIsRefused) {
    lctx_session *a = new_session(), *b = new_session();
    ASSERT_EQ(lctx_build_index(a), LCTX_OK);
    ASSERT_EQ(lctx_build_index(b), LCTX_OK);
    auto q = tok("Once");
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(a, q.data(), q.size(), &sel), LCTX_OK);
    ASSERT_EQ(lctx_select(b, q.data(), q.size(), nullptr), LCTX_ERR_INVALID_ARG);
    lctx_selection *own = nullptr;
    ASSERT_EQ(lctx_select(b, q.data(), q.size(), &own), LCTX_OK);
    EXPECT_EQ(lctx_recompute(b, sel), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_session_last_error(b), HasSubstr("another session"));
    EXPECT_EQ(lctx_recompute(b, own), LCTX_OK);
    lctx_selection_free(own);
    lctx_selection_free(sel);
    lctx_session_free(a);
    lctx_session_free(b);
}

TEST_F(Api, ContextFullIsReportedAndRecoverable) {
    lctx_session *s = new_session(12);
    auto doc = tok("Once upon a time there was a little girl named Lily who loved to play outside");
    ASSERT_GT(doc.size(), 12u);
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_ERR_CONTEXT_FULL);
    EXPECT_EQ(lctx_session_n_fed(s), 0);
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), 8), LCTX_OK);
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    // 8 + 2 query tokens leave room for 2 decoded tokens.
    auto q = std::vector<lctx_token>(doc.begin() + 8, doc.begin() + 10);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK);
    ASSERT_EQ(lctx_recompute(s, sel), LCTX_OK);
    lctx_token t;
    int ok = 0;
    lctx_status st;
    while ((st = lctx_decode(s, nullptr, &t)) == LCTX_OK && ok < 10) ++ok;
    EXPECT_EQ(st, LCTX_ERR_CONTEXT_FULL);
    EXPECT_EQ(ok, 3);  // 2 appended + the last one sampled but never appended
    // The last token has no slot: there are no logits a next decode could
    // sample from, and the reason is on the session.
    EXPECT_EQ(lctx_session_logits(s), nullptr);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("cannot take"));
    // A new question starts over from the document.
    EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK);
    EXPECT_NE(lctx_session_logits(s), nullptr);
    EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_OK);
    lctx_selection_free(sel);
    lctx_session_free(s);
}

TEST_F(Api, LogitsAreThoseTheNextDecodeSamplesFrom) {
    // lctx_session_logits before each greedy decode peaks at the token that
    // decode returns, and the log probability lctx_decode_token reports is
    // the log-softmax of the logits read just before it. (Until this test the
    // logits lagged one token after a decode: the returned token entered the
    // cache only at the next decode.)
    auto doc = tok("Once upon a time there was a little girl named Lily. She loved to play outside with her dog.");
    auto q = tok(" Lily", false);
    const int32_t V = lctx_model_n_vocab(model);
    auto run = [&](bool read_logits, bool forced, std::vector<lctx_token> &tokens, std::vector<float> &lps) {
        lctx_session *s = new_session();
        EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
        EXPECT_EQ(lctx_build_index(s), LCTX_OK);
        lctx_selection *sel = nullptr;
        EXPECT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK);
        EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK);
        lctx_selection_free(sel);
        for (int i = 0; i < 8; ++i) {
            int32_t best = -1;
            std::vector<float> lg;
            if (read_logits) {
                const float *l = lctx_session_logits(s);
                EXPECT_NE(l, nullptr) << lctx_session_last_error(s);
                if (!l) break;
                lg.assign(l, l + V);
                best = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
            }
            lctx_token t = -1;
            if (forced) {
                t = (i * 37 + 5) % V;   // any token, not the greedy one
                float lp = 0.0f;
                EXPECT_EQ(lctx_decode_token(s, t, &lp), LCTX_OK);
                lps.push_back(lp);
                if (read_logits) {
                    double mx = *std::max_element(lg.begin(), lg.end()), sum = 0.0;
                    for (float x : lg) sum += std::exp(double(x) - mx);
                    EXPECT_NEAR(lp, double(lg[size_t(t)]) - mx - std::log(sum), 1e-4) << "step " << i;
                }
            } else {
                EXPECT_EQ(lctx_decode(s, nullptr, &t), LCTX_OK);
                if (read_logits) EXPECT_EQ(t, best) << "step " << i;
            }
            tokens.push_back(t);
        }
        lctx_session_free(s);
    };
    // Reading the logits changes nothing the session answers.
    std::vector<lctx_token> a, b, c, d;
    std::vector<float> la, lb, lc, ld;
    run(true, false, a, la);
    run(false, false, b, lb);
    EXPECT_EQ(a, b);
    run(true, true, c, lc);
    run(false, true, d, ld);
    EXPECT_EQ(lc, ld);
}

namespace {
int cancel_at_second_report(float, void *ud) {
    int *calls = static_cast<int *>(ud);
    return ++*calls >= 2;
}
} // namespace

TEST_F(Api, ProgressCallbackCanCancel) {
    int calls = 0;
    lctx_session *s = new_session(256, cancel_at_second_report, &calls);
    auto doc = tok("Once upon a time there was a little girl named Lily who loved to play outside in the sun with "
                   "her dog and her friends every day after school");
    ASSERT_GT(doc.size(), 16u);  // n_batch is 16: more than one batch
    EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_ERR_CANCELLED);
    int64_t fed = lctx_session_n_fed(s);
    EXPECT_GE(fed, 0);
    EXPECT_LT(fed, static_cast<int64_t>(doc.size()));
    // Still usable: feed the rest (no cancel now).
    calls = -1000000;
    EXPECT_EQ(lctx_feed_chunk(s, doc.data() + fed, doc.size() - fed), LCTX_OK);
    EXPECT_EQ(lctx_session_n_fed(s), static_cast<int64_t>(doc.size()));
    lctx_session_free(s);
}

TEST_F(Api, ChunkingOfFeedCallsDoesNotChangeTheAnswer) {
    auto doc = tok("Once upon a time there was a little girl named Lily. She loved to play outside with her dog.");
    auto q = tok(" Lily", false);
    lctx_session *one = new_session();
    ASSERT_EQ(lctx_feed_chunk(one, doc.data(), doc.size()), LCTX_OK);
    ASSERT_EQ(lctx_build_index(one), LCTX_OK);
    auto a = ask(one, q, 1);
    std::vector<float> la(lctx_session_logits(one), lctx_session_logits(one) + lctx_model_n_vocab(model));

    lctx_session *many = new_session();
    for (size_t i = 0, step = 1; i < doc.size(); i += step, step = step % 5 + 1)
        ASSERT_EQ(lctx_feed_chunk(many, doc.data() + i, std::min(step, doc.size() - i)), LCTX_OK);
    ASSERT_EQ(lctx_build_index(many), LCTX_OK);
    auto b = ask(many, q, 1);
    std::vector<float> lb(lctx_session_logits(many), lctx_session_logits(many) + lctx_model_n_vocab(model));
    // ask() decoded one token; lctx_session_logits ran its forward pass: these
    // are the logits the next decode would sample from, in both sessions.
    EXPECT_EQ(a, b);
    for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], lb[i], 1e-3f * (1 + std::abs(la[i])));
    lctx_session_free(one);
    lctx_session_free(many);
}

TEST_F(Api, SeededSamplingIsReproducibleAndQuestionsRepeat) {
    auto doc = tok("Once upon a time there was a little girl named Lily.");
    auto q = tok(" She", false);
    lctx_session *s = new_session();
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    auto a = ask(s, q, 20, 99, 0.9f);
    auto b = ask(s, q, 20, 99, 0.9f);  // the same question again on the same session
    EXPECT_EQ(a, b);
    auto g1 = ask(s, q, 20);
    auto g2 = ask(s, q, 20);
    EXPECT_EQ(g1, g2);
    lctx_session_free(s);
}
