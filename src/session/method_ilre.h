// ILRe: intermediate-layer retrieval (docs/methods/ilre.md).
// feed = streaming chunked prefill of the layers below the retrieval layer
// (sinks + window caches), keys of the retrieval layer appended to the key
// index (ilre_encoder.h); finish = encode the remainder; select = the
// question through the same shallow layers, softmax-max scores over the
// whole index (ilre_scorer.h), the multi-kernel allocator (ilre_allocator.h);
// recompute = the gathered ids + question as a fresh prompt; decode appends.
#pragma once

#include <memory>
#include <string>

#include "lctx.h"
#include "session/gather_method.h"
#include "session/ilre_encoder.h"
#include "session/ilre_params.h"

namespace lctx {

class IlreMethod : public GatherMethod {
public:
    IlreMethod(const Model &model, Backend &backend, const lctx_session_params &params);

    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    bool token_scores(TokenScores &out) const override;
    uint64_t state_digest() const override;

    // Index persistence (ilre_index_file.h); load requires a fresh method.
    // The encoding sizes and the retrieval layer come from the file; budget,
    // kernels, query_tokens and n_ctx from this session's params.
    void save_index(const std::string &path) const;
    void load_index(const std::string &path);

    // Introspection for tests, tools and diagnostics.
    const IlreParams &params() const { return params_; }
    const IlreEncoder &encoder() const { return *encoder_; }
    // The score of every document token for the last select.
    const std::vector<float> &last_scores() const { return last_scores_; }
    // The question's rotated queries at the retrieval layer for the last select.
    const std::vector<float> &last_queries() const { return last_q_; }
    // The scoring distance select uses for n_scored (document + scored question)
    // tokens: score_distance itself, or for auto -1 (positional) while they fit
    // the trained context and kAutoScoreDistance past it.
    int64_t effective_score_distance(int64_t n_scored) const {
        if (params_.score_distance != IlreParams::kScoreAuto) return params_.score_distance;
        return n_scored > params_.dca_after ? IlreParams::kAutoScoreDistance : -1;
    }

private:
    IlreMethod(const Model &model, Backend &backend, const lctx_session_params &sp, const IlreParams &params);
    ChunkStep encode_step() override;

    IlreParams params_;
    std::unique_ptr<IlreEncoder> encoder_;
    std::vector<float> last_scores_, last_q_;
    std::vector<float> last_ranked_;   // last_scores_ with repeated text zeroed: what the allocator ranked (filter on)
    // What the allocator ranks: last_ranked_ with the repeat filter, the raw scores without it.
    const std::vector<float> &ranked_scores() const { return params_.repeat_window > 0 ? last_ranked_ : last_scores_; }
    std::vector<uint8_t> repeat_;      // mark_repeats of the input, made by the first select
    bool scores_valid_ = false;   // last_scores_ are those of a select that succeeded
};

} // namespace lctx
