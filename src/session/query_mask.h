// Which query tokens REFORM scores (docs/methods/reform.md): the question
// text only. Dropped: blank tokens (whitespace only: the "\n\n" before the
// question, the newline after an end-of-turn marker), control tokens, the
// role header after a start-of-turn token (up to its newline), system
// turns, and a final assistant turn (the generation prefix, e.g.
// "<|im_start|>assistant\nThe answer is"). Text before any turn marker
// counts as part of the user's turn (it continues the document). When
// nothing is left, every non-control token is scored.
#pragma once

#include <cstdint>
#include <vector>

#include "model/tokenizer.h"

namespace lctx {

std::vector<bool> query_score_mask(const Tokenizer &tok, const std::vector<int32_t> &query);

// A token that decodes to whitespace only ("\n\n", " ").
bool is_blank_token(const Tokenizer &tok, int32_t id);

// The number of blank tokens at the start of query[0, n): the separator
// between the document and the question ("\n\n" in lctx run and lctx
// eval). ILRe reads its question from the first token after them
// (docs/methods/ilre.md).
int64_t leading_blank_tokens(const Tokenizer &tok, const int32_t *query, int64_t n);

} // namespace lctx
