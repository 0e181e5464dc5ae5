// --profile-ops of `lctx run` and `lctx eval`: per-op times of a session's
// backend calls (lctx_session_op_times; docs/profiling.md).
#pragma once

#include <string>

#include "lctx.h"

namespace lctx::cli {

// Sets LCTX_PROFILE_OPS=1, so that the sessions this process (and the
// processes it starts) creates from now on time their ops.
void enable_op_profile();
// {"lifetime_s": x, "unaccounted_s": x, "ops": {"matmul": {"calls": n, "s": x}, ...}}
// (ops by time, most first; "bytes" for the ops that move memory); "" for a
// session made without LCTX_PROFILE_OPS.
std::string op_times_json(const lctx_session *s);
// The same as a table on stderr: op, calls, seconds, share of the session's
// lifetime, and the rest no op accounts for (the methods' own host work).
void print_op_times(const lctx_session *s);

} // namespace lctx::cli
