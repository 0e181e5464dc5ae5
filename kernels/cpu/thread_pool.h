// A persistent pool of worker threads (created once, reused by every op).
// parallel_for splits [0, n) into contiguous ranges, one per thread, and the
// calling thread takes part; it returns when all ranges are done.
#pragma once

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

} // namespace lctx::cpu
