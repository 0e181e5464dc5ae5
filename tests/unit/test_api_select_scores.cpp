// lctx_session_select_scores on stories260K: the scores it returns are those
// the selection used. REFORM: the raw scores match a double-precision
// recomputation from the stored embeddings, the ranked ones a naive window
// max of them, and the selection is exactly the forced ranges plus the top
// of a full sort by (ranked desc, raw desc, position asc). ILRe: the
// selection holds the sinks and is what its allocator makes of the returned
// scores. Errors: wrong method, no select yet (also after a cancelled one),
// a small buffer, NULL arguments.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "api/handles.h"
#include "common/ggml_type.h"
#include "lctx.h"
#include "session/ilre_allocator.h"
#include "session/method_ilre.h"
#include "session/method_reform.h"
#include "session_test_util.h"

using ::testing::HasSubstr;
using session_test::random_tokens;

namespace {

std::string stories_path() { return std::string(LCTX_TEST_DATA_DIR) + "/stories260K.gguf"; }

// Cancels the calls made while *armed is true.
int cancel_when_armed(float, void *ud) { return *static_cast<bool *>(ud) ? 1 : 0; }

class SelectScores : public ::testing::Test {
protected:
    void SetUp() override {
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = 2;
        ASSERT_EQ(lctx_model_load(stories_path().c_str(), &mp, &model), LCTX_OK) << lctx_last_error();
    }
    void TearDown() override { lctx_model_free(model); }

    lctx_session *make(session_test::SessionParams p, const std::vector<lctx_token> &doc) {
        p.n_threads = 2;
        p.progress = cancel_when_armed;
        p.progress_user_data = &armed;
        lctx_session *s = nullptr;
        EXPECT_EQ(lctx_session_create(model, &p, &s), LCTX_OK) << lctx_last_error();
        if (!s) return nullptr;
        EXPECT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK) << lctx_session_last_error(s);
        EXPECT_EQ(lctx_build_index(s), LCTX_OK) << lctx_session_last_error(s);
        return s;
    }

    session_test::SessionParams reform(int recompute, int keep, int pool_half) const {
        session_test::SessionParams p;
        p.method = LCTX_METHOD_REFORM;
        p.n_ctx = 256;
        p.reform_p.chunk = 64;
        p.reform_p.budget = 64;
        p.reform_p.sink = 4;
        p.reform_p.recent = 4;
        p.reform_p.obs = 16;
        p.reform_p.recompute = recompute;
        p.reform_p.keep_first = keep;
        p.reform_p.keep_last = keep;
        p.reform_p.pool_half = pool_half;
        return p;
    }

    // ILRe at a small scale: 4 sinks, chunks of 64, a 32-token window, 40 gathered.
    static session_test::SessionParams ilre() {
        session_test::SessionParams p;
        p.method = LCTX_METHOD_ILRE;
        p.n_ctx = 256;
        p.ilre_p.retrieval_layer = 1;
        p.ilre_p.sink = 4;
        p.ilre_p.chunk = 64;
        p.ilre_p.window = 32;
        p.ilre_p.budget = 40;
        p.ilre_p.dca = false;
        return p;
    }

    std::vector<lctx_token> doc(int n, uint32_t seed) const {
        return random_tokens(n, seed, 3, lctx_model_n_vocab(model) - 1);
    }

    struct Scores {
        std::vector<float> raw, ranked;
        int64_t forced_first = -1, forced_last = -1;
    };
    static Scores scores_of(lctx_session *s) {
        Scores sc;
        int64_t n = -1;
        EXPECT_EQ(lctx_session_select_scores(s, nullptr, nullptr, 0, &n, &sc.forced_first, &sc.forced_last), LCTX_OK)
            << lctx_session_last_error(s);
        sc.raw.assign(static_cast<size_t>(std::max<int64_t>(n, 0)), NAN);
        sc.ranked = sc.raw;
        int64_t n2 = -1;
        EXPECT_EQ(lctx_session_select_scores(s, sc.raw.data(), sc.ranked.data(), n, &n2, nullptr, nullptr), LCTX_OK);
        EXPECT_EQ(n2, n);
        return sc;
    }
    static void positions_and_scores(const lctx_selection *sel, std::vector<int64_t> &pos, std::vector<float> &sc) {
        pos.resize(static_cast<size_t>(lctx_selection_size(sel)));
        sc.resize(pos.size());
        lctx_selection_positions(sel, pos.data(), static_cast<int64_t>(pos.size()));
        lctx_selection_scores(sel, sc.data(), static_cast<int64_t>(sc.size()));
    }

