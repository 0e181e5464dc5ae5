// InfLLM on a tiny random model: when every block fits in the memory (or no
// block forms) it attends to the whole input in document order at the same
// positions, so its logits equal FULL's up to the fp16 store; feed splits do
// not matter; retrieval keeps the configured sizes; block scoring and top-k
// match brute force; bad params are refused; a second question and
// cancellation leave the method consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "engine_tiny_model.h"
#include "session_test_util.h"
#include "session/infllm_blocks.h"
#include "session/method_full.h"
#include "session/method_infllm.h"

using namespace lctx;
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

session_test::SessionParams infllm_params(int sink, int recent, int block, int budget, int chunk) {
    session_test::SessionParams p;
    p.method = LCTX_METHOD_INFLLM;
    p.n_ctx = 256;
    p.n_batch = 20;   // several forward calls per chunk
    p.kv_p.sink = sink;
    p.kv_p.recent = recent;
    p.infllm_p.block = block;
    p.kv_p.budget = budget;
    p.kv_p.chunk = chunk;
    p.infllm_p.repr = 3;
    return p;
}


// A Progress whose callback stops the call after `allow` reports.
struct Cancel {
    std::atomic<bool> flag{false};
    int left = 1 << 30;
    static int cb(float, void *u) {
        auto *c = static_cast<Cancel *>(u);
        return c->left-- > 0 ? 0 : 1;
    }
    Progress progress(int allow) {
        flag = false;
        left = allow;
        return Progress(&Cancel::cb, this, flag);
    }
};

void feed_all(Method &m, const std::vector<int32_t> &doc, size_t piece) {
    Cancel c;
    for (size_t at = 0; at < doc.size(); at += piece) {
        Progress p = c.progress(1 << 30);
        m.feed(doc.data() + at, std::min(piece, doc.size() - at), p);
    }
    Progress p = c.progress(1 << 30);
    m.finish(p);
}

// Logits after the question, then after each of `steps` greedy tokens of `ref`.
std::vector<std::vector<float>> answer(Method &m, const std::vector<int32_t> &query, const std::vector<int32_t> &steps) {
    Cancel c;
    Progress p = c.progress(1 << 30);
    Selection s = m.select(query, p);
    std::vector<std::vector<float>> out(1);
    m.recompute(s, p, out[0]);
    for (int32_t t : steps) {
        out.emplace_back();
        m.append(t, out.back());
    }
    return out;
}

int32_t argmax(const std::vector<float> &v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// FULL's logits for doc + query and greedy continuation; the tokens it chose.
std::vector<std::vector<float>> full_answer(const Model &model, Backend &pool, const std::vector<int32_t> &doc,
                                            const std::vector<int32_t> &query, int steps,
                                            std::vector<int32_t> &chosen) {
    FullMethod full(model, pool, 2048, 64);
    feed_all(full, doc, 97);
    Cancel c;
    Progress p = c.progress(1 << 30);
    Selection s = full.select(query, p);
    std::vector<std::vector<float>> out(1);
    full.recompute(s, p, out[0]);
    chosen.clear();
    for (int i = 0; i < steps; ++i) {
        chosen.push_back(argmax(out.back()));
        out.emplace_back();
        full.append(chosen.back(), out.back());
    }
    return out;
}

double rel_diff(const std::vector<float> &a, const std::vector<float> &b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0, scale = 1.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        scale = std::max(scale, double(std::fabs(a[i])));
    }
    return d / scale;
}

// Largest relative logit difference to FULL over the question and 4 greedy
// decode steps; blocks formed and retrieved into `blocks` / `retrieved`.
double diff_to_full(const lctx_session_params &sp, int n_doc, size_t piece, int64_t *blocks, int64_t *retrieved) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(n_doc, 11), query = random_tokens(9, 12);
    std::vector<int32_t> chosen;
    const auto ref = full_answer(*t.model, pool, doc, query, 4, chosen);
    auto m = make_infllm_method(*t.model, pool, sp);
    feed_all(*m, doc, piece);
    auto &inf = dynamic_cast<InfllmMethod &>(*m);
    *blocks = inf.n_blocks();
    *retrieved = inf.memory_blocks();
    const auto got = answer(*m, query, chosen);
    EXPECT_EQ(got.size(), ref.size());
    double d = 0;
    for (size_t i = 0; i < got.size() && i < ref.size(); ++i) d = std::max(d, rel_diff(ref[i], got[i]));
    return d;
}

