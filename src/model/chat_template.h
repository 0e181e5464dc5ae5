// Chat formatting for the template families lctx recognises in
// tokenizer.chat_template: ChatML (<|im_start|>role\n...<|im_end|>\n) and
// Gemma (<start_of_turn>user\n...<end_of_turn>\n, system folded into the
// first user turn). Anything else: lctx::Error(LCTX_ERR_UNSUPPORTED).
#pragma once

#include <string>
#include <vector>

namespace lctx {

enum class ChatFormat { UNKNOWN, CHATML, GEMMA };

struct ChatMessage {
    std::string role;
    std::string content;
};

ChatFormat detect_chat_format(const std::string &template_text);

// The text to tokenize (with parse_special). For ChatML, when the template
// inserts a default system message (SmolLM2 does), it is inserted here too,
// so the output equals what the Jinja template renders.
std::string apply_chat(ChatFormat format, const std::string &template_text, const std::vector<ChatMessage> &messages,
                       bool add_assistant);

} // namespace lctx
