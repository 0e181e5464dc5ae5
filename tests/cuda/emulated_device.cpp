// A host implementation of the CUDA backend's device runtime
// (src/backend/cuda/device.h) and kernel launches (kernels/cuda/launchers.h)
// for test_cuda_backend_emulated: "device memory" is host memory registered
// in a table (so the backend's staging sees which pointers are its own),
// launches run the kernel bodies on the launch emulator with the GPU launch
// geometry, and the f16 GEMM is a plain loop over the f16 values with f32
// accumulation (what cublasGemmEx is asked to compute). Every pointer a
// launch receives must be such device memory.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/cuda/block_cache.h"
#include "backend/cuda/device.h"
#include "common/error.h"
#include "emulated_attention.h"
#include "kernels/cuda/emulate.h"
#include "kernels/cuda/launchers.h"

namespace lctx::cuda {

namespace {
std::mutex g_mu;
std::map<uintptr_t, size_t> g_allocs;   // start -> bytes
} // namespace

namespace dev {

std::string init(int *n_sm) {
    *n_sm = 132;   // an H100's count: the key-split rule sees a large device
    return "emulated device";
}
int device_count() { return 1; }

void *alloc(size_t bytes) {
    if (bytes == 0) return nullptr;
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) fail(LCTX_ERR_OUT_OF_MEMORY, "emulated device: cannot allocate %zu bytes", bytes);
    std::memset(p, 0xff, bytes);   // device memory starts as garbage (NaN floats)
    std::lock_guard<std::mutex> lock(g_mu);
    g_allocs[reinterpret_cast<uintptr_t>(p)] = bytes;
    return p;
}

void free(void *p) {
    if (!p) return;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (g_allocs.erase(reinterpret_cast<uintptr_t>(p)) != 1) std::abort();   // not ours: a backend bug
    }
    std::free(p);
}

// The backend's block cache, over the emulated allocations (so that a block
// it hands out is device memory for is_device and the launch checks; a
// pointer it did not hand out goes to free, which aborts on it).
static BlockCache &temp_cache() {
    static BlockCache *cache = new BlockCache(alloc, free, kTempCacheBytes, kTempBlockMax);
    return *cache;
}
void *alloc_temp(size_t bytes) {
    void *p = temp_cache().alloc(bytes);
    if (p) std::memset(p, 0xff, bytes);   // a reused block must not pass for initialised
    return p;
}
void free_temp(void *p) { temp_cache().free(p); }

void copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    const auto *d = static_cast<const char *>(dst), *s = static_cast<const char *>(src);
    if (d < s + bytes && s < d + bytes) fail(LCTX_ERR_INTERNAL, "emulated device: overlapping copy");
    std::memcpy(dst, src, bytes);
}

bool is_device(const void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return false;
    --it;
    return a < it->first + it->second;
}

void check_launch(const char *) {}
void synchronize() {}   // emulated launches run to the end before they return

Gemm::Gemm() = default;
Gemm::~Gemm() = default;

void Gemm::f16(int64_t m, int64_t n, int64_t k, const uint16_t *w16, const uint16_t *x16, float *y) {
    if (!is_device(w16) || !is_device(x16) || !is_device(y)) fail(LCTX_ERR_INTERNAL, "emulated gemm: host pointer");
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < m; ++r) {
            float s = 0.0f;
            for (int64_t c = 0; c < k; ++c) s += half_to_float(w16[r * k + c]) * half_to_float(x16[t * k + c]);
            y[t * m + r] = s;
        }
}

} // namespace dev

namespace {

// A kernel argument must be device memory (on a GPU a host pointer is an
// illegal address): the backend stages host arguments before launching.
void need(const void *p, const char *what) {
    if (p && !dev::is_device(p)) fail(LCTX_ERR_INTERNAL, "emulated launch: %s is host memory", what);
}

} // namespace

