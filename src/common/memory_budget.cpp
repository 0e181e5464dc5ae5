#include "common/memory_budget.h"

#include "common/error.h"

namespace lctx {

namespace {
double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }
} // namespace

void MemoryBudget::check(uint64_t bytes, const char *what) const {
    if (!limit_) return;
    const uint64_t in_use = used();
    if (bytes > limit_ || in_use > limit_ - bytes)
        fail(LCTX_ERR_OUT_OF_MEMORY, "%s needs %.2f MiB (%llu bytes); max_memory is %.2f MiB (%llu bytes) and "
             "%.2f MiB are in use: raise max_memory or lower the sizes", what, mib(bytes), (unsigned long long)bytes,
             mib(limit_), (unsigned long long)limit_, mib(in_use));
}

void MemoryBudget::charge(uint64_t bytes, const char *what) {
    if (!limit_) {
        const uint64_t now = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
        uint64_t p = peak_.load(std::memory_order_relaxed);
        while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {}
        return;
    }
    uint64_t cur = used_.load(std::memory_order_relaxed);
    do {
        if (bytes > limit_ || cur > limit_ - bytes) check(bytes, what);   // throws with the sizes
    } while (!used_.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed));
    const uint64_t now = cur + bytes;
    uint64_t p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {}
}

} // namespace lctx