// fp16 store: measured ~1e-4 on the tiny model.
constexpr double kTol = 1e-3;

} // namespace

TEST(InfllmMethod, NoMemoryNeededEqualsFull) {
    // 150 tokens < sink + window: no block ever forms.
    int64_t blocks = -1, retrieved = -1;
    EXPECT_LT(diff_to_full(infllm_params(16, 256, 16, 32, 40), 150, 33, &blocks, &retrieved), kTol);
    EXPECT_EQ(blocks, 0);
}

TEST(InfllmMethod, AllBlocksRetrievedEqualsFull) {
    // Blocks form (window 32 of a 300-token document) and the 512-token
    // memory takes all of them: document order, consecutive positions.
    int64_t blocks = -1, retrieved = -1;
    EXPECT_LT(diff_to_full(infllm_params(8, 32, 16, 512, 48), 300, 61, &blocks, &retrieved), kTol);
    EXPECT_EQ(blocks, (300 - 32 - 8) / 16);
    EXPECT_EQ(retrieved, blocks);
    // No sinks and no window (kv_sink, kv_recent < 0): memory + the partial
    // last block still hold everything.
    EXPECT_LT(diff_to_full(infllm_params(-1, -1, 16, 512, 48), 300, 61, &blocks, &retrieved), kTol);
    EXPECT_EQ(blocks, 300 / 16);
    EXPECT_EQ(retrieved, blocks);
}

TEST(InfllmMethod, AllBlocksRetrievedEqualsFullStories260K) {
    const std::string path = engine_test::stories260k_path();
    auto model = Model::load_file(path, true, 2);
    const int32_t V = model->hparams().n_vocab;
    std::mt19937 rng(5);
    std::vector<int32_t> doc(400), query(10);
    for (auto &x : doc) x = 3 + int32_t(rng() % uint32_t(V - 3));
    for (auto &x : query) x = 3 + int32_t(rng() % uint32_t(V - 3));
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    std::vector<int32_t> chosen;
    const auto ref = full_answer(*model, pool, doc, query, 4, chosen);
    auto sp = infllm_params(4, 32, 16, 512, 64);
    sp.n_ctx = 64;
    auto m = make_infllm_method(*model, pool, sp);
    feed_all(*m, doc, 150);
    EXPECT_EQ(dynamic_cast<InfllmMethod &>(*m).memory_blocks(), (400 - 32 - 4) / 16);
    const auto got = answer(*m, query, chosen);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(rel_diff(ref[i], got[i]), kTol) << "step " << i;
}

TEST(InfllmMethod, LimitedMemoryDiffersFromFull) {
    // Control for the two tests above: with 2 of 16 blocks retrieved the
    // comparison does see the missing context.
    int64_t blocks = -1, retrieved = -1;
    EXPECT_GT(diff_to_full(infllm_params(8, 32, 16, 32, 48), 300, 61, &blocks, &retrieved), 10 * kTol);
    EXPECT_EQ(retrieved, 2);
}

TEST(InfllmMethod, FeedSplitDoesNotMatter) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(260, 21), query = random_tokens(7, 22);
    const auto sp = infllm_params(8, 32, 16, 48, 40);
    auto a = make_infllm_method(*t.model, pool, sp), b = make_infllm_method(*t.model, pool, sp);
    feed_all(*a, doc, 1000);
    feed_all(*b, doc, 7);
    const std::vector<int32_t> steps = {5, 6, 7};
    const auto la = answer(*a, query, steps), lb = answer(*b, query, steps);
    for (size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "step " << i;
}

