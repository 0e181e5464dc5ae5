// Host side of the RoPE kernel: the CPU kernels' rotary setup
// (cpu::rope_params: n_rot, layout, linear scaling, YaRN correction dims,
// frequency factors)
// in the kernel's argument struct.
#pragma once

#include "common/error.h"
#include "common/model_types.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/elementwise.h"

namespace lctx::cuda {

inline RopeSetup rope_setup(const Hparams &hp) {
    const cpu::RopeParams c = cpu::rope_params(hp);
    RopeSetup p;
    p.head_dim = c.head_dim;
    p.n_rot = c.n_rot;
    p.neox = c.neox;
    p.base = c.base;
    p.freq_scale = c.freq_scale;
    p.ext_factor = c.ext_factor;
    p.attn_factor = c.attn_factor;
    p.corr0 = c.corr[0];
    p.corr1 = c.corr[1];
    if (c.freq_factors) {
        if (c.n_rot / 2 > kRopeMaxFactors)
            fail(LCTX_ERR_UNSUPPORTED, "rope on cuda: frequency factors for %d rotated dims (at most %d)", c.n_rot,
                 2 * kRopeMaxFactors);
        p.has_factors = true;
        for (int i = 0; i < c.n_rot / 2; ++i) p.factors[i] = c.freq_factors[i];
    }
    return p;
}

} // namespace lctx::cuda
