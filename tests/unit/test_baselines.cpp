// The baselines (TRUNCATE, STREAMING, H2O, TOVA, SNAPKV, INFINIPOT): their
// keep rules against brute-force references on random arrays, and on a tiny
// random model the invariants: budgets >= input length give FULL's logits and
// greedy tokens; TRUNCATE equals FULL over the head and tail; STREAMING keeps
// exactly sinks + window; no method holds more than its pot; feed splits do
// not matter; a second question works; bad parameters are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "common/error.h"
#include "engine_tiny_model.h"
#include "session/evictor_scores.h"
#include "session/method_recurrent.h"
#include "session/method_truncate.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::feed_split;
using session_test::random_tokens;

namespace {


struct Tiny {
    std::unique_ptr<Model> model;
    Tiny() {
        engine_test::TinyOptions o;
        o.n_layer = 3;
        auto bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 2);
    }
};

session_test::SessionParams params(lctx_method m, int budget, int chunk, int sink = 8, int recent = 8) {
    session_test::SessionParams p;
    p.method = m;
    p.n_ctx = 1024;
    p.n_threads = 2;
    p.kv_p.budget = budget;
    p.kv_p.chunk = chunk;
    p.kv_p.sink = sink;
    p.kv_p.recent = recent;
    p.n_batch = 48;   // several forward calls per chunk
    return p;
}


lctx_sampling_params greedy() {
    lctx_sampling_params g;
    lctx_sampling_default_params(&g);
    return g;
}

double max_logit_diff(const Session &a, const Session &b, int32_t V, double *scale) {
    double d = 0, mx = 0;
    for (int32_t i = 0; i < V; ++i) {
        d = std::max(d, double(std::fabs(a.logits()[i] - b.logits()[i])));
        mx = std::max(mx, double(std::fabs(a.logits()[i])));
    }
    *scale = std::max(1.0, mx);
    return d;
}

// FULL over `full_doc` vs the method over `doc`: same logits and greedy tokens.
void expect_equals_full(const Model &model, const std::vector<int32_t> &doc, const std::vector<int32_t> &full_doc,
                        const std::vector<int32_t> &query, const lctx_session_params &mp) {
    lctx_session_params fp = mp;
    fp.method = LCTX_METHOD_FULL;
    Session full(model, fp), m(model, mp);
    feed_split(full, full_doc, {100});
    feed_split(m, doc, {37, 200, 5});
    auto sf = full.select(query.data(), query.size());
    auto sm = m.select(query.data(), query.size());
    full.recompute(*sf);
    m.recompute(*sm);
    double scale = 1;
    const double d = max_logit_diff(full, m, model.hparams().n_vocab, &scale);
    EXPECT_LT(d, 1e-4 * scale) << method_name(mp.method) << ": max |logit diff| " << d;
    for (int k = 0; k < 8; ++k) ASSERT_EQ(full.decode(greedy()), m.decode(greedy())) << method_name(mp.method) << " token " << k;
}

const lctx_method kRecurrent[] = {LCTX_METHOD_STREAMING, LCTX_METHOD_H2O, LCTX_METHOD_TOVA, LCTX_METHOD_SNAPKV,
                                  LCTX_METHOD_INFINIPOT};

RecurrentMethod &recurrent(Session &s) { return dynamic_cast<RecurrentMethod &>(s.method()); }

// Brute force: protected slots, then the others sorted by (score desc, orig desc).
std::vector<int64_t> brute_rank(const std::vector<int64_t> &cand, const float *score, const int64_t *orig, int64_t k) {
    std::vector<int64_t> c = cand;
    std::sort(c.begin(), c.end(), [&](int64_t a, int64_t b) {
        return score[a] != score[b] ? score[a] > score[b] : orig[a] > orig[b];
    });
    c.resize(static_cast<size_t>(std::min<int64_t>(k, static_cast<int64_t>(c.size()))));
    return c;
}

} // namespace

