#include "serve/http_api.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>

#include "serve/chat_request.h"

namespace lctx::serve {

using nlohmann::json;

namespace {

// Text that is not valid UTF-8 (a model may emit half a character before
// stopping) is replaced by U+FFFD when serialised, never thrown on.
std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_json(const ApiError &e) {
    return {{"error",
             {{"message", e.what()},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

void send_json(httplib::Response &res, int status, const json &j) {
    res.status = status;
    res.set_content(dump(j), "application/json");
}

void send_error(httplib::Response &res, const ApiError &e) {
    send_json(res, e.status, error_json(e));
    if (e.status == 503 || e.status == 429) res.set_header("Retry-After", "1");
}

std::string random_hex(size_t n) {
    static std::mutex mu;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard<std::mutex> lock(mu);
    static const char *hex = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) s += hex[rng() & 15];
    return s;
}

// Runs fn, turning what it throws into the error response.
template <class F> void run_guarded(httplib::Response &res, F &&fn) {
    try {
        fn();
    } catch (const ApiError &e) {
        send_error(res, e);
    } catch (const std::bad_alloc &) {
        send_error(res, ApiError(503, "server_error", "out of memory", "out_of_memory"));
    } catch (const std::exception &e) {
        send_error(res, ApiError(500, "server_error", std::string("internal error: ") + e.what()));
    }
}

template <class F> httplib::Server::Handler guarded(F f) {
    return [f](const httplib::Request &req, httplib::Response &res) { run_guarded(res, [&] { f(req, res); }); };
}

// A handler of a request body, read here with the --max-body limit (httplib's
// own limit does not cover chunked bodies): f(req, res, body).
template <class F> httplib::Server::HandlerWithContentReader with_body(size_t max_body, F f) {
    return [max_body, f](const httplib::Request &req, httplib::Response &res, const httplib::ContentReader &reader) {
        run_guarded(res, [&] {
            if (req.is_multipart_form_data()) throw bad_request("multipart bodies are not accepted: send text or JSON");
            std::string body;
            bool too_large = false;
            reader([&](const char *data, size_t n) {
                if (body.size() + n > max_body) {
                    too_large = true;
                    return false;
                }
                body.append(data, n);
                return true;
            });
            if (too_large) {
                res.set_header("Connection", "close");
                throw ApiError(413, "invalid_request_error",
                               "the body is larger than the server's --max-body (" + std::to_string(max_body) + " bytes)",
                               "payload_too_large");
            }
            f(req, res, body);
        });
    };
}

// One chat completion from the slot it holds to its answer.
struct ChatJob {
    Engine *engine = nullptr;
    DocumentStore *docs = nullptr;
    const std::atomic<bool> *shutting_down = nullptr;
    ChatRequest req;
    std::shared_ptr<Document> doc;
    std::vector<lctx_token> query;
    int64_t max_tokens = 0;
    std::string id;
    int64_t created = 0;
    std::chrono::steady_clock::time_point deadline;
    std::unique_ptr<SlotPool::Slot> slot;

    Answer run(RequestControl &ctl, const std::function<bool(const std::string &)> &on_text) {
        if (doc) {
            struct Lease {   // the session goes back to the document however the question ends
                DocumentStore *docs;
                std::shared_ptr<Document> doc;
                std::unique_ptr<SessionBox> box;
                ~Lease() { docs->give_back(doc, std::move(box)); }
            } lease{docs, doc, docs->borrow(doc, ctl)};
            return engine->answer(*lease.box, query, max_tokens, req.sampling, req.stop, ctl, on_text);
        }
        const int64_t n_ctx = int64_t(query.size()) + max_tokens + 1;
        auto box = engine->plain_session(int32_t(std::min<int64_t>(n_ctx, INT32_MAX)));
        return engine->answer(*box, query, max_tokens, req.sampling, req.stop, ctl, on_text);
    }

    RequestControl control() const {
        RequestControl ctl;
        ctl.deadline = deadline;
        ctl.shutting_down = shutting_down;
        return ctl;
    }

    json usage(const Answer &a) const {
        const int64_t prompt = int64_t(query.size());
        json u = {{"prompt_tokens", prompt},
                  {"completion_tokens", a.n_generated},
                  {"total_tokens", prompt + a.n_generated}};
        return u;
    }

    json lctx_info(const Answer &a) const {
        json j = json::object();
        if (doc) {
            std::lock_guard<std::mutex> lock(doc->mu);
            j = {{"document_id", doc->id},
                 {"method", lctx_method_name(doc->method)},
                 {"document_tokens", doc->tokens_total},
                 {"selected_tokens", a.n_selected}};
        }
        return j;
    }

    json chunk(const json &delta, const json &finish) const {
        return {{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", created},
                {"model", engine->model_id()},
                {"system_fingerprint", std::string("lctx-") + lctx_version()},
                {"choices", json::array({{{"index", 0}, {"delta", delta}, {"logprobs", nullptr},
                                          {"finish_reason", finish}}})}};
    }

    // The whole streamed answer, written to the sink as server-sent events.
    // False when the client went away.
    bool stream(httplib::DataSink &sink) {
        auto send = [&](const json &j) {
            const std::string ev = "data: " + dump(j) + "\n\n";
            return sink.write(ev.data(), ev.size());
        };
        RequestControl ctl = control();
        ctl.keep_alive = [&] {
            static const std::string ping = ": keep-alive\n\n";   // an SSE comment: clients skip it
            return sink.write(ping.data(), ping.size());
        };
        if (!send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
        try {
            Answer a = run(ctl, [&](const std::string &text) { return send(chunk({{"content", text}}, nullptr)); });
            json last = chunk(json::object(), a.finish_reason);
            if (doc) last["lctx"] = lctx_info(a);
            if (!send(last)) return false;
            if (req.include_usage) {
                json u = chunk(json::object(), nullptr);
                u["choices"] = json::array();
                u["usage"] = usage(a);
                if (!send(u)) return false;
            }
            static const std::string done = "data: [DONE]\n\n";
            if (!sink.write(done.data(), done.size())) return false;
        } catch (const ApiError &e) {
            if (ctl.disconnected) return false;
            std::fprintf(stderr, "lctx serve: %s: %s\n", id.c_str(), e.what());
            send(error_json(e));
        } catch (const std::exception &e) {
            send(error_json(ApiError(500, "server_error", std::string("internal error: ") + e.what())));
        }
        sink.done();
        return true;
    }
};

} // namespace

HttpApi::HttpApi(Engine &engine, DocumentStore &docs, ApiOptions opts)
    : engine_(engine), docs_(docs), opts_(opts), slots_(opts.parallel, opts.queue),
      started_(static_cast<int64_t>(std::time(nullptr))) {}

void HttpApi::begin_shutdown() {
    shutting_down_ = true;
    slots_.close();
}

void HttpApi::install(httplib::Server &svr) {
    svr.set_payload_max_length(opts_.max_body);
    // A body announced as too large is refused before it is read.
    svr.set_pre_routing_handler([this](const httplib::Request &req, httplib::Response &res) {
        if (req.has_header("Content-Length")) {
            const std::string v = req.get_header_value("Content-Length");
            errno = 0;
            char *end = nullptr;
            const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
            if (!v.empty() && *end == '\0' && errno == 0 && n > opts_.max_body) {
                send_error(res, ApiError(413, "invalid_request_error",
                                         "the body has " + v + " bytes, more than the server's --max-body (" +
                                             std::to_string(opts_.max_body) + ")",
                                         "payload_too_large"));
                res.set_header("Connection", "close");
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    // Errors httplib answers itself (no route, a body past the limit, a bad request line).
    svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string msg, type = "invalid_request_error", code;
        if (res.status == 404) msg = "no endpoint " + req.method + " " + req.path, code = "unknown_url";
        else if (res.status == 413) msg = "the body is larger than the server's --max-body", code = "payload_too_large";
        else if (res.status >= 500) msg = "internal error", type = "server_error";
        else msg = "bad request (a malformed request, or a method this endpoint does not take)";
        send_error(res, ApiError(res.status, type, msg, code));
        return httplib::Server::HandlerResponse::Handled;
    }));
    svr.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception &e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, "server_error", "internal error: " + what));
    });

    svr.Get("/health", guarded([this](const httplib::Request &, httplib::Response &res) {
        send_json(res, 200, {{"status", shutting_down_ ? "shutting_down" : "ok"},
                             {"slots_busy", slots_.busy()},
                             {"slots_total", opts_.parallel},
                             {"queued", slots_.waiting()}});
    }));

    auto model_json = [this] {
        return json{{"id", engine_.model_id()},
                    {"object", "model"},
                    {"created", started_},
                    {"owned_by", "lctx"},
                    {"context_length", engine_.n_ctx_train()},
                    {"architecture", lctx_model_architecture(engine_.model())}};
    };
    svr.Get("/v1/models", guarded([model_json](const httplib::Request &, httplib::Response &res) {
        send_json(res, 200, {{"object", "list"}, {"data", json::array({model_json()})}});
    }));
    svr.Get(R"(/v1/models/(.+))", guarded([this, model_json](const httplib::Request &req, httplib::Response &res) {
        if (req.matches[1] != engine_.model_id())
            throw ApiError(404, "invalid_request_error", "the model '" + std::string(req.matches[1]) +
                                                             "' does not exist; GET /v1/models lists the one served",
                           "model_not_found", "model");
        send_json(res, 200, model_json());
    }));

    svr.Post("/v1/chat/completions", with_body(opts_.max_body, [this](const httplib::Request &, httplib::Response &res,
                                                                        std::string &body) {
        if (shutting_down_) throw ApiError(503, "server_error", "the server is shutting down", "shutting_down");
        auto job = std::make_shared<ChatJob>();
        job->engine = &engine_;
        job->docs = &docs_;
        job->shutting_down = &shutting_down_;
        job->deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000));
        job->req = parse_chat_request(parse_json_body(body));
        const ChatRequest &cr = job->req;
        if (cr.model != engine_.model_id())
            throw ApiError(404, "invalid_request_error",
                           "the model '" + cr.model + "' does not exist; this server serves '" + engine_.model_id() + "'",
                           "model_not_found", "model");
        const int64_t n_train = engine_.n_ctx_train();
        if (!cr.document_id.empty()) {
            job->doc = docs_.get(cr.document_id);
            if (!job->doc)
                throw ApiError(404, "invalid_request_error", "no document '" + cr.document_id + "'",
                               "document_not_found", "document_id");
            if (!job->doc->ready()) {
                const json st = job->doc->to_json();
                throw ApiError(409, "invalid_request_error",
                               "document " + cr.document_id + " is not ready (state " + st["state"].get<std::string>() +
                                   (st.contains("message") ? ": " + st["message"].get<std::string>() : "") + ")",
                               "document_not_ready", "document_id");
            }
            std::string before, after;
            engine_.document_parts(cr.messages, before, after);
            job->query = engine_.tokenize(after, false, true);
            if (int64_t(job->query.size()) >= n_train / 2)
                throw ApiError(400, "invalid_request_error",
                               "the question has " + std::to_string(job->query.size()) +
                                   " tokens; a question about a document may have less than " +
                                   std::to_string(n_train / 2),
                               "context_length_exceeded", "messages");
            // The decode cache ends the answer when it is full (finish_reason "length").
            job->max_tokens = cr.max_tokens > 0 ? cr.max_tokens : opts_.max_tokens;
        } else {
            job->query = engine_.tokenize(engine_.chat_prompt(cr.messages), false, true);
            const int64_t n = int64_t(job->query.size());
            const int64_t want = cr.max_tokens > 0 ? cr.max_tokens : 1;
            if (n + want > n_train)
                throw ApiError(400, "invalid_request_error",
                               "this model's context holds " + std::to_string(n_train) + " tokens; the messages take " +
                                   std::to_string(n) + (cr.max_tokens > 0 ? " and max_tokens asks " +
                                                                                std::to_string(cr.max_tokens) + " more"
                                                                          : "") +
                                   " (upload long text to /v1/documents and ask about it with document_id)",
                               "context_length_exceeded", "messages");
            job->max_tokens = cr.max_tokens > 0 ? cr.max_tokens : std::min(opts_.max_tokens, n_train - n);
        }
        job->id = "chatcmpl-" + random_hex(24);
        job->created = static_cast<int64_t>(std::time(nullptr));

        switch (slots_.acquire(job->deadline, job->slot)) {
        case SlotPool::Result::OK: break;
        case SlotPool::Result::QUEUE_FULL:
            throw ApiError(503, "server_error",
                           "the server is busy: every worker slot (--parallel) is taken and the wait line (--queue) is "
                           "full; try again",
                           "server_busy");
        case SlotPool::Result::TIMEOUT:
            throw ApiError(503, "server_error", "no worker slot came free within --timeout", "server_busy");
        case SlotPool::Result::CLOSED:
            throw ApiError(503, "server_error", "the server is shutting down", "shutting_down");
        }

        if (cr.stream) {
            res.set_header("Cache-Control", "no-cache");
            res.set_header("X-Accel-Buffering", "no");
            res.set_chunked_content_provider(
                "text/event-stream",
                [job](size_t, httplib::DataSink &sink) { return job->stream(sink); },
                // Runs however the response ends (client gone included): the slot comes free.
                [job](bool) { job->slot.reset(); });
            return;
        }
        RequestControl ctl = job->control();
        Answer a = job->run(ctl, nullptr);
        job->slot.reset();
        json out = {{"id", job->id},
                    {"object", "chat.completion"},
                    {"created", job->created},
                    {"model", engine_.model_id()},
                    {"system_fingerprint", std::string("lctx-") + lctx_version()},
                    {"choices", json::array({{{"index", 0},
                                              {"message", {{"role", "assistant"}, {"content", a.text}}},
                                              {"logprobs", nullptr},
                                              {"finish_reason", a.finish_reason}}})},
                    {"usage", job->usage(a)}};
        if (job->doc) out["lctx"] = job->lctx_info(a);
        send_json(res, 200, out);
    }));

