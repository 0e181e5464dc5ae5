#include "session/chunk_feeder.h"

#include <algorithm>
#include <new>

#include "common/error.h"

namespace lctx {

void ChunkFeeder::feed(const int32_t *tokens, size_t n, Progress &progress, const ChunkStep &step) {
    const size_t before = ids.size();
    try {
        ids.insert(ids.end(), tokens, tokens + n);
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "%s: out of memory storing %zu document tokens", who, n);
    }
    try {
        while (static_cast<int64_t>(ids.size()) - n_encoded() >= step_at(n_encoded())) {
            const int64_t at = n_encoded();
            const int64_t done = std::max<int64_t>(0, at - int64_t(before));
            const double frac = n ? double(done) / double(n) : 1.0;
            if (!progress.keep_going(frac))
                fail(LCTX_ERR_CANCELLED, "%s: cancelled after %lld of %zu tokens", who, (long long)done, n);
            step(ids.data() + at, step_at(at), [&] { return progress.keep_going(frac); });
        }
    } catch (...) {
        // Keep what was encoded (and what was pending before this call).
        ids.resize(std::max<size_t>(before, static_cast<size_t>(n_encoded())));
        throw;
    }
    progress.keep_going(1.0);
}

void ChunkFeeder::finish(Progress &progress, const ChunkStep &step) {
    const int64_t n_doc = static_cast<int64_t>(ids.size());
    while (n_encoded() < n_doc) {
        const int64_t at = n_encoded();
        const double frac = double(at) / double(n_doc);
        if (!progress.keep_going(frac)) fail(LCTX_ERR_CANCELLED, "%s: finishing the document cancelled", who);
        step(ids.data() + at, std::min(step_at(at), n_doc - at), [&] { return progress.keep_going(frac); });
    }
    progress.keep_going(1.0);
}

} // namespace lctx