TEST(BaselineEvictors, StreamingKeepsSinksAndTheMostRecent) {
    std::mt19937 rng(3);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = 1 + rng() % 60, budget = 2 + rng() % 40, sink = rng() % 8;
        std::vector<int64_t> orig(static_cast<size_t>(n));
        int64_t o = 0;
        for (auto &x : orig) x = (o += 1 + rng() % 3) - 1;
        auto keep = streaming_keep(orig.data(), n, budget, sink);
        std::vector<int64_t> want;
        if (n <= budget) {
            want.resize(static_cast<size_t>(n));
            std::iota(want.begin(), want.end(), 0);
        } else {
            std::set<int64_t> s;
            for (int64_t i = 0; i < n && static_cast<int64_t>(s.size()) < budget; ++i)
                if (orig[i] < sink) s.insert(i);
            for (int64_t i = n - 1; static_cast<int64_t>(s.size()) < budget; --i) s.insert(i);
            want.assign(s.begin(), s.end());
        }
        ASSERT_EQ(keep, want) << "trial " << trial;
    }
}

TEST(BaselineEvictors, AvgPoolIsZeroPaddedMean) {
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(0, 1);
    for (int64_t kernel : {1, 3, 7, 8}) {
        for (int64_t n : {1, 2, 5, 31}) {
            std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
            for (float &x : in) x = u(rng);
            avg_pool_scores(in.data(), n, kernel, out.data());
            // Reference: explicit zero padding of kernel/2 on the left.
            std::vector<double> padded(static_cast<size_t>(n + 2 * kernel), 0.0);
            for (int64_t i = 0; i < n; ++i) padded[static_cast<size_t>(i + kernel)] = in[i];
            for (int64_t i = 0; i < n; ++i) {
                double s = 0;
                for (int64_t j = 0; j < kernel; ++j) s += padded[static_cast<size_t>(i + kernel - kernel / 2 + j)];
                EXPECT_NEAR(out[i], s / double(kernel), 1e-6) << "kernel " << kernel << " n " << n << " i " << i;
            }
        }
    }
}

TEST(BaselineEvictors, InfinipotKeepMatchesBruteForce) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = 1 + rng() % 80, budget = 4 + rng() % 40, sink = rng() % 5, recent = rng() % 5;
        const float ratio = float(rng() % 5) / 4.0f;
        std::vector<int64_t> orig(static_cast<size_t>(n));
        std::iota(orig.begin(), orig.end(), int64_t(rng() % 3));
        std::vector<float> cap(static_cast<size_t>(n)), nuc(static_cast<size_t>(n));
        for (auto &x : cap) x = float(rng() % 7);   // ties on purpose
        for (auto &x : nuc) x = float(rng() % 7);
        auto keep = infinipot_keep(cap.data(), nuc.data(), orig.data(), n, budget, sink, recent, ratio);
        std::vector<int64_t> want;
        if (n <= budget) {
            want.resize(static_cast<size_t>(n));
            std::iota(want.begin(), want.end(), 0);
        } else {
            std::vector<int64_t> prot, rest;
            for (int64_t s = 0; s < n; ++s) (orig[s] < sink || s >= n - recent ? prot : rest).push_back(s);
            if (static_cast<int64_t>(prot.size()) >= budget) {
                prot.resize(static_cast<size_t>(budget));
                want = prot;
            } else {
                const int64_t free = budget - static_cast<int64_t>(prot.size());
                const int64_t n_nuc = std::llround(double(free) * ratio);
                auto by_nuc = brute_rank(rest, nuc.data(), orig.data(), n_nuc);
                std::vector<int64_t> left;
                for (int64_t s : rest)
                    if (std::find(by_nuc.begin(), by_nuc.end(), s) == by_nuc.end()) left.push_back(s);
                auto by_cap = brute_rank(left, cap.data(), orig.data(), free - n_nuc);
                want = prot;
                want.insert(want.end(), by_nuc.begin(), by_nuc.end());
                want.insert(want.end(), by_cap.begin(), by_cap.end());
            }
            std::sort(want.begin(), want.end());
        }
        ASSERT_EQ(keep, want) << "trial " << trial;
    }
}