void launch_rms_norm(const RmsNormArgs &a, int64_t n_rows, void *) {
    need(a.x, "rms_norm x");
    need(a.w, "rms_norm w");
    need(a.y, "rms_norm y");
    emulate_launch(rms_norm_dims(n_rows), [&](HostCtx &c) { rms_norm_body(c, a); });
}
void launch_swiglu(const SwigluArgs &a, void *) {
    need(a.gate, "swiglu gate");
    need(a.up, "swiglu up");
    need(a.out, "swiglu out");
    emulate_launch(elt_dims(a.n), [&](HostCtx &c) { swiglu_body(c, a); }); }
void launch_geglu(const SwigluArgs &a, void *) {
    need(a.gate, "geglu gate");
    need(a.up, "geglu up");
    need(a.out, "geglu out");
    emulate_launch(elt_dims(a.n), [&](HostCtx &c) { geglu_body(c, a); }); }
void launch_scale(const ScaleArgs &a, void *) {
    need(a.x, "scale x");
    emulate_launch(elt_dims(a.n), [&](HostCtx &c) { scale_body(c, a); }); }
void launch_add(const AddArgs &a, void *) {
    need(a.x, "add x");
    need(a.y, "add y");
    emulate_launch(elt_dims(a.n), [&](HostCtx &c) { add_body(c, a); }); }
void launch_add_bias(const AddBiasArgs &a, void *) {
    need(a.x, "add_bias x");
    need(a.b, "add_bias b");
    emulate_launch(elt_dims(a.n), [&](HostCtx &c) { add_bias_body(c, a); }); }
void launch_rope(const RopeArgs &a, int64_t n_tok, int32_t n_heads, void *) {
    need(a.x, "rope x");
    need(a.pos, "rope pos");
    emulate_launch(rope_dims(n_tok, n_heads), [&](HostCtx &c) { rope_body(c, a); });
}
void launch_dequant_rows(const DequantRowsArgs &a, int64_t n_rows, void *) {
    need(a.w, "weight");
    need(a.ids, "ids");
    need(a.out, "rows out");
    emulate_launch(dequant_rows_dims(n_rows), [&](HostCtx &c) { dequant_rows_body(c, a); });
}
void launch_gemv(const GemvArgs &a, void *) {
    need(a.w, "weight");
    need(a.x, "gemv x");
    need(a.y, "gemv y");
    emulate_launch(gemv_dims(a.n_rows, a.threads_per_row), [&](HostCtx &c) { gemv_body(c, a); });
}
void launch_attention(const AttnArgs &a, void *) {
    for (const void *p : {static_cast<const void *>(a.q), a.k, a.v, static_cast<const void *>(a.out),
                          static_cast<const void *>(a.q_pos), static_cast<const void *>(a.kv_pos),
                          static_cast<const void *>(a.col_sums), static_cast<const void *>(a.part),
                          static_cast<const void *>(a.row_ml)})
        need(p, "an attention argument");
    emulate_attention(a);
}
void launch_gather_rows(const GatherArgs &a, int64_t n, void *) {
    need(a.dst, "gather dst");
    need(a.src, "gather src");
    need(a.idx, "gather idx");
    emulate_launch(kv_rows_dims(n), [&](HostCtx &c) { gather_rows_body(c, a); });
}
void launch_convert_rows(const RowConvertArgs &a, int64_t n, void *) {
    need(a.dst, "rows dst");
    need(a.src, "rows src");
    emulate_launch(kv_rows_dims(n), [&](HostCtx &c) { convert_rows_body(c, a); });
}
void launch_dot_scores(const DotScoresArgs &a, int64_t rows, void *) {
    need(a.q, "scores q");
    need(a.keys, "scores keys");
    need(a.scores, "scores out");
    emulate_launch(dot_scores_dims(a.n, rows, a.dim), [&](HostCtx &c) { dot_scores_body(c, a); });
}
void launch_row_topk(const RowTopkArgs &a, int64_t rows, void *) {
    need(a.scores, "topk scores");
    need(a.best_score, "topk lists");
    need(a.best_index, "topk lists");
    emulate_launch(row_topk_dims(rows), [&](HostCtx &c) { row_topk_body(c, a); });
}

} // namespace lctx::cuda
