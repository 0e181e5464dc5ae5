// Tokenization, detokenization and chat formatting.
#include <cstring>

#include "api/handles.h"
#include "model/chat_template.h"

using lctx::api::copy_out;
using lctx::api::guarded;
using lctx::api::require;

extern "C" {

LCTX_API lctx_status lctx_tokenize(const lctx_model *model, const char *text, size_t text_len, bool add_special,
                                   bool parse_special, lctx_token *tokens, size_t capacity, size_t *n_out) {
    return guarded(nullptr, [&] {
        require(model, "lctx_tokenize", "model");
        require(n_out, "lctx_tokenize", "n_out");
        if (text_len > 0) require(text, "lctx_tokenize", "text");
        std::vector<int32_t> ids =
            model->model->tokenizer().tokenize(std::string_view(text ? text : "", text_len), add_special, parse_special);
        *n_out = ids.size();
        if (capacity < ids.size())
            lctx::fail(LCTX_ERR_BUFFER_TOO_SMALL, "lctx_tokenize: capacity %zu is too small, %zu tokens are needed",
                       capacity, ids.size());
        if (!ids.empty()) {
            require(tokens, "lctx_tokenize", "tokens");
            std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
        }
    });
}

LCTX_API lctx_status lctx_token_to_piece(const lctx_model *model, lctx_token token, bool special, char *buf,
                                         size_t buf_size, size_t *n_out) {
    return guarded(nullptr, [&] {
        require(model, "lctx_token_to_piece", "model");
        const lctx::Tokenizer &tok = model->model->tokenizer();
        if (token < 0 || token >= tok.n_vocab())
            lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_token_to_piece: token id %d is out of range [0, %d)", token,
                       tok.n_vocab());
        copy_out(tok.token_to_piece(token, special), buf, buf_size, n_out, "lctx_token_to_piece");
    });
}

LCTX_API lctx_status lctx_detokenize(const lctx_model *model, const lctx_token *tokens, size_t n_tokens, bool special,
                                     char *buf, size_t buf_size, size_t *n_out) {
    return guarded(nullptr, [&] {
        require(model, "lctx_detokenize", "model");
        if (n_tokens > 0) require(tokens, "lctx_detokenize", "tokens");
        const lctx::Tokenizer &tok = model->model->tokenizer();
        for (size_t i = 0; i < n_tokens; ++i)
            if (tokens[i] < 0 || tokens[i] >= tok.n_vocab())
                lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_detokenize: token id %d at index %zu is out of range [0, %d)",
                           tokens[i], i, tok.n_vocab());
        copy_out(tok.detokenize(tokens, n_tokens, special), buf, buf_size, n_out, "lctx_detokenize");
    });
}

LCTX_API lctx_status lctx_chat_apply(const lctx_model *model, const lctx_chat_message *messages, size_t n_messages,
                                     bool add_assistant, char *buf, size_t buf_size, size_t *n_out) {
    return guarded(nullptr, [&] {
        require(model, "lctx_chat_apply", "model");
        if (n_messages > 0) require(messages, "lctx_chat_apply", "messages");
        std::vector<lctx::ChatMessage> msgs;
        for (size_t i = 0; i < n_messages; ++i) {
            if (!messages[i].role || !messages[i].content)
                lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_chat_apply: message %zu has a NULL role or content", i);
            msgs.push_back({messages[i].role, messages[i].content});
        }
        const std::string &tmpl = model->model->chat_template();
        lctx::ChatFormat fmt = lctx::detect_chat_format(tmpl);
        // Gemma 2/3 base checkpoints ship no template: their family's turn format
        // (BOS comes from the tokenizer's add_bos, not from the text).
        const lctx::Arch arch = model->model->hparams().arch_id;
        if (fmt == lctx::ChatFormat::UNKNOWN && tmpl.empty() && (arch == lctx::Arch::GEMMA3 || arch == lctx::Arch::GEMMA2))
            fmt = lctx::ChatFormat::GEMMA;
        if (fmt == lctx::ChatFormat::UNKNOWN)
            lctx::fail(LCTX_ERR_UNSUPPORTED, tmpl.empty()
                           ? "lctx_chat_apply: the model has no chat template"
                           : "lctx_chat_apply: the model's chat template is neither ChatML nor Gemma");
        copy_out(lctx::apply_chat(fmt, tmpl, msgs, add_assistant), buf, buf_size, n_out, "lctx_chat_apply");
    });
}

} // extern "C"
