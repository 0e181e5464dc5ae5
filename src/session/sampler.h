// Token sampling from a logits vector: repetition penalty, top-k, top-p,
// min-p, temperature, then a draw from a seeded generator (or argmax when
// greedy). The order follows llama.cpp's default sampler chain.
#pragma once

#include <cstdint>
#include <vector>

#include "lctx.h"

namespace lctx {

// Deterministic 64-bit generator (splitmix64): the same seed gives the same
// stream on every platform and standard library.
class Rng {
public:
    explicit Rng(uint64_t seed = 0) : state_(seed) {}
    uint64_t next();
    double uniform();  // [0, 1), 53 random bits
private:
    uint64_t state_;
};

// Validates params (LCTX_ERR_INVALID_ARG with the field's name when out of range).
void validate_sampling(const lctx_sampling_params &p);

struct Candidate {
    int32_t id;
    float logit;
    float p;
};

// The candidate set after penalties and truncations, probabilities
// normalised, sorted by descending probability. Exposed for tests.
std::vector<Candidate> sampling_candidates(const float *logits, int32_t n_vocab, const lctx_sampling_params &p,
                                           const int32_t *history, size_t n_history);

// Samples one token. history: the tokens the repetition penalty looks at.
int32_t sample_token(const float *logits, int32_t n_vocab, const lctx_sampling_params &p, const int32_t *history,
                     size_t n_history, Rng &rng);

} // namespace lctx
