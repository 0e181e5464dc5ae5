// Head identification scoring (MNR) against a brute force, and the built-in
// head profiles against the files committed under data/heads/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "session/head_mnr.h"
#include "session/head_profile.h"

using namespace lctx;

TEST(ReformHeadMnr, MatchesBruteForce) {
    std::mt19937 rng(1);
    for (int trial = 0; trial < 50; ++trial) {
        const int n = 5 + rng() % 200, half = rng() % 12;
        std::vector<float> s(n);
        std::vector<bool> gold(n, false);
        for (float &x : s) x = trial % 2 ? float(rng() % 4) : std::uniform_real_distribution<float>(-1, 1)(rng);
        for (int t = rng() % n, k = 0; k < 1 + int(rng() % 20) && t < n; ++k, ++t) gold[t] = true;
        std::vector<double> sm(n);
        for (int t = 0; t < n; ++t) {
            double sum = 0;
            int c = 0;
            for (int j = t - half; j <= t + half; ++j)
                if (j >= 0 && j < n) { sum += s[j]; ++c; }
            sm[t] = sum / c;
        }
        double want = 0;
        int g = 0;
        for (int t = 0; t < n; ++t) {
            if (!gold[t]) continue;
            int greater = 0, equal = 0;   // average 1-based rank among ties
            for (int j = 0; j < n; ++j) {
                if (sm[j] > sm[t]) ++greater;
                else if (sm[j] == sm[t]) ++equal;
            }
            want += (greater + (equal + 1) / 2.0) / n;
            ++g;
        }
        want /= g;
        EXPECT_NEAR(head_mnr(s, gold, half), want, 1e-9) << trial;
    }
    // A perfect head puts the gold span first: MNR = (g + 1) / (2n).
    std::vector<float> s(100, 0.0f);
    std::vector<bool> gold(100, false);
    for (int t = 40; t < 50; ++t) { s[t] = 1.0f; gold[t] = true; }
    EXPECT_NEAR(head_mnr(s, gold, 0), 11.0 / 200.0, 1e-12);
}

TEST(ReformHeadProfile, BuiltinsMatchCommittedFiles) {
    const std::filesystem::path dir = std::filesystem::path(LCTX_SOURCE_DIR) / "data" / "heads";
    std::vector<std::string> files;
    if (std::filesystem::exists(dir))
        for (const auto &e : std::filesystem::directory_iterator(dir))
            if (e.path().extension() == ".json") {
                std::ifstream f(e.path());
                std::stringstream ss;
                ss << f.rdbuf();
                files.push_back(ss.str());
            }
    ASSERT_EQ(files.size(), builtin_head_profiles().size());
    for (const char *b : builtin_head_profiles()) {
        bool found = false;
        for (const std::string &f : files) found = found || f == b;
        EXPECT_TRUE(found) << "a built-in profile differs from every file in data/heads";
        HeadProfile p = parse_head_profile(b, "builtin");
        EXPECT_FALSE(p.model_shape.empty());
        EXPECT_EQ(p.heads.size(), 4u);
    }
}
