// Internal: the int8 arithmetic of matmul (MatmulArith::INT8, opt-in and
// lossy; docs/int8.md). The activations are rounded to int8 in blocks of 32
// with one f32 scale each, the weights keep their own 4-bit codes, and the
// products are summed in integers (AVX2 `vpmaddubsw`), the way llama.cpp
// multiplies 4-bit weights. Only the packed GEMM of many tokens takes this
// path; the weight types it covers are those whose codes fit 5 bits.
//
// Operand layouts (k = 32 b + 4 g + i inside a row, b the block, g < 8 the
// group of four, i < 4):
//   weight panel of kI8PanelRows rows:  wq[b][g][r][i] (codes 0..15, or 0..31),
//                                       wd[b][r], wm[b][r] (row r, block b: w = wd * code + wm)
//   token tile of kI8TileTokens tokens: xq[b][g][t][i] (int8 in -127..127),
//                                       xd[b][t] (scale), xs[b][t] = xd * sum of the block's codes
// so that one byte vector of a group holds the 8 rows' four codes and one
// broadcast 32-bit word holds a token's four codes.
#pragma once

#include <cstdint>

#include "common/ggml_type.h"
#include "cpu_kernels.h"

namespace lctx::cpu {

struct KernelTable;

constexpr int64_t kI8Block = 32;
// A block of activations whose max |x| is below this quantizes to zero
// codes (127 / max |x| would overflow f32 from about 4e-37).
constexpr float kI8TinyBlock = 1e-30f;
constexpr int kI8PanelRows = 16;
constexpr int kI8TileTokens = 4;

// Bits of the codes of weight type t on the int8 path: 4 (Q4_0, Q4_1, Q4_K),
// 5 (Q5_0, Q5_1), 0 for a type without it.
int int8_code_bits(GgmlType t);
bool int8_weight_type(GgmlType t);   // int8_code_bits(t) != 0

// Row `row` (K elements of type t, int8_weight_type) as codes 0..15 (0..31
// for 5 bits) and per-block (d, m) with element k = d[k / 32] * codes[k] +
// m[k / 32].
void unpack_codes_row(GgmlType t, const uint8_t *row, int64_t K, uint8_t *codes, float *d, float *m);

// x[0..K) in blocks of 32 (K % 32 == 0): d = max |x| / 127, q = x * (127 /
// max |x|) rounded to nearest even, s = d * sum q (q = 0 and s = 0 for a
// block whose max |x| is below kI8TinyBlock; d = s = NaN and q = 0 for a
// block holding an inf or a NaN).
void quantize_act_row(const float *x, int64_t K, int8_t *q, float *d, float *s);

// The token codes xq of nb blocks (one token, quantize_act_row) in the order
// the table's gemv_i8 reads them: per pair of blocks (b, b + 1) 64 bytes,
// elements 0..15 of b, 0..15 of b + 1, 16..31 of b, 16..31 of b + 1 (a last
// unpaired block: zeros for b + 1). xl holds (nb + 1) / 2 * 64 bytes. This
// matches the nibble order of Q4_0, Q4_1, Q5_0 and Q5_1 blocks: one vector
// of two blocks' code bytes holds elements 0..15 of each in its low nibbles,
// 16..31 in its high ones.
void gemv_i8_token_layout(const int8_t *xq, int64_t nb, int8_t *xl);

// The GEMM of matmul_multi with every job of an int8_weight_type and the
// active table's gemm_i8 non-null.
void gemm_int8_multi(ThreadPool &pool, const KernelTable &kt, const MatmulJob *jobs, int n_jobs, const float *x,
                     int64_t ldx, int64_t n_tok);

} // namespace lctx::cpu
