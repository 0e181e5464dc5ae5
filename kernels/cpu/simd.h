// Internal: the SIMD variants of the CPU kernels and the run-time choice
// between them. Each variant (scalar, AVX2+FMA, AVX-512) is the same template
// code (simd_impl.h) instantiated with a different vector type in its own
// translation unit, compiled for that ISA only; a KernelTable of function
// pointers is the only thing that crosses translation units.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/ggml_type.h"
#include "cpu_kernels.h"

namespace lctx::cpu {

enum class SimdVariant { SCALAR = 0, AVX2 = 1, AVX512 = 2 };

// The query rows of one topk_dot call as the bf16 screen reads them
// (simd_topk_bf16.h): row r is q + r * ldq in f32 (for the exact scores) and
// q2 + r * ldq2 as bf16 pairs. The screen scores q . (k - mu), mu a vector
// common to the call (removing the part of the scores that every key
// shares); its bound for row r and a key k is
// bound_k[r] * |(k - mu) * key_scale| + bound_f[r] * |k| + bound_1[r]
// (key_scale channel by channel: the keys' half of the channel weights).
struct TopkScreenRows {
    const float *q = nullptr;
    int64_t ldq = 0;
    const uint32_t *q2 = nullptr;
    int64_t ldq2 = 0;
    const float *mu = nullptr, *key_scale = nullptr;
    const float *bound_k = nullptr, *bound_f = nullptr, *bound_1 = nullptr;
};

// One work item of the screened top-k: rows [r0, r1) against the keys of
// n_tiles tiles, in order (tile i: n <= T keys, ld_keys apart from keys,
// indices idx0 ..), into the rows' lists bs/bi (k entries a row, empty on
// entry).
struct TopkScreenItem {
    struct Tile {
        const void *keys = nullptr;
        int64_t n = 0, idx0 = 0;
    };
    const Tile *tiles = nullptr;
    int64_t n_tiles = 0, T = 0;
    bool keys_f16 = false;
    int64_t ld_keys = 0;
    int32_t d = 0, k = 0;
    int64_t r0 = 0, r1 = 0;
    float *bs = nullptr;
    int64_t *bi = nullptr;
};

// A key that passed the screen and waits for its exact score: its tile and
// column in the item, and its bf16 score + bound.
struct TopkPending {
    float upper;
    int32_t tile, col;
};
constexpr int kTopkPendingCap = 32;   // pending keys per row before a flush
// Each key, query and mu value must lie within +-kTopkScreenMaxAbs for the
// screen (then |q| |k| <= d 2^112 and no sum overflows f32).
constexpr float kTopkScreenMaxAbs = 0x1p56f;

// Scratch of one thread for TopkScreenItem (floats and words as named):
// kt and tmp T * d, kt2 T * d / 2, kn and kn_f T; lb k per row, pending
// kTopkPendingCap per row, n_pending one per row (rows of the item).
struct TopkScreenScratch {
    float *kt = nullptr, *tmp = nullptr, *kn = nullptr, *kn_f = nullptr, *lb = nullptr;
    uint32_t *kt2 = nullptr;
    TopkPending *pending = nullptr;
    int32_t *n_pending = nullptr;
};

struct KernelTable {
    const char *name;
    int mr;   // weight rows per packed GEMM panel
    int nr;   // tokens per GEMM register tile
    // dst[0..n) = row of type t; false when t has no fast path here.
    bool (*dequant_row)(GgmlType t, const uint8_t *src, float *dst, int64_t n);
    // y[r] = row r of w . x for r < n_rows; xbsum[b] = sum of x over 32-block b.
    // false when t has no fused path here.
    bool (*gemv)(GgmlType t, const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t n,
                 const float *x, const float *xbsum, float *y);
    float (*dot)(const float *a, const float *b, int64_t n);
    // Register-blocked GEMM of a packed weight panel (panel[k * mr + r]) and a
    // packed token tile (xp[k * nr + t]), k < kc:
    // y[t * ldy + r] (+)= sum_k panel[k * mr + r] * xp[k * nr + t] for t < n_tok <= nr, r < rows <= mr.
    void (*gemm)(const float *panel, const float *xp, int64_t kc, int n_tok, float *y, int64_t ldy,
                 int rows, bool accumulate);
    // dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (the GEMM's
    // panel packing: W x W register transposes, scalar copies at the edges).
    void (*transpose)(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst, int64_t ldd);
    void (*rms_norm)(const float *x, const float *w, float *y, int64_t n, float eps);
    void (*swiglu)(const float *gate, const float *up, float *out, int64_t n);
    void (*geglu)(const float *gate, const float *up, float *out, int64_t n);
    // Flash attention over keys [j0, j1) for the query heads of KV head g and
    // queries [i0, i1): for row r = (i - i0) * group + u (u-th head of the
    // group) writes the unnormalised output o[r * head_dim ..], the running
    // max m[r] and the exp-sum l[r] (0 when the row saw no key).
    // scratch: at least attn_scratch_floats(...) floats.
    void (*attn_partial)(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1,
                         int64_t j0, int64_t j1, float *o, float *m, float *l, float *scratch);
    // col_sums[g][j] += sum over queries i >= obs_begin and heads of group g of
    // exp(s_ij - m_ih) / l_ih, for keys j in [j0, j1). m, l: [n_q][n_head].
    void (*attn_colsum)(const AttentionArgs &a, float scale, int g, int64_t j0, int64_t j1,
                        const float *m, const float *l, float *scratch);
    // Top-k dot products (topk_dot.cpp): a key tile widened to f32 and
    // transposed to kt[c * T + t] (keys past n are zero; tmp: T * d floats),
    // and the update of `rows` per-row top-k lists from one such tile.
    void (*keys_transposed)(const void *keys, bool f16, int64_t ld, int64_t n, int d, float *kt, int64_t T,
                            float *tmp);
    void (*topk_tile)(const float *q, int64_t ldq, int rows, const float *kt, int64_t T, int64_t n_valid, int d,
                      int64_t idx0, int k, bool tile_max, float *best_score, int64_t *best_index);
    // best[t] = max over `rows` query rows of q_r . key t for the n_valid keys
    // of a transposed tile (keys_transposed); a NaN product never wins.
    void (*max_dot_tile)(const float *q, int64_t ldq, int rows, const float *kt, int64_t T, int64_t n_valid, int d,
                         float *best);
    // attn_partial for many rows (the tiled kernel) with bf16 dot products
    // (AttentionArgs::bf16, simd_bf16.h); f32 K/V only. Null where the
    // CPU has no AVX512_BF16.
    void (*attn_partial_bf16)(const AttentionArgs &a, float scale, int g, int64_t i0, int64_t i1,
                              int64_t j0, int64_t j1, float *o, float *m, float *l, float *scratch);
    // The GEMM above in bf16 (matmul's bf16 option): panel2[kp * mr + r] and
    // xp2[kp * nr + t] are words of two bf16 (k = 2kp in the low half, 2kp + 1
    // in the high half), kpc pairs. Null where the CPU has no AVX512_BF16.
    void (*gemm_bf16)(const uint32_t *panel2, const uint32_t *xp2, int64_t kpc, int n_tok, float *y, int64_t ldy,
                      int rows, bool accumulate);
    // dst[0..n_words) = x[0..n) rounded to bf16 (nearest even), two per word,
    // zeros past n (n_words a multiple of 16). Null with gemm_bf16.
    void (*to_bf16_words)(const float *x, int64_t n, uint32_t *dst, int64_t n_words);
    // The int8 GEMM of matmul's INT8 arithmetic (layouts in matmul_int8.h):
    // y[t * ldy + r] = sum over nb blocks b of wd[b][r] * xd[b][t] * (the
    // block's codes of row r . those of token t) + wm[b][r] * xs[b][t], for
    // t < n_tok <= kI8TileTokens, r < rows <= kI8PanelRows; the weight
    // codes have code_bits (4 or 5) bits. Null in the scalar table.
    void (*gemm_i8)(const uint8_t *wq, const float *wd, const float *wm, const int8_t *xq, const float *xd,
                    const float *xs, int64_t nb, int n_tok, float *y, int64_t ldy, int rows, int code_bits);
    // quantize_act_row (matmul_int8.h) with the same results bit for bit.
    // Null with gemm_i8.
    void (*quantize_i8)(const float *x, int64_t K, int8_t *q, float *d, float *s);
    // The same arithmetic for one token (decode) on the weight rows as
    // stored: y[r] = sum over blocks b of d_w * xds[2b] * (codes . token
    // codes) + m_w * xds[2b + 1] for r < n_rows of w, K columns. xl: the
    // token's codes in gemv_i8_token_layout's order; xds: each block's scale
    // and scaled code sum, interleaved, 2 * K / 32 floats plus 2 readable
    // past the end. false when t has no such path here (then the token is
    // multiplied in f32). Null with gemm_i8.
    bool (*gemv_i8)(GgmlType t, const uint8_t *w, size_t row_bytes, int64_t n_rows, int64_t K, const int8_t *xl,
                    const float *xds, float *y);
    // The bf16 screen of exact top-k (simd_topk_bf16.h, driven by
    // topk_dot.cpp): one work item's lists, the same bit for bit as
    // keys_transposed + topk_tile over its tiles in order. d even. Null where
    // the CPU has no AVX512_BF16.
    void (*topk_item_screened)(const TopkScreenRows &s, const TopkScreenItem &it, const TopkScreenScratch &w);
    // The same screen with the products on the AMX tile unit (TDPBF16PS):
    // the same lists. Needs q2 rows padded to a multiple of 16 pairs and 15
    // zero rows past the last, kt2 with ldq2 zero-padded pair rows (T * ldq2
    // words). Null where the CPU or the OS does not run AMX-BF16.
    void (*topk_item_screened_amx)(const TopkScreenRows &s, const TopkScreenItem &it, const TopkScreenScratch &w);
    // matmul's f32 GEMM on the AMX tile unit (simd_gemm_amx.h, layouts
    // there): a token tile (tokens x + t * ldx, t < n <= 16) and a weight
    // panel (rows src + r * lds, r < rows <= 16; tmp 3 * 16 * kp words) as
    // three bf16 parts each, K columns in kp pairs (a multiple of 16); and
    // y[t * ldy + r] for n_tiles consecutive token tiles (the last holding
    // n_last tokens) against `rows` <= 32 weight rows (one panel, or two in a
    // row). Null where the CPU or the OS does not run AMX-BF16.
    void (*amx_pack_tokens)(const float *x, int64_t ldx, int n, int64_t K, int64_t kp, uint32_t *dst);
    void (*amx_pack_weights)(const float *src, int64_t lds, int rows, int64_t K, int64_t kp, uint32_t *dst,
                             uint32_t *tmp);
    void (*gemm_amx)(const uint32_t *xa, int64_t n_tiles, int n_last, const uint32_t *wb, int rows, int64_t kp,
                     float *y, int64_t ldy);
    // log(sum_i exp(x[i])) for n >= 1 finite x (a logits row's log-softmax
    // normalizer): max pass, then exp(x - max) summed in float lanes, blocks
    // of lane sums added in double.
    double (*log_sum_exp)(const float *x, int64_t n);
};

// Keys per block in the attention kernels; queries per work item at most
// (the driver's query blocks); scratch needed per call.
constexpr int64_t kAttnKeyBlock = 64;
constexpr int64_t kAttnMaxQueryBlock = 128;
// The tiled kernel (many rows) needs K transposed (head_dim x block), a
// 6-row score tile and an aligned copy of the V block (rows padded to 16
// floats), all 64-byte aligned; the key-at-a-time kernel needs less. The
// bf16 tiled kernel needs its converted key and value blocks, a bf16 copy of
// every row of the item and the same score tile.
inline int64_t attn_scratch_floats(const AttentionArgs &a) {
    const int64_t hd = a.head_dim, hd_pad = (hd + 15) / 16 * 16;
    const int64_t f32 = (hd + 6 + hd_pad) * kAttnKeyBlock + 16 + 2 * kAttnKeyBlock + 2 * hd + 64;
    if (!a.bf16) return f32;
    const int64_t pair_words = ((hd + 1) / 2 + 15) / 16 * 16, rows = kAttnMaxQueryBlock * (a.n_head / a.n_head_kv);
    const int64_t bf16 = 2 * pair_words * kAttnKeyBlock + kAttnKeyBlock / 2 * hd_pad + 6 * kAttnKeyBlock / 2 +
                         6 * kAttnKeyBlock + rows * pair_words + 16;
    return f32 > bf16 ? f32 : bf16;
}
// Whether this CPU and OS run AVX512_BF16 (cpuid leaf 7, subleaf 1).
bool cpu_has_avx512_bf16();
// Whether this CPU and OS run AVX512_VNNI (cpuid leaf 7, ecx bit 11).
bool cpu_has_avx512_vnni();
// Whether the AVX-512 attention kernel scores q8 keys with VNNI
// (simd_attn_q8_vnni.h): where the CPU has it, unless a test turned it off
// (the same scores either way; tests compare the two paths).
bool q8_vnni_enabled();
void set_q8_vnni_for_testing(bool on);
// Whether topk_dot screens keys in bf16 (simd_topk_bf16.h): where the active
// table has the screen, unless a test turned it off (the same lists either
// way; tests compare the two paths).
bool topk_screen_enabled();
void set_topk_screen_for_testing(bool on);
// Whether this CPU runs AMX-BF16 and the OS let this process use the tile
// data (Linux: arch_prctl ARCH_REQ_XCOMP_PERM, asked once here).
bool cpu_has_amx_bf16();
// Whether the screen runs its products on AMX: where the active table has
// that variant, unless a test turned it off (the same lists either way).
bool topk_amx_enabled();
void set_topk_amx_for_testing(bool on);

// Whether matmul's f32 GEMM runs on AMX (simd_gemm_amx.h): where the active
// table has it and the OS granted the tile data, unless a test turned it off
// (f32 sums either way, in another order; tests compare the two paths).
bool matmul_amx_enabled();
void set_matmul_amx_for_testing(bool on);
// Tokens from which matmul's f32 GEMM takes the AMX path: below, packing the
// weights into bf16 parts costs more than the tile unit saves.
constexpr int64_t kMinAmxGemmTokens = 256;
// Rows of an AMX tile: the tokens of a packed token tile, the weight rows of a panel.
constexpr int64_t kAmxTileRows = 16;

const KernelTable &kernel_table_scalar();
const KernelTable &kernel_table_avx2();
const KernelTable &kernel_table_avx512();

// Best variant this CPU and OS support (cpuid + XGETBV).
SimdVariant best_supported_variant();
// The active table: the best supported one, lowered by LCTX_SIMD=scalar|avx2|avx512.
const KernelTable &active_kernels();
SimdVariant active_variant();
// Tests and benchmarks: force a variant; throws LCTX_ERR_UNSUPPORTED if this
// CPU cannot run it. Not thread-safe against kernels running concurrently.
void set_simd_variant_for_testing(SimdVariant v);

} // namespace lctx::cpu
