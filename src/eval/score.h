// RULER's scoring of an answer against the expected strings
// (case-insensitive substring match).
#pragma once

#include <string>
#include <vector>

#include "eval/task.h"

namespace lctx::eval {

// s with A-Z mapped to a-z, the case folding of every match below.
std::string ascii_lower(std::string s);

// Fraction of the expected strings found in the answer (0 for no expected).
double string_match_all(const std::string &answer, const std::vector<std::string> &expected);
// 1 if any expected string is found in the answer, else 0.
double string_match_part(const std::string &answer, const std::vector<std::string> &expected);
// The "KEY: VALUE" pairs of a text, in order, as "key: value" (lower case):
// KEY is two or more letter words joined by '-', VALUE a run of digits
// (taken whole: "12345" is not "1234"), ':' or '=' between them with any
// spaces. Anything else in the text is skipped.
std::vector<std::string> extract_pairs(const std::string &text);
// Exact pairs produced in order: with P the answer's pairs, E the expected
// ones' (extract_pairs of each) and C the longest common subsequence of P and
// E, the F1 2|C| / (|P| + |E|): 1 for the exact list, a missing or wrong
// pair costs recall, an extra or repeated one precision, and pairs out of
// order only count as far as a common order exists. 0 if E is empty.
double pairs_in_order(const std::string &answer, const std::vector<std::string> &expected);
// kPerplexity is not a text score: lctx::Error (LCTX_ERR_INVALID_ARG).
double score(ScoreMode mode, const std::string &answer, const std::vector<std::string> &expected);

} // namespace lctx::eval
