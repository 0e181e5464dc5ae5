// Tokenizer tests: known tokenizations produced by llama.cpp
// (tests/data/tokenizer_cases_*.json, generated with llama-cpp-python),
// round trips, robustness on hostile input, and metadata errors. The full
// comparison with llama.cpp on >1,000 strings is in
// tests/reference/test_tokenizer_llamacpp.py.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "gguf_test_writer.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

using lctx::Tokenizer;

namespace {

const std::string kStories = std::string(LCTX_TEST_DATA_DIR) + "/stories260K.gguf";
const std::string kSmolLM2 = std::string(LCTX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::unique_ptr<Tokenizer> load(const std::string &path) {
    auto f = lctx::GgufFile::open(path);
    return Tokenizer::from_gguf(*f);
}

// A missing model fails the test: stories260K is committed under tests/data/,
// SmolLM2 is fetched into models/ by scripts/fetch-models.sh (scripts/setup.sh).
#define ASSERT_MODEL_EXISTS(path)                                                            \
    ASSERT_TRUE(std::filesystem::exists(path))                                               \
        << "model missing: " << (path)                                                       \
        << ((path) == kStories ? " (committed under tests/data/)" : " (run scripts/fetch-models.sh)")

#define LOAD_MODEL(var, path) \
    ASSERT_MODEL_EXISTS(path); \
    auto var = load(path)

// --- a minimal reader for the one-case-per-line JSON data files -------------
struct Case {
    std::string text;
    bool add_special = false, parse_special = false;
    std::vector<int32_t> ids;
};

void append_utf8(std::string &s, uint32_t c) {
    if (c < 0x80) {
        s += static_cast<char>(c);
    } else if (c < 0x800) {
        s += static_cast<char>(0xC0 | (c >> 6));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        s += static_cast<char>(0xE0 | (c >> 12));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (c >> 18));
        s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (c & 0x3F));
    }
}

std::string json_string_after(const std::string &line, const std::string &key) {
    size_t p = line.find("\"" + key + "\": \"");
    if (p == std::string::npos) throw std::runtime_error("no key " + key);
    p += key.size() + 5;
    std::string out;
    while (line[p] != '"') {
        if (line[p] != '\\') {
            out += line[p++];
            continue;
        }
        const char e = line[p + 1];
        p += 2;
        if (e == 'u') {
            uint32_t c = std::stoul(line.substr(p, 4), nullptr, 16);
            p += 4;
            if (c >= 0xD800 && c < 0xDC00 && line.compare(p, 2, "\\u") == 0) {
                const uint32_t lo = std::stoul(line.substr(p + 2, 4), nullptr, 16);
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                p += 6;
            }
            append_utf8(out, c);
        } else {
            out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
    }
    return out;
}

std::vector<Case> read_cases(const std::string &name) {
    std::ifstream in(std::string(LCTX_TEST_DATA_DIR) + "/tokenizer_cases_" + name + ".json");
    std::vector<Case> cases;
    std::string line;
    while (std::getline(in, line)) {
        if (line.find("\"text\":") == std::string::npos) continue;
        Case c;
        c.text = json_string_after(line, "text");
        c.add_special = line.find("\"add_special\": true") != std::string::npos;
        c.parse_special = line.find("\"parse_special\": true") != std::string::npos;
        const size_t a = line.find('[', line.find("\"ids\":"));
        const size_t b = line.find(']', a);
        std::stringstream ss(line.substr(a + 1, b - a - 1));
        std::string num;
        while (std::getline(ss, num, ',')) c.ids.push_back(std::stoi(num));
        cases.push_back(c);
    }
    return cases;
}

void check_cases(const Tokenizer &tok, const std::string &name) {
    const auto cases = read_cases(name);
    ASSERT_GE(cases.size(), 10u);
    for (const Case &c : cases)
        EXPECT_EQ(tok.tokenize(c.text, c.add_special, c.parse_special), c.ids)
            << "text '" << c.text << "' add_special " << c.add_special << " parse_special " << c.parse_special;
}

void expect_status(lctx_status st, const std::function<void()> &fn) {
    try {
        fn();
        ADD_FAILURE() << "no exception";
    } catch (const lctx::Error &e) {
        EXPECT_EQ(e.status(), st) << e.what();
    }
}

const std::vector<std::string> kRoundTrip = {
    "Hello world", "  two  spaces  ", "\ttabs\tand\nnewlines\r\n", "naïve café résumé", "日本語のテキスト",
    "emoji 😀👍🏽👨‍👩‍👧", "digits 1234567890 ١٢٣", "I'm sure they've", "x = f(a, b) -> {c}", "",
    " ", "trailing   ", "<|im_start|> as text", "\xed\xa0\x80 surrogate bytes",
};

} // namespace

