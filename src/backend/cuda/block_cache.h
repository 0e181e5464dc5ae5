// A cache of freed device blocks for the CUDA backend's per-op temporaries
// (staged host arguments, attention partials, top-k scratch). cudaMalloc
// costs tens of microseconds and cudaFree waits for the whole device, and a
// prefill makes several of each per layer; reusing blocks keeps the device
// busy while the host prepares the next op. Reuse is safe on one stream:
// every op that touched a block before it was freed runs before any op that
// gets it next.
//
// Blocks go by size class (powers of two from 256 bytes); larger than
// max_block, or past max_cached bytes held, they are freed at once. When the
// raw allocator fails, the cache is emptied and the allocation tried again.
// Plain C++ (the raw allocator is passed in), so the host tests run it on
// malloc; thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lctx::cuda {

// What the backend's temporaries cache holds at most, and the largest
// block it keeps (a prefill's staged arguments and partials are far smaller).
constexpr size_t kTempCacheBytes = size_t{512} << 20;
constexpr size_t kTempBlockMax = size_t{128} << 20;

class BlockCache {
public:
    using RawAlloc = void *(*)(size_t bytes);   // throws on failure
    using RawFree = void (*)(void *p);

    BlockCache(RawAlloc raw_alloc, RawFree raw_free, size_t max_cached, size_t max_block)
        : raw_alloc_(raw_alloc), raw_free_(raw_free), max_cached_(max_cached), max_block_(max_block) {}
    ~BlockCache() { flush(); }
    BlockCache(const BlockCache &) = delete;
    BlockCache &operator=(const BlockCache &) = delete;

    // The size a request of `bytes` is served with.
    static size_t size_class(size_t bytes) {
        size_t c = 256;
        while (c < bytes) c <<= 1;
        return c;
    }

    void *alloc(size_t bytes) {
        if (bytes == 0) return nullptr;
        const size_t cls = bytes > max_block_ ? bytes : size_class(bytes);
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = free_.find(cls);
            if (it != free_.end() && !it->second.empty()) {
                void *p = it->second.back();
                it->second.pop_back();
                cached_ -= cls;
                live_[p] = cls;
                ++hits_;
                return p;
            }
        }
        void *p = nullptr;
        try {
            p = raw_alloc_(cls);
        } catch (...) {
            if (flush() == 0) throw;
            p = raw_alloc_(cls);   // the cached blocks were in the way; a second failure throws
        }
        std::lock_guard<std::mutex> lock(mu_);
        live_[p] = cls;
        return p;
    }

    // p: from alloc, or null. Anything else is passed to the raw free.
    void free(void *p) {
        if (!p) return;
        {
            std::lock_guard<std::mutex> lock(mu_);
            auto it = live_.find(p);
            if (it != live_.end()) {
                const size_t cls = it->second;
                live_.erase(it);
                if (cls <= max_block_ && cached_ + cls <= max_cached_) {
                    free_[cls].push_back(p);
                    cached_ += cls;
                    return;
                }
            }
        }
        raw_free_(p);
    }

    // Frees every cached block; returns the bytes released.
    size_t flush() {
        std::vector<void *> out;
        size_t released = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            for (auto &[cls, blocks] : free_) {
                released += cls * blocks.size();
                out.insert(out.end(), blocks.begin(), blocks.end());
            }
            free_.clear();
            cached_ = 0;
        }
        for (void *p : out) raw_free_(p);
        return released;
    }

    size_t cached_bytes() const {
        std::lock_guard<std::mutex> lock(mu_);
        return cached_;
    }
    size_t hits() const {
        std::lock_guard<std::mutex> lock(mu_);
        return hits_;
    }

private:
    RawAlloc raw_alloc_;
    RawFree raw_free_;
    size_t max_cached_, max_block_;
    mutable std::mutex mu_;
    std::unordered_map<void *, size_t> live_;       // block -> its size class
    std::map<size_t, std::vector<void *>> free_;    // size class -> cached blocks
    size_t cached_ = 0, hits_ = 0;
};

} // namespace lctx::cuda
