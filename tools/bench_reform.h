// The REFORM parts of `lctx bench`: encode speed (--reform, with --profile a
// per-op breakdown of the encoding) and the cost of select on large indexes
// (--select-study). Each returns its member of the bench's JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli.h"
#include "model/model.h"

namespace lctx::cli {

// REFORM encode through the public API, as an application runs it: a REFORM
// session with default parameters, the document (random ids) fed in pieces
// of 4096 tokens, then build_index; tokens/s per repeat. With profile, the
// first repeat of every length also reports where the encode time goes
// (ReformProfile), rates against fma_peak_gflops (0: unknown). attn_bf16:
// the sessions ask for LCTX_PRECISION_BF16 attention; matmul: their
// matmul_precision. "reform" member.
// A JSON array of numbers with 3 decimals.
std::string json_list(const std::vector<double> &v);

std::string reform_json(const Args &a, const Hparams &hp, const std::vector<int64_t> &lengths, int64_t repeats,
                        int64_t threads, bool profile, double fma_peak_gflops, bool attn_bf16,
                        lctx_precision matmul);

// Per index size N: REFORM's select on a synthetic index of N tokens (random
// unit-norm head blocks of the model's head profile in fp16) against n_query
// query rows: the scoring (the portable loop and backend.max_dot_f16), the
// max-pooling and the top-k with the default REFORM parameters, whether both
// scorings select the same tokens; plus the N-independent part, timed by a
// real select (query embedding) on a session of one chunk. "select_study" member.
std::string select_study_json(const Args &a, const Model &model, Backend &backend, const std::vector<int64_t> &sizes,
                              int64_t repeats, int64_t n_query, int64_t threads);

} // namespace lctx::cli
