// Internal: one builder per task. A builder makes the sample of a given size
// in "units" (haystack sentences, list words, ...); generate() searches the
// number of units that fits the token target. Builders are deterministic in
// (input, units) and grow (roughly monotonically) with units.
#pragma once

#include <cstdint>

#include "eval/task.h"

namespace lctx::eval::detail {

struct BuildInput {
    uint64_t seed;
    int64_t target_tokens;
    double depth;   // (i + 0.5) / n
};

using Builder = Sample (*)(const BuildInput &in, int64_t units);

struct TaskDef {
    const char *name;
    Builder build;
    int64_t min_units;
    int answer_tokens;
    bool perplexity = false;   // scored by the perplexity of answers[0] (ScoreMode::kPerplexity)
};

Sample build_niah_single(const BuildInput &in, int64_t units);
Sample build_niah_multikey(const BuildInput &in, int64_t units);
Sample build_niah_multivalue(const BuildInput &in, int64_t units);
Sample build_niah_multiquery(const BuildInput &in, int64_t units);
Sample build_vt(const BuildInput &in, int64_t units);
Sample build_cwe(const BuildInput &in, int64_t units);
Sample build_fwe(const BuildInput &in, int64_t units);
Sample build_qa(const BuildInput &in, int64_t units);
Sample build_essay_niah(const BuildInput &in, int64_t units);   // reads essay_corpus() (corpus.h)
Sample build_kv_list(const BuildInput &in, int64_t units);
Sample build_ppl(const BuildInput &in, int64_t units);

// kv_list: records per sample, and its answer budget: a "KEY: VALUE" line is
// about 10 tokens for SmolLM2's tokenizer (digits one token each); 14 per
// record leaves room for a restated header.
constexpr int kKvPairs = 6;
constexpr int kKvAnswerTokens = 14 * kKvPairs + 32;
// ppl: tokens of the held-out continuation that are scored.
constexpr int kPplTokens = 256;

} // namespace lctx::eval::detail
