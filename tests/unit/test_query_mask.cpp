// Which question tokens REFORM scores and where ILRe's question starts
// (session/query_mask.h), on SmolLM2's real tokenizer and chat template
// markers. The expected masks are built from which part of the query each
// token's text comes from, not from the mask's code: the question's words
// are scored; blanks, control tokens, role headers, system turns and the
// generation prefix are not.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/tokenizer.h"
#include "session/query_mask.h"

namespace {

const std::string kSmolLM2 = std::string(LCTX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Part {
    std::string text;
    bool scored;
};

class QueryMask : public ::testing::Test {
protected:
    void SetUp() override {
        ASSERT_TRUE(std::filesystem::exists(kSmolLM2)) << "model missing: " << kSmolLM2
                                                       << " (run scripts/fetch-models.sh)";
        auto f = lctx::GgufFile::open(kSmolLM2);
        tok_ = lctx::Tokenizer::from_gguf(*f);
    }

    std::vector<int32_t> tokens(const std::string &text) const {
        return tok_->tokenize(text, /*add_special=*/false, /*parse_special=*/true);
    }

    // The query is the parts' text tokenized whole; a token is expected
    // scored when the characters it decodes to lie in a scored part.
    void check(const std::vector<Part> &parts) const {
        std::string all, described;
        std::vector<std::pair<size_t, bool>> part_end;   // (end offset, scored)
        for (const Part &p : parts) {
            all += p.text;
            part_end.push_back({all.size(), p.scored});
            described += (p.scored ? "[+]" : "[-]") + p.text;
        }
        const std::vector<int32_t> query = tokens(all);
        std::vector<bool> expected;
        size_t at = 0, part = 0;
        for (int32_t id : query) {
            const size_t len = tok_->token_to_piece(id, /*special=*/true).size();
            while (part < part_end.size() && at >= part_end[part].first) ++part;
            ASSERT_LT(part, part_end.size());
            ASSERT_LE(at + len, part_end[part].first) << "a token crosses parts: " << described;
            expected.push_back(part_end[part].second);
            at += len;
        }
        ASSERT_EQ(at, all.size()) << "the pieces do not spell the query";
        EXPECT_EQ(lctx::query_score_mask(*tok_, query), expected) << described;
    }

    std::unique_ptr<lctx::Tokenizer> tok_;
};

// lctx run and lctx eval ask "\n\n" + question inside the user's turn that
// holds the document: the blank separator is not scored, nor is the newline
// after <|im_end|>.
TEST_F(QueryMask, ChatQuestionScoresItsWordsOnly) {
    check({{"\n\n", false},
           {"What is the special magic word for early-miner?", true},
           {"<|im_end|>", false},
           {"\n", false},
           {"<|im_start|>assistant\n", false}});
}

TEST_F(QueryMask, PlainQuestionWithoutSeparatorIsScoredWhole) {
    check({{"Where did Alice hide the key?", true}});
}

TEST_F(QueryMask, BlankRunsInsideTheQuestionAreNotScored) {
    check({{"First line.", true}, {"\n\n", false}, {"Second line?", true}});
}

TEST_F(QueryMask, SystemTurnAndGenerationPrefixAreNotScored) {
    check({{"<|im_start|>system\nYou are terse.", false},
           {"<|im_end|>", false},
           {"\n", false},
           {"<|im_start|>user\n", false},
           {"Which city?", true},
           {"<|im_end|>", false},
           {"\n", false},
           {"<|im_start|>assistant\nThe city is", false}});
}

// A query of blanks and control tokens only keeps a score: every
// non-control token is scored rather than none.
TEST_F(QueryMask, NothingLeftFallsBackToEveryNonControlToken) {
    check({{"\n\n", true}, {"<|im_end|>", false}});
}

// The separator ILRe skips: the blank tokens at the start only.
TEST_F(QueryMask, LeadingBlankTokensAreTheSeparatorOnly) {
    const auto count = [&](const std::string &text) {
        const std::vector<int32_t> q = tokens(text);
        return lctx::leading_blank_tokens(*tok_, q.data(), int64_t(q.size()));
    };
    EXPECT_EQ(count("\n\nWhat is it?"), int64_t(tokens("\n\nWhat").size() - tokens("What").size()));
    EXPECT_GT(count("\n\nWhat is it?"), 0);
    EXPECT_EQ(count("What is it?\n\n"), 0);
    EXPECT_EQ(count("<|im_end|>\n"), 0);   // a control token is not blank
    EXPECT_EQ(count("\n \n"), int64_t(tokens("\n \n").size()));
    EXPECT_EQ(lctx::leading_blank_tokens(*tok_, nullptr, 0), 0);
}

} // namespace
