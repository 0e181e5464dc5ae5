// The launches of one attention call, in order, for both launchers: the
// GPU's (launch_attention, kernels.cu) and the launch emulator's
// (tests/cuda/emulated_attention.h), so the two cannot drift apart.
//
// for_each_attention_launch(a, go) calls go(dims, kernel) per launch, where
// kernel is an empty tag whose run<Ctx>(c, a) calls the kernel body:
//   1. attention_tiled_body (a.tiled and a variant for the head dim) or
//      attention_body;
//   2. attn_combine_body when the keys are split (a.n_split > 1);
//   3. attn_cols_body for column sums after either of the above, which
//      leave each row's final (m, l) in row_ml (attention_body without a
//      split adds the column sums itself).
#pragma once

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_tiled.h"

namespace lctx::cuda {

struct AttnFlatKernel {
    template <class Ctx>
    LCTX_HD static void run(Ctx &c, const AttnArgs &a) { attention_body(c, a); }
};
template <int RQ, int NC>
struct AttnTiledKernel {
    template <class Ctx>
    LCTX_HD static void run(Ctx &c, const AttnArgs &a) { attention_tiled_body<RQ, NC>(c, a); }
};
struct AttnCombineKernel {
    template <class Ctx>
    LCTX_HD static void run(Ctx &c, const AttnArgs &a) { attn_combine_body(c, a); }
};
struct AttnColsKernel {
    template <class Ctx>
    LCTX_HD static void run(Ctx &c, const AttnArgs &a) { attn_cols_body(c, a); }
};

template <class Go>
void for_each_attention_launch(const AttnArgs &a, Go &&go) {
    if (attention_use_tiled(a)) {
        dispatch_attention_tiled(a, [&](auto variant) {
            using T = decltype(variant);
            go(attention_tiled_dims<T::rq, T::nc>(a.n_q, a.n_head, a.n_split), AttnTiledKernel<T::rq, T::nc>{});
        });
    } else {
        go(attention_dims(a.n_q, a.n_head, a.head_dim, a.n_split), AttnFlatKernel{});
    }
    if (a.n_split > 1) go(attn_combine_dims(a.n_q, a.n_head), AttnCombineKernel{});
    if (a.col_sums && (a.n_split > 1 || attention_use_tiled(a)))
        go(attn_cols_dims(a.n_q, a.n_head, a.head_dim, a.n_split), AttnColsKernel{});
}

} // namespace lctx::cuda
