#include "common/log.h"

#include <atomic>
#include <mutex>

#include "common/error.h"

namespace lctx {
namespace {
std::mutex g_log_mutex;
lctx_log_fn g_log_fn = nullptr;
void *g_log_user = nullptr;
std::atomic<int> g_log_min{LCTX_LOG_WARN};
} // namespace

void log(lctx_log_level level, const char *fmt, ...) {
    if (level < g_log_min.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(g_log_mutex);
    if (!g_log_fn) return;
    va_list args;
    va_start(args, fmt);
    std::string msg = vformat(fmt, args);
    va_end(args);
    g_log_fn(level, msg.c_str(), g_log_user);
}

} // namespace lctx

extern "C" LCTX_API void lctx_log_set(lctx_log_fn fn, lctx_log_level min_level, void *user_data) {
    std::lock_guard<std::mutex> lock(lctx::g_log_mutex);
    lctx::g_log_fn = fn;
    lctx::g_log_user = user_data;
    lctx::g_log_min.store(min_level, std::memory_order_relaxed);
}
