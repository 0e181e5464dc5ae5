// RULER's scoring of an answer against the expected strings
// (case-insensitive substring match).
#pragma once

#include <string>
#include <vector>

#include "eval/task.h"

namespace lctx::eval {

// Fraction of the expected strings found in the answer (0 for no expected).
double string_match_all(const std::string &answer, const std::vector<std::string> &expected);
// 1 if any expected string is found in the answer, else 0.
double string_match_part(const std::string &answer, const std::vector<std::string> &expected);
double score(ScoreMode mode, const std::string &answer, const std::vector<std::string> &expected);

} // namespace lctx::eval