    lctx_model *model = nullptr;
    bool armed = false;
};

TEST_F(SelectScores, ReformScoresAreTheOnesItsSelectionUsed) {
    const int n = 400, recompute = 48, keep = 4, half = 3;
    lctx_session *s = make(reform(recompute, keep, half), doc(n, 11));
    ASSERT_NE(s, nullptr);
    const auto &m = dynamic_cast<const lctx::ReformMethod &>(s->session->method());
    for (uint32_t seed : {21u, 22u}) {
        const auto q = random_tokens(9, seed, 3, lctx_model_n_vocab(model) - 1);
        lctx_selection *sel = nullptr;
        ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
        const Scores sc = scores_of(s);
        ASSERT_EQ(sc.raw.size(), size_t(n));
        EXPECT_EQ(sc.forced_first, keep);
        EXPECT_EQ(sc.forced_last, keep);

        // Raw: max over the question's scoring tokens of the dot product with
        // each stored embedding, over the number of heads, in double.
        const int32_t D = m.encoder().dim();
        const auto &qe = m.last_query_embeddings();
        const auto &mask = m.last_query_mask();
        for (int64_t t = 0; t < n; ++t) {
            double best = -INFINITY;
            for (size_t u = 0; u < mask.size(); ++u) {
                if (!mask[u]) continue;
                double acc = 0;
                for (int32_t i = 0; i < D; ++i) acc += double(lctx::fp16_to_fp32(m.store().row(t)[i])) * qe[u * D + i];
                best = std::max(best, acc);
            }
            ASSERT_NEAR(sc.raw[size_t(t)], best / m.encoder().n_heads(), 1e-4) << "token " << t;
        }
        // Ranked: the max of raw over [t - half, t + half].
        for (int64_t t = 0; t < n; ++t) {
            float mx = -INFINITY;
            for (int64_t u = std::max<int64_t>(0, t - half); u <= std::min<int64_t>(n - 1, t + half); ++u)
                mx = std::max(mx, sc.raw[size_t(u)]);
            ASSERT_EQ(sc.ranked[size_t(t)], mx) << "token " << t;
        }
        // The selection: forced ends + the best others by a full sort.
        std::vector<int64_t> others;
        for (int64_t t = keep; t < n - keep; ++t) others.push_back(t);
        std::sort(others.begin(), others.end(), [&](int64_t a, int64_t b) {
            if (sc.ranked[a] != sc.ranked[b]) return sc.ranked[a] > sc.ranked[b];
            if (sc.raw[a] != sc.raw[b]) return sc.raw[a] > sc.raw[b];
            return a < b;
        });
        std::vector<int64_t> want(others.begin(), others.begin() + (recompute - 2 * keep));
        for (int64_t t = 0; t < keep; ++t) want.push_back(t), want.push_back(n - 1 - t);
        std::sort(want.begin(), want.end());
        std::vector<int64_t> pos;
        std::vector<float> sel_scores;
        positions_and_scores(sel, pos, sel_scores);
        EXPECT_EQ(pos, want);
        for (size_t i = 0; i < pos.size(); ++i) EXPECT_EQ(sel_scores[i], sc.ranked[size_t(pos[i])]);
        lctx_selection_free(sel);
    }
    lctx_session_free(s);
}

