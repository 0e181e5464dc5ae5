// lctx_session_set_refreshkv: one session answers a question with RefreshKV
// and densely without reading the document again. Each way is compared,
// bit for bit, with a fresh session created for it (LCTX_METHOD_FULL for
// dense over the whole document; LCTX_METHOD_REFRESHKV; REFORM/ILRe with and
// without refreshkv->gathered), on a tiny llama and on a tiny gemma3 (whose
// sliding layers both decodings read densely from a cache that releases
// their out-of-window slots). Plus: an answer in progress keeps its
// decoding, refusals change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine_tiny_model.h"
#include "lctx.h"
#include "session_test_util.h"

using session_test::random_tokens;

namespace {

struct CModel {
    std::vector<uint8_t> bytes;
    lctx_model *m = nullptr;
    explicit CModel(const std::string &arch) {
        engine_test::TinyOptions o;
        o.arch = arch;
        o.n_layer = arch == "gemma3" ? 7 : 3;   // gemma3: layers 0-4 and 6 slide over 8 tokens, 5 is global
        bytes = engine_test::make_tiny_llama(o);
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 2;
        EXPECT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), LCTX_OK) << lctx_last_error();
    }
    ~CModel() { lctx_model_free(m); }
};

// What one question's answer gave: the log-probability of each forced
// answer token, then the logits after the last one.
struct Answer {
    std::vector<float> logprobs, last_logits;
};

struct Way {
    lctx_method method = LCTX_METHOD_FULL;
    lctx_refreshkv_params rkv;
    lctx_reform_params reform;
    lctx_ilre_params ilre;
    Way() {
        lctx_refreshkv_default_params(&rkv);
        rkv.partial = 12;   // far below the prompt: RefreshKV differs from dense
        rkv.stride = 3;
        lctx_reform_default_params(&reform);
        reform.chunk = 128;
        reform.recompute = 160;
        lctx_ilre_default_params(&ilre);
        ilre.retrieval_layer = 1;
        ilre.chunk = 128;
        ilre.window = 64;
        ilre.budget = 160;
    }
};

lctx_session *open_session(const CModel &cm, const Way &su, const std::vector<int32_t> &doc) {
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = su.method;
    sp.n_ctx = 2048;   // room for the baselines' default budget of 1024
    sp.n_threads = 2;
    sp.refreshkv = &su.rkv;
    sp.reform = &su.reform;
    sp.ilre = &su.ilre;
    lctx_session *s = nullptr;
    EXPECT_EQ(lctx_session_create(cm.m, &sp, &s), LCTX_OK) << lctx_last_error();
    if (!s) return nullptr;
    for (size_t at = 0; at < doc.size(); at += 100)
        EXPECT_EQ(lctx_feed_chunk(s, doc.data() + at, std::min<size_t>(100, doc.size() - at)), LCTX_OK);
    EXPECT_EQ(lctx_build_index(s), LCTX_OK) << lctx_session_last_error(s);
    return s;
}

// Asks q and forces `ans` as the answer; stop_after: forced tokens before
// returning (the answer left in progress).
Answer ask(lctx_session *s, int32_t n_vocab, const std::vector<int32_t> &q, const std::vector<int32_t> &ans,
           size_t stop_after = SIZE_MAX) {
    Answer a;
    lctx_selection *sel = nullptr;
    EXPECT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
    EXPECT_EQ(lctx_recompute(s, sel), LCTX_OK) << lctx_session_last_error(s);
    lctx_selection_free(sel);
    for (size_t i = 0; i < ans.size() && i < stop_after; ++i) {
        float lp = 0;
        EXPECT_EQ(lctx_decode_token(s, ans[i], &lp), LCTX_OK) << lctx_session_last_error(s);
        a.logprobs.push_back(lp);
    }
    if (const float *lg = lctx_session_logits(s)) a.last_logits.assign(lg, lg + n_vocab);
    return a;
}

// Continues an answer left in progress by ask(..., stop_after).
void go_on(lctx_session *s, const std::vector<int32_t> &ans, size_t from, Answer &a, int32_t n_vocab) {
    for (size_t i = from; i < ans.size(); ++i) {
        float lp = 0;
        EXPECT_EQ(lctx_decode_token(s, ans[i], &lp), LCTX_OK) << lctx_session_last_error(s);
        a.logprobs.push_back(lp);
    }
    const float *lg = lctx_session_logits(s);
    a.last_logits.assign(lg, lg + n_vocab);
}

// A fresh session of `su` answering q once.
Answer fresh(const CModel &cm, const Way &su, const std::vector<int32_t> &doc, const std::vector<int32_t> &q,
             const std::vector<int32_t> &ans) {
    lctx_session *s = open_session(cm, su, doc);
    Answer a = ask(s, lctx_model_n_vocab(cm.m), q, ans);
    lctx_session_free(s);
    return a;
}

