// REFORM's pure parts against brute-force references on random arrays:
// H2O eviction, scoring, max-pooling, top-k selection, query mask, JSON
// head profiles and parameter validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "session/evictor_h2o.h"
#include "session/hash64.h"
#include "session/head_profile.h"
#include "common/json.h"
#include "session/reform_params.h"
#include "session/selector.h"
#include "session_test_util.h"

using namespace lctx;

namespace {

// Brute force H2O: sort every unprotected slot by (score desc, orig desc).
std::vector<int64_t> h2o_brute(const std::vector<float> &score, const std::vector<int64_t> &orig, int64_t budget,
                               int64_t sink, int64_t recent) {
    const int64_t n = static_cast<int64_t>(score.size());
    if (n <= budget) {
        std::vector<int64_t> all(n);
        for (int64_t i = 0; i < n; ++i) all[i] = i;
        return all;
    }
    std::set<int64_t> keep;
    std::vector<int64_t> others;
    for (int64_t s = 0; s < n; ++s) {
        if (orig[s] < sink || s >= n - recent) keep.insert(s);
        else others.push_back(s);
    }
    std::stable_sort(others.begin(), others.end(), [&](int64_t a, int64_t b) {
        return score[a] > score[b] || (score[a] == score[b] && orig[a] > orig[b]);
    });
    for (int64_t s : others) {
        if (static_cast<int64_t>(keep.size()) >= budget) break;
        keep.insert(s);
    }
    return {keep.begin(), keep.end()};
}

} // namespace

TEST(ReformEvictor, MatchesBruteForceOnRandomArrays) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = 1 + rng() % 400, budget = 8 + rng() % 200;
        const int64_t sink = rng() % 4 ? rng() % (budget / 3) : 0, recent = rng() % (budget / 3);
        std::vector<float> score(n);
        std::vector<int64_t> orig(n);
        int64_t o = 0;
        for (int64_t s = 0; s < n; ++s) {
            o += 1 + (trial % 2 ? rng() % 5 : 0);   // gaps after earlier evictions
            orig[s] = s < 3 ? s : o;
            // Coarse values make ties frequent, so the tie rule is exercised.
            score[s] = trial % 3 == 0 ? float(rng() % 7) : std::uniform_real_distribution<float>(0, 10)(rng);
        }
        auto got = h2o_keep(score.data(), orig.data(), n, budget, sink, recent);
        auto want = h2o_brute(score, orig, budget, sink, recent);
        ASSERT_EQ(got, want) << "trial " << trial;
        EXPECT_EQ(static_cast<int64_t>(got.size()), std::min(n, budget));
        for (int64_t s = std::max<int64_t>(0, n - recent); s < n && n > budget; ++s)
            EXPECT_TRUE(std::binary_search(got.begin(), got.end(), s));
    }
}

TEST(ReformSelector, ScoreMatchesDoubleReference) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const int32_t heads = 4, d = 16, D = heads * d;
    const int64_t n = 5000, nq = 7;
    auto unit_blocks = [&](std::vector<float> &v) {
        for (size_t r = 0; r < v.size() / D; ++r)
            for (int h = 0; h < heads; ++h) {
                double ss = 0;
                for (int i = 0; i < d; ++i) ss += double(v[r * D + h * d + i]) * v[r * D + h * d + i];
                for (int i = 0; i < d; ++i) v[r * D + h * d + i] = float(v[r * D + h * d + i] / std::sqrt(ss));
            }
    };
    std::vector<float> ef(n * D), q(nq * D);
    for (float &x : ef) x = nd(rng);
    for (float &x : q) x = nd(rng);
    unit_blocks(ef);
    unit_blocks(q);
    std::vector<uint16_t> e(ef.size());
    for (size_t i = 0; i < e.size(); ++i) e[i] = fp32_to_fp16(ef[i]);
    auto pool = make_cpu_backend(2), single = make_cpu_backend(1);
    std::vector<float> s(n), s1(n), s_port(n);
    score_tokens(e.data(), n, D, q.data(), nq, heads, s.data(), pool.get());
    score_tokens(e.data(), n, D, q.data(), nq, heads, s1.data(), single.get());
    EXPECT_EQ(s, s1);   // thread count does not change scores
    score_tokens(e.data(), n, D, q.data(), nq, heads, s_port.data(), nullptr);   // the portable loop
    for (int64_t t = 0; t < n; ++t) {
        double best = -1e30;
        for (int64_t u = 0; u < nq; ++u) {
            double acc = 0;
            for (int i = 0; i < D; ++i) acc += double(fp16_to_fp32(e[t * D + i])) * q[u * D + i];
            best = std::max(best, acc / heads);
        }
        ASSERT_NEAR(s_port[t], best, 1e-5) << t;
    }
    for (int64_t t = 0; t < n; ++t) {
        double best = -1e30;
        for (int64_t u = 0; u < nq; ++u) {
            double acc = 0;
            for (int i = 0; i < D; ++i) acc += double(fp16_to_fp32(e[t * D + i])) * q[u * D + i];
            best = std::max(best, acc / heads);
        }
        ASSERT_NEAR(s[t], best, 1e-5) << t;
        ASSERT_LE(std::fabs(s[t]), 1.0 + 2e-3);   // a mean cosine
    }
    // A token identical to a query token scores 1 (up to fp16).
    std::vector<uint16_t> same(D);
    for (int i = 0; i < D; ++i) same[i] = fp32_to_fp16(q[2 * D + i]);
    float one = 0;
    score_tokens(same.data(), 1, D, q.data(), nq, heads, &one, nullptr);
    EXPECT_NEAR(one, 1.0f, 2e-3);
}

