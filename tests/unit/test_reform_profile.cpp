// Head identification scoring (MNR) against a brute force, and the built-in
// head profiles against the files committed under data/heads/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "session/head_mnr.h"
#include "session/head_profile.h"
#include "session/ilre_params.h"

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

namespace {

HeadProfile committed_profile(const char *file) {
    const std::filesystem::path p = std::filesystem::path(LCTX_SOURCE_DIR) / "data" / "heads" / file;
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_head_profile(ss.str(), p.string());
}

// The shapes as the GGUF files state them (general.architecture, block_count,
// embedding_length, head_count, head_count_kv, key_length, vocabulary size,
// context_length), so a change of the key format breaks the lookup here.
Hparams shape(const char *arch, int32_t layers, int32_t embd, int32_t heads, int32_t kv, int32_t dim, int32_t vocab,
              int32_t ctx) {
    Hparams hp;
    hp.arch = arch;
    hp.n_layer = layers;
    hp.n_embd = embd;
    hp.n_head = heads;
    hp.n_head_kv = kv;
    hp.head_dim = dim;
    hp.n_vocab = vocab;
    hp.n_ctx_train = ctx;
    return hp;
}

} // namespace

TEST(ReformHeadProfile, BuiltinChosenByShapeKey) {
    struct Case {
        Hparams hp;
        const char *file;
    };
    const Case cases[] = {
        {shape("llama", 30, 576, 9, 3, 64, 49152, 8192), "smollm2-135m.json"},        // SmolLM2-135M(-Instruct)
        {shape("gemma3", 18, 640, 4, 1, 256, 262144, 32768), "gemma3-270m.json"},     // Gemma 3 270M
    };
    for (const Case &c : cases) {
        const HeadProfile want = committed_profile(c.file);
        ASSERT_FALSE(want.heads.empty()) << c.file;
        ASSERT_GE(want.ilre_layer, 0) << c.file << " has no \"ilre\" retrieval layer";
        const HeadProfile got = choose_head_profile(c.hp, "");
        EXPECT_EQ(got.origin, "builtin") << c.file;
        EXPECT_EQ(got.heads_string(), want.heads_string()) << c.file;
        std::string origin;
        EXPECT_EQ(ilre_default_layer(c.hp, "", origin), want.ilre_layer) << c.file;
        EXPECT_EQ(origin, "builtin") << c.file;
        // One field off (another context length): no built-in profile fits.
        Hparams other = c.hp;
        other.n_ctx_train *= 2;
        EXPECT_EQ(choose_head_profile(other, "").origin, "fallback") << c.file;
        ilre_default_layer(other, "", origin);
        EXPECT_EQ(origin, "fallback") << c.file;
    }
}
