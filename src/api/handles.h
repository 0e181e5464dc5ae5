// The structs behind the opaque handles of lctx.h, and the guard that turns
// C++ exceptions into a status + last-error message at the C boundary.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/error.h"
#include "lctx.h"
#include "model/model.h"
#include "session/session.h"

struct lctx_model {
    std::unique_ptr<lctx::Model> model;
    std::string backend;   // lctx_model_params.backend ("" for the default choice)
};

struct lctx_session {
    const lctx_model *owner = nullptr;
    std::unique_ptr<lctx::Session> session;
    std::string last_error;
};

struct lctx_selection {
    lctx::Selection sel;
};

namespace lctx::api {

// Records a failure: thread-local message (and the session's, when given).
lctx_status set_error(lctx_status status, const std::string &message, lctx_session *session = nullptr);

// Runs body; returns LCTX_OK or the status of what it threw. Never throws.
template <class Body>
lctx_status guarded(lctx_session *session, Body &&body) noexcept {
    try {
        std::forward<Body>(body)();
        return LCTX_OK;
    } catch (const lctx::Error &e) {
        return set_error(e.status(), e.what(), session);
    } catch (const std::bad_alloc &) {
        return set_error(LCTX_ERR_OUT_OF_MEMORY, "out of memory", session);
    } catch (const std::exception &e) {
        return set_error(LCTX_ERR_INTERNAL, std::string("internal error: ") + e.what(), session);
    } catch (...) {
        return set_error(LCTX_ERR_INTERNAL, "internal error: unknown exception", session);
    }
}

// Throws LCTX_ERR_INVALID_ARG "<fn>: <name> is NULL" when p is null.
inline void require(const void *p, const char *fn, const char *name) {
    if (!p) lctx::fail(LCTX_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
}

// Copies `s` into a caller buffer (NUL-terminated when room allows).
// Sets *n_out to s.size(); throws LCTX_ERR_BUFFER_TOO_SMALL when it does not fit.
void copy_out(const std::string &s, char *buf, size_t buf_size, size_t *n_out, const char *fn);

} // namespace lctx::api
