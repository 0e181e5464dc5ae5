#include "backend/backend.h"

#include <cmath>

namespace lctx {

const char *kv_type_name(KvType t) { return t == KvType::F16 ? "f16" : "f32"; }

size_t kv_type_size(KvType t) { return t == KvType::F16 ? 2 : 4; }

namespace {

// The magnitude factor RoPE applies with hp (ggml's mscale).
float rope_magnitude(const Hparams &hp) {
    float mscale = hp.yarn_attn_factor;
    if (hp.rope_scaling == RopeScaling::YARN && hp.yarn_ext_factor != 0.0f)
        mscale *= 1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale);
    return mscale;
}

} // namespace

Hparams rope_delta_hparams(const Hparams &hp) {
    // Rotations compose additively in the position (linear and YaRN angles
    // are linear in it), but the magnitude factor mscale must be applied
    // once only: cancel it for the delta rotation.
    Hparams rot = hp;
    rot.yarn_attn_factor = hp.yarn_attn_factor / rope_magnitude(hp);
    return rot;
}

Hparams rope_inverse_hparams(const Hparams &hp) {
    // A delta rotation (magnitude 1) that also divides by the magnitude the
    // original rotation applied.
    Hparams inv = rope_delta_hparams(hp);
    inv.yarn_attn_factor /= rope_magnitude(hp);
    return inv;
}

} // namespace lctx
