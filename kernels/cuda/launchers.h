// GPU launches of the kernel bodies of kernels/cuda/*.h (defined in
// kernels.cu, compiled by nvcc): each takes the body's argument struct and
// the sizes that give its launch geometry (the *_dims() functions the
// emulated tests use too), and launches on `stream` (a cudaStream_t; null:
// the legacy default stream). Plain C++: the backend's .cpp files include it
// without the CUDA headers. A launch of zero blocks does nothing.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_launches.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/dequant.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/kv_rows.h"
#include "kernels/cuda/topk.h"

namespace lctx::cuda {

void launch_rms_norm(const RmsNormArgs &a, int64_t n_rows, void *stream);
void launch_swiglu(const SwigluArgs &a, void *stream);
void launch_geglu(const SwigluArgs &a, void *stream);
void launch_scale(const ScaleArgs &a, void *stream);
void launch_add(const AddArgs &a, void *stream);
void launch_add_bias(const AddBiasArgs &a, void *stream);
void launch_rope(const RopeArgs &a, int64_t n_tok, int32_t n_heads, void *stream);
void launch_dequant_rows(const DequantRowsArgs &a, int64_t n_rows, void *stream);
void launch_gemv(const GemvArgs &a, void *stream);
// The launches of for_each_attention_launch (attention_launches.h).
// AttnArgs::row_ml must be set where attention_needs_row_ml says so, part
// where n_split > 1.
void launch_attention(const AttnArgs &a, void *stream);
void launch_gather_rows(const GatherArgs &a, int64_t n, void *stream);
void launch_convert_rows(const RowConvertArgs &a, int64_t n, void *stream);
void launch_dot_scores(const DotScoresArgs &a, int64_t rows, void *stream);
void launch_row_topk(const RowTopkArgs &a, int64_t rows, void *stream);

} // namespace lctx::cuda
