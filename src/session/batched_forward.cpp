#include "session/batched_forward.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace lctx {

void forward_in_batches(Forward &forward, KvStore &cache, int64_t limit, const int32_t *tokens, size_t n,
                        int32_t n_batch, Progress *progress, std::vector<float> &logits,
                        std::vector<int32_t> &cached_tokens, const char *who, AttentionPolicy *policy) {
    limit = std::min(limit, cache.capacity());
    if (static_cast<int64_t>(n) > limit - cache.size())
        fail(LCTX_ERR_CONTEXT_FULL, "%s: the decode cache holds %lld of %lld tokens and cannot take %zu more: "
             "raise n_ctx", who, (long long)cache.size(), (long long)limit, n);
    std::vector<int32_t> pos;
    const size_t nb = static_cast<size_t>(std::max(1, n_batch));
    for (size_t done = 0; done < n;) {
        const size_t b = std::min(n - done, nb);
        const double frac = double(done) / double(n);
        if (progress && !progress->keep_going(frac))
            fail(LCTX_ERR_CANCELLED, "%s: cancelled after %zu of %zu tokens", who, done, n);
        pos.resize(b);
        std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cache.size()));
        if (cache.releases_window()) cache.raise_floor(pos[0]);
        ForwardOptions opt;
        opt.logits = done + b == n ? LogitsMode::LAST : LogitsMode::NONE;
        opt.policy = policy;
        if (progress) opt.keep_going = [progress, frac] { return progress->keep_going(frac); };
        forward.run(tokens + done, pos.data(), static_cast<int64_t>(b), cache, opt, logits);
        cached_tokens.insert(cached_tokens.end(), tokens + done, tokens + done + b);
        done += b;
    }
}

} // namespace lctx
