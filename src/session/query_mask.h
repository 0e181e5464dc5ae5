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

} // namespace lctx
