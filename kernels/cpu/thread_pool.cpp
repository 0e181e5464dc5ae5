// Persistent workers woken per parallel_for by a generation counter. A worker
// spins briefly on the counter (decode calls parallel_for ~10 times per layer
// per token, so a futex round trip per call would dominate) and then sleeps on
// a condition variable. The caller runs range 0 itself.
#include "thread_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LCTX_CPU_RELAX() _mm_pause()
#else
#define LCTX_CPU_RELAX() std::this_thread::yield()
#endif

#include "common/error.h"

namespace lctx::cpu {
namespace {
thread_local bool t_in_pool_task = false;   // nested parallel_for runs serially
constexpr auto kSpin = std::chrono::microseconds(200);
} // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::mutex call_mutex;                 // one parallel_for at a time per pool

    // The current job (written by the caller before bumping generation).
    const std::function<void(int64_t, int64_t, int)> *fn = nullptr;
    int64_t n = 0;
    std::atomic<uint64_t> generation{0};
    std::atomic<int> pending{0};           // workers still running the job
    std::atomic<bool> stop{false};
    std::vector<std::exception_ptr> errors;   // one slot per thread

    std::mutex sleep_mutex;
    std::condition_variable wake;
    std::atomic<int> sleepers{0};

    void run_range(int t) {
        const int64_t b = n * t / n_threads, e = n * (t + 1) / n_threads;
        if (b >= e) return;
        t_in_pool_task = true;
        try {
            (*fn)(b, e, t);
        } catch (...) {
            errors[t] = std::current_exception();
        }
        t_in_pool_task = false;
    }

    void worker_loop(int t) {
        uint64_t seen = 0;
        for (;;) {
            uint64_t g = generation.load(std::memory_order_acquire);
            if (g == seen && !stop.load(std::memory_order_acquire)) {
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0;; ++i) {
                    // pause first; then yield so an oversubscribed CPU can run the thread we wait for
                    if (i < 64) LCTX_CPU_RELAX();
                    else std::this_thread::yield();
                    g = generation.load(std::memory_order_acquire);
                    if (g != seen || stop.load(std::memory_order_acquire)) break;
                    if ((i & 15) == 15 && std::chrono::steady_clock::now() - t0 > kSpin) {
                        std::unique_lock<std::mutex> lk(sleep_mutex);
                        sleepers.fetch_add(1, std::memory_order_seq_cst);
                        wake.wait(lk, [&] {
                            return generation.load(std::memory_order_seq_cst) != seen || stop.load();
                        });
                        sleepers.fetch_sub(1, std::memory_order_relaxed);
                        g = generation.load(std::memory_order_acquire);
                        break;
                    }
                }
            }
            if (stop.load(std::memory_order_acquire)) return;
            seen = g;
            run_range(t);
            pending.fetch_sub(1, std::memory_order_acq_rel);
        }
    }

    void wake_all() {
        if (sleepers.load(std::memory_order_seq_cst) > 0) {
            { std::lock_guard<std::mutex> lk(sleep_mutex); }
            wake.notify_all();
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
    if (n_threads < 1) n_threads = 1;
    impl_->n_threads = n_threads;
    impl_->errors.resize(n_threads);
    try {
        for (int t = 1; t < n_threads; ++t) impl_->workers.emplace_back([this, t] { impl_->worker_loop(t); });
    } catch (const std::exception &e) {
        impl_->stop.store(true);
        impl_->generation.fetch_add(1, std::memory_order_seq_cst);
        impl_->wake_all();
        for (auto &w : impl_->workers) w.join();
        delete impl_;
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot start %d worker threads: %s", n_threads - 1, e.what());
    }
}

ThreadPool::~ThreadPool() {
    impl_->stop.store(true, std::memory_order_seq_cst);
    impl_->generation.fetch_add(1, std::memory_order_seq_cst);
    { std::lock_guard<std::mutex> lk(impl_->sleep_mutex); }
    impl_->wake.notify_all();
    for (auto &w : impl_->workers) w.join();
    delete impl_;
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) {
    if (n <= 0) return;
    Impl &p = *impl_;
    if (p.n_threads == 1 || n == 1 || t_in_pool_task) {
        fn(0, n, 0);
        return;
    }
    std::lock_guard<std::mutex> call_lock(p.call_mutex);
    p.fn = &fn;
    p.n = n;
    for (auto &e : p.errors) e = nullptr;
    p.pending.store(p.n_threads - 1, std::memory_order_relaxed);
    p.generation.fetch_add(1, std::memory_order_seq_cst);
    p.wake_all();

    p.run_range(0);
    for (int i = 0; p.pending.load(std::memory_order_acquire) != 0; ++i) {
        if (i < 64) LCTX_CPU_RELAX();
        else std::this_thread::yield();
    }
    p.fn = nullptr;
    for (auto &e : p.errors)
        if (e) std::rethrow_exception(e);
}

} // namespace lctx::cpu
