// Kernel bodies of the row-wise and element-wise ops (launch.h): RMSNorm,
// SwiGLU, GeGLU, scale, add, bias add, RoPE. Semantics are those of the CPU kernels
// (kernels/cpu/cpu_kernels.h); RoPE follows kernels/cpu/rope.cpp exactly
// (ggml's NORMAL/NEOX layouts, linear and YaRN scaling, theta in double).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"

namespace lctx::cuda {

constexpr int kRowThreads = 256;    // threads per row of rms_norm
constexpr int kEltThreads = 256;    // threads per block of element-wise ops
constexpr int64_t kEltMaxBlocks = 65535;

// --- RMSNorm: one block per row; block size a power of two; shared: nthreads floats.
struct RmsNormArgs {
    const float *x;
    const float *w;   // may be null
    float *y;
    int64_t n;
    float eps;
};

template <class Ctx>
LCTX_HD void rms_norm_body(Ctx &c, const RmsNormArgs &a) {
    const int64_t r = c.bx();
    const float *x = a.x + r * a.n;
    float *y = a.y + r * a.n;
    float ss = 0.0f;
    for (int64_t i = c.tid(); i < a.n; i += c.nthreads()) ss += x[i] * x[i];
    ss = block_sum(c, reinterpret_cast<float *>(c.shared()), ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.n) + a.eps);
    for (int64_t i = c.tid(); i < a.n; i += c.nthreads()) y[i] = x[i] * inv * (a.w ? a.w[i] : 1.0f);
}

inline LaunchDims rms_norm_dims(int64_t n_rows) {
    return {{static_cast<unsigned>(n_rows), 1, 1}, kRowThreads, kRowThreads * sizeof(float)};
}

// --- element-wise: grid-stride loops over n elements.
struct SwigluArgs {
    const float *gate, *up;
    float *out;
    int64_t n;
};

template <class Ctx>
LCTX_HD void swiglu_body(Ctx &c, const SwigluArgs &a) {
    const int64_t stride = c.gx() * c.nthreads();
    for (int64_t i = c.bx() * c.nthreads() + c.tid(); i < a.n; i += stride) {
        const float g = a.gate[i];
        a.out[i] = g / (1.0f + expf(-g)) * a.up[i];
    }
}

// GeGLU (Gemma): gelu_tanh(gate) * up, the formula of kernels/cpu/norm_act.cpp.
template <class Ctx>
LCTX_HD void geglu_body(Ctx &c, const SwigluArgs &a) {
    const int64_t stride = c.gx() * c.nthreads();
    for (int64_t i = c.bx() * c.nthreads() + c.tid(); i < a.n; i += stride) {
        const float x = a.gate[i];
        a.out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * a.up[i];
    }
}

struct ScaleArgs {
    float *x;
    float s;
    int64_t n;
};

template <class Ctx>
LCTX_HD void scale_body(Ctx &c, const ScaleArgs &a) {
    const int64_t stride = c.gx() * c.nthreads();
    for (int64_t i = c.bx() * c.nthreads() + c.tid(); i < a.n; i += stride) a.x[i] *= a.s;
}

struct AddArgs {
    float *x;
    const float *y;
    int64_t n;
};

template <class Ctx>
LCTX_HD void add_body(Ctx &c, const AddArgs &a) {
    const int64_t stride = c.gx() * c.nthreads();
    for (int64_t i = c.bx() * c.nthreads() + c.tid(); i < a.n; i += stride) a.x[i] += a.y[i];
}

// x[i] += b[i % n_cols] over n elements (rows of n_cols: a bias per row).
struct AddBiasArgs {
    float *x;
    const float *b;
    int64_t n, n_cols;
};

template <class Ctx>
LCTX_HD void add_bias_body(Ctx &c, const AddBiasArgs &a) {
    const int64_t stride = c.gx() * c.nthreads();
    for (int64_t i = c.bx() * c.nthreads() + c.tid(); i < a.n; i += stride) a.x[i] += a.b[i % a.n_cols];
}

// Blocks for an element-wise launch of n elements.
inline unsigned elt_blocks(int64_t n) {
    const int64_t b = ceil_div(n, kEltThreads);
    return static_cast<unsigned>(b < 1 ? 1 : (b > kEltMaxBlocks ? kEltMaxBlocks : b));
}
inline LaunchDims elt_dims(int64_t n) { return {{elt_blocks(n), 1, 1}, kEltThreads, 0}; }

// --- RoPE: grid (n_tok, n_heads); threads over the n_rot/2 pairs of a head.
// The rotary setup as rope.cpp derives it from Hparams (rope_setup(), host).
// Frequency factors travel in the argument struct (at most kRopeMaxFactors
// pairs, n_rot <= 512), so a launch needs no device copy of them.
constexpr int kRopeMaxFactors = 256;
struct RopeSetup {
    int n_rot = 0, head_dim = 0;
    bool neox = false;
    double base = 10000.0;
    float freq_scale = 1.0f, ext_factor = 0.0f, attn_factor = 1.0f;
    float corr0 = 0.0f, corr1 = 0.0f;
    bool has_factors = false;          // pair i turns at theta_i / factors[i]
    float factors[kRopeMaxFactors] = {};
};

struct RopeArgs {
    RopeSetup p;
    float *x;
    int64_t ld;
    const int32_t *pos;
};

constexpr int kRopeThreads = 64;
inline LaunchDims rope_dims(int64_t n_tok, int32_t n_heads) {
    return {{static_cast<unsigned>(n_tok), static_cast<unsigned>(n_heads), 1}, kRopeThreads, 0};
}

template <class Ctx>
LCTX_HD void rope_body(Ctx &c, const RopeArgs &a) {
    const RopeSetup &p = a.p;
    const int64_t t = c.bx(), h = c.by();
    float *v = a.x + t * a.ld + h * p.head_dim;
    const int half = p.n_rot / 2;
    for (int i = c.tid(); i < half; i += c.nthreads()) {
        double invf = pow(p.base, -2.0 * i / p.n_rot);
        if (p.has_factors) invf /= p.factors[i];
        const double theta_extrap = static_cast<double>(a.pos[t]) * invf;
        const double theta_interp = p.freq_scale * theta_extrap;
        double theta = theta_interp;
        float mscale = p.attn_factor;
        if (p.ext_factor != 0.0f) {
            const double span = static_cast<double>(p.corr1 - p.corr0);
            const double y = (i - static_cast<double>(p.corr0)) / (span > 0.001 ? span : 0.001);
            const double mix = (1.0 - (y < 0.0 ? 0.0 : (y > 1.0 ? 1.0 : y))) * p.ext_factor;
            theta = theta_interp * (1 - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
        }
        const float cs = static_cast<float>(cos(theta)) * mscale, sn = static_cast<float>(sin(theta)) * mscale;
        const int ia = p.neox ? i : 2 * i, ib = p.neox ? i + half : 2 * i + 1;
        const float x0 = v[ia], x1 = v[ib];
        v[ia] = x0 * cs - x1 * sn;
        v[ib] = x0 * sn + x1 * cs;
    }
}

} // namespace lctx::cuda