TEST(Tokenizer, StoriesMatchesLlamaCppCases) {
    LOAD_MODEL(tok, kStories);
    check_cases(*tok, "stories");
}

TEST(Tokenizer, SmolLM2MatchesLlamaCppCases) {
    LOAD_MODEL(tok, kSmolLM2);
    check_cases(*tok, "smollm2");
}

TEST(Tokenizer, StoriesSpecialIds) {
    LOAD_MODEL(tok, kStories);
    EXPECT_EQ(tok->n_vocab(), 512);
    EXPECT_EQ(tok->bos(), 1);
    EXPECT_EQ(tok->eos(), 2);
    EXPECT_EQ(tok->unk(), 0);
    EXPECT_EQ(tok->pad(), -1);  // 0xFFFFFFFF in the file means none
    EXPECT_TRUE(tok->add_bos());
    EXPECT_FALSE(tok->add_eos());
    EXPECT_TRUE(tok->is_eog(2));
    EXPECT_FALSE(tok->is_eog(1));
    EXPECT_EQ(tok->token_attr(3), lctx::TokenAttr::BYTE);
    EXPECT_EQ(tok->token_to_piece(3 + 0x41, false), "A");  // <0x41>
    EXPECT_EQ(tok->token_to_piece(1, false), "");
    EXPECT_EQ(tok->token_to_piece(1, true), "<s>");
}

TEST(Tokenizer, SmolLM2SpecialIds) {
    LOAD_MODEL(tok, kSmolLM2);
    EXPECT_EQ(tok->n_vocab(), 49152);
    EXPECT_EQ(tok->token_text(2), "<|im_end|>");
    EXPECT_TRUE(tok->is_eog(2));
    EXPECT_TRUE(tok->is_eog(0));   // <|endoftext|>
    EXPECT_FALSE(tok->is_eog(1));  // <|im_start|>
    EXPECT_FALSE(tok->add_bos());
    EXPECT_TRUE(tok->is_control(1));
    EXPECT_EQ(tok->token_to_piece(1, true), "<|im_start|>");
    EXPECT_EQ(tok->token_to_piece(1, false), "");
}

TEST(Tokenizer, RoundTrip) {
    for (const std::string &path : {kStories, kSmolLM2}) {  // stories first: it is always there
        ASSERT_MODEL_EXISTS(path);
        auto tok = load(path);
        for (const std::string &s : kRoundTrip) {
            const auto ids = tok->tokenize(s, false, false);
            EXPECT_EQ(tok->detokenize(ids.data(), ids.size(), false), s) << path << ": '" << s << "'";
            const auto ids2 = tok->tokenize(s, false, true);
            EXPECT_EQ(tok->detokenize(ids2.data(), ids2.size(), true), s) << path << ": '" << s << "'";
        }
    }
}

TEST(Tokenizer, HostileInputDoesNotCrash) {
    for (const std::string &path : {kStories, kSmolLM2}) {  // stories first: it is always there
        ASSERT_MODEL_EXISTS(path);
        auto tok = load(path);
        std::string junk;
        for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>((i * 131 + 7) & 0xFF));  // invalid UTF-8, NULs
        const std::string nul("a\0b\0\0c", 6);
        for (const std::string &s : {junk, nul, std::string("\xF7\xBF\xBF\xBF\xF4\x90\x80\x80"), std::string(1, '\0')}) {
            for (bool sp : {false, true}) {
                const auto ids = tok->tokenize(s, true, sp);
                for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
                (void)tok->detokenize(ids.data(), ids.size(), sp);
            }
        }
        // NULs survive a round trip (byte fallback / byte-level BPE).
        const auto ids = tok->tokenize(nul, false, false);
        EXPECT_EQ(tok->detokenize(ids.data(), ids.size(), false), nul) << path;
        const std::string long_text(200000, 'x');
        EXPECT_FALSE(tok->tokenize(long_text, false, false).empty());
        const std::string long_spaces(100000, ' ');
        EXPECT_FALSE(tok->tokenize(long_spaces, false, false).empty());

        expect_status(LCTX_ERR_INVALID_ARG, [&] { tok->token_to_piece(-1, true); });
        expect_status(LCTX_ERR_INVALID_ARG, [&] { tok->token_to_piece(tok->n_vocab(), false); });
        const int32_t bad[] = {1, 2, 1 << 30};
        expect_status(LCTX_ERR_INVALID_ARG, [&] { tok->detokenize(bad, 3, false); });
        EXPECT_FALSE(tok->is_eog(-5));
        EXPECT_FALSE(tok->is_control(tok->n_vocab()));
    }
}

