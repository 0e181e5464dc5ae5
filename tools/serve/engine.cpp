#include "serve/engine.h"

#include <cstdio>

#include "serve/text_stream.h"

namespace lctx::serve {

namespace {

std::string session_error(const lctx_session *s) {
    const char *m = s ? lctx_session_last_error(s) : nullptr;
    if (!m || !*m) m = lctx_last_error();
    return m && *m ? m : "no details";
}

} // namespace

ApiError lctx_error(lctx_status st, const std::string &what, const std::string &detail) {
    const std::string msg = what + " failed (" + lctx_status_string(st) + "): " + detail;
    switch (st) {
    case LCTX_ERR_OUT_OF_MEMORY:
        return ApiError(400, "invalid_request_error", msg + " (the server's --max-memory bounds each session)",
                        "memory_limit_exceeded");
    case LCTX_ERR_CONTEXT_FULL:
        return ApiError(400, "invalid_request_error", msg, "context_length_exceeded");
    case LCTX_ERR_INVALID_ARG:
    case LCTX_ERR_UNSUPPORTED:
        return ApiError(400, "invalid_request_error", msg);
    default:
        return ApiError(500, "server_error", msg);
    }
}

int SessionBox::progress(float done, void *user_data) {
    auto *box = static_cast<SessionBox *>(user_data);
    return box->on_progress && box->on_progress(done) ? 1 : 0;
}

StopReason RequestControl::reason() const {
    if (disconnected) return StopReason::DISCONNECTED;
    if (shutting_down && shutting_down->load()) return StopReason::SHUTDOWN;
    if (std::chrono::steady_clock::now() >= deadline) return StopReason::TIMEOUT;
    return StopReason::NONE;
}

ApiError RequestControl::error() const {
    switch (reason()) {
    case StopReason::TIMEOUT:
        return ApiError(504, "timeout_error", "the request took longer than the server's --timeout", "timeout");
    case StopReason::SHUTDOWN:
        return ApiError(503, "server_error", "the server is shutting down", "shutting_down");
    case StopReason::DISCONNECTED:
        return ApiError(499, "client_closed_request", "the client closed the connection");
    default:
        return ApiError(500, "server_error", "request stopped for no reason");
    }
}

Engine::Engine(lctx_model *model, std::string model_id, EngineOptions opts)
    : model_(model), model_id_(std::move(model_id)), opts_(opts) {}

Engine::~Engine() { lctx_model_free(model_); }

std::vector<lctx_token> Engine::tokenize(const std::string &text, bool add_special, bool parse_special) const {
    std::vector<lctx_token> ids(text.size() + 8);
    size_t n = 0;
    lctx_status st = lctx_tokenize(model_, text.data(), text.size(), add_special, parse_special, ids.data(),
                                   ids.size(), &n);
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        ids.resize(n);
        st = lctx_tokenize(model_, text.data(), text.size(), add_special, parse_special, ids.data(), ids.size(), &n);
    }
    if (st != LCTX_OK) throw lctx_error(st, "tokenizing", lctx_last_error());
    ids.resize(n);
    return ids;
}

std::string Engine::piece(lctx_token t) const {
    char buf[128];
    size_t n = 0;
    lctx_status st = lctx_token_to_piece(model_, t, false, buf, sizeof buf, &n);
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        std::string s(n, '\0');
        st = lctx_token_to_piece(model_, t, false, s.data(), s.size(), &n);
        if (st != LCTX_OK) throw lctx_error(st, "token_to_piece", lctx_last_error());
        return s;
    }
    if (st != LCTX_OK) throw lctx_error(st, "token_to_piece", lctx_last_error());
    return std::string(buf, n);
}

std::string Engine::chat_prompt(const std::vector<ChatMessage> &messages) const {
    std::vector<lctx_chat_message> msgs;
    for (const auto &m : messages) msgs.push_back({m.role.c_str(), m.content.c_str()});
    size_t n = 0;
    lctx_status st = lctx_chat_apply(model_, msgs.data(), msgs.size(), true, nullptr, 0, &n);
    if (st != LCTX_OK && st != LCTX_ERR_BUFFER_TOO_SMALL) throw lctx_error(st, "applying the chat template", lctx_last_error());
    std::vector<char> out(n + 1);
    st = lctx_chat_apply(model_, msgs.data(), msgs.size(), true, out.data(), out.size(), &n);
    if (st != LCTX_OK) throw lctx_error(st, "applying the chat template", lctx_last_error());
    return std::string(out.data(), n);
}