// The SIMD scoring (CpuBackend::max_dot_f16) selects exactly the tokens the
// portable loop (the scoring before it) selects, on a fixed index the shape
// of SmolLM2's (4 heads of 64) with REFORM's default gather parameters.
TEST(ReformSelector, FastScoringSelectsAsPortable) {
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int32_t heads = 4, d = 64, D = heads * d;
    const int64_t n = 100000, nq = 32;
    auto unit = [&](std::vector<float> &v) {
        for (size_t b = 0; b < v.size() / d; ++b) {
            double ss = 0;
            for (int i = 0; i < d; ++i) ss += double(v[b * d + i]) * v[b * d + i];
            for (int i = 0; i < d; ++i) v[b * d + i] = float(v[b * d + i] / std::sqrt(ss));
        }
    };
    std::vector<float> ef(static_cast<size_t>(n * D)), q(static_cast<size_t>(nq * D));
    for (float &x : ef) x = u(rng);
    for (float &x : q) x = u(rng);
    unit(ef);
    unit(q);
    std::vector<uint16_t> e(ef.size());
    for (size_t i = 0; i < e.size(); ++i) e[i] = fp32_to_fp16(ef[i]);
    auto be = make_cpu_backend(2);
    std::vector<float> s_fast(n), s_port(n), p_fast(n), p_port(n);
    score_tokens(e.data(), n, D, q.data(), nq, heads, s_fast.data(), be.get());
    score_tokens(e.data(), n, D, q.data(), nq, heads, s_port.data(), nullptr);
    max_pool(s_fast.data(), n, 64, p_fast.data());
    max_pool(s_port.data(), n, 64, p_port.data());
    const auto sel_fast = select_top(s_fast.data(), p_fast.data(), n, 4096, 256, 256);
    const auto sel_port = select_top(s_port.data(), p_port.data(), n, 4096, 256, 256);
    ASSERT_EQ(sel_fast.size(), 4096u);
    EXPECT_EQ(sel_fast, sel_port);
}

TEST(ReformSelector, MaxPoolMatchesNaive) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = 1 + rng() % 600, half = rng() % 70;
        std::vector<float> s(n), p(n);
        for (float &x : s) x = trial % 2 ? float(rng() % 5) : std::uniform_real_distribution<float>(-1, 1)(rng);
        max_pool(s.data(), n, half, p.data());
        for (int64_t t = 0; t < n; ++t) {
            float m = -2;
            for (int64_t j = std::max<int64_t>(0, t - half); j <= std::min(n - 1, t + half); ++j) m = std::max(m, s[j]);
            ASSERT_EQ(p[t], m) << "trial " << trial << " t " << t;
        }
    }
}

