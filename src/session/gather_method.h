// What REFORM and ILRe share (docs/engine.md): the document is encoded chunk
// by chunk (ChunkFeeder and the method's encode step) into an index the
// method scores against the question in select; recompute then runs the
// gathered tokens and the question as a fresh prompt (GatheredDecoder), and
// decode appends to that cache. A subclass supplies the encode step, select,
// token_scores and state_digest.
#pragma once

#include <cstdint>
#include <vector>

#include "lctx.h"
#include "session/chunk_feeder.h"
#include "session/gathered_decoder.h"
#include "session/method.h"

namespace lctx {

class GatherMethod : public Method {
public:
    // Fails with LCTX_ERR_STATE once the document is sealed (finish or a loaded index).
    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return decoder_.tokens(); }
    int64_t n_fed() const override { return static_cast<int64_t>(feeder_.ids.size()); }
    const RefreshKvPolicy *refreshkv() const override { return decoder_.refreshkv(); }
    bool set_decoding(const RefreshKvConfig *cfg) override {
        decoder_.set_decoding(cfg);
        return true;
    }

    const std::vector<int32_t> &doc_ids() const { return feeder_.ids; }

protected:
    // who: the method's name for messages ("REFORM"); n_ctx, n_batch and
    // kv_type size the decode cache; RefreshKV decoding comes from sp.
    GatherMethod(const Model &model, Backend &backend, const char *who, int64_t n_ctx, int32_t n_batch,
                 KvType kv_type, const lctx_session_params &sp);

    // Encodes the next m document tokens into the method's index.
    virtual ChunkStep encode_step() = 0;

    const Model &model_;
    Backend &backend_;
    ChunkFeeder feeder_;   // the document ids and the feed loop
    bool sealed_ = false;
    GatheredDecoder decoder_;   // recompute and decode
};

} // namespace lctx
