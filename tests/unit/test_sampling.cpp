// Sampler semantics on distributions whose answers are known by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/error.h"
#include "session/sampler.h"

using namespace lctx;

namespace {

lctx_sampling_params defaults() {
    lctx_sampling_params p{};
    p.struct_size = sizeof p;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 1;
    return p;
}

// logits = log(probabilities): softmax gives the probabilities back.
std::vector<float> logits_of(const std::vector<double> &probs) {
    std::vector<float> l;
    for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
    return l;
}

const std::vector<double> kProbs = {0.1, 0.5, 0.15, 0.25};  // sorted: 1, 3, 2, 0

std::map<int32_t, float> as_map(const std::vector<Candidate> &c) {
    std::map<int32_t, float> m;
    for (const auto &x : c) m[x.id] = x.p;
    return m;
}

} // namespace

TEST(Sampling, NoTruncationKeepsTheDistribution) {
    auto l = logits_of(kProbs);
    auto c = sampling_candidates(l.data(), 4, defaults(), nullptr, 0);
    ASSERT_EQ(c.size(), 4u);
    EXPECT_EQ(c[0].id, 1);
    EXPECT_EQ(c[1].id, 3);
    for (const auto &x : c) EXPECT_NEAR(x.p, kProbs[x.id], 1e-6);
}

TEST(Sampling, TopKKeepsTheKMostLikely) {
    auto p = defaults();
    p.top_k = 2;
    auto l = logits_of(kProbs);
    auto m = as_map(sampling_candidates(l.data(), 4, p, nullptr, 0));
    ASSERT_EQ(m.size(), 2u);
    EXPECT_NEAR(m[1], 0.5 / 0.75, 1e-6);
    EXPECT_NEAR(m[3], 0.25 / 0.75, 1e-6);
}

TEST(Sampling, TopPKeepsTheSmallestPrefixReachingP) {
    auto p = defaults();
    p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75: two tokens
    auto l = logits_of(kProbs);
    EXPECT_EQ(sampling_candidates(l.data(), 4, p, nullptr, 0).size(), 2u);
    p.top_p = 0.8f;  // 0.75 < 0.8 <= 0.9: three tokens
    EXPECT_EQ(sampling_candidates(l.data(), 4, p, nullptr, 0).size(), 3u);
    p.top_p = 0.4f;  // the top token alone
    EXPECT_EQ(sampling_candidates(l.data(), 4, p, nullptr, 0).size(), 1u);
}

TEST(Sampling, MinPDropsTokensBelowAFractionOfTheTop) {
    auto p = defaults();
    p.min_p = 0.4f;  // threshold 0.2: keeps 0.5 and 0.25
    auto l = logits_of(kProbs);
    auto m = as_map(sampling_candidates(l.data(), 4, p, nullptr, 0));
    ASSERT_EQ(m.size(), 2u);
    EXPECT_TRUE(m.count(1) && m.count(3));
    p.min_p = 0.25f;  // threshold 0.125: keeps 0.15 too
    EXPECT_EQ(sampling_candidates(l.data(), 4, p, nullptr, 0).size(), 3u);
}

TEST(Sampling, TemperatureSharpensAndFlattens) {
    auto p = defaults();
    p.temperature = 0.5f;  // p^2 renormalised
    auto l = logits_of(kProbs);
    auto m = as_map(sampling_candidates(l.data(), 4, p, nullptr, 0));
    double z = 0;
    for (double q : kProbs) z += q * q;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(m[i], kProbs[i] * kProbs[i] / z, 1e-6);
    p.temperature = 2.0f;  // sqrt(p) renormalised
    m = as_map(sampling_candidates(l.data(), 4, p, nullptr, 0));
    z = 0;
    for (double q : kProbs) z += std::sqrt(q);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(m[i], std::sqrt(kProbs[i]) / z, 1e-6);
}

TEST(Sampling, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogits) {
    auto p = defaults();
    p.temperature = 0.0f;
    p.repeat_penalty = 4.0f;
    std::vector<float> l = {2.0f, 3.0f, -1.0f};
    int32_t hist[] = {1};
    Rng rng(1);
    // 3/4 < 2: token 0 wins once token 1 is penalised.
    EXPECT_EQ(sample_token(l.data(), 3, p, hist, 1, rng), 0);
    p.repeat_penalty = 1.0f;
    EXPECT_EQ(sample_token(l.data(), 3, p, hist, 1, rng), 1);
    // Negative logits get more negative.
    p.repeat_penalty = 2.0f;
    p.temperature = 1.0f;
    std::vector<float> l2 = {-1.0f, -1.0f};
    int32_t hist2[] = {0};
    auto m = as_map(sampling_candidates(l2.data(), 2, p, hist2, 1));
    EXPECT_NEAR(m[0], std::exp(-2.0) / (std::exp(-2.0) + std::exp(-1.0)), 1e-6);
    // The window: a token older than repeat_last_n is not penalised.
    p.repeat_last_n = 1;
    int32_t hist3[] = {0, 1};
    m = as_map(sampling_candidates(l2.data(), 2, p, hist3, 2));
    EXPECT_NEAR(m[1], std::exp(-2.0) / (std::exp(-2.0) + std::exp(-1.0)), 1e-6);
}

TEST(Sampling, GreedyIsArgmaxWithFirstIndexOnTies) {
    auto p = defaults();
    p.temperature = 0.0f;
    std::vector<float> l = {0.0f, 5.0f, 5.0f, -3.0f};
    Rng rng(7);
    EXPECT_EQ(sample_token(l.data(), 4, p, nullptr, 0, rng), 1);
}

TEST(Sampling, DrawsFollowTheDistribution) {
    auto p = defaults();
    auto l = logits_of(kProbs);
    Rng rng(12345);
    std::vector<int> counts(4, 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) counts[sample_token(l.data(), 4, p, nullptr, 0, rng)]++;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / double(n), kProbs[i], 0.01) << "token " << i;
}

TEST(Sampling, SameSeedSameTokensOtherSeedOtherTokens) {
    auto p = defaults();
    std::vector<float> l(1000);
    for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 0.37) * 3);
    auto draw = [&](uint64_t seed) {
        Rng rng(seed);
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) out.push_back(sample_token(l.data(), 1000, p, nullptr, 0, rng));
        return out;
    };
    EXPECT_EQ(draw(42), draw(42));
    EXPECT_NE(draw(42), draw(43));
}

TEST(Sampling, InvalidParametersAreRefused) {
    auto p = defaults();
    p.top_p = 0.0f;
    EXPECT_THROW(validate_sampling(p), Error);
    p = defaults();
    p.repeat_penalty = 0.0f;
    EXPECT_THROW(validate_sampling(p), Error);
    p = defaults();
    p.temperature = NAN;
    EXPECT_THROW(validate_sampling(p), Error);
    p = defaults();
    p.struct_size = 4;
    EXPECT_THROW(validate_sampling(p), Error);
    p = defaults();
    p.repeat_last_n = -2;
    EXPECT_THROW(validate_sampling(p), Error);
    EXPECT_NO_THROW(validate_sampling(defaults()));
}
