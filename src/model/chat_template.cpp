// ChatML and Gemma chat formatting, equal to what the models' Jinja
// templates render (without a Jinja engine: the two families are fixed
// formats, and only ChatML's optional default system prompt is read from the
// template text).
#include "model/chat_template.h"

#include "common/error.h"

namespace lctx {

ChatFormat detect_chat_format(const std::string &t) {
    if (t.find("<|im_start|>") != std::string::npos) return ChatFormat::CHATML;
    if (t.find("<start_of_turn>") != std::string::npos) return ChatFormat::GEMMA;
    return ChatFormat::UNKNOWN;
}

namespace {

// The default system prompt a ChatML template inserts when the first message
// is not a system message, e.g. SmolLM2's
//   {{ '<|im_start|>system\nYou are a helpful AI assistant ...<|im_end|>\n' }}
// Found as a string literal holding "<|im_start|>system\n<text><|im_end|>".
// Returns false when the template has no such literal (the system turn is
// then built from the messages only).
bool chatml_default_system(const std::string &t, std::string &out) {
    static const std::string open = "<|im_start|>system";
    static const std::string close = "<|im_end|>";
    for (size_t p = t.find(open); p != std::string::npos; p = t.find(open, p + 1)) {
        // The literal's quote character is the one just before the marker.
        if (p == 0 || (t[p - 1] != '\'' && t[p - 1] != '"')) continue;
        const char quote = t[p - 1];
        size_t i = p + open.size();
        // Jinja string escapes: \n, \t, \\, \', \"
        std::string text;
        bool ok = false;
        while (i < t.size()) {
            if (t.compare(i, close.size(), close) == 0) {
                ok = true;
                break;
            }
            char c = t[i];
            if (c == quote) break;  // the literal ends before <|im_end|>: content is not fixed text
            if (c == '\\' && i + 1 < t.size()) {
                const char e = t[i + 1];
                c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
                i += 2;
            } else {
                ++i;
            }
            text.push_back(c);
        }
        if (!ok || text.empty() || text[0] != '\n') continue;
        out = text.substr(1);
        return true;
    }
    return false;
}

// Jinja's |trim (Python str.strip() restricted to ASCII whitespace).
std::string trim(const std::string &s) {
    const char *ws = " \t\n\r\v\f";
    const size_t a = s.find_first_not_of(ws);
    if (a == std::string::npos) return std::string();
    const size_t b = s.find_last_not_of(ws);
    return s.substr(a, b - a + 1);
}

std::string apply_chatml(const std::string &tmpl, const std::vector<ChatMessage> &msgs, bool add_assistant) {
    std::string out;
    std::string def;
    if (!msgs.empty() && msgs[0].role != "system" && chatml_default_system(tmpl, def))
        out += "<|im_start|>system\n" + def + "<|im_end|>\n";
    for (const ChatMessage &m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_assistant) out += "<|im_start|>assistant\n";
    return out;
}

// Gemma 3's template: {{ bos_token }}, a leading system message becomes a
// prefix (content + "\n\n") of the first remaining turn, "assistant" is
// rendered as "model", contents are trimmed.
std::string apply_gemma(const std::string &tmpl, const std::vector<ChatMessage> &msgs, bool add_assistant) {
    std::string out;
    if (tmpl.find("bos_token") != std::string::npos) out += "<bos>";
    size_t first = 0;
    std::string prefix;
    if (!msgs.empty() && msgs[0].role == "system") {
        prefix = msgs[0].content + "\n\n";
        first = 1;
    }
    for (size_t i = first; i < msgs.size(); ++i) {
        const ChatMessage &m = msgs[i];
        // The template raises unless turns alternate user/assistant from a user turn.
        if ((m.role == "user") != ((i - first) % 2 == 0))
            fail(LCTX_ERR_INVALID_ARG, "Gemma chat: roles must alternate user/assistant/... (message %zu is '%s')",
                 i, m.role.c_str());
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n" + (i == first ? prefix : std::string()) + trim(m.content) +
               "<end_of_turn>\n";
    }
    if (add_assistant) out += "<start_of_turn>model\n";
    return out;
}

} // namespace

std::string apply_chat(ChatFormat format, const std::string &template_text, const std::vector<ChatMessage> &messages,
                       bool add_assistant) {
    switch (format) {
    case ChatFormat::CHATML:
        return apply_chatml(template_text, messages, add_assistant);
    case ChatFormat::GEMMA:
        return apply_gemma(template_text, messages, add_assistant);
    default:
        fail(LCTX_ERR_UNSUPPORTED, "chat template not recognised (only ChatML and Gemma are supported)");
    }
}

} // namespace lctx
