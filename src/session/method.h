// A long-context method is a set of policies behind the five session stages.
// Session (session.h) owns the stage machine and argument checks; a Method
// only does the work of each stage.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "session/progress.h"

namespace lctx {

// What select() chose: document positions (ascending) with their scores, and
// the query they were chosen for (recompute appends it).
struct Selection {
    uint64_t session_id = 0;      // the session that made it
    std::vector<int64_t> positions;
    std::vector<float> scores;
    std::vector<int32_t> query;
};

// The per-token scores behind the last select of a method that scores every
// document token (REFORM, ILRe): `raw` is the score itself, `ranked` the one
// the selection ranks tokens by (REFORM: the max-pooled score; ILRe: the raw
// score, which its allocator pools in blocks). The first forced_first and
// last forced_last document tokens are gathered whatever their scores.
struct TokenScores {
    const std::vector<float> *raw = nullptr;      // null: no successful select yet
    const std::vector<float> *ranked = nullptr;
    int64_t forced_first = 0, forced_last = 0;
};

class RefreshKvPolicy;
struct RefreshKvConfig;

class Method {
public:
    virtual ~Method() = default;
    // Stage 1: more document tokens. Must leave the method unchanged when it
    // throws (cancellation included) except for fully processed tokens.
    virtual void feed(const int32_t *tokens, size_t n, Progress &progress) = 0;
    // Stage 2: the document is complete.
    virtual void finish(Progress &progress) = 0;
    // Stage 3: choose document tokens for a question.
    virtual Selection select(const std::vector<int32_t> &query, Progress &progress) = 0;
    // Stage 4: build the decode cache from a selection; writes the logits of
    // the last query token.
    virtual void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) = 0;
    // Stage 5: append one generated token to the decode cache; writes the
    // logits that follow it.
    virtual void append(int32_t token, std::vector<float> &logits) = 0;
    // Tokens the decode context holds, in order (for repetition penalties).
    virtual const std::vector<int32_t> &context_tokens() const = 0;
    // Document tokens read so far.
    virtual int64_t n_fed() const = 0;
    // A hash of what the method holds of the document (its caches' filled
    // slots: keys, values, positions; the token ids and bookkeeping they
    // stand for). Equal digests mean equal document state: the cancel/retry
    // tests compare it with an uninterrupted run.
    virtual uint64_t state_digest() const = 0;
    // The RefreshKV decoding of the method, if it decodes with RefreshKV.
    virtual const RefreshKvPolicy *refreshkv() const { return nullptr; }
    // Switches how the next questions are decoded, from the next recompute
    // on (the answer in progress keeps its decoding): cfg null = dense,
    // else RefreshKV with *cfg. False, changing nothing, for a method whose
    // decoding cannot switch; a method may also refuse with its own error.
    virtual bool set_decoding(const RefreshKvConfig *cfg) {
        (void)cfg;
        return false;
    }
    // The scores of the last select (TokenScores); false for a method whose
    // select does not score every document token.
    virtual bool token_scores(TokenScores &) const { return false; }
    // For a method whose attention reads a different part of its cache at
    // each step (ReAttention): per stored token (document, question, answer
    // so far), the share of layers whose attention at the latest step could
    // see it. False for a method whose decode attends to its whole cache
    // (what it keeps is the selection of lctx_select).
    virtual bool attended_share(std::vector<float> &) const { return false; }
};

} // namespace lctx