TEST(InfllmMethod, LimitedMemoryKeepsSizesAndSelectsSorted) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(400, 31), query = random_tokens(6, 32);
    auto sp = infllm_params(8, 32, 16, 40, 48);   // budget rounds down to 2 blocks
    sp.kv_p.obs = 16;                             // representatives from the last 16 queries of a call
    auto m = make_infllm_method(*t.model, pool, sp);
    auto &inf = dynamic_cast<InfllmMethod &>(*m);
    EXPECT_EQ(inf.params().memory, 32);
    feed_all(*m, doc, 50);
    EXPECT_EQ(inf.n_fed(), 400);
    // Blocks: [8, 8 + 16b) up to 400 - 32 -> 22 blocks; window = the rest.
    EXPECT_EQ(inf.n_blocks(), (400 - 32 - 8) / 16);
    EXPECT_EQ(inf.memory_blocks(), 2);
    EXPECT_LE(inf.max_slots_used(), 8 + 32 + 32 + 15 + 48);
    Cancel c;
    Progress p = c.progress(1 << 30);
    Selection s = m->select(query, p);
    ASSERT_TRUE(std::is_sorted(s.positions.begin(), s.positions.end()));
    ASSERT_TRUE(std::adjacent_find(s.positions.begin(), s.positions.end()) == s.positions.end());
    EXPECT_EQ(s.positions.size(), s.scores.size());
    for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(s.positions[static_cast<size_t>(i)], i);   // sinks
    EXPECT_EQ(s.positions.back(), 399);                                                   // window
    // Sinks + window (400 - 8 - 22*16 = 40 tokens) + at most every layer and
    // head's 2 blocks, at least 2 blocks.
    const int64_t fixed = 8 + 40, n_sel = static_cast<int64_t>(s.positions.size());
    EXPECT_GE(n_sel, fixed + 32);
    EXPECT_LE(n_sel, fixed + 3 * 2 * 32);
    std::vector<float> logits;
    m->recompute(s, p, logits);
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t g = 0; g < 2; ++g) {
            const auto &r = inf.retrieved(l, g);
            EXPECT_EQ(r.size(), 2u);
            EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
        }
    for (float x : logits) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(m->context_tokens().size(), 8u + 40u + query.size());
    EXPECT_TRUE(inf.memory_slots_consistent());
    // Decode steps retrieve again: blocks that stay keep their slots, new
    // ones replace the dropped ones; every slot holds what retrieved() says.
    const int64_t copies0 = inf.block_copies();
    for (int i = 0; i < 12; ++i) {
        m->append(3 + (i * 37) % 290, logits);
        ASSERT_TRUE(inf.memory_slots_consistent()) << "step " << i;
        for (int32_t l = 0; l < 3; ++l)
            for (int32_t g = 0; g < 2; ++g) {
                auto r = inf.retrieved(l, g);
                std::sort(r.begin(), r.end());
                ASSERT_EQ(r.size(), 2u);
                ASSERT_LT(r[0], r[1]);
            }
    }
    EXPECT_GT(inf.block_copies(), copies0);   // retrieval did change
    EXPECT_EQ(m->context_tokens().size(), 8u + 40u + query.size() + 12);
}

TEST(InfllmMethod, SecondQuestionAfterDecodingEqualsFreshSession) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(300, 41), q1 = random_tokens(8, 42), q2 = random_tokens(5, 43);
    const auto sp = infllm_params(8, 32, 16, 48, 48);
    auto a = make_infllm_method(*t.model, pool, sp), b = make_infllm_method(*t.model, pool, sp);
    feed_all(*a, doc, 300);
    feed_all(*b, doc, 300);
    answer(*a, q1, {10, 11, 12, 13});
    const std::vector<int32_t> steps = {20, 21};
    const auto la = answer(*a, q2, steps), lb = answer(*b, q2, steps);
    for (size_t i = 0; i < la.size(); ++i) EXPECT_LT(rel_diff(la[i], lb[i]), 1e-6) << "step " << i;
    EXPECT_EQ(a->context_tokens(), b->context_tokens());
}

