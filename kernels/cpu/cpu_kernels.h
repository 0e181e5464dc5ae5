// CPU kernels the engine needs. Each has a scalar reference (suffix _ref,
// used by tests) and SIMD variants picked at run time (AVX2, AVX-512,
// AVX-512-BF16/VNNI) behind the plain name. All math is f32 with the weights
// dequantized on the fly, so results equal an f32 reference up to rounding.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/kv_q8_row.h"
#include "common/model_types.h"
#include "thread_pool.h"

namespace lctx::cpu {

// f32 GFLOP/s of the active SIMD width with every pool thread running FMA
// chains in registers (0 for the scalar variant).
double fma_peak_gflops(ThreadPool &pool);

// GB/s read from main memory (a 256 MiB buffer) by every pool thread at once.
double read_bandwidth_gb_s(ThreadPool &pool);

// Name of the SIMD variant chosen for this CPU ("avx512bf16", "avx512", "avx2", "scalar").
const char *simd_variant();

// The arithmetic of matmul (every arithmetic's fallback is exact f32):
//   F32:  exact (the default).
//   BF16: opt-in, lossy: the dequantized weights and the activations rounded
//         to bf16, sums in f32, where the CPU has AVX512_BF16
//         (matmul_bf16_available); the packed GEMM of 4 or more tokens only.
//   INT8: opt-in, lossy: the activations rounded to int8 in blocks of 32 with
//         an f32 scale each, integer dot products with the weights' 4- or
//         5-bit codes, where the active SIMD variant is AVX2 or AVX-512
//         (matmul_int8_available); docs/int8.md. Any token count: Q4_0,
//         Q4_1, Q4_K, Q5_0, Q5_1; other types stay f32.
enum class MatmulArith { F32, BF16, INT8 };

// y[t * n_rows + r] = sum_c W[r, c] * x[t * ldx + c]   for t < n_tok, r < W.n_rows.
// ldx >= W.n_cols. Any type dequantize_row_ref supports.
void matmul(ThreadPool &pool, const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y,
            MatmulArith arith = MatmulArith::F32);
bool matmul_bf16_available();
bool matmul_int8_available();
void matmul_ref(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y);

// Several weights with the same n_cols applied to the same activations
// (q/k/v, gate/up) as one pool job: y_j laid out as matmul's y for W_j.
// Same results as one matmul per weight; fewer thread wake-ups and, for
// prefill, the tokens are packed once.
constexpr int kMaxMatmulJobs = 8;
struct MatmulJob {
    const WeightView *W;
    float *y;
};
void matmul_multi(ThreadPool &pool, const MatmulJob *jobs, int n_jobs, const float *x, int64_t ldx, int64_t n_tok,
                  MatmulArith arith = MatmulArith::F32);

// Row r of W as f32 (embedding lookup).
void get_row(const WeightView &W, int64_t r, float *out);

// y = x / sqrt(mean(x^2) + eps) * w, n elements (w may be nullptr: no scale).
void rms_norm(const float *x, const float *w, float *y, int64_t n, float eps);
void rms_norm_ref(const float *x, const float *w, float *y, int64_t n, float eps);

// In-place RoPE on n_tok vectors of n_heads heads of head_dim each (stride
// between tokens: ld floats), token t at position pos[t]. Uses hp's n_rot,
// base, layout and linear/YaRN scaling exactly as ggml's rope does.
// The rotary setup both backends derive from Hparams: rotated dims, layout,
// base, linear scaling, the YaRN ramp's correction dims and the per-pair
// frequency divisors (null: none).
struct RopeParams {
    int n_rot, head_dim;
    bool neox;
    double base;
    float freq_scale, ext_factor, attn_factor;
    float corr[2];
    const float *freq_factors;   // n_rot / 2, or null
};
RopeParams rope_params(const Hparams &hp);   // fails (LCTX_ERR_INVALID_ARG) on an odd or too large n_rot
void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos);
void rope_ref(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos);

// The (cos, sin) pairs rope() computes for positions [0, n_pos()), kept so that
// the projections of every layer and of q and k look them up instead of
// calling cos/sin in double again (bitwise the same values). Immutable once
// built; RopeTableCache hands them out.
class RopeTable {
public:
    RopeTable(const RopeParams &p, int64_t n_pos);
    // prev's positions copied (the same values), the rest computed.
    RopeTable(const RopeTable &prev, int64_t n_pos);
    bool matches(const RopeParams &p) const;   // every field that changes a value
    int64_t n_pos() const { return n_pos_; }
    const float *at(int64_t pos) const { return cs_.data() + pos * n_rot_; }   // cs[2i], cs[2i + 1]

private:
    void fill_from(int64_t t0);   // computes positions [t0, n_pos_)
    RopeParams p_;
    std::vector<float> freq_factors_;   // a copy: p_.freq_factors may be freed with its model
    int n_rot_;
    int64_t n_pos_;
    std::vector<float> cs_;
};

