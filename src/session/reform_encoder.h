// REFORM stage 1 (spec §2): recurrent chunked forwarding with early exit.
// One step runs a chunk through layers 0..E-1 on top of the working cache,
// captures the chosen heads' pre-RoPE Q/K/V of every chunk token (layer E
// only computes its projections), accumulates H2O scores from the chunk's
// last `obs` queries, and evicts each (layer, KV head) back to `budget`
// entries, renumbering the survivors to positions 0..budget-1 (slot = position).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/embedding_store.h"
#include "session/evictor.h"
#include "session/head_profile.h"
#include "session/reform_profile.h"

namespace lctx {

struct EncoderConfig {
    int64_t chunk = 2048, budget = 2048, sink = 256, recent = 256, obs = 128;
    bool accumulate = true;
    EvictorKind evictor = EvictorKind::H2O;   // the working cache's keep rule (evictor.h)
    int64_t snapkv_kernel = 7;                // SNAPKV evictor: score pooling width
    KvType kv_type = KvType::F32;             // element type of the working cache
};

class ReformEncoder {
public:
    ReformEncoder(const Model &model, Backend &backend, const EncoderConfig &cfg, std::vector<HeadSpec> heads);

    int32_t exit_layer() const { return exit_; }
    int32_t dim() const { return static_cast<int32_t>(heads_.size()) * head_dim_; }
    int32_t n_heads() const { return static_cast<int32_t>(heads_.size()); }
    const std::vector<HeadSpec> &heads() const { return heads_; }
    const EncoderConfig &config() const { return cfg_; }
    int64_t n_slots() const { return cache_.size(); }
    int64_t n_encoded() const { return n_encoded_; }

    // Encodes tokens[0..m) (1 <= m <= chunk) as document tokens
    // n_encoded()..+m, writing their embeddings into store rows (reserved and
    // committed here), then evicts. On an exception (cancellation included)
    // the encoder and the store are unchanged.
    void step(const int32_t *tokens, int64_t m, EmbeddingStore &store, const std::function<bool()> &keep_going);

    // Embeddings [q][dim()] of tokens on top of the working cache, at the
    // positions after it; the working cache is left as it was.
    void embed_query(const int32_t *tokens, int64_t q, std::vector<float> &out,
                     const std::function<bool()> &keep_going);

    // Working cache state, for persistence: per layer l < E and KV head g,
    // slot s holds original token orig(l,g)[s] with H2O score score(l,g)[s].
    KvStore &cache() { return cache_; }
    const KvStore &cache() const { return cache_; }
    std::vector<int64_t> &orig(int32_t l, int32_t g) { return orig_[static_cast<size_t>(l) * n_kv_ + g]; }
    std::vector<float> &score(int32_t l, int32_t g) { return score_[static_cast<size_t>(l) * n_kv_ + g]; }
    const std::vector<int64_t> &orig(int32_t l, int32_t g) const { return orig_[static_cast<size_t>(l) * n_kv_ + g]; }
    const std::vector<float> &score(int32_t l, int32_t g) const { return score_[static_cast<size_t>(l) * n_kv_ + g]; }
    // Restores a loaded state: n_slots filled slots (positions 0..n_slots-1)
    // after n_encoded document tokens; the caller fills keys/values/orig/score.
    void restore(int64_t n_slots, int64_t n_encoded);
    // Profiling of step() (may be null; the caller keeps it alive): times are
    // added to *p. Never changes what is encoded.
    void set_profile(ReformProfile *p) { prof_ = p; }

private:
    using RowWriter = std::function<void(int64_t row, int32_t col, const float *v)>;
    // Runs tokens through layers 0..E-1 at positions n_slots.., capturing
    // every head into `write` (row = index in tokens); prof may be null.
    void run_capture(const int32_t *tokens, int64_t n, const RowWriter &write, ForwardHooks *extra,
                     const std::function<bool()> &keep_going, ReformProfile *prof);
    // Projections of the heads at layer E from the residual stream rows x.
    void capture_exit_layer(const float *x, int64_t n, int64_t row0, const RowWriter &write, ReformProfile *prof);
    void evict();
    double *timer(ReformProfile::Part part) { return prof_ ? &prof_->seconds[part] : nullptr; }

    const Model &model_;
    Backend &backend_;
    Forward forward_;
    EncoderConfig cfg_;
    std::vector<HeadSpec> heads_;
    int32_t exit_, head_dim_, n_kv_;
    KvStore cache_;
    std::vector<std::vector<int64_t>> orig_;
    std::vector<std::vector<float>> score_;
    int64_t n_encoded_ = 0;
    std::vector<std::vector<float>> cols_;
    std::unique_ptr<Buffer> x_buf_, xn_buf_, proj_buf_;
    std::vector<float> proj_, tmp_;
    ReformProfile *prof_ = nullptr;
};

// Writes v / ||v|| (or zeros when ||v|| < 1e-20) into out, n floats.
void l2_normalize(const float *v, int32_t n, float *out);

} // namespace lctx