TEST(ReformSelector, TopKMatchesBruteForceAndIsNested) {
    std::mt19937 rng(5);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = 1 + rng() % 800, first = rng() % 40, last = rng() % 40;
        const int64_t budget = first + last + 1 + rng() % 300;
        std::vector<float> s(n), p(n);
        for (int64_t t = 0; t < n; ++t) {
            s[t] = float(rng() % 9) / 8.0f;
            p[t] = std::max(s[t], float(rng() % 9) / 8.0f);
        }
        auto got = select_top(s.data(), p.data(), n, budget, first, last);
        // Brute force: full sort of the unforced tokens.
        std::vector<int64_t> want;
        if (n <= budget) {
            for (int64_t t = 0; t < n; ++t) want.push_back(t);
        } else {
            std::vector<int64_t> rest;
            for (int64_t t = 0; t < n; ++t) {
                if (t < first || t >= n - last) want.push_back(t);
                else rest.push_back(t);
            }
            std::sort(rest.begin(), rest.end(), [&](int64_t a, int64_t b) {
                if (p[a] != p[b]) return p[a] > p[b];
                if (s[a] != s[b]) return s[a] > s[b];
                return a < b;
            });
            for (int64_t t : rest) {
                if (static_cast<int64_t>(want.size()) >= budget) break;
                want.push_back(t);
            }
            std::sort(want.begin(), want.end());
        }
        ASSERT_EQ(got, want) << "trial " << trial;
        ASSERT_EQ(static_cast<int64_t>(got.size()), std::min(n, budget));
        // Nested in the budget.
        auto bigger = select_top(s.data(), p.data(), n, budget + 17, first, last);
        EXPECT_TRUE(std::includes(bigger.begin(), bigger.end(), got.begin(), got.end()));
    }
}

// Brute force of mark_repeats: compare every window with every earlier one.
static std::vector<uint8_t> naive_repeats(const std::vector<int32_t> &ids, int64_t w) {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<uint8_t> out(static_cast<size_t>(n), 0);
    if (w < 2) return out;
    auto occurs_before = [&](int64_t start) {   // the window [start, start + w) occurs at an earlier start
        for (int64_t u = 0; u < start; ++u)
            if (std::equal(ids.begin() + start, ids.begin() + start + w, ids.begin() + u)) return true;
        return false;
    };
    for (int64_t t = 0; t < n; ++t) {
        const bool left = t - w + 1 >= 0 && occurs_before(t - w + 1);
        const bool right = t + w <= n && occurs_before(t);
        out[static_cast<size_t>(t)] = left || right;
    }
    return out;
}

TEST(ReformSelector, MarkRepeatsMatchesBruteForce) {
    std::mt19937 rng(23);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = rng() % 400, w = rng() % 12;
        const int32_t vocab = 2 + static_cast<int32_t>(rng() % (trial % 3 == 0 ? 3 : 50));   // tiny vocabularies repeat by chance
        std::vector<int32_t> ids;
        while (static_cast<int64_t>(ids.size()) < n) {
            if (!ids.empty() && rng() % 4 == 0) {   // copy an earlier piece: repeated text
                const size_t from = rng() % ids.size(), len = 1 + rng() % 40;
                for (size_t i = 0; i < len && static_cast<int64_t>(ids.size()) < n; ++i)
                    ids.push_back(ids[std::min(from + i, ids.size() - 1)]);
            } else {
                ids.push_back(static_cast<int32_t>(rng() % vocab) - (trial % 5 == 0 ? vocab / 2 : 0));
            }
        }
        ASSERT_EQ(mark_repeats(ids.data(), n, w), naive_repeats(ids, w)) << "trial " << trial << " n " << n << " w " << w;
    }
}

TEST(ReformSelector, RepeatedParagraphRanksOnceAndTheNeedleIsGathered) {
    // Three copies of a 60-token paragraph that scores 0.9, one 10-token needle
    // scoring 0.8, noise at 0.1, pooling 30 each side: without the filter the
    // budget goes to the copies of the paragraph (360 tokens pool to 0.9);
    // with it, to the paragraph's first copy and the needle.
    std::mt19937 rng(3);
    std::vector<int32_t> para(60), ids;
    for (int32_t &x : para) x = 1000 + static_cast<int32_t>(rng() % 1000);
    std::vector<float> s;
    auto noise = [&](int k) { for (int i = 0; i < k; ++i) { ids.push_back(static_cast<int32_t>(ids.size()) + 5000); s.push_back(0.1f); } };
    auto paragraph = [&] { for (int32_t x : para) { ids.push_back(x); s.push_back(0.9f); } };
    noise(100); paragraph(); noise(100); paragraph(); noise(50);
    const int64_t needle = static_cast<int64_t>(ids.size());
    for (int i = 0; i < 10; ++i) { ids.push_back(9000 + i); s.push_back(0.8f); }
    noise(100); paragraph(); noise(100);
    const int64_t n = static_cast<int64_t>(ids.size());
    const auto rep = mark_repeats(ids.data(), n, 16);
    for (int64_t t = 0; t < 160; ++t) EXPECT_EQ(rep[t], 0) << t;   // the first copy and what precedes it
    for (int64_t t = needle; t < needle + 10; ++t) EXPECT_EQ(rep[t], 0) << t;
    for (int64_t t = 260; t < 320; ++t) EXPECT_EQ(rep[t], 1) << t;   // the second copy, whole
    const int64_t budget = 190;   // the 120 tokens pooled from one copy + 70 from the needle
    auto pick = [&](const std::vector<float> &sc) {
        std::vector<float> p(static_cast<size_t>(n));
        max_pool(sc.data(), n, 30, p.data());
        return select_top(sc.data(), p.data(), n, budget, 0, 0);
    };
    auto has = [](const std::vector<int64_t> &sel, int64_t t) { return std::binary_search(sel.begin(), sel.end(), t); };
    const auto plain = pick(s);
    EXPECT_FALSE(has(plain, needle));
    const auto filtered = pick(demote_repeats(s, rep));
    for (int64_t t = needle; t < needle + 10; ++t) EXPECT_TRUE(has(filtered, t)) << t;
    EXPECT_TRUE(has(filtered, 130));   // inside the first copy
    EXPECT_FALSE(has(filtered, 290));  // inside the second
    // No marks: the scores are unchanged.
    EXPECT_EQ(demote_repeats(s, std::vector<uint8_t>(s.size(), 0)), s);
}

