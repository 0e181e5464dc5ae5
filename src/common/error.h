// Errors inside the C++ core: thrown as lctx::Error, caught at the C API
// boundary (src/api) and turned into an lctx_status plus message.
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

#include "lctx.h"

namespace lctx {

class Error : public std::runtime_error {
public:
    Error(lctx_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    lctx_status status() const { return status_; }

private:
    lctx_status status_;
};

// printf-style formatting into a std::string.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char *fmt, va_list args);

// Throws lctx::Error(status, formatted message).
[[noreturn]] void fail(lctx_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

} // namespace lctx
