// InfLLM block retrieval as pure functions (method_infllm.h uses them).
// A memory block is represented by the mean of the pre-RoPE keys of its
// `repr` most attended tokens; its relevance to a set of queries is
//   score(b) = 1/R * sum_{query i} sum_{head h of KV group g} sum_{r < R} q[i,h] . k[b,r]
// which, being linear, equals dot(sum_{i,h} q[i,h], mean_r k[b,r]): one dot
// product per block.
#pragma once

#include <cstdint>
#include <vector>

namespace lctx {

// Indices (ascending) of the r entries of scores[0..n) with the largest
// values; ties go to the earlier index, NaN ranks lowest. r is clamped to n.
std::vector<int64_t> infllm_top_indices(const float *scores, int64_t n, int64_t r);

// Mean of the keys (fp16, row t at keys + t * ld, D numbers) of the r rows
// of the block (n rows) with the largest scores: out[0..D).
void infllm_repr_key(const uint16_t *keys, int64_t ld, const float *scores, int64_t n, int64_t r, int32_t D,
                     float *out);

// scores[b] = dot(sum over queries i < n_q and heads head0..head0+n_heads-1
// of q[i * ldq + h * D ..], kbar[b * D ..]) for b < n_blocks.
void infllm_block_scores(const float *q, int64_t ldq, int64_t n_q, int32_t head0, int32_t n_heads, int32_t D,
                         const float *kbar, int64_t n_blocks, float *scores);

} // namespace lctx