void expect_same(const Answer &got, const Answer &want, const std::string &what) {
    EXPECT_EQ(got.logprobs, want.logprobs) << what;
    EXPECT_EQ(got.last_logits, want.last_logits) << what;
    EXPECT_FALSE(want.logprobs.empty()) << what;
}

bool differs(const Answer &a, const Answer &b) { return a.logprobs != b.logprobs; }

int64_t rkv_steps(lctx_session *s) {
    lctx_refreshkv_stats st{};
    st.struct_size = sizeof st;
    if (lctx_session_refreshkv_stats(s, &st, nullptr, nullptr, 0) != LCTX_OK) return -1;
    return st.n_steps;
}

const std::vector<int32_t> kDoc = random_tokens(500, 31), kQ1 = random_tokens(9, 32), kQ2 = random_tokens(7, 33),
                           kAns = random_tokens(16, 34);

} // namespace

// A REFRESHKV session switched to dense answers exactly as FULL does, and
// switched back exactly as RefreshKV does; on both architectures.
TEST(SwitchDecoding, RefreshKvSessionAnswersAsFullAndBack) {
    for (const char *arch : {"llama", "gemma3"}) {
        CModel cm(arch);
        ASSERT_NE(cm.m, nullptr);
        const int32_t V = lctx_model_n_vocab(cm.m);
        Way full, rkv;
        rkv.method = LCTX_METHOD_REFRESHKV;
        const Answer want_full = fresh(cm, full, kDoc, kQ1, kAns), want_rkv = fresh(cm, rkv, kDoc, kQ1, kAns);
        ASSERT_TRUE(differs(want_full, want_rkv)) << arch << ": K too large for the check to mean anything";

        lctx_session *s = open_session(cm, rkv, kDoc);
        ASSERT_NE(s, nullptr);
        expect_same(ask(s, V, kQ1, kAns), want_rkv, std::string(arch) + ": RefreshKV first");
        EXPECT_EQ(rkv_steps(s), int64_t(kAns.size()));
        ASSERT_EQ(lctx_session_set_refreshkv(s, nullptr), LCTX_OK) << lctx_session_last_error(s);
        EXPECT_EQ(rkv_steps(s), int64_t(kAns.size())) << "the switch waits for the next recompute";
        expect_same(ask(s, V, kQ1, kAns), want_full, std::string(arch) + ": dense after the switch");
        EXPECT_EQ(rkv_steps(s), -1) << "a dense session has no RefreshKV statistics";
        EXPECT_NE(std::string(lctx_session_last_error(s)).find("lctx_session_set_refreshkv"), std::string::npos);
        ASSERT_EQ(lctx_session_set_refreshkv(s, &rkv.rkv), LCTX_OK) << lctx_session_last_error(s);
        expect_same(ask(s, V, kQ1, kAns), want_rkv, std::string(arch) + ": RefreshKV again");
        lctx_session_free(s);
    }
}

// A FULL session switched to RefreshKV answers as a REFRESHKV session, and
// switched back as FULL; on gemma3 too, whose FULL cache has released the
// sliding layers' out-of-window slots before the switch.
TEST(SwitchDecoding, FullSessionSwitchesToRefreshKvAndBack) {
    for (const char *arch : {"llama", "gemma3"}) {
        CModel cm(arch);
        const int32_t V = lctx_model_n_vocab(cm.m);
        Way full, rkv;
        rkv.method = LCTX_METHOD_REFRESHKV;
        const Answer want_rkv = fresh(cm, rkv, kDoc, kQ2, kAns), want_full = fresh(cm, full, kDoc, kQ2, kAns);
        ASSERT_TRUE(differs(want_full, want_rkv)) << arch;
        lctx_session *s = open_session(cm, full, kDoc);
        expect_same(ask(s, V, kQ2, kAns), want_full, std::string(arch) + ": FULL first");
        ASSERT_EQ(lctx_session_set_refreshkv(s, &rkv.rkv), LCTX_OK) << lctx_session_last_error(s);
        expect_same(ask(s, V, kQ2, kAns), want_rkv, std::string(arch) + ": FULL switched to RefreshKV");
        ASSERT_EQ(lctx_session_set_refreshkv(s, nullptr), LCTX_OK);
        expect_same(ask(s, V, kQ2, kAns), want_full, std::string(arch) + ": FULL switched back");
        lctx_session_free(s);
    }
}

