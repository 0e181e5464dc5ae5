// The __global__ wrappers of the kernel bodies (kernels/cuda/*.h) and their
// launches (launchers.h): each wrapper makes a DeviceCtx and calls the body
// that the emulated tests run on the host.
#include <cuda_runtime.h>

#include "kernels/cuda/launchers.h"

namespace lctx::cuda {
namespace {

template <class Args, void (*Body)(DeviceCtx &, const Args &)>
__global__ void run_body(Args a) {
    DeviceCtx c;
    Body(c, a);
}

// A tag's body (attention_launches.h: Kernel::run<Ctx>) as a plain function.
template <class Args, class Kernel>
LCTX_HD void run_kernel(DeviceCtx &c, const Args &a) {
    Kernel::template run<DeviceCtx>(c, a);
}

template <class Args, void (*Body)(DeviceCtx &, const Args &)>
void launch(const LaunchDims &d, const Args &a, void *stream) {
    if (d.grid.x == 0 || d.grid.y == 0 || d.grid.z == 0) return;
    run_body<Args, Body><<<dim3(d.grid.x, d.grid.y, d.grid.z), d.block, d.shmem, static_cast<cudaStream_t>(stream)>>>(a);
}

} // namespace

void launch_rms_norm(const RmsNormArgs &a, int64_t n_rows, void *s) {
    launch<RmsNormArgs, rms_norm_body<DeviceCtx>>(rms_norm_dims(n_rows), a, s);
}
void launch_swiglu(const SwigluArgs &a, void *s) { launch<SwigluArgs, swiglu_body<DeviceCtx>>(elt_dims(a.n), a, s); }
void launch_geglu(const SwigluArgs &a, void *s) { launch<SwigluArgs, geglu_body<DeviceCtx>>(elt_dims(a.n), a, s); }
void launch_scale(const ScaleArgs &a, void *s) { launch<ScaleArgs, scale_body<DeviceCtx>>(elt_dims(a.n), a, s); }
void launch_add(const AddArgs &a, void *s) { launch<AddArgs, add_body<DeviceCtx>>(elt_dims(a.n), a, s); }
void launch_add_bias(const AddBiasArgs &a, void *s) {
    launch<AddBiasArgs, add_bias_body<DeviceCtx>>(elt_dims(a.n), a, s);
}
void launch_rope(const RopeArgs &a, int64_t n_tok, int32_t n_heads, void *s) {
    launch<RopeArgs, rope_body<DeviceCtx>>(rope_dims(n_tok, n_heads), a, s);
}
void launch_dequant_rows(const DequantRowsArgs &a, int64_t n_rows, void *s) {
    launch<DequantRowsArgs, dequant_rows_body<DeviceCtx>>(dequant_rows_dims(n_rows), a, s);
}
void launch_gemv(const GemvArgs &a, void *s) {
    launch<GemvArgs, gemv_body<DeviceCtx>>(gemv_dims(a.n_rows, a.threads_per_row), a, s);
}
void launch_attention(const AttnArgs &a, void *s) {
    for_each_attention_launch(a, [&](const LaunchDims &d, auto kernel) {
        launch<AttnArgs, run_kernel<AttnArgs, decltype(kernel)>>(d, a, s);
    });
}
void launch_gather_rows(const GatherArgs &a, int64_t n, void *s) {
    launch<GatherArgs, gather_rows_body<DeviceCtx>>(kv_rows_dims(n), a, s);
}
void launch_convert_rows(const RowConvertArgs &a, int64_t n, void *s) {
    launch<RowConvertArgs, convert_rows_body<DeviceCtx>>(kv_rows_dims(n), a, s);
}
void launch_dot_scores(const DotScoresArgs &a, int64_t rows, void *s) {
    launch<DotScoresArgs, dot_scores_body<DeviceCtx>>(dot_scores_dims(a.n, rows, a.dim), a, s);
}
void launch_row_topk(const RowTopkArgs &a, int64_t rows, void *s) {
    launch<RowTopkArgs, row_topk_body<DeviceCtx>>(row_topk_dims(rows), a, s);
}

} // namespace lctx::cuda
