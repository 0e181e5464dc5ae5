// The backend seam: the one interface through which the engine and the
// methods run ops and own memory. Nothing above src/backend/ calls a kernel
// directly; a backend is picked per session by the registry (registry.h).
//
// Memory model. Activations, scratch and KV storage live in Buffers the
// backend allocates; the float pointers the ops take are addresses inside
// such buffers (for the CPU backend, plain host memory). Weights stay where
// the model put them (WeightView, host memory, usually mmapped); a device
// backend uploads them once in prepare() and finds its copy by the view's
// data pointer. Hooks that hand activations to methods (ForwardHooks) get
// host pointers: a backend whose buffers are not host memory says so
// (host_memory() false) and the engine copies through to_host().
//
// The op set is what the forward pass and the methods need: embedding rows,
// norms, matmul on every supported weight type, RoPE at explicit per-row
// positions, SwiGLU, residual add, attention with the per-slot score outputs
// that the evictors read, KV row moves (append, gather, compact) and top-k.
//
// Changing this file changes the module ABI: bump kBackendApiVersion
// (module_abi.h), so that modules built against an older header are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lctx.h"
#include "model/model.h"

namespace lctx {

// Element type of KV storage. Q8 (opt-in, lossy; docs/kv-storage.md): int8
// codes and one f32 scale per row (common/kv_q8_row.h); its storage element
// is the byte, so the strides of q8 storage count bytes.
enum class KvType { F32, F16, Q8 };
const char *kv_type_name(KvType t);
size_t kv_type_size(KvType t);                        // bytes per storage element (q8: 1)
int64_t kv_row_elems(KvType t, int64_t d);            // storage elements of one row of d values
inline size_t kv_row_bytes(KvType t, int64_t d) { return static_cast<size_t>(kv_row_elems(t, d)) * kv_type_size(t); }

// A block of backend memory. data() is valid for the buffer's lifetime.
class Buffer {
public:
    virtual ~Buffer() = default;
    virtual void *data() = 0;
    virtual size_t size() const = 0;
    float *f32() { return static_cast<float *>(data()); }
};

// One weight applied to shared activations (matmul_multi).
struct MatmulJob {
    const WeightView *W;
    float *y;
};
constexpr int kMaxMatmulJobs = 8;

// Attention of n_q query tokens over n_kv cached keys/values, grouped-query.
//   q:   [n_q][n_head * head_dim] (already rotated), row stride ldq
//   k,v: per KV head g: k + g * kv_head_stride, rows of head_dim, stride ld_kv
//        elements of kv_type (f32, f16, or q8 bytes: rows of kv_row_elems)
//   mask: query i sees slot j of KV head g iff kv_pos[g * kv_pos_head_stride + j] <= q_pos[i]
//         and, with window > 0, q_pos[i] - kv_pos[...] < window (sliding-window layers)
//   out: [n_q][n_head * head_dim], row stride ldo
// col_sums (optional, [n_head_kv][n_kv]): adds the softmax probability every
// slot receives, summed over the query heads of its group and the queries
// i >= obs_begin (the H2O/TOVA/SnapKV eviction scores). With col_max the
// kernel takes the max instead of the sum (over those query heads and
// queries; RefreshKV's group-max scores); the caller zeroes col_sums.
struct AttentionArgs {
    const float *q = nullptr;
    int64_t ldq = 0;
    const void *k = nullptr;
    const void *v = nullptr;
    KvType kv_type = KvType::F32;
    int64_t ld_kv = 0;               // elements between consecutive slots of one head
    int64_t kv_head_stride = 0;      // elements between KV heads
    float *out = nullptr;
    int64_t ldo = 0;
    int64_t n_q = 0, n_kv = 0;
    int32_t n_head = 0, n_head_kv = 0, head_dim = 0;
    const int32_t *q_pos = nullptr;
    const int32_t *kv_pos = nullptr;
    int64_t kv_pos_head_stride = 0;  // 0: one position array shared by every KV head
    float scale = 0.0f;              // 0: 1/sqrt(head_dim)
    int32_t window = 0;              // > 0: keys at pos_q - pos_k >= window are masked
    float softcap = 0.0f;            // > 0 (gemma2): scaled scores s become softcap * tanh(s / softcap)
    float *col_sums = nullptr;
    int64_t obs_begin = 0;
    bool col_max = false;            // col_sums: max, not sum, of the probabilities
    // Profiling (may be null): a backend that computes col_sums in a pass of
    // its own adds that pass's wall time here (the CPU backend does).
    double *colsum_seconds = nullptr;
};

// Per-row top-k of dot products (ReAttention's selection): for each of the
// n_rows f32 query rows, the k keys with the largest q . key, merged into the
// lists best_score/best_index ([n_rows][k], descending, equal scores by
// ascending index, empty entries index -1 / score -inf). The keys come in
// segments (blocks of a store): segment s holds n rows (ld_keys elements
// apart) with indices index_base .. index_base + n - 1. tile_max: each
// aligned tile of 128 indices adds at most its best key per row (a tile must
// not span two segments). Keys, queries and lists are host memory.
struct TopkKeySegment {
    const void *keys = nullptr;
    int64_t n = 0, index_base = 0;
};
struct TopkDotArgs {
    const float *q = nullptr;
    int64_t ldq = 0, n_rows = 0;
    const TopkKeySegment *segments = nullptr;
    int64_t n_segments = 0;
    KvType key_type = KvType::F32;
    int64_t ld_keys = 0;
    int32_t dim = 0, k = 0;
    bool tile_max = false;
    float *best_score = nullptr;
    int64_t *best_index = nullptr;
};

// Max over query rows of dot products with f16 keys (REFORM's selection
// scores): out[t] = max over the n_q f32 query rows u (q + u * ldq) of
// q_u . key t, for n keys of dim elements, ld apart (n_q >= 1). A NaN
// product never wins; a key with only NaN products scores -inf. Host memory.
struct MaxDotArgs {
    const uint16_t *keys = nullptr;
    int64_t n = 0, ld = 0;
    int32_t dim = 0;
    const float *q = nullptr;
    int64_t n_q = 0, ldq = 0;
    float *out = nullptr;
};

// The portable MaxDotArgs scoring (fp16 table, one key at a time, products
// added in order in f32): the Backend default, and the reference the SIMD
// kernels were checked against. parallel (may be null) splits long inputs.
class Backend;
void max_dot_f16_portable(const MaxDotArgs &a, Backend *parallel);

// out[r] = -log softmax(row r of logits)[tokens[r]] for n_rows rows of
// n_vocab logits (host memory; tokens in [0, n_vocab)): the surprisal of
// each token. The portable one computes in double, one row at a time: the
// Backend default and the reference. parallel (may be null) splits the rows.
void token_surprisal_portable(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens, float *out,
                              Backend *parallel);

class Backend {
public:
    virtual ~Backend() = default;

