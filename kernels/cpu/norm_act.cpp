// rms_norm, swiglu, geglu (Gemma 3) and log_sum_exp (log-softmax of logits):
// dispatch to the active SIMD variant, plus the scalar references (rms_norm:
// double accumulation, as ggml does for the sum of squares; geglu: the tanh
// formula with std::tanh; log_sum_exp: double throughout).
#include <algorithm>
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

double log_sum_exp(const float *x, int64_t n) {
    if (n <= 0) return -INFINITY;
    return active_kernels().log_sum_exp(x, n);
}

double log_sum_exp_ref(const float *x, int64_t n) {
    if (n <= 0) return -INFINITY;
    double mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(x[i]));
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
    return mx + std::log(sum);
}

} // namespace lctx::cpu
