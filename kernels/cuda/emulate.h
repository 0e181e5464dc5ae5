// Launch emulator: runs a kernel body (launch.h) on the host as the GPU
// would run it, block after block, with every thread of a block a separate
// thread of control, so c.sync() is a real barrier. Two schemes:
//   Fibers (default): the block's threads are ucontext fibers on one OS
//     thread; each runs until its next sync(), and the order in which they
//     run alternates (0..n-1, then n-1..0) from one barrier phase to the
//     next, so a read of another thread's shared-memory write that lacks a
//     sync() in between sees stale data in one of the two orders. A thread
//     that leaves the body while others wait at a barrier is reported
//     (divergent __syncthreads). Fast enough for many small launches.
//   Threads: one OS thread per GPU thread, the barrier a mutex + condition
//     variable: true concurrency (races for ThreadSanitizer), but slow.
// Shared memory is refilled with NaN bytes before every block, so reading it
// before writing does not pass by luck. Host only (tests).
// Sanitizers: under AddressSanitizer the fiber switches are announced to it
// (__sanitizer_start/finish_switch_fiber); under ThreadSanitizer, which does
// not follow swapcontext, the default mode is Threads.
#pragma once

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#define LCTX_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LCTX_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define LCTX_EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LCTX_EMU_TSAN 1
#endif
#endif
#ifdef LCTX_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/launch.h"