TEST(ReformSelector, ForcedRangesOverBudgetShareItBetweenTheEnds) {
    std::mt19937 rng(17);
    for (int trial = 0; trial < 300; ++trial) {
        const int64_t n = 2 + rng() % 500, first = rng() % 300, last = rng() % 300;
        const int64_t f = std::min(first, n), n_last = n - std::max(f, n - last);
        if (f + n_last <= 1) continue;
        const int64_t budget = 1 + rng() % (f + n_last - 1);   // forced > budget
        if (n <= budget) continue;
        std::vector<float> s(n), p(n);
        for (int64_t t = 0; t < n; ++t) s[t] = p[t] = float(rng() % 9);
        auto got = select_top(s.data(), p.data(), n, budget, first, last);
        ASSERT_EQ(static_cast<int64_t>(got.size()), budget) << trial;
        // Count how many come from each end; none from the middle.
        int64_t from_first = 0, from_last = 0;
        for (int64_t t : got) {
            if (t < f) ++from_first;
            else if (t >= n - n_last) ++from_last;
            else FAIL() << "middle token " << t << " kept, trial " << trial;
        }
        // Each end keeps its prefix/suffix (contiguous at the boundaries).
        for (int64_t i = 0; i < from_first; ++i) ASSERT_EQ(got[i], i);
        for (int64_t i = 0; i < from_last; ++i) ASSERT_EQ(got[got.size() - 1 - i], n - 1 - i);
        // Balanced: an end gets less than half only when it is shorter than half.
        const int64_t half = budget / 2;
        EXPECT_EQ(from_first, std::min(f, std::max(half, budget - n_last))) << trial;
        EXPECT_EQ(from_last, budget - from_first) << trial;
        EXPECT_GE(from_last, std::min(n_last, budget - half)) << trial;
    }
    // The case that was wrong before: 256 + 256 forced, budget 100.
    std::vector<float> s(4000, 0.0f);
    auto got = select_top(s.data(), s.data(), 4000, 100, 256, 256);
    ASSERT_EQ(got.size(), 100u);
    EXPECT_EQ(got.front(), 0);
    EXPECT_EQ(got[49], 49);
    EXPECT_EQ(got[50], 4000 - 50);
    EXPECT_EQ(got.back(), 3999);
}

