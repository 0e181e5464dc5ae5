#include "op_times.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli.h"
#include "common/json.h"

namespace lctx::cli {

namespace {

// The session's ops, most time first; false when it was not profiled.
bool read_ops(const lctx_session *s, std::vector<lctx_op_time> &ops, double &lifetime) {
    size_t n = 0;
    if (lctx_session_op_times(s, nullptr, 0, &n, &lifetime) != LCTX_OK) return false;
    ops.resize(n);
    if (n > 0 && lctx_session_op_times(s, ops.data(), ops.size(), &n, &lifetime) != LCTX_OK) return false;
    ops.resize(std::min(n, ops.size()));
    std::stable_sort(ops.begin(), ops.end(),
                     [](const lctx_op_time &a, const lctx_op_time &b) { return a.seconds > b.seconds; });
    return true;
}

double sum_seconds(const std::vector<lctx_op_time> &ops) {
    double t = 0;
    for (const auto &o : ops) t += o.seconds;
    return t;
}

} // namespace

void enable_op_profile() { setenv("LCTX_PROFILE_OPS", "1", 1); }

std::string op_times_json(const lctx_session *s) {
    std::vector<lctx_op_time> ops;
    double lifetime = 0;
    if (!read_ops(s, ops, lifetime)) return "";
    std::string j = "{\"lifetime_s\": " + fmt_num("%.4f", lifetime) + ", \"unaccounted_s\": " +
                    fmt_num("%.4f", std::max(0.0, lifetime - sum_seconds(ops))) + ", \"ops\": {";
    for (size_t i = 0; i < ops.size(); ++i) {
        j += (i ? ", " : "") + json::quote(ops[i].op) + ": {\"calls\": " + std::to_string(ops[i].calls) +
             ", \"s\": " + fmt_num("%.4f", ops[i].seconds);
        if (ops[i].bytes > 0) j += ", \"bytes\": " + std::to_string(ops[i].bytes);
        j += "}";
    }
    return j + "}}";
}

void print_op_times(const lctx_session *s) {
    std::vector<lctx_op_time> ops;
    double lifetime = 0;
    if (!read_ops(s, ops, lifetime)) return;
    const double share = lifetime > 0 ? 100.0 / lifetime : 0.0;
    std::fprintf(stderr, "ops over the session's %.3f s:\n  %-14s %10s %10s %6s %12s\n", lifetime, "op", "calls",
                 "seconds", "%", "MiB moved");
    for (const auto &o : ops) {
        std::fprintf(stderr, "  %-14s %10lld %10.3f %6.1f", o.op, (long long)o.calls, o.seconds, o.seconds * share);
        if (o.bytes > 0) std::fprintf(stderr, " %12.1f", double(o.bytes) / (1024.0 * 1024.0));
        std::fputc('\n', stderr);
    }
    const double rest = std::max(0.0, lifetime - sum_seconds(ops));
    std::fprintf(stderr, "  %-14s %10s %10.3f %6.1f\n", "(no op)", "", rest, rest * share);
}

} // namespace lctx::cli