TEST(BaselineMethods, BudgetAtLeastInputEqualsFull) {
    Tiny t;
    auto doc = random_tokens(300, 1), query = random_tokens(12, 2);
    for (lctx_method m : kRecurrent) expect_equals_full(*t.model, doc, doc, query, params(m, 400, 64));
    expect_equals_full(*t.model, doc, doc, query, params(LCTX_METHOD_TRUNCATE, 400, 64));
}

TEST(BaselineMethods, TruncateEqualsFullOverHeadAndTail) {
    Tiny t;
    auto doc = random_tokens(300, 3), query = random_tokens(9, 4);
    std::vector<int32_t> cut(doc.begin(), doc.begin() + 50);
    cut.insert(cut.end(), doc.end() - 51, doc.end());
    expect_equals_full(*t.model, doc, cut, query, params(LCTX_METHOD_TRUNCATE, 101, 64));
    Session s(*t.model, params(LCTX_METHOD_TRUNCATE, 101, 64));
    feed_split(s, doc, {7});
    auto sel = s.select(query.data(), query.size());
    ASSERT_EQ(sel->positions.size(), 101u);
    EXPECT_EQ(sel->positions[49], 49);
    EXPECT_EQ(sel->positions[50], 249);
    EXPECT_EQ(sel->positions.back(), 299);
}

TEST(BaselineMethods, StreamingKeepsExactlySinksAndWindow) {
    Tiny t;
    auto doc = random_tokens(300, 5);
    Session s(*t.model, params(LCTX_METHOD_STREAMING, 64, 32, 8, 8));
    feed_split(s, doc, {45});
    const RecurrentMethod &m = recurrent(s);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 8; ++i) want.push_back(i);
    for (int64_t i = 300 - 56; i < 300; ++i) want.push_back(i);
    for (int32_t l = 0; l < t.model->hparams().n_layer; ++l)
        for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g) EXPECT_EQ(m.slot_tokens(l, g), want);
}

TEST(BaselineMethods, NoMethodHoldsMoreThanItsPot) {
    Tiny t;
    auto doc = random_tokens(333, 6), query = random_tokens(10, 7);
    const int budget = 64, chunk = 32;
    for (lctx_method mth : kRecurrent) {
        Session s(*t.model, params(mth, budget, chunk));
        feed_split(s, doc, {50, 3});
        const RecurrentMethod &m = recurrent(s);
        int64_t pot = budget + chunk;
        if (mth == LCTX_METHOD_INFINIPOT) pot += 128;   // the catalyst prompt on top, briefly
        EXPECT_LE(m.max_slots_seen(), pot) << method_name(mth);
        const int64_t after = mth == LCTX_METHOD_SNAPKV ? budget + chunk : budget;
        for (int32_t l = 0; l < t.model->hparams().n_layer; ++l)
            for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g) {
                const auto &o = m.slot_tokens(l, g);
                ASSERT_LE(static_cast<int64_t>(o.size()), after) << method_name(mth);
                ASSERT_TRUE(std::is_sorted(o.begin(), o.end()));
                for (int64_t i = 0; i < 8; ++i) ASSERT_EQ(o[i], i) << method_name(mth) << ": sink " << i;
                // The last kv_recent document tokens are always kept.
                ASSERT_EQ(o.back(), 332) << method_name(mth);
                ASSERT_EQ(o[o.size() - 8], 325) << method_name(mth);
            }
        auto sel = s.select(query.data(), query.size());
        s.recompute(*sel);
        // Decode context: the kept document KV (at most the budget) + the question.
        EXPECT_LE(static_cast<int64_t>(m.context_tokens().size()), budget + 10) << method_name(mth);
        EXPECT_NE(s.decode(greedy()), -1);
    }
}

