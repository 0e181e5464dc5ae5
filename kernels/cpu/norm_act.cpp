// rms_norm, swiglu and geglu (Gemma 3): dispatch to the active SIMD variant,
// plus the scalar references (rms_norm: double accumulation, as ggml does for
// the sum of squares; geglu: the tanh formula with std::tanh).
#include <cmath>

#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {

void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    if (n <= 0) return;
    active_kernels().rms_norm(x, w, y, n, eps);
}

void rms_norm_ref(const float *x, const float *w, float *y, int64_t n, float eps) {
    if (n <= 0) return;
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv * (w ? w[i] : 1.0f));
}

void swiglu(const float *gate, const float *up, float *out, int64_t n) {
    if (n <= 0) return;
    active_kernels().swiglu(gate, up, out, n);
}

void geglu(const float *gate, const float *up, float *out, int64_t n) {
    if (n <= 0) return;
    active_kernels().geglu(gate, up, out, n);
}

void geglu_ref(const float *gate, const float *up, float *out, int64_t n) {
    // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
    constexpr float kC = 0.7978845608028654f;
    for (int64_t i = 0; i < n; ++i) {
        const float x = gate[i];
        out[i] = 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x))) * up[i];
    }
}

} // namespace lctx::cpu