    svr.Post("/v1/documents", with_body(opts_.max_body, [this](const httplib::Request &req, httplib::Response &res,
                                                                 std::string &body_text) {
        if (shutting_down_) throw ApiError(503, "server_error", "the server is shutting down", "shutting_down");
        std::string text, method_name = "reform", name;
        if (req.has_param("method")) method_name = req.get_param_value("method");
        if (req.has_param("name")) name = req.get_param_value("name");
        const std::string ctype = req.get_header_value("Content-Type");
        if (ctype.compare(0, 16, "application/json") == 0) {
            const json body = parse_json_body(body_text);
            if (!body.is_object()) throw bad_request("the body must be a JSON object with 'text'");
            if (!body.contains("text")) throw bad_request("'text' (the document) is required", "text");
            if (!body["text"].is_string())
                throw bad_request(std::string("'text' must be a string, got ") + body["text"].type_name(), "text");
            text = body["text"].get<std::string>();
            for (const char *f : {"method", "name"})
                if (body.contains(f) && !body[f].is_null() && !body[f].is_string())
                    throw bad_request(std::string("'") + f + "' must be a string", f);
            if (body.contains("method") && body["method"].is_string()) method_name = body["method"];
            if (body.contains("name") && body["name"].is_string()) name = body["name"];
        } else {
            text = std::move(body_text);   // the document as it is (text/plain or anything else)
        }
        if (std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
            throw bad_request("the document is empty", "text");
        check_utf8(text, "text");
        check_utf8(name, "name");
        lctx_method method;
        if (lctx_method_from_name(method_name.c_str(), &method) != LCTX_OK)
            throw bad_request(lctx_last_error(), "method");
        if (!lctx_method_is_implemented(method))
            throw bad_request("the method '" + method_name + "' is not implemented", "method");
        auto doc = docs_.add(std::move(text), method, name);
        res.set_header("Location", "/v1/documents/" + doc->id);
        send_json(res, 202, doc->to_json());
    }));
    svr.Get("/v1/documents", guarded([this](const httplib::Request &, httplib::Response &res) {
        send_json(res, 200, docs_.list());
    }));
    svr.Get(R"(/v1/documents/([^/]+))", guarded([this](const httplib::Request &req, httplib::Response &res) {
        auto doc = docs_.get(req.matches[1]);
        if (!doc)
            throw ApiError(404, "invalid_request_error", "no document '" + std::string(req.matches[1]) + "'",
                           "document_not_found");
        send_json(res, 200, doc->to_json());
    }));
    svr.Delete(R"(/v1/documents/([^/]+))", guarded([this](const httplib::Request &req, httplib::Response &res) {
        const std::string id = req.matches[1];
        if (!docs_.remove(id))
            throw ApiError(404, "invalid_request_error", "no document '" + id + "'", "document_not_found");
        send_json(res, 200, {{"id", id}, {"object", "document.deleted"}, {"deleted", true}});
    }));
}

} // namespace lctx::serve
