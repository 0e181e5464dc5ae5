// The recurrent compressed-cache baselines: STREAMING (StreamingLLM), H2O,
// TOVA, SNAPKV and INFINIPOT. The document is forwarded chunk by chunk
// (boundaries depend only on kv_chunk, not on the feed calls) through all
// layers on top of a compressed KV cache; after each chunk every (layer, KV
// head) is evicted back to kv_budget slots with the method's scores, and the
// survivors are renumbered to consecutive positions 0..budget-1 (slot =
// position, keys re-rotated). The question and answer are then decoded
// straight from that cache (no recompute), at the positions after it.
//
// Scores per (layer, KV head) slot:
//   STREAMING  none: sinks + most recent.
//   H2O        attention mass received from the chunk's last kv_obs (128)
//              queries, summed over chunks (the REFORM paper's H2O).
//   TOVA       attention of the chunk's last query (kv_obs = 1), fresh per chunk.
//   SNAPKV     attention of the last kv_obs (32) queries, average-pooled
//              (kernel 7), fresh per chunk. Eviction is lazy (only when the
//              pot of budget + chunk slots has no room for the next chunk,
//              with the scores of the previous one), so the last chunks stay
//              whole until the question: select() then compresses with the
//              question as the observation window, on a copy, as SnapKV does
//              after a full prefill. Its default chunk is n_ctx_train -
//              budget, so an input that fits the trained context is exactly
//              SnapKV (one prefill, one compression); longer ones are
//              compressed per chunk.
//   INFINIPOT  when the pot (budget + chunk) is full: the catalyst prompt is
//              forwarded on top of the cache and its attention (CaP) scores
//              the slots; a share infinipot_nuc_ratio of the free slots goes
//              to the most novel tokens instead (NuC: the surprisal
//              -log p(token | compressed context) measured when the token was
//              read). Positions restart consecutively after each compression
//              (InfiniPot's CR-RoPE is this renumbering).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/baseline_params.h"
#include "session/chunk_feeder.h"
#include "session/evictor.h"
#include "session/method.h"

namespace lctx {

class RecurrentMethod : public Method {
public:
    RecurrentMethod(const Model &model, Backend &backend, const BaselineParams &params);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return ctx_tokens_; }
    int64_t n_fed() const override { return static_cast<int64_t>(feeder_.ids.size()); }
    uint64_t state_digest() const override;

    // Introspection for tests: the document cache and the original document
    // index of every slot of (layer, KV head).
    const BaselineParams &params() const { return p_; }
    const KvStore &doc_cache() const { return cache_; }
    const std::vector<int64_t> &slot_tokens(int32_t layer, int32_t head) const { return orig_[index(layer, head)]; }
    int64_t max_slots_seen() const { return max_slots_; }

private:
    size_t index(int32_t l, int32_t g) const { return static_cast<size_t>(l) * n_kv_ + g; }
    // Forwards m document tokens at the next positions, updating scores.
    void step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going);
    // Runs tokens on `cache` at positions cache.size().. in calls of n_batch;
    // column sums of the queries i >= obs_begin into cols ([layer][head][slot]
    // over all slots); surprisal of tokens[1..n) into nuc (if non-null).
    void run_collect(KvStore &cache, const int32_t *tokens, int64_t n, int64_t obs_begin,
                     std::vector<std::vector<float>> *cols, std::vector<float> *nuc, float *first_nuc,
                     const std::function<bool()> &keep_going);
    // Keep list of (layer, head) for the current scores; n slots.
    std::vector<int64_t> keep_list(int32_t l, int32_t g, int64_t n, const std::vector<std::vector<float>> *cap) const;
    void evict(const std::vector<std::vector<float>> *cap);
    ChunkStep encode_step();
    void forward_decode(const int32_t *tokens, size_t n, Progress *progress, std::vector<float> &logits);

    const Model &model_;
    Backend &backend_;
    BaselineParams p_;
    Evictor evictor_;   // the keep rule of every method but INFINIPOT
    int32_t n_layer_, n_kv_;
    Forward forward_;
    KvStore cache_;                          // the compressed document cache
    std::vector<std::vector<int64_t>> orig_; // [layer * n_kv + head][slot] -> document index
    std::vector<std::vector<float>> score_;  // [layer * n_kv + head][slot]: H2O/TOVA/SnapKV score, InfiniPot NuC
    ChunkFeeder feeder_;   // the document ids and the feed loop
    int64_t n_encoded_ = 0;
    std::vector<float> last_logits_;         // INFINIPOT: logits after the last document token
    std::vector<int32_t> catalyst_;
    bool sealed_ = false;
    int64_t max_slots_ = 0;
    // Decode: n_doc_slots_ document slots of cache_ (or of snap_ for SNAPKV)
    // followed by the question and answer.
    int64_t n_doc_slots_ = 0;
    std::unique_ptr<KvStore> snap_;          // SNAPKV: the question-compressed copy
    std::vector<std::vector<int64_t>> snap_keep_;   // SNAPKV: keep lists of the last select
    std::vector<int32_t> snap_query_;        // the question of the last select
    KvStore *decode_ = nullptr;
    std::vector<int32_t> ctx_tokens_;
};

} // namespace lctx