TEST(InfllmMethod, SelectDuringDecodingKeepsTheAnswer) {
    // A select that is cancelled leaves the previous answer decodable.
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(200, 51), q1 = random_tokens(6, 52), q2 = random_tokens(6, 53);
    const auto sp = infllm_params(8, 32, 16, 48, 48);
    auto a = make_infllm_method(*t.model, pool, sp), b = make_infllm_method(*t.model, pool, sp);
    feed_all(*a, doc, 200);
    feed_all(*b, doc, 200);
    const auto la = answer(*a, q1, {30, 31, 32});
    answer(*b, q1, {30, 31});
    Cancel c;
    Progress p = c.progress(1);
    EXPECT_THROW(b->select(q2, p), Error);
    std::vector<float> lb;
    b->append(32, lb);
    EXPECT_LT(rel_diff(la.back(), lb), 1e-6);
}

TEST(InfllmMethod, CancelledFeedAndRecomputeStayConsistent) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    const auto doc = random_tokens(300, 61), query = random_tokens(7, 62);
    const auto sp = infllm_params(8, 32, 16, 48, 48);
    auto ref = make_infllm_method(*t.model, pool, sp);
    feed_all(*ref, doc, 300);
    const auto want = answer(*ref, query, {3, 4});

    auto m = make_infllm_method(*t.model, pool, sp);
    Cancel c;
    Progress p = c.progress(5);   // stops inside the feed, after some chunks
    try {
        m->feed(doc.data(), doc.size(), p);
        FAIL() << "feed was not cancelled";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CANCELLED);
    }
    const int64_t kept = m->n_fed();
    EXPECT_EQ(kept % 48, 0);
    EXPECT_LT(kept, 300);
    EXPECT_EQ(dynamic_cast<InfllmMethod &>(*m).n_encoded(), kept);
    std::vector<int32_t> rest(doc.begin() + kept, doc.end());
    feed_all(*m, rest, 41);

    Progress p2 = c.progress(1);
    Selection s;
    s.query = query;
    std::vector<float> logits;
    EXPECT_THROW(m->recompute(s, p2, logits), Error);
    const auto got = answer(*m, query, {3, 4});
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "step " << i;
}

TEST(InfllmMethod, EmptyDocumentAndFullDecodeCache) {
    Tiny t;
    auto pool_owner = make_cpu_backend(2);
    Backend &pool = *pool_owner;
    auto sp = infllm_params(8, 32, 16, 48, 48);
    sp.n_ctx = 10;   // question + answer
    auto m = make_infllm_method(*t.model, pool, sp);
    feed_all(*m, {}, 1);
    EXPECT_EQ(m->n_fed(), 0);
    const auto q = random_tokens(8, 71);
    auto l = answer(*m, q, {5, 6});
    for (float x : l.back()) ASSERT_TRUE(std::isfinite(x));
    std::vector<float> logits;
    try {
        m->append(7, logits);
        FAIL() << "the decode cache should be full";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CONTEXT_FULL);
    }
    EXPECT_EQ(m->context_tokens().size(), 10u);
    // A new question still works after the full answer.
    l = answer(*m, q, {});
    EXPECT_EQ(m->context_tokens().size(), 8u);
}

TEST(InfllmMethod, BadParamsRefused) {
    Tiny t;
    auto pool_owner = make_cpu_backend(1);
    Backend &pool = *pool_owner;
    auto refused = [&](const lctx_session_params &p) {
        try {
            make_infllm_method(*t.model, pool, p);
        } catch (const Error &e) {
            return e.status() == LCTX_ERR_INVALID_ARG;
        }
        return false;
    };
    auto base = infllm_params(8, 32, 16, 48, 48);
    EXPECT_NO_THROW(make_infllm_method(*t.model, pool, base));
    auto p = base;
    p.infllm_p.block = -4;
    EXPECT_TRUE(refused(p));
    p = base;
    p.infllm_p.repr = 17;   // more than the block
    EXPECT_TRUE(refused(p));
    p = base;
    p.infllm_p.repr = -1;
    EXPECT_TRUE(refused(p));
    p = base;
    p.kv_p.budget = 15;     // less than one block
    EXPECT_TRUE(refused(p));
    p = base;
    p.kv_p.chunk = -1;
    EXPECT_TRUE(refused(p));
    p = base;
    p.kv_p.obs = -2;
    EXPECT_TRUE(refused(p));
    p = base;
    p.kv_p.budget = 1 << 30;
    EXPECT_TRUE(refused(p));
}

