// ThreadPool: ranges cover [0, n) exactly once, many back-to-back calls,
// exceptions from any thread reach the caller, pool of one, nested calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/thread_pool.h"

using lctx::cpu::ThreadPool;

TEST(ThreadPool, CoversEveryIndexOnce) {
    for (int threads : {1, 2, 3, 5}) {
        ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        for (int64_t n : {1, 2, 3, 7, 64, 1001}) {
            std::vector<std::atomic<int>> hits(n);
            std::atomic<int> bad_index{0};
            pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
                if (t < 0 || t >= threads || b >= e) bad_index++;
                for (int64_t i = b; i < e; ++i) hits[i]++;
            });
            EXPECT_EQ(bad_index.load(), 0);
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
        }
    }
}

TEST(ThreadPool, ManyCallsSumCorrectly) {
    ThreadPool pool(3);
    std::vector<int64_t> partial(3);
    for (int call = 0; call < 5000; ++call) {
        const int64_t n = 1 + call % 97;
        std::fill(partial.begin(), partial.end(), 0);
        pool.parallel_for(n, [&](int64_t b, int64_t e, int t) {
            for (int64_t i = b; i < e; ++i) partial[t] += i + call;
        });
        const int64_t sum = partial[0] + partial[1] + partial[2];
        ASSERT_EQ(sum, n * (n - 1) / 2 + n * call) << "call " << call;
    }
}

TEST(ThreadPool, WakesAfterWorkersSleep) {
    ThreadPool pool(2);
    for (int k = 0; k < 3; ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));   // workers go to the condition variable
        std::atomic<int64_t> s{0};
        pool.parallel_for(100, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; ++i) s += i;
        });
        EXPECT_EQ(s.load(), 4950);
    }
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
    ThreadPool pool(3);
    for (int thrower = 0; thrower < 3; ++thrower) {
        EXPECT_THROW(pool.parallel_for(3,
                                       [&](int64_t, int64_t, int t) {
                                           if (t == thrower) throw std::runtime_error("boom");
                                       }),
                     std::runtime_error);
        // the pool stays usable
        std::atomic<int> n{0};
        pool.parallel_for(30, [&](int64_t b, int64_t e, int) { n += static_cast<int>(e - b); });
        EXPECT_EQ(n.load(), 30);
    }
}

TEST(ThreadPool, SizeOneAndNested) {
    ThreadPool one(0);   // clamped to 1
    EXPECT_EQ(one.size(), 1);
    int calls = 0;
    one.parallel_for(10, [&](int64_t b, int64_t e, int t) {
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, 10);
        EXPECT_EQ(t, 0);
        ++calls;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_THROW(one.parallel_for(1, [](int64_t, int64_t, int) { throw std::logic_error("x"); }), std::logic_error);

    ThreadPool pool(2);
    std::atomic<int64_t> total{0};
    pool.parallel_for(4, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i)
            pool.parallel_for(10, [&](int64_t b2, int64_t e2, int) { total += e2 - b2; });   // runs serially
    });
    EXPECT_EQ(total.load(), 40);
    one.parallel_for(0, [](int64_t, int64_t, int) { FAIL(); });
}
