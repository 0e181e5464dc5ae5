#include "eval/score.h"

#include <algorithm>

#include "common/error.h"

namespace lctx::eval {

std::string ascii_lower(std::string s) {
    for (char &c : s)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return s;
}

namespace {

bool found(const std::string &answer_lower, const std::string &expected) {
    return !expected.empty() && answer_lower.find(ascii_lower(expected)) != std::string::npos;
}

} // namespace

double string_match_all(const std::string &answer, const std::vector<std::string> &expected) {
    if (expected.empty()) return 0.0;
    const std::string a = ascii_lower(answer);
    size_t hits = 0;
    for (const auto &e : expected) hits += found(a, e);
    return double(hits) / double(expected.size());
}

double string_match_part(const std::string &answer, const std::vector<std::string> &expected) {
    const std::string a = ascii_lower(answer);
    for (const auto &e : expected)
        if (found(a, e)) return 1.0;
    return 0.0;
}

std::vector<std::string> extract_pairs(const std::string &text) {
    const std::string t = ascii_lower(text);
    auto letter = [&](size_t i) { return i < t.size() && t[i] >= 'a' && t[i] <= 'z'; };
    auto digit = [&](size_t i) { return i < t.size() && t[i] >= '0' && t[i] <= '9'; };
    auto space = [&](size_t i) { return i < t.size() && (t[i] == ' ' || t[i] == '\t'); };
    std::vector<std::string> out;
    size_t i = 0;
    while (i < t.size()) {
        // A key starts at a letter that does not continue a word or a key.
        if (!letter(i) || (i > 0 && (letter(i - 1) || t[i - 1] == '-'))) {
            ++i;
            continue;
        }
        size_t j = i;
        int words = 0;
        for (;;) {
            const size_t w = j;
            while (letter(j)) ++j;
            if (j == w) break;
            ++words;
            if (t[j] == '-' && letter(j + 1)) ++j;   // guaranteed j < size by letter(j + 1)
            else break;
        }
        const size_t key_end = j;
        if (words < 2) {
            i = j;
            continue;
        }
        while (space(j)) ++j;
        if (j < t.size() && (t[j] == ':' || t[j] == '=')) {
            ++j;
            while (space(j)) ++j;
            const size_t v = j;
            while (digit(j)) ++j;
            if (j > v && !letter(j)) {
                out.push_back(t.substr(i, key_end - i) + ": " + t.substr(v, j - v));
                i = j;
                continue;
            }
        }
        i = key_end;
    }
    return out;
}

double pairs_in_order(const std::string &answer, const std::vector<std::string> &expected) {
    std::vector<std::string> e;
    for (const auto &x : expected)
        for (auto &p : extract_pairs(x)) e.push_back(std::move(p));
    if (e.empty()) return 0.0;
    const std::vector<std::string> p = extract_pairs(answer);
    if (p.empty()) return 0.0;
    // LCS by dynamic programming over one row.
    std::vector<size_t> row(e.size() + 1, 0);
    for (const auto &a : p) {
        size_t diag = 0;
        for (size_t j = 1; j <= e.size(); ++j) {
            const size_t up = row[j];
            row[j] = a == e[j - 1] ? diag + 1 : std::max(row[j], row[j - 1]);
            diag = up;
        }
    }
    return 2.0 * double(row[e.size()]) / double(p.size() + e.size());
}

double score(ScoreMode mode, const std::string &answer, const std::vector<std::string> &expected) {
    switch (mode) {
    case ScoreMode::kMatchPart: return string_match_part(answer, expected);
    case ScoreMode::kPairsInOrder: return pairs_in_order(answer, expected);
    case ScoreMode::kPerplexity:
        fail(LCTX_ERR_INVALID_ARG, "a perplexity task is scored by teacher forcing, not from an answer text");
    default: return string_match_all(answer, expected);
    }
}

} // namespace lctx::eval
