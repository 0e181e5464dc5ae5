// The body of POST /v1/chat/completions, read and checked: OpenAI's fields
// that lctx serve honours (model, messages, stream, stream_options,
// max_tokens / max_completion_tokens, temperature, top_p, seed, stop, n = 1)
// and its own: document_id (a document uploaded to /v1/documents; the
// openai client sends it with extra_body), top_k, min_p, repeat_penalty.
// A known field of the wrong type or out of range is refused (400, naming the
// field); fields it does not know are ignored, except features it does not
// have (tools, n > 1, logprobs, a JSON response_format), which are refused.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lctx.h"
#include "serve/engine.h"

namespace lctx::serve {

struct ChatRequest {
    std::string model;
    std::vector<ChatMessage> messages;
    bool stream = false;
    bool include_usage = false;        // stream_options.include_usage
    int64_t max_tokens = -1;           // -1: not given
    lctx_sampling_params sampling{};
    std::vector<std::string> stop;
    std::string document_id;           // "" : a plain chat
};

// The body as JSON; bad JSON (or nesting deeper than 64) is a 400.
nlohmann::json parse_json_body(const std::string &body);
ChatRequest parse_chat_request(const nlohmann::json &body);
// Text a client sent, checked: valid UTF-8 (else a 400 naming `field` and the
// byte offset).
void check_utf8(const std::string &text, const std::string &field);

} // namespace lctx::serve