TEST(Tokenizer, OneMillionTokensInOneCall) {
    LOAD_MODEL(tok, kSmolLM2);
    const std::string para =
        "The quick brown fox jumps over the lazy dog. It's a sunny day, and we're going to the park with 3 friends! "
        "Internationalization isn't easy; tokenizers split words into sub-word units.\n";
    std::string text;
    while (text.size() < 5'000'000) text += para;
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = tok->tokenize(text, false, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_GT(ids.size(), 1'000'000u);
    EXPECT_TRUE(tok->detokenize(ids.data(), ids.size(), false) == text);  // no byte lost over 5 MB
    const double per_million = s * 1e6 / static_cast<double>(ids.size());
    // Informational only: speed is checked by benchmarks, not by unit tests.
    std::printf("tokenized %zu tokens in %.3f s (%.3f s per 1M tokens)\n", ids.size(), s, per_million);
}

// --- metadata errors, on small synthetic files -------------------------------

namespace {
std::unique_ptr<Tokenizer> from_writer(const gguf_test::Writer &w) {
    const auto bytes = w.build();
    auto f = lctx::GgufFile::from_memory(bytes.data(), bytes.size());
    return Tokenizer::from_gguf(*f);
}

gguf_test::Writer tiny_spm() {
    gguf_test::Writer w;
    w.kv_str("tokenizer.ggml.model", "llama");
    w.kv_arr_str("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81" "a", "b", "ab", "bcd", "<0x63>", "\xE2\x96\x81"});
    w.kv_arr<float>("tokenizer.ggml.scores", gguf_test::F32, {0, 0, 0, -1, -2, -3, -4, 0, 0});
    w.kv_arr<int32_t>("tokenizer.ggml.token_type", gguf_test::I32, {2, 3, 3, 1, 1, 4, 4, 6, 1});
    return w;
}
} // namespace

TEST(Tokenizer, MetadataErrors) {
    {
        gguf_test::Writer w;
        w.kv_str("tokenizer.ggml.model", "bert");
        w.kv_arr_str("tokenizer.ggml.tokens", {"a"});
        expect_status(LCTX_ERR_UNSUPPORTED, [&] { from_writer(w); });
    }
    {
        gguf_test::Writer w;
        w.kv_str("tokenizer.ggml.model", "llama");
        expect_status(LCTX_ERR_FORMAT, [&] { from_writer(w); });  // no tokens
    }
    {
        gguf_test::Writer w;
        w.kv_str("tokenizer.ggml.model", "llama");
        w.kv_arr_str("tokenizer.ggml.tokens", {"a", "b"});
        w.kv_arr<float>("tokenizer.ggml.scores", gguf_test::F32, {0});
        expect_status(LCTX_ERR_FORMAT, [&] { from_writer(w); });
    }
    {
        gguf_test::Writer w;
        w.kv_str("tokenizer.ggml.model", "gpt2");
        w.kv_str("tokenizer.ggml.pre", "llama-bpe");
        w.kv_arr_str("tokenizer.ggml.tokens", {"a", "b"});
        w.kv_arr_str("tokenizer.ggml.merges", {"a b"});
        expect_status(LCTX_ERR_UNSUPPORTED, [&] { from_writer(w); });
    }
    {
        gguf_test::Writer w;
        w.kv_str("tokenizer.ggml.model", "gpt2");
        w.kv_str("tokenizer.ggml.pre", "smollm");
        w.kv_arr_str("tokenizer.ggml.tokens", {"a", "b"});
        expect_status(LCTX_ERR_FORMAT, [&] { from_writer(w); });  // no merges
    }
}

// Hand-derived from llama.cpp's rules: special texts are cut out longest
// first over the whole input (so "bcd" wins over an earlier "ab"); user-
// defined texts are cut out even without parse_special; the space prefix is
// added at the start and after each special token; bytes the vocabulary lacks
// fall back to <0xXX> tokens.
TEST(Tokenizer, TinySpmSpecialPartition) {
    auto tok = from_writer(tiny_spm());
    EXPECT_EQ(tok->tokenize("abcd", false, false), (std::vector<int32_t>{3, 6}));  // ▁a, bcd
    EXPECT_EQ(tok->tokenize("<s>a", true, true), (std::vector<int32_t>{1, 1, 3}));
    EXPECT_EQ(tok->tokenize("c", false, false), (std::vector<int32_t>{8, 7}));     // ▁, <0x63>
    EXPECT_EQ(tok->token_to_piece(7, false), "c");
    EXPECT_EQ(tok->token_to_piece(5, false), "ab");  // user-defined: always its text
    EXPECT_EQ(tok->token_to_piece(0, false), "");
    EXPECT_EQ(tok->token_to_piece(0, true), "<unk>");
}
