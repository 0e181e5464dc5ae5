// Probes of a selection (`lctx run --probe TEXT`): where a text lies in the
// input tokens, and how the last select treated those tokens. Pure functions
// over the token pieces and the per-token scores of
// lctx_session_select_scores; docs/methods/reform.md, "Probing a selection",
// explains how to read the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lctx::cli {

struct TokenSpan {
    int64_t begin = 0, end = 0;   // [begin, end) in input tokens
};

// The token spans of every occurrence of `text` (not overlapping, left to
// right) in the concatenation of `pieces`, token i's text being pieces[i]:
// a token with any byte inside the occurrence belongs to its span. Empty
// when `text` is empty or does not occur.
std::vector<TokenSpan> find_text_spans(const std::vector<std::string> &pieces, const std::string &text);

// The scores of one select (lctx_session_select_scores) and what it chose.
struct SelectScores {
    std::vector<float> raw, ranked;   // per input token
    int64_t forced_first = 0, forced_last = 0;
    std::vector<int64_t> selected;    // ascending positions
};

struct SpanProbe {
    TokenSpan span;
    int64_t n_gathered = 0;   // of the span's tokens
};

struct ProbeReport {
    std::vector<SpanProbe> spans;   // empty: the text was not found
    int64_t n_tokens = 0, n_gathered = 0;   // over all spans
    // The span token that comes first in the selection's order (ranked desc,
    // raw desc, position asc; NaN counts as -inf, as in select): its position,
    // scores and 1-based rank in that order among all scored tokens.
    int64_t best_pos = -1;
    float best_raw = 0, best_ranked = 0;
    int64_t rank = 0;
    // The span token with the highest raw score, and its rank by raw score
    // (raw desc, position asc).
    int64_t best_raw_pos = -1;
    float top_raw = 0;
    int64_t raw_rank = 0;
    // Over the tokens the selection took by rank (the forced first/last ones
    // left out): the lowest ranked score; has_lowest false when there are none.
    bool has_lowest = false;
    float lowest_selected = 0;
    float highest_ranked = 0, highest_raw = 0;   // over all scored tokens
    int64_t n_scored = 0;
};

ProbeReport probe_selection(const SelectScores &sc, const std::vector<TokenSpan> &spans);

// The report as a JSON object, with the probe text and whether it was found.
std::string probe_json(const std::string &text, const ProbeReport &r);

} // namespace lctx::cli
