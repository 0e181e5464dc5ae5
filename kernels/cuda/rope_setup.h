// Host side of the RoPE kernel: the rotary setup derived from Hparams as
// kernels/cpu/rope.cpp derives it (n_rot, layout, linear scaling, YaRN
// correction dims as ggml_rope_yarn_corr_dims).
#pragma once

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/model_types.h"
#include "kernels/cuda/elementwise.h"

namespace lctx::cuda {

inline RopeSetup rope_setup(const Hparams &hp) {
    RopeSetup p;
    p.head_dim = hp.head_dim;
    p.n_rot = hp.n_rot > 0 ? hp.n_rot : hp.head_dim;
    if (p.head_dim <= 0 || p.n_rot > p.head_dim || p.n_rot % 2 != 0)
        fail(LCTX_ERR_INVALID_ARG, "rope: n_rot %d must be even and <= head_dim %d", p.n_rot, p.head_dim);
    p.neox = hp.rope_layout == RopeLayout::NEOX;
    p.base = hp.rope_base;
    p.freq_scale = hp.rope_scaling == RopeScaling::NONE ? 1.0f : hp.rope_freq_scale;
    p.ext_factor = hp.rope_scaling == RopeScaling::YARN ? hp.yarn_ext_factor : 0.0f;
    p.attn_factor = hp.yarn_attn_factor;
    if (p.ext_factor != 0.0f) {
        const int n_orig = hp.rope_orig_ctx > 0 ? hp.rope_orig_ctx : hp.n_ctx_train;
        const float base = static_cast<float>(p.base);
        auto corr_dim = [&](float n_rot) {
            return p.n_rot * std::log(n_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
        };
        p.corr0 = std::max(0.0f, std::floor(corr_dim(hp.yarn_beta_fast)));
        p.corr1 = std::min(static_cast<float>(p.n_rot - 1), std::ceil(corr_dim(hp.yarn_beta_slow)));
    }
    return p;
}

} // namespace lctx::cuda
