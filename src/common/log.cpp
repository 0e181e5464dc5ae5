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

// The callback is called with no lock held: a callback that takes a lock of
// its own (Python's GIL) while another thread holds that lock and calls
// lctx_log_set cannot deadlock. The (fn, user_data) pair is read together
// under the mutex, so a callback never gets another callback's user_data;
// a callback may still run once after lctx_log_set replaced it (lctx.h).
void log(lctx_log_level level, const char *fmt, ...) {
    if (level < g_log_min.load(std::memory_order_relaxed)) return;
    lctx_log_fn fn = nullptr;
    void *user = nullptr;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        fn = g_log_fn;
        user = g_log_user;
    }
    if (!fn) return;
    va_list args;
    va_start(args, fmt);
    std::string msg = vformat(fmt, args);
    va_end(args);
    fn(level, msg.c_str(), user);
}

} // namespace lctx

extern "C" LCTX_API void lctx_log_set(lctx_log_fn fn, lctx_log_level min_level, void *user_data) {
    std::lock_guard<std::mutex> lock(lctx::g_log_mutex);
    lctx::g_log_fn = fn;
    lctx::g_log_user = user_data;
    lctx::g_log_min.store(min_level, std::memory_order_relaxed);
}