void Engine::document_parts(const std::vector<ChatMessage> &messages, std::string &before, std::string &after) const {
    // A mark no text can hold (control bytes) stands for the document.
    static const std::string mark = "\x01\x02LCTXDOC\x02\x01";
    std::vector<ChatMessage> turns;
    bool first_user = true;
    for (const auto &m : messages) {
        if (m.role == "system") continue;
        turns.push_back(m);
        if (m.role == "user" && first_user) {
            turns.back().content = mark + (m.content.empty() ? "" : "\n\n" + m.content);
            first_user = false;
        }
    }
    if (first_user) throw bad_request("a chat about a document needs a user message (the question)", "messages");
    if (turns[0].role != "user")
        throw bad_request("a chat about a document starts with a user message (the document is read at its start)",
                          "messages");
    const std::string text = chat_prompt(turns);
    const size_t at = text.find(mark);
    if (at == std::string::npos) throw ApiError(500, "server_error", "the chat template dropped the document");
    before = text.substr(0, at);
    after = text.substr(at + mark.size());
}

lctx_session_params Engine::session_params(lctx_method method, SessionBox &box) const {
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = method;
    sp.n_threads = opts_.n_threads;
    sp.max_memory = opts_.max_memory;
    sp.progress = &SessionBox::progress;
    sp.progress_user_data = &box;
    return sp;
}

std::unique_ptr<SessionBox> Engine::plain_session(int32_t n_ctx) const {
    auto box = std::make_unique<SessionBox>();
    lctx_session_params sp = session_params(LCTX_METHOD_FULL, *box);
    sp.n_ctx = n_ctx;
    lctx_status st = lctx_session_create(model_, &sp, &box->session);
    if (st != LCTX_OK) throw lctx_error(st, "creating the session", lctx_last_error());
    // The prompt is the question of an empty document.
    st = lctx_build_index(box->session);
    if (st != LCTX_OK) throw lctx_error(st, "build_index", session_error(box->session));
    return box;
}

Answer Engine::answer(SessionBox &box, const std::vector<lctx_token> &query, int64_t max_tokens,
                      const lctx_sampling_params &sampling, const std::vector<std::string> &stop, RequestControl &ctl,
                      const std::function<bool(const std::string &)> &on_text) const {
    double last_ping = 0;
    box.on_progress = [&](float) {
        if (ctl.keep_alive) {
            const double t =
                std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
            if (t - last_ping >= 1.0) {
                last_ping = t;
                if (!ctl.keep_alive()) ctl.disconnected = true;
            }
        }
        return ctl.reason() != StopReason::NONE;
    };
    struct Unhook {   // the box may outlive this call (a document's cached session)
        SessionBox &b;
        ~Unhook() { b.on_progress = nullptr; }
    } unhook{box};
    lctx_session *s = box.session;

    lctx_selection *sel = nullptr;
    lctx_status st = lctx_select(s, query.data(), query.size(), &sel);
    if (st == LCTX_ERR_CANCELLED) throw ctl.error();
    if (st != LCTX_OK) throw lctx_error(st, "select", session_error(s));
    Answer ans;
    ans.n_selected = lctx_selection_size(sel);
    st = lctx_recompute(s, sel);
    lctx_selection_free(sel);
    if (st == LCTX_ERR_CANCELLED) throw ctl.error();
    if (st != LCTX_OK) throw lctx_error(st, "processing the prompt", session_error(s));

    TextStream text(stop);
    ans.finish_reason = "length";
    for (; ans.n_generated < max_tokens;) {
        if (ctl.reason() != StopReason::NONE) throw ctl.error();
        lctx_token tok = -1;
        st = lctx_decode(s, &sampling, &tok);
        if (st == LCTX_ERR_CONTEXT_FULL) break;   // the decode cache is full: the answer ends as at max_tokens
        if (st == LCTX_ERR_CANCELLED) throw ctl.error();
        if (st != LCTX_OK) throw lctx_error(st, "decode", session_error(s));
        if (lctx_token_is_eog(model_, tok)) {
            ans.finish_reason = "stop";
            break;
        }
        ++ans.n_generated;
        const std::string out = text.push(piece(tok));
        if (!out.empty() && on_text && !on_text(out)) {
            ctl.disconnected = true;
            throw ctl.error();
        }
        if (text.stopped()) {
            ans.finish_reason = "stop";
            break;
        }
    }
    const std::string rest = text.finish();
    if (!rest.empty() && on_text && !on_text(rest)) {
        ctl.disconnected = true;
        throw ctl.error();
    }
    ans.text = text.text();
    return ans;
}

} // namespace lctx::serve
