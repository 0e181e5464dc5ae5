#include "session/infllm_blocks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/ggml_type.h"
#include "common/top_k.h"

namespace lctx {

std::vector<int64_t> infllm_top_indices(const float *scores, int64_t n, int64_t r) {
    return top_k_indices(scores, n, r);
}

void infllm_repr_key(const uint16_t *keys, int64_t ld, const float *scores, int64_t n, int64_t r, int32_t D,
                     float *out) {
    const std::vector<int64_t> top = infllm_top_indices(scores, n, r);
    std::fill(out, out + D, 0.0f);
    for (int64_t t : top)
        for (int32_t d = 0; d < D; ++d) out[d] += fp16_to_fp32(keys[t * ld + d]);
    const float inv = top.empty() ? 0.0f : 1.0f / static_cast<float>(top.size());
    for (int32_t d = 0; d < D; ++d) out[d] *= inv;
}

void infllm_block_scores(const float *q, int64_t ldq, int64_t n_q, int32_t head0, int32_t n_heads, int32_t D,
                         const float *kbar, int64_t n_blocks, float *scores) {
    std::vector<double> qs(static_cast<size_t>(D), 0.0);
    for (int64_t i = 0; i < n_q; ++i)
        for (int32_t h = head0; h < head0 + n_heads; ++h) {
            const float *row = q + i * ldq + int64_t(h) * D;
            for (int32_t d = 0; d < D; ++d) qs[d] += row[d];
        }
    std::vector<float> qf(qs.begin(), qs.end());
    for (int64_t b = 0; b < n_blocks; ++b) {
        const float *k = kbar + b * D;
        float s = 0.0f;
        for (int32_t d = 0; d < D; ++d) s += qf[d] * k[d];
        scores[b] = s;
    }
}

} // namespace lctx
