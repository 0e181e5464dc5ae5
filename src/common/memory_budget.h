// A memory budget (lctx_model_params.max_memory, lctx_session_params.max_memory):
// large allocations are charged to it before they are made, and refused with
// LCTX_ERR_OUT_OF_MEMORY, naming the sizes, when they would exceed it, so a
// limit set by the caller is never crossed (and the OOM killer never has to
// step in because a file or a parameter asked for too much). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace lctx {

class MemoryBudget {
public:
    explicit MemoryBudget(uint64_t limit = 0) : limit_(limit) {}   // 0: no limit
    MemoryBudget(const MemoryBudget &) = delete;
    MemoryBudget &operator=(const MemoryBudget &) = delete;

    uint64_t limit() const { return limit_; }
    uint64_t used() const { return used_.load(std::memory_order_relaxed); }
    uint64_t peak() const { return peak_.load(std::memory_order_relaxed); }

    // Throws LCTX_ERR_OUT_OF_MEMORY ("<what> needs X MiB; max_memory is Y MiB,
    // Z MiB in use") when `bytes` more would not fit; charges nothing.
    void check(uint64_t bytes, const char *what) const;
    // check, then charges the bytes (release them with release()).
    void charge(uint64_t bytes, const char *what);
    void release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

private:
    uint64_t limit_;
    std::atomic<uint64_t> used_{0}, peak_{0};
};

// Bytes charged to a budget (may be none) for as long as it lives.
class MemoryCharge {
public:
    MemoryCharge() = default;
    MemoryCharge(MemoryBudget *budget, uint64_t bytes, const char *what) : budget_(budget) {
        if (budget_) budget_->charge(bytes, what);
        bytes_ = budget_ ? bytes : 0;
    }
    MemoryCharge(MemoryCharge &&o) noexcept : budget_(std::exchange(o.budget_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    MemoryCharge &operator=(MemoryCharge &&o) noexcept {
        if (this != &o) {
            reset();
            budget_ = std::exchange(o.budget_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    ~MemoryCharge() { reset(); }
    void reset() {
        if (budget_ && bytes_) budget_->release(bytes_);
        bytes_ = 0;
    }

private:
    MemoryBudget *budget_ = nullptr;
    uint64_t bytes_ = 0;
};

} // namespace lctx