// REFORM and ILRe: the recomputed cache decoded either way, equal to a
// session created for that way.
TEST(SwitchDecoding, ReformAndIlreDecodeTheirGatheredCacheEitherWay) {
    for (const char *arch : {"llama", "gemma3"}) {
        CModel cm(arch);
        const int32_t V = lctx_model_n_vocab(cm.m);
        for (lctx_method method : {LCTX_METHOD_REFORM, LCTX_METHOD_ILRE}) {
            const std::string what = std::string(arch) + " " + lctx_method_name(method);
            Way dense, gathered;
            dense.method = gathered.method = method;
            gathered.rkv.gathered = true;
            const Answer want_dense = fresh(cm, dense, kDoc, kQ1, kAns);
            const Answer want_rkv = fresh(cm, gathered, kDoc, kQ1, kAns);
            ASSERT_TRUE(differs(want_dense, want_rkv)) << what;
            lctx_session *s = open_session(cm, dense, kDoc);
            expect_same(ask(s, V, kQ1, kAns), want_dense, what + ": dense first");
            Way off = dense;   // gathered = false: not read by the switch
            ASSERT_EQ(lctx_session_set_refreshkv(s, &off.rkv), LCTX_OK) << lctx_session_last_error(s);
            expect_same(ask(s, V, kQ1, kAns), want_rkv, what + ": RefreshKV after the switch");
            ASSERT_EQ(lctx_session_set_refreshkv(s, nullptr), LCTX_OK);
            expect_same(ask(s, V, kQ1, kAns), want_dense, what + ": dense again");
            lctx_session_free(s);
        }
    }
}

// Switching in the middle of an answer changes the next question, not it.
TEST(SwitchDecoding, AnAnswerInProgressKeepsItsDecoding) {
    CModel cm("llama");
    const int32_t V = lctx_model_n_vocab(cm.m);
    Way full, rkv;
    rkv.method = LCTX_METHOD_REFRESHKV;
    const Answer want_rkv = fresh(cm, rkv, kDoc, kQ1, kAns), want_full = fresh(cm, full, kDoc, kQ2, kAns);
    lctx_session *s = open_session(cm, rkv, kDoc);
    Answer a = ask(s, V, kQ1, kAns, 6);
    ASSERT_EQ(lctx_session_set_refreshkv(s, nullptr), LCTX_OK);
    go_on(s, kAns, 6, a, V);
    expect_same(a, want_rkv, "the answer in progress");
    EXPECT_EQ(rkv_steps(s), int64_t(kAns.size()));
    expect_same(ask(s, V, kQ2, kAns), want_full, "the next question");
    lctx_session_free(s);
}

// Bad knobs and methods that cannot switch: a clear error, nothing changed.
TEST(SwitchDecoding, RefusalsChangeNothing) {
    CModel cm("llama");
    const int32_t V = lctx_model_n_vocab(cm.m);
    Way rkv;
    rkv.method = LCTX_METHOD_REFRESHKV;
    const Answer want_rkv = fresh(cm, rkv, kDoc, kQ1, kAns);
    lctx_session *s = open_session(cm, rkv, kDoc);
    lctx_refreshkv_params bad = rkv.rkv;
    bad.stride = -3;
    EXPECT_EQ(lctx_session_set_refreshkv(s, &bad), LCTX_ERR_INVALID_ARG);
    EXPECT_NE(std::string(lctx_session_last_error(s)).find("stride"), std::string::npos) << lctx_session_last_error(s);
    bad = rkv.rkv;
    bad.struct_size = sizeof bad + 8;
    EXPECT_EQ(lctx_session_set_refreshkv(s, &bad), LCTX_ERR_INVALID_ARG);
    bad = rkv.rkv;
    bad.pool_kernel = 4;
    EXPECT_EQ(lctx_session_set_refreshkv(s, &bad), LCTX_ERR_INVALID_ARG);
    expect_same(ask(s, V, kQ1, kAns), want_rkv, "RefreshKV after the refused switches");
    lctx_session_free(s);
    EXPECT_EQ(lctx_session_set_refreshkv(nullptr, nullptr), LCTX_ERR_INVALID_ARG);

    for (lctx_method m : {LCTX_METHOD_H2O, LCTX_METHOD_STREAMING, LCTX_METHOD_REATTENTION, LCTX_METHOD_INFLLM}) {
        Way other;
        other.method = m;
        lctx_session *o = open_session(cm, other, kDoc);
        ASSERT_NE(o, nullptr);
        EXPECT_EQ(lctx_session_set_refreshkv(o, &rkv.rkv), LCTX_ERR_UNSUPPORTED) << lctx_method_name(m);
        EXPECT_NE(std::string(lctx_session_last_error(o)).find(lctx_method_name(m)), std::string::npos)
            << lctx_session_last_error(o);
        lctx_session_free(o);
    }
}
