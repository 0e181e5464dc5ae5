#include "eval/score.h"

namespace lctx::eval {

namespace {

std::string lower(std::string s) {
    for (char &c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
}

bool found(const std::string &answer_lower, const std::string &expected) {
    return !expected.empty() && answer_lower.find(lower(expected)) != std::string::npos;
}

} // namespace

double string_match_all(const std::string &answer, const std::vector<std::string> &expected) {
    if (expected.empty()) return 0.0;
    const std::string a = lower(answer);
    size_t hits = 0;
    for (const auto &e : expected) hits += found(a, e);
    return double(hits) / double(expected.size());
}

double string_match_part(const std::string &answer, const std::vector<std::string> &expected) {
    const std::string a = lower(answer);
    for (const auto &e : expected)
        if (found(a, e)) return 1.0;
    return 0.0;
}

double score(ScoreMode mode, const std::string &answer, const std::vector<std::string> &expected) {
    return mode == ScoreMode::kMatchPart ? string_match_part(answer, expected) : string_match_all(answer, expected);
}

} // namespace lctx::eval