    // --- identity
    virtual const char *name() const = 0;           // "cpu", "cuda", ...
    virtual std::string description() const = 0;    // one line: device, variant, threads
    virtual int n_threads() const = 0;               // host threads (parallel_for)

    // --- memory
    // A buffer of `bytes` (64-byte aligned). Throws LCTX_ERR_OUT_OF_MEMORY.
    virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
    // Whether buffer memory is directly readable by the host (CPU: true).
    virtual bool host_memory() const = 0;
    virtual void to_host(void *dst, const void *src, size_t bytes) = 0;
    virtual void from_host(void *dst, const void *src, size_t bytes) = 0;
    // Copy between two places of backend memory (regions may overlap).
    virtual void copy(void *dst, const void *src, size_t bytes) = 0;
    // Called once per model before the first op on its weights.
    virtual void prepare(const Model &model) = 0;

    // --- host work of the methods (scoring, bookkeeping), split over the
    // backend's host threads; fn(begin, end, thread_index).
    virtual void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) = 0;

    // --- ops of the forward pass
    // out[t] = row ids[t] of W as f32, n_embd = W.n_cols floats each.
    virtual void get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) = 0;
    // RMSNorm of n_rows rows of n floats (w: the F32 scale weight; may be empty).
    virtual void rms_norm(const float *x, const WeightView &w, float *y, int64_t n_rows, int64_t n, float eps) = 0;
    // y[t * W.n_rows + r] = sum_c W[r, c] * x[t * ldx + c], t < n_tok.
    virtual void matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) = 0;
    // Several weights with the same n_cols on the same activations, one job.
    virtual void matmul_multi(const MatmulJob *jobs, int n_jobs, const float *x, int64_t ldx, int64_t n_tok) = 0;
    // In-place RoPE of n_tok rows of n_heads heads (row stride ld floats) at
    // positions pos[t], with hp's rotary setup. Positions may be deltas (the
    // re-rotation of cached keys: hp from rope_delta_hparams).
    virtual void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads,
                      const int32_t *pos) = 0;
    // out = silu(gate) * up over n_rows rows of n elements.
    virtual void swiglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) = 0;
    // out = gelu_tanh(gate) * up over n_rows rows of n elements (Gemma's GeGLU).
    virtual void geglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) = 0;
    // x *= s over n elements.
    virtual void scale(float *x, float s, int64_t n) = 0;
    // x += y over n elements.
    virtual void add(float *x, const float *y, int64_t n) = 0;
    // x[r][i] += b[i] over n_rows rows of b.n_cols elements (b: an F32 bias weight, qwen2's q/k/v).
    virtual void add_bias(float *x, const WeightView &b, int64_t n_rows) = 0;
    virtual void attention(const AttentionArgs &a) = 0;
    // Opt-in, lossy (lctx_session_params.attn_precision): multiply the dot
    // products of attention over many query rows in bf16 with f32 sums.
    // Returns whether the backend will; one without bf16 arithmetic, or on
    // a CPU without it, keeps f32 and returns false.
    virtual bool set_attention_bf16(bool on) { return !on; }
    // The arithmetic of the weight matrix products of many tokens (matmul,
    // matmul_multi with n_tok of a GEMM; lctx_session_params.matmul_precision):
    // LCTX_PRECISION_BF16 rounds weights and activations to bf16 and sums in
    // f32; LCTX_PRECISION_INT8 rounds the activations to int8 blocks and
    // sums in integers with 4-bit weight codes. Returns whether the backend
    // will; otherwise it keeps (or returns to) exact f32.
    virtual bool set_matmul_precision(lctx_precision p) { return p == LCTX_PRECISION_F32; }

    // --- KV rows (storage elements of `type`; a row holds `row` values, which
    // take kv_row_elems(type, row) elements; strides count storage elements)
    // Whether this backend stores and attends over `type` (every backend: f32, f16).
    virtual bool supports_kv_type(KvType type) const { return type != KvType::Q8; }
    // dst[i] = src[idx[i]] for i < n (rows may overlap only if idx ascending and idx[i] >= i).
    virtual void gather_rows(KvType type, void *dst, const void *src, const int64_t *idx, int64_t n, int64_t row) = 0;
    // Writes n f32 rows (source row stride ld_src floats) as `type` at dst (row stride ld_dst elements).
    virtual void store_rows(KvType type, void *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t n,
                            int64_t row) = 0;
    // Reads n rows of `type` as f32.
    virtual void load_rows(KvType type, float *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t n,
                           int64_t row) = 0;

    // --- selection
    // Indices of the k largest of x[0..n) (ties: the lower index), ascending.
    virtual std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) = 0;
    // See TopkDotArgs.
    virtual void topk_dot(const TopkDotArgs &a) = 0;
    // See MaxDotArgs. Default: max_dot_f16_portable on this backend's threads.
    virtual void max_dot_f16(const MaxDotArgs &a) { max_dot_f16_portable(a, this); }

    // --- scores of logits (host memory; see token_surprisal_portable)
    virtual void token_surprisal(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens,
                                 float *out) {
        token_surprisal_portable(logits, n_rows, n_vocab, tokens, out, this);
    }

    // --- ordering
    // Returns once every op issued so far has finished. A device backend's
    // ops may return before their kernels ran (its next copy to the host
    // waits for them); the CPU's are done when they return.
    virtual void synchronize() {}
};

// Scratch of at least `floats` floats (one at least) in backend memory: `b`
// is reallocated only when it is too small, so repeated calls reuse it.
inline float *scratch_f32(Backend &be, std::unique_ptr<Buffer> &b, int64_t floats) {
    const size_t bytes = static_cast<size_t>(floats > 1 ? floats : 1) * sizeof(float);
    if (!b || b->size() < bytes) b = be.alloc(bytes);
    return b->f32();
}

// hp with the YaRN magnitude factor cancelled, for the delta rotation of keys
// that already carry it (re-positioning cached keys).
Hparams rope_delta_hparams(const Hparams &hp);
// hp for rotating keys rotated with hp at p back to position 0 (rope at -p):
// the delta rotation that also removes the magnitude factor.
Hparams rope_inverse_hparams(const Hparams &hp);

} // namespace lctx
