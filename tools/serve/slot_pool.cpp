#include "serve/slot_pool.h"

namespace lctx::serve {

SlotPool::Result SlotPool::acquire(std::chrono::steady_clock::time_point deadline, std::unique_ptr<Slot> &out) {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) return Result::CLOSED;
    if (free_ == 0) {
        if (waiting_ >= max_waiting_) return Result::QUEUE_FULL;
        ++waiting_;
        const bool got = cv_.wait_until(lock, deadline, [&] { return closed_ || free_ > 0; });
        --waiting_;
        if (closed_) return Result::CLOSED;
        if (!got) return Result::TIMEOUT;
    }
    --free_;
    ++held_;
    out = std::make_unique<Slot>(this);
    return Result::OK;
}

void SlotPool::release() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        ++free_;
        --held_;
    }
    cv_.notify_one();
}

void SlotPool::close() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        closed_ = true;
    }
    cv_.notify_all();
}

int SlotPool::busy() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
}

int SlotPool::waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
}

} // namespace lctx::serve
