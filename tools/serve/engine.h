// The model side of lctx serve, through the public C API only: one shared
// lctx_model, sessions made from it, the chat template, and answering a
// question on a session (select, recompute, decode) under a request's limits
// (deadline, client gone, shutdown). Errors are thrown as ApiError.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lctx.h"
#include "serve/api_error.h"

namespace lctx::serve {

struct EngineOptions {
    int32_t n_threads = 0;        // per session; 0: all cores
    uint64_t max_memory = 0;      // bytes per session (lctx_session_params.max_memory); 0: no limit
};

struct ChatMessage {
    std::string role;      // "system", "user", "assistant"
    std::string content;
};

// A session and the hook its progress callback calls: the callback is fixed
// when the session is made, the request using it changes (a document's
// session serves one question after another), so the request sets `on_progress`.
struct SessionBox {
    lctx_session *session = nullptr;
    std::function<bool(float)> on_progress;   // returns true to cancel the running call

    SessionBox() = default;
    ~SessionBox() { lctx_session_free(session); }
    SessionBox(const SessionBox &) = delete;
    SessionBox &operator=(const SessionBox &) = delete;

    static int progress(float done, void *user_data);
};

// Why a request stops before its answer is complete.
enum class StopReason { NONE, TIMEOUT, DISCONNECTED, SHUTDOWN };

// A request's limits, checked between tokens and inside long calls.
struct RequestControl {
    std::chrono::steady_clock::time_point deadline;
    const std::atomic<bool> *shutting_down = nullptr;
    bool disconnected = false;
    // Called during long calls (at most once a second) on streamed requests:
    // writes a keep-alive comment; false: the client is gone.
    std::function<bool()> keep_alive;

    StopReason reason() const;
    ApiError error() const;   // the error of reason() (not NONE)
};

struct Answer {
    std::string text;
    int64_t n_generated = 0;
    int64_t n_selected = 0;        // document tokens gathered for the question (documents)
    std::string finish_reason;     // "stop" or "length"
};

class Engine {
  public:
    Engine(lctx_model *model, std::string model_id, EngineOptions opts);
    ~Engine();

    const std::string &model_id() const { return model_id_; }
    const lctx_model *model() const { return model_; }
    int32_t n_ctx_train() const { return lctx_model_n_ctx_train(model_); }
    const EngineOptions &options() const { return opts_; }

    std::vector<lctx_token> tokenize(const std::string &text, bool add_special, bool parse_special) const;
    std::string piece(lctx_token t) const;
    // The conversation in the chat template, ending with the assistant's header.
    std::string chat_prompt(const std::vector<ChatMessage> &messages) const;
    // The template split around a document placed at the start of the first
    // user message: `before` (up to the document) and `after` (the rest of
    // that message, the later turns, the assistant's header). System messages
    // are left out: the document was read after the template's own system part.
    void document_parts(const std::vector<ChatMessage> &messages, std::string &before, std::string &after) const;

    // Session parameters of this server (threads, memory bound, progress hook).
    lctx_session_params session_params(lctx_method method, SessionBox &box) const;
    // A FULL session with an empty document, for a plain chat of n_ctx tokens.
    std::unique_ptr<SessionBox> plain_session(int32_t n_ctx) const;

    // Answers `query` on a session whose document is indexed: select,
    // recompute, decode up to max_tokens. on_text gets the text as it can be
    // sent (it returns false when the client is gone).
    Answer answer(SessionBox &box, const std::vector<lctx_token> &query, int64_t max_tokens,
                  const lctx_sampling_params &sampling, const std::vector<std::string> &stop, RequestControl &ctl,
                  const std::function<bool(const std::string &)> &on_text) const;

  private:
    lctx_model *model_;
    std::string model_id_;
    EngineOptions opts_;
};

} // namespace lctx::serve
