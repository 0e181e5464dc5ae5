// The probe of `lctx run --probe` (tools/probe.cpp) against brute force:
// text spans from a per-byte owner map of the pieces, ranks from a full sort
// of every token, gathered counts and the lowest selected score from plain
// loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "probe.h"

using namespace lctx::cli;

namespace {

// Brute force: the owner token of every byte of the joined pieces; an
// occurrence's span runs from the owner of its first byte to that of its last.
std::vector<TokenSpan> spans_brute(const std::vector<std::string> &pieces, const std::string &text) {
    std::string all;
    std::vector<int64_t> owner;
    for (size_t i = 0; i < pieces.size(); ++i)
        for (char c : pieces[i]) all += c, owner.push_back(int64_t(i));
    std::vector<TokenSpan> out;
    if (text.empty()) return out;
    for (size_t at = 0; at + text.size() <= all.size();) {
        if (all.compare(at, text.size(), text) == 0) {
            out.push_back({owner[at], owner[at + text.size() - 1] + 1});
            at += text.size();
        } else {
            ++at;
        }
    }
    return out;
}

TEST(CliProbe, TextSpansMatchByteOwnership) {
    std::mt19937 rng(3);
    const std::vector<std::string> vocab = {"a", "b", "ab", "ba", "", "aab", " ", "b a", "\xc3\xa9"};
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<std::string> pieces(1 + rng() % 40);
        for (auto &p : pieces) p = vocab[rng() % vocab.size()];
        std::string text;
        const size_t len = 1 + rng() % 4;
        for (size_t i = 0; i < len; ++i) text += "ab "[rng() % 3];
        const auto got = find_text_spans(pieces, text), want = spans_brute(pieces, text);
        ASSERT_EQ(got.size(), want.size()) << "trial " << trial;
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].begin, want[i].begin) << "trial " << trial;
            EXPECT_EQ(got[i].end, want[i].end) << "trial " << trial;
        }
    }
}

TEST(CliProbe, TextSpansOfAPhraseAndAMiss) {
    const std::vector<std::string> pieces = {"<s>", "", " The", " magic", " number", " is", " 12", "34", "."};
    const auto sp = find_text_spans(pieces, "number is 1234");
    ASSERT_EQ(sp.size(), 1u);
    EXPECT_EQ(sp[0].begin, 4);
    EXPECT_EQ(sp[0].end, 8);
    EXPECT_TRUE(find_text_spans(pieces, "numbers").empty());
    EXPECT_TRUE(find_text_spans(pieces, "").empty());
    EXPECT_TRUE(find_text_spans({}, "x").empty());
}

// The rank of token t in a full sort of all tokens by `before`.
template <class Less>
int64_t rank_brute(int64_t n, int64_t t, Less before) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
    std::stable_sort(order.begin(), order.end(), before);
    return std::find(order.begin(), order.end(), t) - order.begin() + 1;
}

TEST(CliProbe, RanksAndCountsMatchBruteForce) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t n = 20 + rng() % 200;
        SelectScores sc;
        // Few distinct values: many ties, some NaN.
        for (int64_t t = 0; t < n; ++t) {
            sc.raw.push_back(rng() % 13 == 0 ? NAN : float(rng() % 7) / 7.0f);
            sc.ranked.push_back(rng() % 17 == 0 ? NAN : float(rng() % 5) / 5.0f);
        }
        sc.forced_first = rng() % 4;
        sc.forced_last = rng() % 4;
        for (int64_t t = 0; t < n; ++t)
            if (t < sc.forced_first || t >= n - sc.forced_last || rng() % 3 == 0) sc.selected.push_back(t);
        std::vector<TokenSpan> spans;
        for (int k = 1 + rng() % 3; k > 0; --k) {
            const int64_t b = rng() % n;
            spans.push_back({b, std::min<int64_t>(n, b + 1 + rng() % 6)});
        }
        const ProbeReport r = probe_selection(sc, spans);

        auto k = [](float v) { return std::isnan(v) ? -INFINITY : v; };
        auto before = [&](int64_t a, int64_t b) {
            if (k(sc.ranked[a]) != k(sc.ranked[b])) return k(sc.ranked[a]) > k(sc.ranked[b]);
            if (k(sc.raw[a]) != k(sc.raw[b])) return k(sc.raw[a]) > k(sc.raw[b]);
            return a < b;
        };
        auto raw_before = [&](int64_t a, int64_t b) {
            return k(sc.raw[a]) != k(sc.raw[b]) ? k(sc.raw[a]) > k(sc.raw[b]) : a < b;
        };
        // The best span token in each order, and its rank by a full sort.
        int64_t best = -1, best_raw = -1, tokens = 0, gathered = 0;
        for (const TokenSpan &s : spans) {
            int64_t g = 0;
            for (int64_t t = s.begin; t < s.end; ++t) {
                if (best < 0 || before(t, best)) best = t;
                if (best_raw < 0 || raw_before(t, best_raw)) best_raw = t;
                g += std::count(sc.selected.begin(), sc.selected.end(), t);
            }
            tokens += s.end - s.begin;
            gathered += g;
        }
        ASSERT_EQ(r.spans.size(), spans.size());
        for (size_t i = 0; i < spans.size(); ++i) {
            int64_t g = 0;
            for (int64_t t = spans[i].begin; t < spans[i].end; ++t)
                g += std::count(sc.selected.begin(), sc.selected.end(), t);
            EXPECT_EQ(r.spans[i].n_gathered, g);
        }
        EXPECT_EQ(r.n_tokens, tokens);
        EXPECT_EQ(r.n_gathered, gathered);
        EXPECT_EQ(r.best_pos, best);
        EXPECT_EQ(r.rank, rank_brute(n, best, before)) << "trial " << trial;
        EXPECT_EQ(r.best_raw_pos, best_raw);
        EXPECT_EQ(r.raw_rank, rank_brute(n, best_raw, raw_before)) << "trial " << trial;
        EXPECT_EQ(r.n_scored, n);
        // Lowest selected (forced ends left out) and highest overall.
        float lo = INFINITY, hi = -INFINITY, hi_raw = -INFINITY;
        bool any = false;
        for (int64_t t : sc.selected)
            if (t >= sc.forced_first && t < n - sc.forced_last) lo = std::min(lo, k(sc.ranked[t])), any = true;
        for (int64_t t = 0; t < n; ++t) hi = std::max(hi, k(sc.ranked[t])), hi_raw = std::max(hi_raw, k(sc.raw[t]));
        EXPECT_EQ(r.has_lowest, any);
        if (any) EXPECT_EQ(r.lowest_selected, lo);
        EXPECT_EQ(r.highest_ranked, hi);
        EXPECT_EQ(r.highest_raw, hi_raw);
    }
}

TEST(CliProbe, JsonSaysNotFound) {
    SelectScores sc;
    sc.raw = {0.1f, 0.2f};
    sc.ranked = {0.2f, 0.2f};
    sc.selected = {0, 1};
    sc.forced_first = 2;
    const std::string j = probe_json("needle", probe_selection(sc, {}));
    EXPECT_NE(j.find("\"found\": false"), std::string::npos) << j;
    EXPECT_NE(j.find("\"lowest_selected_score\": null"), std::string::npos) << j;
    EXPECT_EQ(j.find("\"rank\""), std::string::npos) << j;
    const std::string k = probe_json("x", probe_selection(sc, {{1, 2}}));
    EXPECT_NE(k.find("\"found\": true"), std::string::npos) << k;
    EXPECT_NE(k.find("\"rank\": 1"), std::string::npos) << k;   // tied ranked scores: the higher raw one first
}

} // namespace
