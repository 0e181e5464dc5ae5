// q8 KV rows: quantization when a row is stored, dequantization when one is
// read back or widened for the tiled attention kernels (the few-row kernel
// reads the codes in place: simd_impl.h, attn_partial_rows).
#include <cmath>
#include <cstring>

#include "cpu_kernels.h"

namespace lctx::cpu {

void q8_quantize_row(const float *x, int64_t d, uint8_t *row) {
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < d; ++i) {
        finite = finite && std::isfinite(x[i]);
        amax = std::fmax(amax, std::fabs(x[i]));
    }
    auto *codes = reinterpret_cast<int8_t *>(row);
    float scale = amax / 127.0f;
    if (!finite) {   // the f32 cache would carry the NaN or infinity into attention: so does this row
        scale = NAN;
        std::memset(codes, 0, static_cast<size_t>(d));
    } else {
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t i = 0; i < d; ++i)
            codes[i] = static_cast<int8_t>(std::fmax(-127.0f, std::fmin(127.0f, std::nearbyint(x[i] * inv))));
    }
    for (int64_t i = d; i < q8_scale_offset(d); ++i) codes[i] = 0;
    std::memcpy(row + q8_scale_offset(d), &scale, sizeof scale);
}

void q8_dequantize_row(const uint8_t *row, int64_t d, float *x) {
    const float scale = q8_row_scale(row, d);
    const auto *codes = reinterpret_cast<const int8_t *>(row);
    for (int64_t i = 0; i < d; ++i) x[i] = static_cast<float>(codes[i]) * scale;
}

} // namespace lctx::cpu
