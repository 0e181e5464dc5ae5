// Where REFORM's encoding time goes (lctx bench --reform N --profile): the
// forward pass's per-op profile over layers 0..E-1 plus the encoder's own
// parts around it. With no profile attached the encoder reads no clock.
#pragma once

#include <chrono>
#include <cstdint>

#include "engine/forward.h"

namespace lctx {

struct ReformProfile {
    enum Part {
        HEAD_CAPTURE,   // the captured heads of layers < E: normalise, write fp16 rows (inside the forward's hooks)
        EXIT_NORM,      // layer E: the attention norm of the residual stream (inside the hooks)
        EXIT_PROJ,      // layer E: the captured heads' projections (matmul, bias, q/k norm)
        EXIT_CAPTURE,   // layer E: normalise, write fp16 rows
        SCORE_ACCUM,    // adding the chunk's attention column sums into the eviction scores
        EVICT_KEEP,     // the evictor choosing the survivors of every (layer, KV head)
        KV_COMPACT,     // moving the survivors in the working cache, re-rotating their keys
        STORE,          // growing and committing the embedding store
        N_PARTS
    };
    ForwardProfile forward;     // layers 0..E-1 of every chunk (its HOOKS hold the capture parts)
    double seconds[N_PARTS] = {};
    double step_seconds = 0.0;  // wall time of all encoder steps (the parts above plus what no part names)
    int64_t steps = 0, tokens = 0;
    int64_t exit_rows = 0;      // projection rows x tokens computed at layer E (its matmul work: x n_embd)
    static const char *name(int part);
    double parts_total() const;
};

// Adds the wall time of its scope to *slot; a null slot reads no clock.
class ProfileTimer {
public:
    explicit ProfileTimer(double *slot) : slot_(slot) {
        if (slot_) t0_ = std::chrono::steady_clock::now();
    }
    ~ProfileTimer() { stop(); }
    // Charges the time so far and stops (the scope's end then adds nothing).
    void stop() {
        if (slot_) *slot_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
        slot_ = nullptr;
    }
    ProfileTimer(const ProfileTimer &) = delete;
    ProfileTimer &operator=(const ProfileTimer &) = delete;

private:
    double *slot_;
    std::chrono::steady_clock::time_point t0_;
};

} // namespace lctx
