// ReAttention (docs/methods/reattention.md): the fused top-k scoring kernel
// and the vote against brute force written here, and the method against FULL
// where the two must agree (an input that fits the first window; spans wide
// enough to cover the whole middle), plus feed-split invariance, repeated
// questions, the disk-backed store and parameter errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "engine_tiny_model.h"
#include "kernels/cpu/cpu_kernels.h"
#include "session/method_reattention.h"
#include "session/reattention_select.h"
#include "session/session.h"
#include "session_test_util.h"
#include "test_kernels_util.h"

using namespace lctx;
using session_test::feed_split;
using session_test::random_tokens;

namespace {

struct Entry {
    double score;
    int64_t index;
};

// The k best keys of one row by a double-precision dot product: score
// descending, equal scores by ascending index. tile > 0: first the best key
// of each aligned tile of `tile` indices (the first of equal ones).
std::vector<Entry> brute_topk(const float *q, const std::vector<float> &keys, int64_t n, int d, int64_t base, int k,
                              int64_t tile) {
    std::vector<Entry> all;
    for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += double(q[c]) * keys[j * d + c];
        all.push_back({s, base + j});
    }
    if (tile > 0) {
        std::vector<Entry> best;
        for (const Entry &e : all) {
            if (!best.empty() && best.back().index / tile == e.index / tile) {
                if (e.score > best.back().score) best.back() = e;
            } else {
                best.push_back(e);
            }
        }
        all = best;
    }
    std::stable_sort(all.begin(), all.end(), [](const Entry &a, const Entry &b) { return a.score > b.score; });
    if (int64_t(all.size()) > k) all.resize(k);
    return all;
}

std::vector<float> int_values(size_t n, std::mt19937 &rng, int lo, int hi) {
    std::uniform_int_distribution<int> u(lo, hi);
    std::vector<float> v(n);
    for (float &x : v) x = float(u(rng));
    return v;
}

} // namespace

