// launch_attention's sequence of launches (kernels/cuda/kernels.cu) on the
// launch emulator: the emulated device (emulated_device.cpp) and the kernel
// tests (test_cuda_kernels_emulated.cpp) both run it.
#pragma once

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/emulate.h"

namespace lctx::cuda {

inline void emulate_attention(const AttnArgs &a) {
    if (attention_use_tiled(a)) {
        dispatch_attention_tiled(a, [&](auto variant) {
            using T = decltype(variant);
            emulate_launch(attention_tiled_dims<T::rq, T::nc>(a.n_q, a.n_head, a.n_split),
                           [&](HostCtx &c) { attention_tiled_body<T::rq, T::nc>(c, a); });
        });
    } else {
        emulate_launch(attention_dims(a.n_q, a.n_head, a.head_dim, a.n_split), [&](HostCtx &c) { attention_body(c, a); });
    }
    if (a.n_split > 1) emulate_launch(attn_combine_dims(a.n_q, a.n_head), [&](HostCtx &c) { attn_combine_body(c, a); });
    if (a.col_sums && (a.n_split > 1 || attention_use_tiled(a)))
        emulate_launch(attn_cols_dims(a.n_q, a.n_head, a.head_dim, a.n_split), [&](HostCtx &c) { attn_cols_body(c, a); });
}

} // namespace lctx::cuda
