#include "session/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "common/error.h"

namespace lctx {

uint64_t Rng::next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

void validate_sampling(const lctx_sampling_params &p) {
    if (p.struct_size < sizeof(lctx_sampling_params))
        fail(LCTX_ERR_INVALID_ARG, "lctx_sampling_params.struct_size is %u, expected %zu: fill it with "
                                   "lctx_sampling_default_params()", p.struct_size, sizeof(lctx_sampling_params));
    if (!std::isfinite(p.temperature)) fail(LCTX_ERR_INVALID_ARG, "sampling temperature must be finite");
    if (!(p.top_p > 0.0f) || !std::isfinite(p.top_p))
        fail(LCTX_ERR_INVALID_ARG, "sampling top_p must be in (0, 1] (>= 1 turns it off), got %g", p.top_p);
    if (std::isnan(p.min_p) || p.min_p > 1.0f)
        fail(LCTX_ERR_INVALID_ARG, "sampling min_p must be <= 1 (<= 0 turns it off), got %g", p.min_p);
    if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
        fail(LCTX_ERR_INVALID_ARG, "sampling repeat_penalty must be > 0 (1 turns it off), got %g", p.repeat_penalty);
    if (p.repeat_last_n < -1)
        fail(LCTX_ERR_INVALID_ARG, "sampling repeat_last_n must be >= -1, got %d", p.repeat_last_n);
}

namespace {

// llama.cpp's penalty: divide positive logits, multiply negative ones.
void apply_repeat_penalty(std::vector<Candidate> &c, const lctx_sampling_params &p, const int32_t *history,
                          size_t n_history) {
    if (p.repeat_penalty == 1.0f || p.repeat_last_n == 0 || n_history == 0) return;
    size_t window = p.repeat_last_n < 0 ? n_history : std::min(n_history, static_cast<size_t>(p.repeat_last_n));
    std::unordered_set<int32_t> seen(history + (n_history - window), history + n_history);
    for (Candidate &x : c) {
        if (!seen.count(x.id)) continue;
        x.logit = x.logit > 0 ? x.logit / p.repeat_penalty : x.logit * p.repeat_penalty;
    }
}

void softmax_sorted(std::vector<Candidate> &c, float temperature) {
    std::sort(c.begin(), c.end(), [](const Candidate &a, const Candidate &b) {
        return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
    });
    float t = temperature > 0 ? temperature : 1.0f;
    double sum = 0;
    float max = c.empty() ? 0.0f : c[0].logit;
    for (Candidate &x : c) {
        x.p = std::exp((x.logit - max) / t);
        sum += x.p;
    }
    for (Candidate &x : c) x.p = static_cast<float>(x.p / sum);
}

} // namespace

std::vector<Candidate> sampling_candidates(const float *logits, int32_t n_vocab, const lctx_sampling_params &p,
                                           const int32_t *history, size_t n_history) {
    std::vector<Candidate> c(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) {
        float l = logits[i];
        c[i] = {i, std::isnan(l) ? -std::numeric_limits<float>::infinity() : l, 0.0f};
    }
    apply_repeat_penalty(c, p, history, n_history);
    // Truncations work on probabilities at temperature 1, then the survivors
    // are re-normalised at the requested temperature.
    softmax_sorted(c, 1.0f);
    if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(static_cast<size_t>(p.top_k));
    if (p.top_p < 1.0f) {
        double cum = 0;
        size_t keep = c.size();
        for (size_t i = 0; i < c.size(); ++i) {
            cum += c[i].p;
            if (cum >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.resize(keep);
    }
    if (p.min_p > 0.0f && !c.empty()) {
        float threshold = c[0].p * p.min_p;
        size_t keep = 1;
        while (keep < c.size() && c[keep].p >= threshold) ++keep;
        c.resize(keep);
    }
    softmax_sorted(c, p.temperature);
    return c;
}

int32_t sample_token(const float *logits, int32_t n_vocab, const lctx_sampling_params &p, const int32_t *history,
                     size_t n_history, Rng &rng) {
    if (n_vocab <= 0) fail(LCTX_ERR_INTERNAL, "sampling from an empty vocabulary");
    if (p.temperature <= 0.0f) {
        // Greedy: argmax after the repetition penalty (first index wins ties).
        std::vector<Candidate> c(static_cast<size_t>(n_vocab));
        for (int32_t i = 0; i < n_vocab; ++i) c[i] = {i, logits[i], 0.0f};
        apply_repeat_penalty(c, p, history, n_history);
        int32_t best = 0;
        for (int32_t i = 1; i < n_vocab; ++i)
            if (c[i].logit > c[best].logit || std::isnan(c[best].logit)) best = i;
        return best;
    }
    std::vector<Candidate> c = sampling_candidates(logits, n_vocab, p, history, n_history);
    double u = rng.uniform(), cum = 0;
    for (const Candidate &x : c) {
        cum += x.p;
        if (u < cum) return x.id;
    }
    return c.back().id;
}

} // namespace lctx