namespace lctx::cuda {

// Reusable barrier for n threads (C++17: mutex + condition variable).
class HostBarrier {
public:
    explicit HostBarrier(int n) : n_(n) {}
    void wait() {
        std::unique_lock<std::mutex> lock(mu_);
        const uint64_t gen = gen_;
        if (++arrived_ == n_) {
            arrived_ = 0;
            ++gen_;
            cv_.notify_all();
            return;
        }
        cv_.wait(lock, [&] { return gen_ != gen; });
    }

private:
    std::mutex mu_;
    std::condition_variable cv_;
    int n_, arrived_ = 0;
    uint64_t gen_ = 0;
};

enum class EmulateMode { Fibers, Threads };
#ifdef LCTX_EMU_TSAN
constexpr EmulateMode kDefaultEmulateMode = EmulateMode::Threads;
#else
constexpr EmulateMode kDefaultEmulateMode = EmulateMode::Fibers;
#endif

// Announces a stack switch to AddressSanitizer (no-ops without it).
inline void fiber_switch_start(void **fake_stack, const void *bottom, size_t size) {
#ifdef LCTX_EMU_ASAN
    __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#else
    (void)fake_stack, (void)bottom, (void)size;
#endif
}
inline void fiber_switch_finish(void *fake_stack, const void **bottom_old, size_t *size_old) {
#ifdef LCTX_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack, bottom_old, size_old);
#else
    (void)fake_stack, (void)bottom_old, (void)size_old;
#endif
}

// The fibers of one block and the scheduler's context.
struct FiberSet {
    ucontext_t main{};
    std::vector<ucontext_t> ctx;
    std::vector<char *> stacks;   // from fiber_stacks(): kept per host thread across launches
    std::vector<char> done;
    int current = 0;
    size_t stack_size = 0;
    const void *main_bottom = nullptr;   // the scheduler's stack (AddressSanitizer)
    size_t main_size = 0;
};

struct HostLaunchState {
    Dim3 grid;
    int block = 1;
    std::vector<char> shared;
    HostBarrier barrier;
    std::mutex atomic_mu;   // the atomics of all threads (blocks run one at a time)
    FiberSet *fibers = nullptr;   // set in fiber mode
    HostLaunchState(Dim3 g, int b, size_t shmem) : grid(g), block(b), shared(shmem > 0 ? shmem : 1), barrier(b) {}
};

struct HostCtx {
    HostLaunchState *st;
    int t;
    int64_t x = 0, y = 0, z = 0;
    int tid() const { return t; }
    int nthreads() const { return st->block; }
    int64_t bx() const { return x; }
    int64_t by() const { return y; }
    int64_t bz() const { return z; }
    int64_t gx() const { return st->grid.x; }
    int64_t gy() const { return st->grid.y; }
    int64_t gz() const { return st->grid.z; }
    char *shared() const { return st->shared.data(); }
    void sync() const {
        if (!st->fibers) {
            st->barrier.wait();
            return;
        }
        FiberSet &f = *st->fibers;
        void *fake = nullptr;
        fiber_switch_start(&fake, f.main_bottom, f.main_size);
        swapcontext(&f.ctx[static_cast<size_t>(t)], &f.main);
        fiber_switch_finish(fake, nullptr, nullptr);
    }
    void atomic_add(float *p, float v) const {
        std::lock_guard<std::mutex> lock(st->atomic_mu);
        *p += v;
    }
    void atomic_max_nonneg(float *p, float v) const {
        std::lock_guard<std::mutex> lock(st->atomic_mu);
        if (v > *p) *p = v;
    }
};

namespace detail {

// n fiber stacks of `size` bytes, allocated once per host thread and reused
// by its later launches (allocating 128 x 256 KiB per launch dominated).
inline std::vector<char *> fiber_stacks(int n, size_t size) {
    thread_local std::vector<std::unique_ptr<char[]>> pool;
    thread_local size_t pool_size = 0;
    if (pool_size != size) {
        pool.clear();
        pool_size = size;
    }
    while (static_cast<int>(pool.size()) < n) pool.emplace_back(new char[size]);
    std::vector<char *> out(static_cast<size_t>(n));
    for (int t = 0; t < n; ++t) out[static_cast<size_t>(t)] = pool[static_cast<size_t>(t)].get();
    return out;
}

template <class Body>
struct FiberJob {
    HostLaunchState *st;
    Body *body;
    int64_t x, y, z;
    int t;
};

// makecontext passes ints only: the job of the fiber being started.
template <class Body>
FiberJob<Body> *&fiber_job() {
    thread_local FiberJob<Body> *job = nullptr;
    return job;
}

template <class Body>
void fiber_entry() {
    FiberJob<Body> job = *fiber_job<Body>();
    FiberSet &f = *job.st->fibers;
    fiber_switch_finish(nullptr, &f.main_bottom, &f.main_size);
    HostCtx c{job.st, job.t, job.x, job.y, job.z};
    (*job.body)(c);
    f.done[static_cast<size_t>(job.t)] = 1;
    fiber_switch_start(nullptr, f.main_bottom, f.main_size);   // this fiber ends: uc_link returns to the scheduler
}

template <class Body>
void run_block_fibers(HostLaunchState &st, Body &body, int64_t x, int64_t y, int64_t z) {
    FiberSet &f = *st.fibers;
    const int n = st.block;
    const size_t kStack = f.stack_size;
    std::fill(f.done.begin(), f.done.end(), 0);
    for (int t = 0; t < n; ++t) {
        ucontext_t &u = f.ctx[static_cast<size_t>(t)];
        getcontext(&u);
        u.uc_stack.ss_sp = f.stacks[static_cast<size_t>(t)];
        u.uc_stack.ss_size = kStack;
        u.uc_link = &f.main;
        makecontext(&u, &fiber_entry<Body>, 0);
    }
    std::vector<FiberJob<Body>> jobs(static_cast<size_t>(n));
    for (int phase = 0;; ++phase) {
        int finished = 0, ran = 0;
        for (int k = 0; k < n; ++k) {
            const int t = phase % 2 == 0 ? k : n - 1 - k;
            if (f.done[static_cast<size_t>(t)]) continue;
            f.current = t;
            if (phase == 0) {
                jobs[static_cast<size_t>(t)] = {&st, &body, x, y, z, t};
                fiber_job<Body>() = &jobs[static_cast<size_t>(t)];
            }
            void *fake = nullptr;
            fiber_switch_start(&fake, f.stacks[static_cast<size_t>(t)], kStack);
            swapcontext(&f.main, &f.ctx[static_cast<size_t>(t)]);
            fiber_switch_finish(fake, nullptr, nullptr);
            ++ran;
            finished += f.done[static_cast<size_t>(t)];
        }
        if (ran == 0) return;
        if (finished != 0 && finished != ran)
            throw std::logic_error("emulated launch: some threads of block (" + std::to_string(x) + "," +
                                   std::to_string(y) + "," + std::to_string(z) +
                                   ") left the kernel while others wait at a barrier");
    }
}

} // namespace detail

// body(HostCtx &) for every thread of every block of grid; `block` threads
// per block, `shmem` bytes of shared memory.
template <class Body>
void emulate_launch(Dim3 grid, int block, size_t shmem, Body body, EmulateMode mode = kDefaultEmulateMode) {
    HostLaunchState st(grid, block, shmem);
    if (mode == EmulateMode::Fibers) {
        FiberSet f;
        f.stack_size = 256 * 1024;
        f.ctx.resize(static_cast<size_t>(block));
        f.done.resize(static_cast<size_t>(block));
        f.stacks = detail::fiber_stacks(block, f.stack_size);
        st.fibers = &f;
        for (int64_t z = 0; z < grid.z; ++z)
            for (int64_t y = 0; y < grid.y; ++y)
                for (int64_t x = 0; x < grid.x; ++x) {
                    std::memset(st.shared.data(), 0xff, st.shared.size());
                    detail::run_block_fibers(st, body, x, y, z);
                }
        return;
    }
    auto run = [&](int t) {
        HostCtx c{&st, t};
        for (c.z = 0; c.z < grid.z; ++c.z)
            for (c.y = 0; c.y < grid.y; ++c.y)
                for (c.x = 0; c.x < grid.x; ++c.x) {
                    st.barrier.wait();   // the previous block is done with shared memory
                    if (t == 0) std::memset(st.shared.data(), 0xff, st.shared.size());
                    st.barrier.wait();
                    body(c);
                }
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(block));
    for (int t = 0; t < block; ++t) threads.emplace_back(run, t);
    for (std::thread &th : threads) th.join();
}

template <class Body>
void emulate_launch(const LaunchDims &d, Body body, EmulateMode mode = kDefaultEmulateMode) {
    emulate_launch(d.grid, d.block, d.shmem, body, mode);
}

} // namespace lctx::cuda