TEST(BaselineMethods, FeedSplitsDoNotChangeTheAnswer) {
    Tiny t;
    auto doc = random_tokens(260, 8), query = random_tokens(8, 9);
    for (lctx_method mth : kRecurrent) {
        Session a(*t.model, params(mth, 48, 40)), b(*t.model, params(mth, 48, 40));
        feed_split(a, doc, {260});
        feed_split(b, doc, {1, 17, 90});
        auto sa = a.select(query.data(), query.size());
        auto sb = b.select(query.data(), query.size());
        EXPECT_EQ(sa->positions, sb->positions) << method_name(mth);
        a.recompute(*sa);
        b.recompute(*sb);
        for (int32_t i = 0; i < t.model->hparams().n_vocab; ++i)
            ASSERT_EQ(a.logits()[i], b.logits()[i]) << method_name(mth) << " logit " << i;
    }
}

TEST(BaselineMethods, EvictionChangesWhatIsKeptPerMethod) {
    // Different scores must lead to different caches (guards against a
    // method silently falling back to another's rule).
    Tiny t;
    auto doc = random_tokens(300, 10);
    std::vector<std::vector<int64_t>> kept;
    for (lctx_method mth : {LCTX_METHOD_STREAMING, LCTX_METHOD_H2O, LCTX_METHOD_TOVA, LCTX_METHOD_INFINIPOT}) {
        Session s(*t.model, params(mth, 64, 32));
        feed_split(s, doc, {300});
        kept.push_back(recurrent(s).slot_tokens(1, 0));
    }
    for (size_t i = 0; i < kept.size(); ++i)
        for (size_t j = i + 1; j < kept.size(); ++j) EXPECT_NE(kept[i], kept[j]) << i << " vs " << j;
}

TEST(BaselineMethods, SecondQuestionGivesTheSameAnswer) {
    Tiny t;
    auto doc = random_tokens(200, 11), query = random_tokens(8, 12), other = random_tokens(5, 13);
    for (lctx_method mth : {LCTX_METHOD_H2O, LCTX_METHOD_SNAPKV, LCTX_METHOD_TRUNCATE}) {
        Session s(*t.model, params(mth, 64, 32));
        feed_split(s, doc, {64});
        auto run = [&](const std::vector<int32_t> &q) {
            auto sel = s.select(q.data(), q.size());
            s.recompute(*sel);
            std::vector<int32_t> out;
            for (int k = 0; k < 5; ++k) out.push_back(s.decode(greedy()));
            return out;
        };
        auto first = run(query);
        run(other);
        EXPECT_EQ(run(query), first) << method_name(mth);
    }
}

TEST(BaselineMethods, SnapkvCompressesWithTheQuestion) {
    Tiny t;
    auto doc = random_tokens(120, 14), query = random_tokens(6, 15);
    Session s(*t.model, params(LCTX_METHOD_SNAPKV, 64, 64));
    feed_split(s, doc, {120});
    // Lazy eviction: the last chunk is still whole before the question.
    EXPECT_EQ(recurrent(s).slot_tokens(0, 0).size(), 120u);
    auto sel = s.select(query.data(), query.size());
    s.recompute(*sel);
    EXPECT_EQ(recurrent(s).context_tokens().size(), 64u + 6u);
    // Sinks are kept; the union over heads is at least the budget.
    EXPECT_GE(sel->positions.size(), 64u);
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(sel->positions[static_cast<size_t>(i)], i);
}

TEST(BaselineMethods, BadParametersAreRefused) {
    Tiny t;
    auto expect_invalid = [&](const lctx_session_params &p, const char *what) {
        try {
            Session s(*t.model, p);
            ADD_FAILURE() << what << " accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG) << what << ": " << e.what();
        }
    };
    expect_invalid(params(LCTX_METHOD_H2O, 16, 32, 8, 8), "sink + recent >= budget");
    auto p = params(LCTX_METHOD_TOVA, 2000, 32);
    expect_invalid(p, "budget >= n_ctx");
    p = params(LCTX_METHOD_INFINIPOT, 64, 32);
    p.kv_p.infinipot_nuc_ratio = 2.0f;
    expect_invalid(p, "nuc ratio > 1");
    p = params(LCTX_METHOD_TRUNCATE, 1024, 32);
    expect_invalid(p, "truncate budget >= n_ctx");
}