TEST(InfllmMethod, DefaultsFollowTheTrainedContext) {
    Tiny t;   // n_ctx_train 4096
    session_test::SessionParams p;
    p.method = LCTX_METHOD_INFLLM;
    const InfllmParams ip = infllm_params_from(t.model->hparams(), p);
    EXPECT_EQ(ip.block, 128);
    EXPECT_EQ(ip.repr, 4);
    EXPECT_EQ(ip.memory, 1024);
    EXPECT_EQ(ip.window, 1024);
    EXPECT_EQ(ip.sink, 128);
    EXPECT_EQ(ip.chunk, 512);
    EXPECT_EQ(ip.obs, 128);
    EXPECT_EQ(ip.n_ctx, 4096 - (128 + 1024 + 1024 + 127));
    p.kv_p.budget = 300;   // rounds down to whole blocks
    EXPECT_EQ(infllm_params_from(t.model->hparams(), p).memory, 256);
}

// Top-k and block scores against brute force on random arrays.
TEST(InfllmBlocks, TopIndicesMatchSort) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int n = 1 + int(rng() % 60), r = int(rng() % 70);
        std::vector<float> s(static_cast<size_t>(n));
        for (float &x : s) x = float(int(rng() % 9)) - 4.0f;   // many ties
        std::vector<int64_t> order(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
        order.resize(static_cast<size_t>(std::min(n, r)));
        std::sort(order.begin(), order.end());
        EXPECT_EQ(infllm_top_indices(s.data(), n, r), order);
    }
}

TEST(InfllmBlocks, ScoresMatchBruteForce) {
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int32_t D = 8, n_head = 6, n_kv = 2, ng = n_head / n_kv, B = 10, R = 3, n_blocks = 7, n_q = 5;
    std::vector<float> q(static_cast<size_t>(n_q * n_head * D));
    for (float &x : q) x = nd(rng);
    std::vector<uint16_t> keys(static_cast<size_t>(n_blocks * B * D));
    for (auto &k : keys) k = fp32_to_fp16(nd(rng));
    std::vector<float> attn(static_cast<size_t>(n_blocks * B));
    for (float &a : attn) a = std::fabs(nd(rng));
    for (int32_t g = 0; g < n_kv; ++g) {
        std::vector<float> kbar(static_cast<size_t>(n_blocks * D)), got(static_cast<size_t>(n_blocks));
        for (int b = 0; b < n_blocks; ++b)
            infllm_repr_key(keys.data() + b * B * D, D, attn.data() + b * B, B, R, D, kbar.data() + b * D);
        infllm_block_scores(q.data(), n_head * D, n_q, g * ng, ng, D, kbar.data(), n_blocks, got.data());
        for (int b = 0; b < n_blocks; ++b) {
            // Representatives: the R most attended tokens of the block.
            std::vector<int> idx(B);
            for (int i = 0; i < B; ++i) idx[i] = i;
            std::sort(idx.begin(), idx.end(), [&](int x, int y) { return attn[b * B + x] > attn[b * B + y]; });
            double want = 0;
            for (int i = 0; i < n_q; ++i)
                for (int h = g * ng; h < (g + 1) * ng; ++h)
                    for (int r = 0; r < R; ++r)
                        for (int d = 0; d < D; ++d)
                            want += double(q[(i * n_head + h) * D + d]) *
                                    fp16_to_fp32(keys[(b * B + idx[r]) * D + d]);
            want /= R;
            EXPECT_NEAR(got[b], want, 1e-4 * (1.0 + std::fabs(want))) << "g " << g << " block " << b;
        }
        // Top-k of the scores equals the brute-force ranking.
        std::vector<int64_t> top = infllm_top_indices(got.data(), n_blocks, 3);
        EXPECT_EQ(top.size(), 3u);
        for (int64_t b : top)
            for (int64_t o = 0; o < n_blocks; ++o)
                if (std::find(top.begin(), top.end(), o) == top.end()) EXPECT_GE(got[b], got[o]);
    }
}