// A few RopeTables (one per set of RoPE parameters: gemma3's sliding and
// global layers differ), grown to the largest position asked for, up to
// kMaxBytes each; positions past that are computed as rope() does.
class RopeTableCache {
public:
    static constexpr size_t kMaxBytes = size_t(8) << 20;
    static constexpr int kMaxTables = 4;
    // A table for p covering positions [0, min(n_pos, the size cap)).
    std::shared_ptr<const RopeTable> get(const RopeParams &p, int64_t n_pos);

private:
    std::mutex mu_;
    std::vector<std::shared_ptr<const RopeTable>> tables_;   // most recently used last
};

// rope() with the (cos, sin) pairs of positions inside `table` looked up
// (table may be null); the same results bit for bit.
void rope_cached(const RopeParams &p, const RopeTable *table, float *x, int64_t ld, int64_t n_tok, int32_t n_heads,
                 const int32_t *pos);
// Rotate by position deltas (re-positioning cached keys): same as rope with pos = delta.

// out = silu(gate) * up, n elements.
void swiglu(const float *gate, const float *up, float *out, int64_t n);

// out = gelu(gate) * up with the tanh approximation of GELU, n elements
// (the active SIMD variant; geglu_ref: the scalar formula with std::tanh).
void geglu(const float *gate, const float *up, float *out, int64_t n);
void geglu_ref(const float *gate, const float *up, float *out, int64_t n);

// log(sum_i exp(x[i])) of n >= 1 finite values: the normalizer of a logits
// row's log-softmax (the active SIMD variant: float exps, their sum in double;
// log_sum_exp_ref: exps and sum in double).
double log_sum_exp(const float *x, int64_t n);
double log_sum_exp_ref(const float *x, int64_t n);

// Attention of n_q query tokens over n_kv cached keys/values, grouped-query.
//   q:   [n_q][n_head * head_dim]    (already rotated), row stride ldq
//   k,v: per KV head h: k + h * kv_head_stride, rows of head_dim, row stride ld_kv
//   mask: query i may see key j of KV head h iff kv_pos[h * kv_pos_head_stride + j] <= q_pos[i]
//         (causal by position; stride 0: one position array for every head)
//         and, with window > 0, q_pos[i] - kv_pos[...] < window (sliding window)
//   out: [n_q][n_head * head_dim], row stride ldo
// scale = 1/sqrt(head_dim). Streams over keys in blocks with an online
// softmax (never n_q x n_kv in memory).
// col_sums (optional, [n_head_kv][n_kv]): adds the softmax probabilities that
// every key receives, summed over the query heads of its group and over the
// queries i >= obs_begin (H2O/TOVA/SnapKV scores). Computing them needs the
// final row maxima, so this variant makes a second pass over the keys. With
// few query rows (decode) the first pass keeps every row's scores and the
// second pass reads them instead of recomputing the dot products (RefreshKV's
// full steps: docs/methods/refreshkv.md, "Cost").
struct AttentionArgs {
    const float *q = nullptr; int64_t ldq = 0;
    const float *k = nullptr; const float *v = nullptr;
    // f16 storage instead of k/v (same layout, halves): every work item
    // widens its own key range to f32 before the kernels read it.
    const uint16_t *k16 = nullptr; const uint16_t *v16 = nullptr;
    // q8 storage instead (rows of head_dim int8 codes and an f32 scale,
    // q8_row_bytes each; ld_kv and kv_head_stride then count bytes): the
    // few-row kernel reads it in place, the tiled ones widen it like f16.
    const uint8_t *k8 = nullptr; const uint8_t *v8 = nullptr;
    int64_t ld_kv = 0;            // elements (floats, halves or q8 bytes) between consecutive keys of one head
    int64_t kv_head_stride = 0;   // elements between KV heads
    float *out = nullptr; int64_t ldo = 0;
    int64_t n_q = 0, n_kv = 0;
    int32_t n_head = 0, n_head_kv = 0, head_dim = 0;
    const int32_t *q_pos = nullptr, *kv_pos = nullptr;
    int64_t kv_pos_head_stride = 0;   // int32s between the position arrays of KV heads
    float scale = 0.0f;           // 0: 1/sqrt(head_dim)
    int32_t window = 0;           // > 0: sliding window (see mask above)
    float softcap = 0.0f;         // > 0: every scaled score s becomes softcap * tanh(s / softcap) (gemma2)
    float *col_sums = nullptr;    // optional
    int64_t obs_begin = 0;
    bool col_max = false;         // col_sums takes the max instead of the sum (caller zeroes it)
    double *colsum_seconds = nullptr;   // optional: the column pass's wall time is added here
    // Set by attention() itself, not by callers: [n_q * n_head][n_kv] scaled
    // scores (-inf where masked) written by the first pass, read by the
    // column pass. Only with fewer than kAttnTiledMinRows rows per item.
    float *row_scores = nullptr;
    // Opt-in, lossy: the tiled (many-row) kernel multiplies in bf16 with f32
    // sums where the CPU has AVX512_BF16 (docs/bf16.md); elsewhere, and
    // for few-row items, the f32 kernels run. The column pass stays f32.
    bool bf16 = false;
};
// q8 KV rows (common/kv_q8_row.h has the layout): quantize d values into
// one row, and back.
void q8_quantize_row(const float *x, int64_t d, uint8_t *row);
void q8_dequantize_row(const uint8_t *row, int64_t d, float *x);

