// A persistent pool of worker threads (created once, reused by every op).
// parallel_for splits [0, n) into contiguous ranges, one per thread, and the
// calling thread takes part; it returns when all ranges are done.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>

namespace lctx::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);   // n_threads >= 1 (includes the caller)
    ~ThreadPool();
    ThreadPool(const ThreadPool &) = delete;
    ThreadPool &operator=(const ThreadPool &) = delete;

    int size() const;
    // fn(begin, end, thread_index); thread_index in [0, size()).
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn);

private:
    struct Impl;
    Impl *impl_;
};

// Items [0, n_items) handed out one at a time from a shared counter, for
// work whose items cost unevenly or whose threads run at uneven speeds (a
// shared machine): equal ranges would wait for the slowest thread. Calls
// work(claim) on min(size, n_items) threads of the pool; work sets up what
// its thread needs, then claim(fn) calls fn(item) for every item the thread
// takes.
template <class Work>
void parallel_claim(ThreadPool &pool, int64_t n_items, Work &&work) {
    std::atomic<int64_t> next{0};
    pool.parallel_for(std::min<int64_t>(pool.size(), n_items), [&](int64_t, int64_t, int) {
        work([&](auto &&fn) {
            for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) fn(item);
        });
    });
}

} // namespace lctx::cpu