// Small integers: every dot product is exact in f32 and f16 alike, ties are
// frequent, so the result must equal brute force entry by entry, including
// the tie-break by index, for every SIMD variant, thread count and split.
TEST(TopkDot, EqualsBruteForceWithTies) {
    std::mt19937 rng(1);
    test::for_each_variant([&](cpu::SimdVariant, const char *name) {
        for (int threads : {1, 2, 3}) {
            cpu::ThreadPool pool(threads);
            for (int d : {64, 16, 24}) {
                for (int64_t n : {int64_t(1), int64_t(37), int64_t(300), int64_t(2500)}) {
                    const int64_t rows = 1 + int64_t(rng() % 20), base = int64_t(rng() % 300);
                    const auto q = int_values(size_t(rows * d), rng, -2, 2);
                    const auto keys = int_values(size_t(n * d), rng, -2, 2);
                    for (int k : {1, 4, 7}) {
                        for (bool f16 : {false, true}) {
                            for (bool tile_max : {false, true}) {
                                std::vector<float> bs;
                                std::vector<int64_t> bi;
                                test::run_topk_dot(pool, q, rows, keys, f16, n, d, base, k, tile_max, 1024, bs, bi);
                                for (int64_t r = 0; r < rows; ++r) {
                                    const auto want =
                                        brute_topk(q.data() + r * d, keys, n, d, base, k, tile_max ? cpu::kTopkTile : 0);
                                    for (int i = 0; i < k; ++i) {
                                        SCOPED_TRACE(testing::Message() << name << " threads " << threads << " d " << d
                                                                        << " n " << n << " k " << k << " f16 " << f16
                                                                        << " tile_max " << tile_max << " row " << r);
                                        if (i < int(want.size())) {
                                            ASSERT_EQ(bi[r * k + i], want[i].index) << "rank " << i;
                                            ASSERT_EQ(bs[r * k + i], float(want[i].score));
                                        } else {
                                            ASSERT_EQ(bi[r * k + i], -1);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

// Real-valued data: the scores equal double-precision ones to rounding, and
// a returned key is never beaten by a key it left out by more than that.
TEST(TopkDot, RealValuedScoresAreTheBestToRounding) {
    std::mt19937 rng(2);
    cpu::ThreadPool pool(2);
    const int d = 64, k = 4;
    const int64_t n = 5000, rows = 30;
    const auto q = test::random_floats(size_t(rows * d), rng);
    const auto keys = test::random_floats(size_t(n * d), rng);
    std::vector<float> bs;
    std::vector<int64_t> bi;
    test::run_topk_dot(pool, q, rows, keys, false, n, d, 0, k, false, 1024, bs, bi);
    for (int64_t r = 0; r < rows; ++r) {
        const auto want = brute_topk(q.data() + r * d, keys, n, d, 0, k, 0);
        for (int i = 0; i < k; ++i) {
            ASSERT_GE(bi[r * k + i], 0);
            double s = 0;
            for (int c = 0; c < d; ++c) s += double(q[r * d + c]) * keys[bi[r * k + i] * d + c];
            EXPECT_NEAR(bs[r * k + i], s, 1e-4);
            EXPECT_NEAR(bs[r * k + i], want[i].score, 1e-4) << "rank " << i;
        }
    }
}

// Lists passed in are merged with the new keys (a store read block by block).
TEST(TopkDot, MergesWithTheListsPassedIn) {
    std::mt19937 rng(3);
    cpu::ThreadPool pool(2);
    const int d = 16, k = 4;
    const int64_t n = 700, rows = 5;
    const auto q = int_values(size_t(rows * d), rng, -3, 3);
    const auto keys = int_values(size_t(n * d), rng, -3, 3);
    std::vector<float> whole_s, part_s;
    std::vector<int64_t> whole_i, part_i;
    test::run_topk_dot(pool, q, rows, keys, false, n, d, 0, k, false, 128, whole_s, whole_i);
    // First half, then the second half merged into the first's lists.
    const std::vector<float> a(keys.begin(), keys.begin() + 300 * d), b(keys.begin() + 300 * d, keys.end());
    test::run_topk_dot(pool, q, rows, a, false, 300, d, 0, k, false, 1000, part_s, part_i);
    test::merge_topk_dot(pool, q, rows, b, false, n - 300, d, 300, k, false, 1000, part_s, part_i);
    EXPECT_EQ(part_i, whole_i);
    EXPECT_EQ(part_s, whole_s);
}

// Overflowing products give +-inf and inf - inf gives NaN: NaN is never
// selected, and the call neither crashes nor returns an index out of range.
TEST(TopkDot, ExtremeValuesNeverSelectNaN) {
    cpu::ThreadPool pool(2);
    const int d = 16, k = 4;
    const int64_t n = 200, rows = 3;
    std::vector<float> q(size_t(rows * d), 0.0f), keys(size_t(n * d), 0.0f);
    for (int c = 0; c < d; ++c) {
        q[c] = 3e38f;                       // row 0: products overflow
        q[d + c] = c % 2 ? 3e38f : -3e38f;  // row 1: +inf and -inf sum to NaN
        q[2 * d + c] = 1.0f;
    }
    for (int64_t j = 0; j < n; ++j)
        for (int c = 0; c < d; ++c) keys[j * d + c] = j == 50 ? NAN : (j % 7 == 0 ? 65504.0f : 1.0f);
    for (bool f16 : {false, true}) {
        std::vector<float> bs;
        std::vector<int64_t> bi;
        test::run_topk_dot(pool, q, rows, keys, f16, n, d, 0, k, false, 64, bs, bi);
        for (size_t i = 0; i < bs.size(); ++i) {
            EXPECT_FALSE(std::isnan(bs[i]));
            EXPECT_TRUE(bi[i] == -1 || (bi[i] >= 0 && bi[i] < n));
            EXPECT_NE(bi[i], 50);
        }
        EXPECT_EQ(bi[2 * k], 0);   // row 2: the 65504 keys, lowest index first
        EXPECT_EQ(bi[2 * k + 1], 7);
    }
}

// The vote against a plain re-implementation: count, rank, widen, mark.
TEST(ReattentionVote, EqualsBruteForce) {
    std::mt19937 rng(4);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t mid0 = rng() % 40, mid1 = mid0 + 1 + rng() % 400;
        const int64_t n = rng() % 300, n_spans = rng() % 12, span = 2 * (1 + rng() % 10);
        std::vector<int64_t> idx(static_cast<size_t>(n));
        std::vector<float> sc(idx.size());
        for (int64_t i = 0; i < n; ++i) {
            idx[i] = rng() % 10 == 0 ? -1 : mid0 + int64_t(rng() % uint32_t(mid1 - mid0));
            sc[i] = float(rng() % 5);   // many equal scores
        }
        const auto got = vote_spans(idx.data(), sc.data(), n, mid0, mid1, n_spans, span);
        // Brute force.
        std::map<int64_t, std::pair<int64_t, float>> votes;   // index -> (votes, best)
        for (int64_t i = 0; i < n; ++i) {
            if (idx[i] < 0) continue;
            auto it = votes.find(idx[i]);
            if (it == votes.end()) votes[idx[i]] = {1, sc[i]};
            else it->second = {it->second.first + 1, std::max(it->second.second, sc[i])};
        }
        std::vector<int64_t> order;
        for (auto &[j, v] : votes) order.push_back(j);
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
            if (votes[a].first != votes[b].first) return votes[a].first > votes[b].first;
            if (votes[a].second != votes[b].second) return votes[a].second > votes[b].second;
            return a < b;
        });
        if (int64_t(order.size()) > n_spans) order.resize(static_cast<size_t>(n_spans));
        std::vector<char> mark(static_cast<size_t>(mid1), 0);
        for (int64_t j : order)
            for (int64_t o = -span / 2; o < span / 2; ++o) {
                const int64_t t = j + o;
                if (t >= mid0 && t < mid1) mark[t] = 1;
            }
        std::vector<int64_t> want;
        for (int64_t t = 0; t < mid1; ++t)
            if (mark[t]) want.push_back(t);
        ASSERT_EQ(got, want) << "trial " << trial;
    }
}

namespace {

struct Tiny {
    std::unique_ptr<Model> model;
    Tiny() {
        engine_test::TinyOptions o;
        o.n_layer = 3;
        o.n_ctx = 4096;
        auto bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 2);
    }
};

const Tiny &tiny() {
    static Tiny t;
    return t;
}

session_test::SessionParams re_params(int G, int L, int span, int k, int spans, int chunk) {
    session_test::SessionParams p;
    p.method = LCTX_METHOD_REATTENTION;
    p.n_threads = 2;
    p.reattention_p.n_global = G;
    p.reattention_p.n_local = L;
    p.reattention_p.span = span;
    p.reattention_p.top_k = k;
    p.reattention_p.n_spans = spans;
    p.reattention_p.chunk = chunk;
    return p;
}

ReattentionMethod &re(Session &s) { return dynamic_cast<ReattentionMethod &>(s.method()); }

// Logits after the question and `steps` greedy tokens, for two sessions on
// `model` (default: the tiny llama).
void expect_same_answers(Session &a, Session &b, const std::vector<int32_t> &query, float tol, int steps = 8,
                         const Model *model = nullptr) {
    const int32_t n_vocab = (model ? *model : *tiny().model).hparams().n_vocab;
    auto sa = a.select(query.data(), query.size());
    auto sb = b.select(query.data(), query.size());
    a.recompute(*sa);
    b.recompute(*sb);
    lctx_sampling_params g;
    lctx_sampling_default_params(&g);
    for (int s = 0; s <= steps; ++s) {
        const float *la = a.logits(), *lb = b.logits();
        ASSERT_TRUE(la && lb);
        for (int32_t i = 0; i < n_vocab; ++i)
            ASSERT_NEAR(la[i], lb[i], tol * std::max(1.0f, std::fabs(la[i]))) << "step " << s << " logit " << i;
        if (s == steps) break;
        ASSERT_EQ(a.decode(g), b.decode(g)) << "greedy token " << s;
    }
}

} // namespace

// Everything within G + L: no middle, plain causal attention at the true
// positions, so ReAttention is FULL (to rounding: ReAttention runs the last
// question token alone, through the one-token matmul path).
TEST(ReattentionMethod, InputWithinTheFirstWindowEqualsFull) {
    const auto doc = random_tokens(150, 1), query = random_tokens(9, 2);
    auto rp = re_params(8, 200, 8, 2, 4, 16);
    session_test::SessionParams fp = rp;
    fp.method = LCTX_METHOD_FULL;
    fp.n_ctx = 400;
    Session full(*tiny().model, fp), ra(*tiny().model, rp);
    feed_split(full, doc, {150});
    feed_split(ra, doc, {13, 50});
    expect_same_answers(full, ra, query, 1e-5f);
    EXPECT_EQ(re(ra).selecting_steps(), 0);
}

// Spans wider than twice the middle: one winner covers it all, so the
// window is the whole input in order, numbered consecutively: dense
// attention again (at positions shifted by a constant once the local tokens
// have been moved down), now through selection, placement and rebases.
TEST(ReattentionMethod, SpansCoveringTheMiddleEqualDenseAttention) {
    const auto doc = random_tokens(1500, 3), query = random_tokens(7, 4);
    auto rp = re_params(4, 24, 4096, 1, 1, 8);
    session_test::SessionParams fp = rp;
    fp.method = LCTX_METHOD_FULL;
    fp.n_ctx = 1600;
    Session full(*tiny().model, fp), ra(*tiny().model, rp);
    feed_split(full, doc, {1500});
    feed_split(ra, doc, {1500});
    EXPECT_GT(re(ra).selecting_steps(), 150);
    EXPECT_GT(re(ra).rebases(), 0);
    expect_same_answers(full, ra, query, 2e-4f);
    // The last step attended to the whole middle in every layer.
    const int64_t n = re(ra).store().size();
    EXPECT_GE(n, 400 + 7 + 7);
    for (const auto &sel : re(ra).last_selection()) {
        ASSERT_EQ(int64_t(sel.size()), n - 24 - 4);
        EXPECT_EQ(sel.front(), 4);
    }
}

// Chunk boundaries do not depend on how the document is fed; asking the same
// question twice gives the same answer; the selections obey their bounds.
TEST(ReattentionMethod, FeedSplitRepeatedQuestionsAndSelectionBounds) {
    const auto doc = random_tokens(700, 5), query = random_tokens(6, 6);
    const auto p = re_params(4, 64, 8, 2, 5, 16);
    Session a(*tiny().model, p), b(*tiny().model, p);
    feed_split(a, doc, {700});
    feed_split(b, doc, {1, 77, 5, 300});
    EXPECT_EQ(a.method().state_digest(), b.method().state_digest());
    EXPECT_GT(re(a).selecting_steps(), 20);
    for (const auto &sel : re(a).last_selection()) {
        ASSERT_FALSE(sel.empty());
        EXPECT_TRUE(std::is_sorted(sel.begin(), sel.end()));
        EXPECT_EQ(std::set<int64_t>(sel.begin(), sel.end()).size(), sel.size());
        EXPECT_GE(sel.front(), 4);
        EXPECT_LT(sel.back(), 700 - 64);
        EXPECT_LE(int64_t(sel.size()), 5 * 8);
    }
    expect_same_answers(a, b, query, 0.0f, 20);
    // A second question on a, the first again on b: the state goes back to
    // the document, so a's second answer is b's first one.
    const auto q2 = random_tokens(5, 7);
    Session c(*tiny().model, p);
    feed_split(c, doc, {350});
    expect_same_answers(a, c, q2, 0.0f, 10);
    expect_same_answers(b, c, query, 0.0f, 5);
}

// A store that spills to a file after 2 blocks answers exactly as one in RAM,
// in f16 as well; k' = 0 runs the global + local mode.
TEST(ReattentionMethod, FileBackedStoreAndModes) {
    const auto doc = random_tokens(3000, 8), query = random_tokens(6, 9);
    for (bool f16 : {false, true}) {
        auto p = re_params(4, 64, 8, 2, 5, 32);
        if (f16) p.kv_type = LCTX_KV_F16;
        auto pf = p;
        pf.reattention_p.store_max_ram = 1;   // every block goes to the file
        pf.reattention_p.store_dir = "/tmp";
        Session ram(*tiny().model, p), file(*tiny().model, pf);
        feed_split(ram, doc, {3000});
        feed_split(file, doc, {3000});
        EXPECT_EQ(re(ram).store().file_bytes(), 0u);
        EXPECT_GT(re(file).store().file_bytes(), 0u);
        EXPECT_EQ(re(file).store().ram_bytes(), 0u);
        EXPECT_EQ(ram.method().state_digest(), file.method().state_digest());
        expect_same_answers(ram, file, query, 0.0f, 4);
    }
    auto p0 = re_params(4, 64, 8, 2, 0, 32);
    Session s0(*tiny().model, p0);
    feed_split(s0, doc, {3000});
    EXPECT_EQ(re(s0).selecting_steps(), 0);
    for (const auto &sel : re(s0).last_selection()) EXPECT_TRUE(sel.empty());
}

// The approximate top-k changes the selection but not the bounds.
TEST(ReattentionMethod, TileMaxRuns) {
    const auto doc = random_tokens(1500, 10);
    auto p = re_params(4, 64, 8, 4, 5, 32);
    auto pt = p;
    pt.reattention_p.tile_max = true;
    Session a(*tiny().model, p), b(*tiny().model, pt);
    feed_split(a, doc, {1500});
    feed_split(b, doc, {1500});
    for (const auto &sel : re(b).last_selection()) {
        ASSERT_FALSE(sel.empty());
        EXPECT_LT(sel.back(), 1500 - 64);
    }
    EXPECT_NE(a.method().state_digest(), b.method().state_digest());
}

TEST(ReattentionMethod, ParameterErrors) {
    auto expect_invalid = [](session_test::SessionParams p, const char *what) {
        try {
            Session s(*tiny().model, p);
            ADD_FAILURE() << what << " was accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG) << what;
            EXPECT_NE(std::string(e.what()).find("ReAttention"), std::string::npos) << e.what();
        }
    };
    auto p = re_params(4, 64, 8, 2, 5, 16);
    auto q = p;
    q.reattention_p.span = 7;
    expect_invalid(q, "odd span");
    q = p;
    q.reattention_p.chunk = 65;
    expect_invalid(q, "chunk above n_local");
    q = p;
    q.reattention_p.chunk = 513;
    q.reattention_p.n_local = 2000;
    expect_invalid(q, "chunk above 512");
    q = p;
    q.reattention_p.top_k = 0;
    expect_invalid(q, "top_k 0");
    q = p;
    q.reattention_p.top_k = 65;
    expect_invalid(q, "top_k 65");
    q = p;
    q.reattention_p.n_global = -2;
    expect_invalid(q, "negative global");
    q = p;
    q.reattention_p.n_spans = -5;
    expect_invalid(q, "negative spans");
    q = p;
    q.reattention_p.n_local = 0;
    expect_invalid(q, "no local window");
    // Defaults for an 8K model are the paper's.
    engine_test::TinyOptions o;
    o.n_layer = 1;
    o.n_ctx = 8192;
    auto bytes = engine_test::make_tiny_llama(o);
    auto m8k = Model::load_memory(bytes.data(), bytes.size(), 1);
    session_test::SessionParams d;
    const ReattentionParams r = reattention_params_from(*m8k, d);
    EXPECT_EQ(r.n_global, 32);
    EXPECT_EQ(r.n_local, 4096);
    EXPECT_EQ(r.span, 32);
    EXPECT_EQ(r.top_k, 4);
    EXPECT_EQ(r.n_spans, 127);
    EXPECT_EQ(r.chunk, 512);
    EXPECT_EQ(r.max_window(), 8192);
}

// The source of lctx_session_attended: after a step, each layer saw the
// global tokens, its own spans and the local tokens, nothing else; a token's
// share counts those layers. Before any step nothing was seen; within the
// first window everything was. Methods that attend to their whole cache say so.
TEST(ReattentionMethod, AttendedShareCountsEachLayersWindow) {
    const auto p = re_params(4, 64, 8, 2, 5, 16);
    Session a(*tiny().model, p);
    std::vector<float> share;
    ASSERT_TRUE(a.method().attended_share(share));
    EXPECT_TRUE(share.empty());

    feed_split(a, random_tokens(50, 10), {50});   // within G + L: no middle
    ASSERT_TRUE(a.method().attended_share(share));
    ASSERT_EQ(share.size(), 50u);
    for (float v : share) EXPECT_EQ(v, 1.0f);

    Session b(*tiny().model, p);
    feed_split(b, random_tokens(700, 5), {700});
    ASSERT_TRUE(b.method().attended_share(share));
    ASSERT_EQ(share.size(), 700u);
    const auto &sels = re(b).last_selection();
    const double n_layer = double(sels.size());
    int64_t middle_seen = 0, middle_unseen = 0;
    for (int64_t t = 0; t < 700; ++t) {
        double want = 1.0;
        if (t >= 4 && t < 700 - 64) {
            int64_t layers = 0;
            for (const auto &sel : sels) layers += std::count(sel.begin(), sel.end(), t);
            want = double(layers) / n_layer;
            (layers ? middle_seen : middle_unseen)++;
        }
        ASSERT_NEAR(share[size_t(t)], want, 1e-6) << "token " << t;
    }
    // At most 5 spans of 8 per layer: most of the 632-token middle was out of view.
    EXPECT_GT(middle_seen, 0);
    EXPECT_GT(middle_unseen, 632 - int64_t(n_layer) * 40);

    session_test::SessionParams fp = p;
    fp.method = LCTX_METHOD_FULL;
    Session full(*tiny().model, fp);
    EXPECT_FALSE(full.method().attended_share(share));
}

// Gemma 3's sliding layers (5 of every 6) mask every key further back than
// their window. When the window ends inside the local tokens for every query
// of a step (n_local - chunk + 1 >= window), the global tokens and spans
// below them are out of view: the layer selects and places none. The answers
// stay dense attention's (spans covering the middle, as above), on both sides
// of that boundary: with n_local = 15 and 8-token steps the first query's
// window (8) reaches exactly the first local token; with 14 it reaches one
// token further, a span token, so the sliding layers must select.
TEST(ReattentionMethod, SlidingLayersSelectOnlyWhenTheirWindowReachesBelowTheLocalTokens) {
    engine_test::TinyOptions o;
    o.arch = "gemma3";
    o.n_layer = 6;
    o.window = 8;
    auto bytes = engine_test::make_tiny_llama(o);
    auto gemma = Model::load_memory(bytes.data(), bytes.size(), 2);
    ASSERT_EQ(gemma->hparams().window_of(0), 8);
    ASSERT_EQ(gemma->hparams().window_of(5), 0);
    const auto doc = random_tokens(600, 21), query = random_tokens(7, 22);
    for (const int local : {12, 14, 15, 40}) {
        SCOPED_TRACE("n_local " + std::to_string(local));
        auto rp = re_params(4, local, 4096, 1, 1, 8);
        session_test::SessionParams fp = rp;
        fp.method = LCTX_METHOD_FULL;
        fp.n_ctx = 700;
        Session full(*gemma, fp), ra(*gemma, rp);
        feed_split(full, doc, {600});
        feed_split(ra, doc, {600});
        // The document's last step: what is left after the first G + L tokens, in 8s.
        const int last_step = (600 - 4 - local) % 8 ? (600 - 4 - local) % 8 : 8;
        const bool local_only = local - last_step + 1 >= 8;
        const auto &sels = re(ra).last_selection();
        for (int l = 0; l < 6; ++l)
            EXPECT_EQ(sels[size_t(l)].empty(), local_only && l != 5) << "layer " << l;

        std::vector<float> share;
        ASSERT_TRUE(ra.method().attended_share(share));
        ASSERT_EQ(share.size(), 600u);
        if (local_only) {   // the last step's sliding layers saw their last 8 tokens; layer 5 everything
            for (int64_t t = 0; t < 600; ++t)
                ASSERT_NEAR(share[size_t(t)], t >= 592 ? 1.0 : 1.0 / 6.0, 1e-6) << "token " << t;
        }

        expect_same_answers(full, ra, query, 2e-4f, 6, gemma.get());
    }
}