// Work items with at least this many (query, head-in-group) rows use the
// tiled kernel (f32 K/V only: the driver widens f16 storage for it); fewer
// rows, the key-at-a-time kernel, which reads f16 in place.
constexpr int64_t kAttnTiledMinRows = 8;
// Whether an item of `rows` rows runs the tiled kernel: the one rule the
// driver and the kernels follow.
constexpr bool attn_item_is_tiled(int64_t rows) { return rows >= kAttnTiledMinRows; }
void attention(ThreadPool &pool, const AttentionArgs &a);
// Whether AttentionArgs::bf16 has a kernel here (the active SIMD variant is
// AVX-512 and the CPU has AVX512_BF16).
bool attention_bf16_available();
// The mask above for one key (64-bit difference: positions may be far apart).
inline bool key_visible(int32_t kv_pos, int32_t q_pos, int32_t window) {
    return kv_pos <= q_pos && (window <= 0 || int64_t(q_pos) - kv_pos < window);
}
// Gemma 2's attention logit soft-capping of a scaled score (cap > 0).
inline float softcap_score(float s, float cap) { return cap * std::tanh(s / cap); }
void attention_ref(const AttentionArgs &a);   // naive, materialises scores

// Per-row top-k of dot products, q_r . key_j, without materialising the
// rows x keys matrix (ReAttention's selection scores; docs/methods/reattention.md).
// Keys are read in tiles of kTopkTile, widened to f32 and transposed once per
// tile, then every query row is scored against the tile in registers and only
// scores above the row's current k-th best are inserted. Lists are kept
// descending by score, equal scores by ascending index; entries never filled
// have index -1 and score -inf; NaN scores are never selected. The lists the
// caller passes in are merged with the new candidates, so keys can be given
// block by block. The result does not depend on the thread count.
constexpr int64_t kTopkTile = 128;
struct TopkDotArgs {
    const float *q = nullptr;     // [n_rows][dim], row stride ldq
    int64_t ldq = 0, n_rows = 0;
    // The keys, in segments (blocks of a store): segment s holds n rows of
    // dim elements, ld_keys apart, with indices index_base .. index_base + n - 1.
    struct Segment {
        const void *keys = nullptr;
        int64_t n = 0, index_base = 0;
    };
    const Segment *segments = nullptr;
    int64_t n_segments = 0;
    bool keys_f16 = false;        // f16 keys, else f32
    int64_t ld_keys = 0;
    int32_t dim = 0;
    int32_t k = 0;                // list length, 1..kMaxTopk
    // tile_max: each aligned tile of kTopkTile indices (index / kTopkTile)
    // adds at most its first best key per row (the approximation of
    // ReAttention's reference kernel); a tile must not span two segments.
    bool tile_max = false;
    float *best_score = nullptr;  // [n_rows][k], in and out
    int64_t *best_index = nullptr;
};
constexpr int32_t kMaxTopk = 64;
void topk_dot(ThreadPool &pool, const TopkDotArgs &a);
void topk_dot_ref(const TopkDotArgs &a);   // naive loops, one key at a time

// Max over query rows of dot products (REFORM's selection scores,
// docs/methods/reform.md): out[t] = max over the n_q query rows u of
// q_u . key t, for n f16 keys of dim elements, ld apart (n_q >= 1). Keys are
// widened and transposed in tiles of kTopkTile as topk_dot does and scored
// against every query row in registers; each dot product adds its dim
// products in order, so the result does not depend on the thread count. A NaN
// product never wins; a key whose products are all NaN scores -inf.
struct MaxDotArgs {
    const uint16_t *keys = nullptr;
    int64_t n = 0, ld = 0;
    int32_t dim = 0;
    const float *q = nullptr;     // [n_q][dim], row stride ldq
    int64_t n_q = 0, ldq = 0;
    float *out = nullptr;         // [n]
};
void max_dot_f16(ThreadPool &pool, const MaxDotArgs &a);

} // namespace lctx::cpu
