// Library logging: goes to the user's callback set with lctx_log_set(),
// silent by default. Never writes to stdout.
#pragma once

#include "lctx.h"

namespace lctx {

void log(lctx_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LCTX_LOG_DEBUG(...) ::lctx::log(LCTX_LOG_DEBUG, __VA_ARGS__)
#define LCTX_LOG_INFO(...) ::lctx::log(LCTX_LOG_INFO, __VA_ARGS__)
#define LCTX_LOG_WARN(...) ::lctx::log(LCTX_LOG_WARN, __VA_ARGS__)
#define LCTX_LOG_ERROR(...) ::lctx::log(LCTX_LOG_ERROR, __VA_ARGS__)

} // namespace lctx