TEST_F(SelectScores, IlreScoresAreTheOnesItsAllocatorUsed) {
    const int n = 300;
    lctx_session *s = make(ilre(), doc(n, 12));
    ASSERT_NE(s, nullptr);
    const auto q = random_tokens(7, 5, 3, lctx_model_n_vocab(model) - 1);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
    const Scores sc = scores_of(s);
    ASSERT_EQ(sc.raw.size(), size_t(n));
    EXPECT_EQ(sc.raw, sc.ranked);
    EXPECT_EQ(sc.forced_first, 4);
    EXPECT_EQ(sc.forced_last, 0);
    // Attention probabilities: in [0, 1], not all equal.
    for (float v : sc.raw) ASSERT_TRUE(v >= 0.0f && v <= 1.0f) << v;
    EXPECT_NE(*std::min_element(sc.raw.begin(), sc.raw.end()), *std::max_element(sc.raw.begin(), sc.raw.end()));
    std::vector<int64_t> pos;
    std::vector<float> sel_scores;
    positions_and_scores(sel, pos, sel_scores);
    for (size_t i = 0; i < pos.size(); ++i) EXPECT_EQ(sel_scores[i], sc.raw[size_t(pos[i])]);
    const auto &m = dynamic_cast<const lctx::IlreMethod &>(s->session->method());
    EXPECT_EQ(pos, lctx::ilre_allocate(sc.raw.data(), n, 4, 40, m.params().max_kernels, m.params().avg_kernels));
    for (int64_t t = 0; t < 4; ++t) EXPECT_EQ(pos[size_t(t)], t);
    EXPECT_EQ(pos.size(), 44u);
    lctx_selection_free(sel);
    lctx_session_free(s);
}

// ILRe reads its question from the first token after the blank separator
// that puts it after the document ("\n\n" in lctx run and lctx eval): the
// scores of "\n\n" + Q are those of Q, bit for bit. A question of blanks
// only is still read (scores that differ from token to token).
TEST_F(SelectScores, IlreReadsTheQuestionAfterItsBlankSeparator) {
    const int n = 300;
    lctx_session *s = make(ilre(), doc(n, 12));
    ASSERT_NE(s, nullptr);
    lctx_token nl[8];
    size_t n_nl = 0;
    ASSERT_EQ(lctx_tokenize(model, "\n\n", 2, false, false, nl, 8, &n_nl), LCTX_OK);
    ASSERT_GE(n_nl, 1u);
    // The question: a word, so its first token is not blank.
    lctx_token words[16];
    size_t n_words = 0;
    ASSERT_EQ(lctx_tokenize(model, "Where did the little dog go?", 28, false, false, words, 16, &n_words), LCTX_OK);
    const std::vector<lctx_token> q(words, words + n_words);
    std::vector<lctx_token> sep_q(nl, nl + n_nl);
    sep_q.insert(sep_q.end(), q.begin(), q.end());
    auto raw_of = [&](const std::vector<lctx_token> &query) {
        lctx_selection *sel = nullptr;
        EXPECT_EQ(lctx_select(s, query.data(), query.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
        lctx_selection_free(sel);
        return scores_of(s).raw;
    };
    const std::vector<float> plain = raw_of(q), separated = raw_of(sep_q);
    ASSERT_EQ(plain.size(), size_t(n));
    EXPECT_EQ(plain, separated);
    const std::vector<float> blank = raw_of(std::vector<lctx_token>(nl, nl + n_nl));
    ASSERT_EQ(blank.size(), size_t(n));
    EXPECT_NE(*std::min_element(blank.begin(), blank.end()), *std::max_element(blank.begin(), blank.end()));
    EXPECT_NE(blank, plain);
    lctx_session_free(s);
}

TEST_F(SelectScores, WholeDocumentInBudgetIsAllForced) {
    const int n = 40;
    lctx_session *s = make(reform(48, 4, 3), doc(n, 13));
    ASSERT_NE(s, nullptr);
    const auto q = random_tokens(5, 6, 3, lctx_model_n_vocab(model) - 1);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK) << lctx_session_last_error(s);
    const Scores sc = scores_of(s);
    EXPECT_EQ(sc.raw.size(), size_t(n));
    EXPECT_EQ(sc.forced_first + sc.forced_last, n);
    EXPECT_EQ(lctx_selection_size(sel), n);
    lctx_selection_free(sel);
    lctx_session_free(s);
}

TEST_F(SelectScores, ErrorsAreReported) {
    int64_t n = -1;
    float buf[8];
    EXPECT_EQ(lctx_session_select_scores(nullptr, nullptr, nullptr, 0, &n, nullptr, nullptr), LCTX_ERR_INVALID_ARG);

    // A method without per-token scores.
    session_test::SessionParams full;
    full.method = LCTX_METHOD_FULL;
    full.n_ctx = 256;
    const auto d = doc(100, 14);
    lctx_session *f = make(full, d);
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(lctx_session_select_scores(f, nullptr, nullptr, 0, &n, nullptr, nullptr), LCTX_ERR_UNSUPPORTED);
    EXPECT_THAT(lctx_session_last_error(f), HasSubstr("does not score every document token"));
    lctx_session_free(f);

    lctx_session *s = make(reform(48, 4, 3), d);
    ASSERT_NE(s, nullptr);
    // No select yet.
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, nullptr, 0, &n, nullptr, nullptr), LCTX_ERR_STATE);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("no lctx_select has succeeded"));
    const auto q = random_tokens(5, 7, 3, lctx_model_n_vocab(model) - 1);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK);
    lctx_selection_free(sel);
    // n_tokens is required.
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, nullptr, 0, nullptr, nullptr, nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("n_tokens is NULL"));
    // A buffer too small: the size is still reported, either buffer alone counts.
    n = -1;
    EXPECT_EQ(lctx_session_select_scores(s, buf, nullptr, 8, &n, nullptr, nullptr), LCTX_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 100);
    n = -1;
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, buf, 8, &n, nullptr, nullptr), LCTX_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 100);
    std::vector<float> one(100);
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, one.data(), 100, &n, nullptr, nullptr), LCTX_OK);
    // A cancelled select leaves no scores (they would be half of a question).
    armed = true;
    EXPECT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_ERR_CANCELLED);
    armed = false;
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, nullptr, 0, &n, nullptr, nullptr), LCTX_ERR_STATE);
    // The next select brings them back.
    ASSERT_EQ(lctx_select(s, q.data(), q.size(), &sel), LCTX_OK);
    lctx_selection_free(sel);
    EXPECT_EQ(lctx_session_select_scores(s, nullptr, nullptr, 0, &n, nullptr, nullptr), LCTX_OK);
    lctx_session_free(s);
}

