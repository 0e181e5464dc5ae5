// The eviction rule of a compressed KV cache, applied per (layer, KV head)
// after each chunk: which slots stay. Shared by REFORM's encoder (H2O by
// default; TOVA, StreamingLLM and SnapKV selectable) and the recurrent
// baselines. The scores are the attention mass slots received from the last
// `obs` queries of a chunk (ForwardHooks::col_sums), summed over chunks when
// `accumulate` (H2O) or fresh per chunk (TOVA, SnapKV).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lctx {

enum class EvictorKind { H2O, TOVA, STREAMING, SNAPKV };

const char *evictor_name(EvictorKind kind);
// "h2o", "tova", "streaming", "snapkv"; false for anything else.
bool evictor_from_name(const std::string &name, EvictorKind &out);

struct Evictor {
    EvictorKind kind = EvictorKind::H2O;
    int64_t budget = 0;         // slots kept, sinks and recent included
    int64_t sink = 0;           // first document tokens always kept
    int64_t recent = 0;         // most recent slots always kept (not STREAMING: its window is the rest)
    int64_t obs = 0;            // observation queries per chunk; 0: no scores (STREAMING)
    bool accumulate = false;    // scores summed over chunks (H2O) or fresh per chunk
    int64_t snapkv_kernel = 7;  // SNAPKV: average-pooling width of the scores

    // The defaults of each rule for a cache of `budget` slots with sink and
    // recent protected (H2O: obs 128, accumulated; TOVA: the chunk's last
    // query; SNAPKV: a 32-query window, pooled by 7; STREAMING: no scores).
    static Evictor make(EvictorKind kind, int64_t budget, int64_t sink, int64_t recent);

    // score[s], orig[s] (document index, increasing) of slots s < n. The
    // slots to keep, ascending: all n when n <= budget, else exactly budget.
    std::vector<int64_t> keep(const float *score, const int64_t *orig, int64_t n) const;
};

} // namespace lctx
