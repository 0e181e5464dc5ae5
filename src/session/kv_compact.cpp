#include "session/kv_compact.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace lctx {

Hparams delta_rope_hparams(const Hparams &hp) {
    Hparams rot = hp;
    float mscale = hp.yarn_attn_factor;
    if (hp.rope_scaling == RopeScaling::YARN && hp.yarn_ext_factor != 0.0f)
        mscale *= 1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale);
    rot.yarn_attn_factor = hp.yarn_attn_factor / mscale;
    return rot;
}

void compact_head(KvCache &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep, const Hparams &rot) {
    const int64_t D = cache.head_dim(), nk = static_cast<int64_t>(keep.size());
    float *k = cache.keys(layer) + head * cache.head_stride();
    float *v = cache.values(layer) + head * cache.head_stride();
    const size_t row = static_cast<size_t>(D) * sizeof(float);
    std::vector<int32_t> delta(static_cast<size_t>(nk));
    for (int64_t i = 0; i < nk; ++i) {   // keep is ascending: moving forward is safe
        const int64_t src = keep[i];
        delta[i] = static_cast<int32_t>(i - src);
        if (src == i) continue;
        std::memmove(k + i * D, k + src * D, row);
        std::memmove(v + i * D, v + src * D, row);
    }
    cpu::rope(rot, k, D, nk, 1, delta.data());
}

void compact_head_slots(KvCache &cache, int32_t layer, int32_t head, const std::vector<int64_t> &keep,
                        const Hparams &rot, std::vector<int64_t> &orig, std::vector<float> &score) {
    compact_head(cache, layer, head, keep, rot);
    for (size_t i = 0; i < keep.size(); ++i) {   // ascending: moving forward is safe
        orig[i] = orig[static_cast<size_t>(keep[i])];
        score[i] = score[static_cast<size_t>(keep[i])];
    }
    orig.resize(keep.size());
    score.resize(keep.size());
}

} // namespace lctx
