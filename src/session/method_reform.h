// REFORM: compress, gather, recompute (docs/engine.md has the parts it is made of).
// feed = recurrent chunked encoding into a per-token embedding store (stage
// boundaries depend only on the chunk size, not on the feed calls); finish =
// encode the remainder; select = cosine scoring of the store against the
// question's embeddings, max-pooled, forced first/last tokens, top-k to the
// recompute budget; recompute = full forward over the gathered ids + query at
// fresh consecutive positions; decode appends to that cache.
#pragma once

#include <memory>
#include <string>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "lctx.h"
#include "session/embedding_store.h"
#include "session/gather_method.h"
#include "session/head_profile.h"
#include "session/reform_encoder.h"
#include "session/reform_params.h"

namespace lctx {

class ReformMethod : public GatherMethod {
public:
    ReformMethod(const Model &model, Backend &backend, const lctx_session_params &params);

    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    bool token_scores(TokenScores &out) const override;
    uint64_t state_digest() const override;

    // Index persistence (index_file.h); load requires a fresh method.
    void save_index(const std::string &path) const;
    void load_index(const std::string &path, const lctx_session_params &params);

    // Profiling of the encoding (lctx bench --reform N --profile): feed and
    // build_index add their encoder steps' times to *p (may be null; the
    // caller keeps it alive). Never changes what is encoded.
    void set_encode_profile(ReformProfile *p);

    // Introspection for tests, tools and diagnostics.
    const ReformParams &params() const { return params_; }
    const HeadProfile &profile() const { return profile_; }
    const ReformEncoder &encoder() const { return *encoder_; }
    const EmbeddingStore &store() const { return *store_; }
    // Raw (s) and pooled (p) scores of every document token for the last select.
    const std::vector<float> &last_raw_scores() const { return last_s_; }
    const std::vector<float> &last_pooled_scores() const { return last_p_; }
    const std::vector<bool> &last_query_mask() const { return last_mask_; }
    // Query embeddings of the last select, [q][dim].
    const std::vector<float> &last_query_embeddings() const { return last_qemb_; }

private:
    ReformMethod(const Model &model, Backend &backend, const lctx_session_params &sp, const ReformParams &params);
    void make_encoder(const EncoderConfig &cfg);
    ChunkStep encode_step() override;

    ReformParams params_;
    HeadProfile profile_;
    std::unique_ptr<ReformEncoder> encoder_;
    std::unique_ptr<EmbeddingStore> store_;
    std::vector<float> last_s_, last_p_, last_qemb_;
    std::vector<bool> last_mask_;
    std::vector<uint8_t> repeat_;   // mark_repeats of the input, made by the first select
    ReformProfile *encode_profile_ = nullptr;
    bool scores_valid_ = false;   // last_s_/last_p_ are those of a select that succeeded
};

} // namespace lctx
