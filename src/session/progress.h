// Progress reporting and cancellation for long session calls. The user's
// callback runs on the calling thread only; the cancel flag may be set from
// any thread (lctx_session_cancel).
#pragma once

#include <atomic>

#include "lctx.h"

namespace lctx {

class Progress {
public:
    Progress(lctx_progress_fn fn, void *user_data, std::atomic<bool> &cancel)
        : fn_(fn), user_data_(user_data), cancel_(cancel) {}

    // Reports `done` in [0,1]; false when the caller asked to stop.
    bool keep_going(double done) {
        if (cancel_.load(std::memory_order_relaxed)) return false;
        if (done >= 1.0) reported_end_ = true;
        if (fn_ && fn_(static_cast<float>(done < 0 ? 0 : done > 1 ? 1 : done), user_data_) != 0) {
            cancel_.store(true, std::memory_order_relaxed);
            return false;
        }
        return true;
    }
    bool cancelled() const { return cancel_.load(std::memory_order_relaxed); }
    // The end of a call: reports done = 1.0 unless the call already did, and
    // is false when the callback (at 1.0 too) or lctx_session_cancel asked to
    // stop. Every long call ends with it (Session::run_call), so each call
    // reports its end exactly once and a non-zero answer there is obeyed.
    bool finish() {
        if (cancel_.load(std::memory_order_relaxed)) return false;
        if (!reported_end_) return keep_going(1.0);
        return true;
    }

private:
    lctx_progress_fn fn_;
    void *user_data_;
    std::atomic<bool> &cancel_;
    bool reported_end_ = false;
};

} // namespace lctx
