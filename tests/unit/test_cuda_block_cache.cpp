// The CUDA backend's cache of temporary device blocks (src/backend/cuda/block_cache.h)
// on a counting host allocator: reuse by size class, the limits, the retry
// after an allocation failure, and concurrent use.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cuda/block_cache.h"

using lctx::cuda::BlockCache;

namespace {

// A host "device": counts raw calls and fails past a byte limit.
struct FakeDevice {
    static inline std::mutex mu;
    static inline size_t live_bytes = 0, limit = SIZE_MAX, raw_allocs = 0, raw_frees = 0;
    static inline std::vector<std::pair<void *, size_t>> blocks;
    static void reset(size_t lim = SIZE_MAX) {
        live_bytes = raw_allocs = raw_frees = 0;
        limit = lim;
        blocks.clear();
    }
    static void *alloc(size_t bytes) {
        std::lock_guard<std::mutex> lock(mu);
        if (live_bytes + bytes > limit) throw std::runtime_error("out of device memory");
        void *p = std::malloc(bytes);
        live_bytes += bytes;
        ++raw_allocs;
        blocks.emplace_back(p, bytes);
        return p;
    }
    static void free(void *p) {
        std::lock_guard<std::mutex> lock(mu);
        for (size_t i = 0; i < blocks.size(); ++i)
            if (blocks[i].first == p) {
                live_bytes -= blocks[i].second;
                blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
                ++raw_frees;
                std::free(p);
                return;
            }
        ADD_FAILURE() << "raw free of a block the fake device did not hand out";
    }
};

} // namespace

TEST(CudaBlockCache, SizeClassesArePowersOfTwoFrom256Bytes) {
    EXPECT_EQ(BlockCache::size_class(1), 256u);
    EXPECT_EQ(BlockCache::size_class(256), 256u);
    EXPECT_EQ(BlockCache::size_class(257), 512u);
    EXPECT_EQ(BlockCache::size_class(1000), 1024u);
    EXPECT_EQ(BlockCache::size_class(size_t{3} << 20), size_t{4} << 20);
}

TEST(CudaBlockCache, AFreedBlockServesTheNextRequestOfItsClass) {
    FakeDevice::reset();
    {
        BlockCache cache(FakeDevice::alloc, FakeDevice::free, 1 << 20, 1 << 16);
        EXPECT_EQ(cache.alloc(0), nullptr);
        void *a = cache.alloc(1000);
        cache.free(a);
        EXPECT_EQ(cache.cached_bytes(), 1024u);
        void *b = cache.alloc(600);   // same class (1024): the same block, no raw call
        EXPECT_EQ(b, a);
        EXPECT_EQ(cache.hits(), 1u);
        EXPECT_EQ(FakeDevice::raw_allocs, 1u);
        void *c = cache.alloc(2000);  // another class: a raw allocation
        EXPECT_NE(c, b);
        EXPECT_EQ(FakeDevice::raw_allocs, 2u);
        cache.free(b);
        cache.free(c);
        cache.free(nullptr);
        EXPECT_EQ(cache.cached_bytes(), 1024u + 2048u);
        EXPECT_EQ(FakeDevice::raw_frees, 0u);
    }
    // the destructor releases what it held
    EXPECT_EQ(FakeDevice::raw_frees, 2u);
    EXPECT_EQ(FakeDevice::live_bytes, 0u);
}

TEST(CudaBlockCache, LargeBlocksAndBlocksPastTheLimitAreFreedAtOnce) {
    FakeDevice::reset();
    BlockCache cache(FakeDevice::alloc, FakeDevice::free, 2048, 4096);
    void *big = cache.alloc(5000);   // over max_block: its exact size, never cached
    EXPECT_EQ(FakeDevice::live_bytes, 5000u);
    cache.free(big);
    EXPECT_EQ(FakeDevice::raw_frees, 1u);
    EXPECT_EQ(cache.cached_bytes(), 0u);
    void *a = cache.alloc(1024), *b = cache.alloc(1024), *c = cache.alloc(1024);
    cache.free(a);
    cache.free(b);
    cache.free(c);   // the cache holds 2048 bytes at most
    EXPECT_EQ(cache.cached_bytes(), 2048u);
    EXPECT_EQ(FakeDevice::raw_frees, 2u);
    EXPECT_EQ(cache.flush(), 2048u);
    EXPECT_EQ(FakeDevice::live_bytes, 0u);
}

TEST(CudaBlockCache, AFailedAllocationEmptiesTheCacheAndTriesAgain) {
    FakeDevice::reset(8192);
    BlockCache cache(FakeDevice::alloc, FakeDevice::free, 1 << 20, 1 << 20);
    std::vector<void *> held;
    for (int i = 0; i < 6; ++i) held.push_back(cache.alloc(1024));
    for (void *p : held) cache.free(p);
    EXPECT_EQ(cache.cached_bytes(), 6144u);
    void *p = cache.alloc(4096);   // 6144 cached + 4096 > 8192: flushed, then served
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(cache.cached_bytes(), 0u);
    EXPECT_EQ(FakeDevice::live_bytes, 4096u);
    EXPECT_THROW(cache.alloc(8192), std::runtime_error);   // too large even with nothing cached
    cache.free(p);
    cache.flush();
    EXPECT_EQ(FakeDevice::live_bytes, 0u);
}

TEST(CudaBlockCache, ConcurrentUsersNeverShareABlock) {
    FakeDevice::reset();
    BlockCache cache(FakeDevice::alloc, FakeDevice::free, 1 << 20, 1 << 20);
    std::mutex mu;
    std::set<void *> in_use;
    bool shared = false;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < 2000; ++i) {
                void *p = cache.alloc(static_cast<size_t>(256 << ((i + t) % 4)));
                {
                    std::lock_guard<std::mutex> lock(mu);
                    if (!in_use.insert(p).second) shared = true;
                }
                {
                    std::lock_guard<std::mutex> lock(mu);
                    in_use.erase(p);
                }
                cache.free(p);
            }
        });
    for (auto &th : threads) th.join();
    EXPECT_FALSE(shared);
    EXPECT_GT(cache.hits(), 7000u);
    cache.flush();
    EXPECT_EQ(FakeDevice::live_bytes, 0u);
}