TEST(ReformProfile, JsonRoundTripAndErrors) {
    HeadProfile p;
    p.name = "test \"quoted\"\n";
    p.model_shape = "llama:L4";
    p.heads = {{3, HeadKind::V, 1}, {1, HeadKind::Q, 2}, {2, HeadKind::K, 0}};
    const std::string js = head_profile_json(p, "  \"mnr\": {\"rows\": [[0, \"Q\", 1, 0.5]]}");
    HeadProfile q = parse_head_profile(js, "mem");
    EXPECT_EQ(q.name, p.name);
    EXPECT_EQ(q.model_shape, p.model_shape);
    EXPECT_EQ(q.heads, p.heads);
    EXPECT_EQ(q.exit_layer(), 3);
    EXPECT_EQ(q.heads_string(), "V1@L3,Q2@L1,K0@L2");
    for (const char *bad : {"", "{", "[]", "{\"format\": \"lctx-head-profile\", \"version\": 1}",
                            "{\"format\": \"lctx-head-profile\", \"version\": 2, \"heads\": []}",
                            "{\"format\": \"lctx-head-profile\", \"version\": 1, \"heads\": [{\"layer\": 1}]}",
                            "{\"format\": \"lctx-head-profile\", \"version\": 1, \"heads\": [{\"layer\": -1, "
                            "\"kind\": \"V\", \"head\": 0}]}",
                            "{\"format\": \"lctx-head-profile\", \"version\": 1, \"heads\": [{\"layer\": 1, "
                            "\"kind\": \"X\", \"head\": 0}]}",
                            "{\"format\": \"x\", \"version\": 1, \"heads\": [{\"layer\": 1, \"kind\": \"V\", "
                            "\"head\": 0}]} trailing"}) {
        try {
            parse_head_profile(bad, "bad");
            ADD_FAILURE() << "accepted: " << bad;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_FORMAT) << bad;
        }
    }
    Hparams hp;
    hp.arch = "llama";
    hp.n_layer = 4;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    validate_head_profile(q, hp);
    q.heads.push_back({4, HeadKind::V, 0});
    EXPECT_THROW(validate_head_profile(q, hp), Error);
    q.heads.back() = {1, HeadKind::K, 2};   // only 2 KV heads
    EXPECT_THROW(validate_head_profile(q, hp), Error);
    HeadProfile fb = fallback_head_profile(hp);
    EXPECT_FALSE(fb.heads.empty());
    validate_head_profile(fb, hp);
}

TEST(ReformProfile, JsonParserEscapes) {
    json::Value v = json::parse(R"({"a": "x\u00e9\ud83d\ude00\n", "b": [1, -2.5e3, true, null]})");
    EXPECT_EQ(v.find("a")->str, "x\xC3\xA9\xF0\x9F\x98\x80\n");
    EXPECT_EQ(v.find("b")->arr[1].num, -2500.0);
    EXPECT_EQ(json::parse(json::quote("a\"b\\c\x01")).str, "a\"b\\c\x01");
    std::string deep(200, '[');
    EXPECT_THROW(json::parse(deep), Error);
}

TEST(ReformParams, DefaultsForAn8KModelAndRefusals) {
    Hparams hp;
    hp.n_ctx_train = 8192;
    lctx_session_params sp{};
    ReformParams p = reform_params_from(hp, sp);
    EXPECT_EQ(p.chunk, 2048);
    EXPECT_EQ(p.budget, 2048);
    EXPECT_EQ(p.recompute, 4096);
    EXPECT_EQ(p.sink, 256);
    EXPECT_EQ(p.recent, 256);
    EXPECT_EQ(p.obs, 128);
    EXPECT_EQ(p.keep_first, 256);
    EXPECT_EQ(p.keep_last, 256);
    EXPECT_EQ(p.pool_half, 64);
    EXPECT_EQ(p.n_ctx, 8192);
    auto refused = [&](const lctx_session_params &s) {
        try {
            reform_params_from(hp, s);
            return false;
        } catch (const Error &e) {
            return e.status() == LCTX_ERR_INVALID_ARG;
        }
    };
    session_test::SessionParams s;
    lctx_reform_params &r = s.reform_p;
    const lctx_reform_params r0 = r;
    r.sink = 1024; r.recent = 1024;                          // S0 + Wr >= B
    EXPECT_TRUE(refused(s));
    r = r0; r.keep_first = 2048; r.keep_last = 2048;         // F + T >= R
    EXPECT_TRUE(refused(s));
    r = r0; r.recompute = 8192;                              // R >= n_ctx
    EXPECT_TRUE(refused(s));
    r = r0; r.chunk = 64; r.obs = 65;                        // Wobs > C
    EXPECT_TRUE(refused(s));
    r = r0; r.chunk = 64; r.budget = 48; r.sink = 8; r.recent = 8;
    r.obs = 16; r.pool_half = 4;
    ReformParams small = reform_params_from(hp, s);
    EXPECT_EQ(small.budget, 48);
    EXPECT_EQ(small.pool_half, 4);
}

TEST(ReformHash, StreamingEqualsOneShotAndDetectsChanges) {
    std::vector<uint8_t> data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 31 + 7);
    Hash64 a, b;
    a.update(data.data(), data.size());
    for (size_t i = 0; i < data.size();) {
        size_t n = std::min<size_t>(1 + i % 13, data.size() - i);
        b.update(data.data() + i, n);
        i += n;
    }
    EXPECT_EQ(a.digest(), b.digest());
    for (size_t pos : {0u, 7u, 500u, 999u}) {
        auto d = data;
        d[pos] ^= 1;
        Hash64 c;
        c.update(d.data(), d.size());
        EXPECT_NE(c.digest(), a.digest());
    }
}
