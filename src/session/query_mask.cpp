#include "session/query_mask.h"

#include <string>

namespace lctx {

bool is_blank_token(const Tokenizer &tok, int32_t id) {
    const std::string piece = tok.token_to_piece(id, false);
    return !piece.empty() && piece.find_first_not_of(" \t\n\r\v\f") == std::string::npos;
}

int64_t leading_blank_tokens(const Tokenizer &tok, const int32_t *query, int64_t n) {
    int64_t i = 0;
    while (i < n && is_blank_token(tok, query[i])) ++i;
    return i;
}

std::vector<bool> query_score_mask(const Tokenizer &tok, const std::vector<int32_t> &query) {
    const size_t n = query.size();
    std::vector<bool> mask(n, false);
    // Turn i: [start_i, end_i) with its role; the implicit first turn is "user".
    std::vector<std::string> role(n);
    std::vector<int> turn(n, 0);
    std::vector<bool> header(n, false);
    std::string cur = "user";
    int t = 0;
    bool in_header = false;
    std::string header_text;
    for (size_t i = 0; i < n; ++i) {
        const int32_t id = query[i];
        if (tok.is_control(id)) {
            const std::string &text = tok.token_text(id);
            // A start-of-turn marker opens a role header ("<|im_start|>",
            // "<start_of_turn>"); other control tokens just end text.
            if (text.find("start") != std::string::npos) {
                in_header = true;
                header_text.clear();
                ++t;
                cur.clear();
            }
            header[i] = true;
            turn[i] = t;
            role[i] = cur;
            continue;
        }
        if (in_header) {
            const std::string piece = tok.token_to_piece(id, false);
            header_text += piece;
            header[i] = true;
            if (piece.find('\n') != std::string::npos) {
                in_header = false;
                size_t e = header_text.find_first_of(" \n");
                cur = header_text.substr(0, e);
            }
        }
        turn[i] = t;
        role[i] = cur;
    }
    const int last_turn = t;
    bool any = false;
    for (size_t i = 0; i < n; ++i) {
        if (header[i]) continue;
        if (role[i] == "system") continue;
        if (turn[i] == last_turn && turn[i] > 0 && (role[i] == "assistant" || role[i] == "model")) continue;
        // A blank token (the separator before the question, the newline
        // after an end-of-turn marker) carries nothing of the question, and
        // its embedding matches every paragraph break of the document
        // (docs/methods/reform.md, "Blank question tokens").
        if (is_blank_token(tok, query[i])) continue;
        mask[i] = true;
        any = true;
    }
    if (!any)   // nothing left (a bare control sequence, blanks only): score every non-control token
        for (size_t i = 0; i < n; ++i) mask[i] = !tok.is_control(query[i]);
    return mask;
}

} // namespace lctx
