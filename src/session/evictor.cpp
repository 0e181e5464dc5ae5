#include "session/evictor.h"

#include <algorithm>

#include "session/evictor_h2o.h"
#include "session/evictor_scores.h"

namespace lctx {

const char *evictor_name(EvictorKind kind) {
    switch (kind) {
    case EvictorKind::H2O: return "h2o";
    case EvictorKind::TOVA: return "tova";
    case EvictorKind::STREAMING: return "streaming";
    case EvictorKind::SNAPKV: return "snapkv";
    }
    return "?";
}

bool evictor_from_name(const std::string &name, EvictorKind &out) {
    for (EvictorKind k : {EvictorKind::H2O, EvictorKind::TOVA, EvictorKind::STREAMING, EvictorKind::SNAPKV})
        if (name == evictor_name(k)) {
            out = k;
            return true;
        }
    return false;
}

Evictor Evictor::make(EvictorKind kind, int64_t budget, int64_t sink, int64_t recent) {
    Evictor e;
    e.kind = kind;
    e.budget = budget;
    e.sink = sink;
    e.recent = recent;
    switch (kind) {
    case EvictorKind::H2O: e.obs = 128; e.accumulate = true; break;
    case EvictorKind::TOVA: e.obs = 1; break;
    case EvictorKind::SNAPKV: e.obs = 32; break;
    case EvictorKind::STREAMING: e.obs = 0; break;
    }
    return e;
}

std::vector<int64_t> Evictor::keep(const float *score, const int64_t *orig, int64_t n) const {
    switch (kind) {
    case EvictorKind::STREAMING: return streaming_keep(orig, n, budget, sink);
    case EvictorKind::SNAPKV: {
        std::vector<float> pooled(static_cast<size_t>(n));
        avg_pool_scores(score, n, snapkv_kernel, pooled.data());
        return h2o_keep(pooled.data(), orig, n, budget, sink, recent);
    }
    case EvictorKind::H2O:
    case EvictorKind::TOVA: break;
    }
    return h2o_keep(score, orig, n, budget, sink, recent);
}

} // namespace lctx