// lctx_session_attended through the C API: ReAttention reports one share per
// stored token; FULL is refused with the reason; errors as for select_scores.
TEST_F(SelectScores, AttendedSharesOfReattention) {
    const auto doc = random_tokens(300, 11, 3, lctx_model_n_vocab(model) - 1);
    session_test::SessionParams p;
    p.method = LCTX_METHOD_REATTENTION;
    p.reattention_p.n_global = 4;
    p.reattention_p.n_local = 32;
    p.reattention_p.span = 8;
    p.reattention_p.n_spans = 3;
    p.reattention_p.chunk = 16;
    lctx_session *s = make(p, doc);
    ASSERT_NE(s, nullptr);
    int64_t n = -1;
    EXPECT_EQ(lctx_session_attended(s, nullptr, 0, nullptr), LCTX_ERR_INVALID_ARG);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("n_tokens is NULL"));
    ASSERT_EQ(lctx_session_attended(s, nullptr, 0, &n), LCTX_OK) << lctx_session_last_error(s);
    EXPECT_EQ(n, 300);
    std::vector<float> share(300, -1.0f);
    n = -1;
    EXPECT_EQ(lctx_session_attended(s, share.data(), 10, &n), LCTX_ERR_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 300);
    ASSERT_EQ(lctx_session_attended(s, share.data(), 300, &n), LCTX_OK);
    // The global and local tokens were in every layer's window; the middle only
    // where a layer's spans fell (3 spans of 8 tokens: at most 24 of 264).
    for (int t = 0; t < 4; ++t) EXPECT_EQ(share[t], 1.0f);
    for (int t = 300 - 32; t < 300; ++t) EXPECT_EQ(share[t], 1.0f);
    int unseen = 0;
    for (int t = 4; t < 300 - 32; ++t) {
        EXPECT_GE(share[t], 0.0f);
        EXPECT_LE(share[t], 1.0f);
        unseen += share[t] == 0.0f;
    }
    EXPECT_GT(unseen, 0);
    lctx_session_free(s);

    session_test::SessionParams fp;
    fp.method = LCTX_METHOD_FULL;
    s = make(fp, doc);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(lctx_session_attended(s, nullptr, 0, &n), LCTX_ERR_UNSUPPORTED);
    EXPECT_THAT(lctx_session_last_error(s), HasSubstr("attends to its whole cache"));
    lctx_session_free(s);
}

} // namespace
