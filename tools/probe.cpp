#include "probe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/json.h"

namespace lctx::cli {

std::vector<TokenSpan> find_text_spans(const std::vector<std::string> &pieces, const std::string &text) {
    std::vector<TokenSpan> out;
    if (text.empty()) return out;
    std::string all;
    std::vector<size_t> start(pieces.size() + 1);   // byte offset of each token's text in `all`
    for (size_t i = 0; i < pieces.size(); ++i) {
        start[i] = all.size();
        all += pieces[i];
    }
    start[pieces.size()] = all.size();
    for (size_t at = all.find(text); at != std::string::npos; at = all.find(text, at + text.size())) {
        const size_t end = at + text.size();
        // The first token whose text ends past `at`, and the first token starting at or past `end`.
        // Tokens with empty text at the edges (special tokens) are not part of the span.
        const int64_t b = std::upper_bound(start.begin() + 1, start.end(), at) - start.begin() - 1;
        const int64_t e = std::lower_bound(start.begin(), start.end() - 1, end) - start.begin();
        out.push_back({b, e});
    }
    return out;
}

namespace {

float key(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

} // namespace

ProbeReport probe_selection(const SelectScores &sc, const std::vector<TokenSpan> &spans) {
    ProbeReport r;
    const int64_t n = static_cast<int64_t>(sc.raw.size());
    r.n_scored = n;
    // select's order: ranked desc, raw desc, position asc.
    auto before = [&](int64_t a, int64_t b) {
        const float pa = key(sc.ranked[a]), pb = key(sc.ranked[b]);
        if (pa != pb) return pa > pb;
        const float sa = key(sc.raw[a]), sb = key(sc.raw[b]);
        if (sa != sb) return sa > sb;
        return a < b;
    };
    auto raw_before = [&](int64_t a, int64_t b) {
        const float sa = key(sc.raw[a]), sb = key(sc.raw[b]);
        return sa != sb ? sa > sb : a < b;
    };
    auto gathered = [&](int64_t t) { return std::binary_search(sc.selected.begin(), sc.selected.end(), t); };
    for (const TokenSpan &sp : spans) {
        SpanProbe p{sp, 0};
        for (int64_t t = std::max<int64_t>(0, sp.begin); t < std::min(n, sp.end); ++t) {
            p.n_gathered += gathered(t);
            if (r.best_pos < 0 || before(t, r.best_pos)) r.best_pos = t;
            if (r.best_raw_pos < 0 || raw_before(t, r.best_raw_pos)) r.best_raw_pos = t;
        }
        r.n_tokens += sp.end - sp.begin;
        r.n_gathered += p.n_gathered;
        r.spans.push_back(p);
    }
    float hi_ranked = -std::numeric_limits<float>::infinity(), hi_raw = hi_ranked;
    for (int64_t t = 0; t < n; ++t) {
        hi_ranked = std::max(hi_ranked, key(sc.ranked[t]));
        hi_raw = std::max(hi_raw, key(sc.raw[t]));
        if (r.best_pos >= 0 && before(t, r.best_pos)) ++r.rank;
        if (r.best_raw_pos >= 0 && raw_before(t, r.best_raw_pos)) ++r.raw_rank;
    }
    r.highest_ranked = hi_ranked;
    r.highest_raw = hi_raw;
    if (r.best_pos >= 0) {
        ++r.rank;
        r.best_raw = sc.raw[r.best_pos];
        r.best_ranked = sc.ranked[r.best_pos];
    }
    if (r.best_raw_pos >= 0) {
        ++r.raw_rank;
        r.top_raw = sc.raw[r.best_raw_pos];
    }
    for (int64_t t : sc.selected) {
        if (t < sc.forced_first || t >= n - sc.forced_last) continue;
        const float v = key(sc.ranked[t]);
        if (!r.has_lowest || v < r.lowest_selected) r.lowest_selected = v;
        r.has_lowest = true;
    }
    return r;
}

std::string probe_json(const std::string &text, const ProbeReport &r) {
    using json::number;
    std::string spans = "[";
    for (size_t i = 0; i < r.spans.size(); ++i) {
        const SpanProbe &p = r.spans[i];
        const int64_t len = p.span.end - p.span.begin;
        spans += std::string(i ? ", " : "") + "{\"begin\": " + std::to_string(p.span.begin) +
                 ", \"end\": " + std::to_string(p.span.end) + ", \"gathered\": " + std::to_string(p.n_gathered) +
                 ", \"fraction\": " + number(len > 0 ? double(p.n_gathered) / double(len) : 0.0) + "}";
    }
    spans += "]";
    const bool found = !r.spans.empty();
    std::string o = "{\"text\": " + json::quote(text) + ", \"found\": " + (found ? "true" : "false") +
                    ", \"spans\": " + spans;
    if (found) {
        o += ", \"gathered_fraction\": " + number(r.n_tokens > 0 ? double(r.n_gathered) / double(r.n_tokens) : 0.0) +
             ", \"best_pos\": " + std::to_string(r.best_pos) + ", \"best_score\": " + number(r.best_raw) +
             ", \"best_ranked_score\": " + number(r.best_ranked) + ", \"rank\": " + std::to_string(r.rank) +
             ", \"best_raw_pos\": " + std::to_string(r.best_raw_pos) + ", \"top_raw_score\": " + number(r.top_raw) +
             ", \"raw_rank\": " + std::to_string(r.raw_rank);
    }
    o += std::string(", \"lowest_selected_score\": ") + (r.has_lowest ? number(r.lowest_selected) : "null") +
         ", \"highest_ranked_score\": " + number(r.highest_ranked) + ", \"highest_score\": " + number(r.highest_raw) +
         ", \"n_scored\": " + std::to_string(r.n_scored) + "}";
    return o;
}

} // namespace lctx::cli
