// The one feed loop of every chunked encoder (REFORM's, the recurrent
// baselines', InfLLM's): document tokens are appended to the method's id
// list, and every complete chunk of `chunk` tokens is encoded by the
// encoder's step, so chunk boundaries depend only on the chunk size, never on
// how the caller split its feed calls. The rest is encoded by finish.
//
// A step must leave its encoder unchanged when it throws (cancellation
// included); the loop then keeps exactly the encoded tokens plus what was
// pending before the call, so a failed or cancelled feed loses nothing that
// was already stored and can be retried.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "session/progress.h"

namespace lctx {

// step(tokens, m, keep_going): encode m (1 <= m <= chunk) tokens that follow
// the encoded ones; keep_going() is polled inside long work.
using ChunkStep = std::function<void(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going)>;

struct ChunkFeeder {
    std::vector<int32_t> ids;        // every document token read so far
    int64_t chunk = 0;
    int64_t first_chunk = 0;         // size of the first step when > 0 (ILRe: sinks + chunk)
    const char *who = "";            // method name for messages ("REFORM")
    std::function<int64_t()> n_encoded;   // tokens the encoder has taken so far

    // The size of the step that starts at document token `at`.
    int64_t step_at(int64_t at) const { return at == 0 && first_chunk > 0 ? first_chunk : chunk; }

    // Appends tokens[0..n) and encodes every complete chunk.
    void feed(const int32_t *tokens, size_t n, Progress &progress, const ChunkStep &step);
    // Encodes what is left (less than a chunk after feed).
    void finish(Progress &progress, const ChunkStep &step);
};

} // namespace lctx
