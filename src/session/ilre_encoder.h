// ILRe stage 1 (docs/methods/ilre.md, "Encoding"): the document runs chunk by
// chunk through the layers below the retrieval layer only, each chunk
// attending to the first `sink` tokens, the `window` tokens before it and
// itself (causally), all at their original positions. Of the retrieval
// layer only the keys are computed (RMSNorm, K projection, RoPE at the
// token's position); they form the key index, fp16, one store per KV head.
//
// The encoder can index several layers at once (the retrieval-layer sweep of
// `lctx heads --ilre` indexes all of them in one pass): it then runs up to
// the deepest one. Layer 0's keys come from the token embeddings.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "session/embedding_store.h"

namespace lctx {

struct IlreEncoderConfig {
    int64_t sink = 4, window = 512, chunk = 1024;
    bool dca = false;                 // rotate the sinks' keys forward with every chunk (see sink_shift)
    int64_t dca_after = 0;            // DCA moves the sinks only for blocks that end past this position
                                      // (the trained context); 0: from the third chunk on, as the paper
    KvType kv_type = KvType::F32;     // element type of the shallow caches
};

class IlreEncoder {
public:
    // index_layers: ascending, distinct layers of the model whose keys are indexed.
    IlreEncoder(const Model &model, Backend &backend, const IlreEncoderConfig &cfg, std::vector<int32_t> index_layers);

    const IlreEncoderConfig &config() const { return cfg_; }
    const std::vector<int32_t> &index_layers() const { return layers_; }
    int32_t n_full_layers() const { return n_full_; }   // layers run in full (the deepest index layer)
    int64_t n_encoded() const { return n_encoded_; }
    int64_t n_cached() const { return cache_ ? cache_->size() : 0; }   // sinks + window slots held
    size_t memory_bytes() const;   // key index + shallow caches

    // Size of step `i`'s chunk: sink + chunk for the first, chunk after.
    int64_t step_size() const { return n_encoded_ == 0 ? cfg_.sink + cfg_.chunk : cfg_.chunk; }

    // Encodes tokens[0..m) (1 <= m <= step_size()) as document tokens
    // n_encoded()..+m. On an exception (cancellation included) the encoder
    // is unchanged.
    void step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going);

    // Rotated queries of q tokens on top of the shallow caches at positions
    // n_encoded().., one [q][n_head * head_dim] array per index layer; the
    // caches are left as they were. At most `chunk` tokens.
    void queries(const int32_t *tokens, int64_t q, std::vector<std::vector<float>> &out,
                 const std::function<bool()> &keep_going);

    // Key index of index layer i (its position in index_layers()), KV head g:
    // row t = the key of document token t, rotated at position t.
    const EmbeddingStore &keys(size_t i, int32_t g) const { return *keys_[i * n_kv_ + g]; }
    EmbeddingStore &keys(size_t i, int32_t g) { return *keys_[i * n_kv_ + g]; }

    // DCA: the position offset of the sinks' keys while the n-token block
    // that starts at position p0 is read: max(0, p0 - sink - chunk), so a
    // token never sees a sink farther than about two chunks away; 0 for a
    // block that ends within dca_after.
    int64_t sink_shift(int64_t p0, int64_t n) const;

    // Persistence (index files): the shallow caches (sinks + window, each
    // slot at its position) and the count of encoded tokens. restore() sets
    // the count after the caller refilled the index rows and the caches.
    KvStore *cache() { return cache_.get(); }
    const KvStore *cache() const { return cache_.get(); }
    // DCA: the sinks' pre-RoPE keys and values, [layer][KV head][sink][head_dim]
    // (empty without DCA); saved with the index so a loaded encoder rotates
    // from the very same rows.
    int64_t n_dca_sinks() const { return n_sinks_saved_; }
    const std::vector<float> &dca_sink_keys() const { return sink_k_; }
    const std::vector<float> &dca_sink_values() const { return sink_v_; }
    void restore(int64_t n_encoded, int64_t n_dca_sinks, std::vector<float> sink_k, std::vector<float> sink_v);

private:
    using KeySink = std::function<void(size_t index_slot, const float *rows, int64_t n, int64_t row0)>;
    // Runs tokens at positions p0.. through the full layers on top of the
    // cache; index layer i's rotated keys (proj = wk) or queries (proj = wq)
    // go to `sink`.
    void run(const int32_t *tokens, int64_t n, bool want_queries, const KeySink &sink,
             const std::function<bool()> &keep_going);
    // Projection + RoPE of the layer's input rows x (host) for index slot i.
    void project(size_t i, const float *x, int64_t n, int64_t p0, bool want_queries, const KeySink &sink);
    void shift_sinks(int64_t p0, int64_t n);
    void keep_sinks_and_window();

    const Model &model_;
    Backend &backend_;
    IlreEncoderConfig cfg_;
    std::vector<int32_t> layers_;
    int32_t n_full_, n_kv_, head_dim_;
    Forward forward_;
    std::unique_ptr<KvStore> cache_;   // layers < n_full_: sinks + window + the current block
    std::vector<std::unique_ptr<EmbeddingStore>> keys_;   // [index layer][KV head]
    int64_t n_encoded_ = 0;
    // DCA: the sinks' pre-RoPE keys and values, [layer][head][sink][head_dim].
    std::vector<float> sink_k_, sink_v_;
    int64_t n_sinks_saved_ = 0;
    std::unique_ptr<Buffer> x_buf_, xn_buf_, proj_buf_;
    std::vector<float> proj_;
};

} // namespace lctx
