// A fixed number of worker slots shared by the requests that run the model
// (lctx serve --parallel N), with a bounded wait line in front of them
// (--queue M): a request that finds every slot busy and the line full is
// refused at once (503), one that waits past its deadline gives up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace lctx::serve {

class SlotPool {
  public:
    enum class Result { OK, QUEUE_FULL, TIMEOUT, CLOSED };

    // A held slot; gives it back when destroyed.
    class Slot {
      public:
        explicit Slot(SlotPool *pool) : pool_(pool) {}
        ~Slot() { pool_->release(); }
        Slot(const Slot &) = delete;
        Slot &operator=(const Slot &) = delete;

      private:
        SlotPool *pool_;
    };

    SlotPool(int n_slots, int max_waiting) : free_(n_slots), max_waiting_(max_waiting) {}

    // Takes a slot, waiting in line until `deadline` when all are busy.
    Result acquire(std::chrono::steady_clock::time_point deadline, std::unique_ptr<Slot> &out);
    // Wakes every waiter with CLOSED and refuses new ones (shutdown).
    void close();

    int busy() const;
    int waiting() const;

  private:
    void release();

    mutable std::mutex mu_;
    std::condition_variable cv_;
    int free_;
    int waiting_ = 0;
    int max_waiting_;
    int held_ = 0;
    bool closed_ = false;
};

} // namespace lctx::serve
