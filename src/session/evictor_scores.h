// Keep-list rules of the recurrent baselines for one (layer, KV head) of a
// compressed cache, beside H2O's (evictor_h2o.h). Pure functions over
// arrays: score[s] / orig[s] for slots s < n (orig strictly increasing);
// each returns the slots to keep, ascending: all n when n <= budget, else
// exactly `budget`. Protected slots: orig < sink, and the last `recent`.
// TOVA and SnapKV use h2o_keep with their own scores (one query's attention;
// pooled window attention).
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

// StreamingLLM: the sinks and the most recent slots.
std::vector<int64_t> streaming_keep(const int64_t *orig, int64_t n, int64_t budget, int64_t sink);

// SnapKV's pooling (PyTorch avg_pool1d, stride 1, padding kernel/2, zero
// padding counted): out[i] = sum of in[i - kernel/2 .. i - kernel/2 + kernel-1]
// / kernel. out has n entries.
void avg_pool_scores(const float *in, int64_t n, int64_t kernel, float *out);

// InfiniPot: protected slots, then round(free * nuc_ratio) slots with the
// highest novelty nuc[], then the rest by the catalyst prompt's attention
// cap[]. Ties keep the more recent token.
std::vector<int64_t> infinipot_keep(const float *cap, const float *nuc, const int64_t *orig, int64_t n,
                                    int64_t budget, int64_t sink, int64_t recent, float nuc_ratio);

} // namespace lctx
