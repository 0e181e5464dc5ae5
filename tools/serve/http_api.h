// The HTTP endpoints of lctx serve (OpenAI-compatible where OpenAI has one):
//   GET    /health                  {"status": "ok"}
//   GET    /v1/models, /v1/models/{id}
//   POST   /v1/chat/completions     (stream: server-sent events)
//   POST   /v1/documents            upload and encode a long document
//   GET    /v1/documents, /v1/documents/{id}   progress and state
//   DELETE /v1/documents/{id}
// Every error is {"error": {"message", "type", "param", "code"}} with its
// HTTP status. README.md ("lctx serve") documents the requests.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "serve/document_store.h"
#include "serve/engine.h"
#include "serve/slot_pool.h"

namespace httplib {
class Server;
}

namespace lctx::serve {

struct ApiOptions {
    int parallel = 1;                 // worker slots
    int queue = 16;                   // requests that may wait for a slot
    double timeout_s = 300;           // per request, the wait for a slot included
    size_t max_body = 32u << 20;      // bytes
    int64_t max_tokens = 512;         // answer tokens when a request gives no max_tokens
};

class HttpApi {
  public:
    HttpApi(Engine &engine, DocumentStore &docs, ApiOptions opts);

    // Registers the routes, the body limit and the error handlers on `svr`.
    void install(httplib::Server &svr);
    // New requests get 503; running ones stop at their next check.
    void begin_shutdown();

  private:
    Engine &engine_;
    DocumentStore &docs_;
    ApiOptions opts_;
    SlotPool slots_;
    std::atomic<bool> shutting_down_{false};
    int64_t started_ = 0;
};

} // namespace lctx::serve
