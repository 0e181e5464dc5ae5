// An error the server answers with: HTTP status and the OpenAI error object
// {"error": {"message", "type", "param", "code"}}.
#pragma once

#include <stdexcept>
#include <string>

#include "lctx.h"

namespace lctx::serve {

struct ApiError : std::runtime_error {
    int status;
    std::string type;    // "invalid_request_error", "not_found_error", "server_error", ...
    std::string code;    // "" (null) or a machine-readable code ("model_not_found")
    std::string param;   // "" (null) or the request field at fault

    ApiError(int status_, std::string type_, const std::string &message, std::string code_ = "",
             std::string param_ = "")
        : std::runtime_error(message), status(status_), type(std::move(type_)), code(std::move(code_)),
          param(std::move(param_)) {}
};

inline ApiError bad_request(const std::string &message, const std::string &param = "", const std::string &code = "") {
    return ApiError(400, "invalid_request_error", message, code, param);
}

// An lctx call's failure as the error a client gets: a request too large for
// the session's memory bound or context is the client's (400); the rest is
// the server's (500). `what` names the call.
ApiError lctx_error(lctx_status st, const std::string &what, const std::string &detail);

} // namespace lctx::serve
