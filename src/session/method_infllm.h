// InfLLM baseline (Xiao et al. 2024): block memory with representative
// tokens; each chunk (and each decode step) attends to the initial tokens,
// the memory blocks retrieved for it per layer and KV head, and a local
// window. The full KV of the document is kept (fp16) as the memory store.
//
// Mapping onto the engine:
//  * Store: for every document token, layer and KV head the pre-RoPE key and
//    the value as fp16 (captured in ForwardHooks::on_qkv), plus the token ids.
//  * Blocks: document tokens [sink, ...) are cut into blocks of infllm_block
//    tokens. A block joins the memory once it lies fully before the local
//    window of the next chunk; the window is then everything after the last
//    complete block (kv_recent to kv_recent + block - 1 tokens), so no token
//    falls between memory and window. Its representative key per (layer, KV
//    head) is the mean pre-RoPE key of its infllm_repr tokens that received
//    the most attention mass while they were in a chunk or in the local
//    window (column sums of the last kv_obs = 128 queries of every forward
//    call; see InfllmParams::obs for why not all of them).
//  * Working KvStore, slot = position: [0, S) sinks, [S, S + k*block) the k
//    retrieved blocks in document order, then the window, then the tokens
//    being forwarded. k = min(kv_budget / block, complete blocks), the same
//    for every layer and head. Keys copied from the store are rotated to
//    their slot's position, so positions stay consecutive (as REFORM
//    renumbers) instead of InfLLM's single shared position for all memory.
//  * Retrieval: the attention policy (RetrievalPolicy), at layer l before its
//    attention, per KV head g:
//    block score = sum over the sub-batch's queries and the query heads of g
//    of q . k_repr (mean over representatives), pre-RoPE; the top k blocks
//    are copied into layer l's memory slots. Chunks, the question and every
//    decode step retrieve anew. The first retrieval of a chunk or question
//    places the blocks in document order; later ones (further forward calls
//    of a chunk, decode steps) leave blocks that stay retrieved in their
//    slots and put new ones in the freed slots, so a decode step copies and
//    rotates only the blocks that changed (re-sorting would re-rotate up to
//    the whole memory per step: 3x FULL's decode time on SmolLM2). Memory
//    blocks may then be out of document order; InfLLM itself gives all
//    memory one shared position, so their mutual order carries no meaning.
//  * Question: after the document, the cache holds sinks + memory + window;
//    recompute appends the question (retrieval by its own queries), decode
//    appends one token per step, retrieving per step as InfLLM does. A new
//    question drops the previous question and answer.
//  * select() forwards the question once to see what it retrieves and
//    returns the positions of the sinks, the union over layers and KV heads
//    of the retrieved blocks, and the window (scores 1.0); it leaves the
//    decode cache as it was (the previous answer is hidden by position while
//    it runs, or dropped if the cache has no room for both).
//  * context_tokens(): sinks + window + question + answer (memory differs per
//    layer and head, so it is left out).
#pragma once

#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"
#include "session/infllm_params.h"
#include "session/infllm_store.h"
#include "session/chunk_feeder.h"
#include "session/method.h"

namespace lctx {

class InfllmMethod : public Method {
public:
    InfllmMethod(const Model &model, Backend &backend, const InfllmParams &params);

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return ctx_tokens_; }
    int64_t n_fed() const override { return static_cast<int64_t>(feeder_.ids.size()); }
    uint64_t state_digest() const override;

    // Introspection for tests.
    const InfllmParams &params() const { return p_; }
    int64_t n_encoded() const { return n_encoded_; }
    int64_t n_blocks() const { return n_blocks_; }
    int64_t memory_blocks() const { return k_; }          // blocks in the working cache now
    int64_t max_slots_used() const { return max_slots_; }
    // Block ids in the memory slots of (layer, KV head), in slot order
    // (ascending after the first retrieval of a chunk or question).
    const std::vector<int64_t> &retrieved(int32_t l, int32_t g) const { return retrieved_[index(l, g)]; }
    // Blocks copied into memory slots so far, over all layers and heads.
    int64_t block_copies() const { return block_copies_; }
    // True when every filled memory slot holds the key (rotated to the slot's
    // position) and value of the block that retrieved() names for it.
    bool memory_slots_consistent() const;

private:
    size_t index(int32_t l, int32_t g) const { return static_cast<size_t>(l) * n_kv_ + g; }
    int64_t block_start(int64_t b) const { return p_.sink + b * p_.block; }
    void step(const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going);
    ChunkStep encode_step();
    void form_blocks(int64_t c0);
    void build_prefix(int64_t c0);
    // Copies store tokens [tok0, tok0 + n) of (l, g) into slots [slot0, ..), rotated to the slot positions.
    void fill(int32_t l, int32_t g, int64_t slot0, int64_t tok0, int64_t n);
    // Retrieves layer l's memory for the pre-RoPE queries q [n_q][n_head * D].
    void retrieve(int32_t l, const float *q, int64_t n_q);
    void retrieve_blocks(int32_t l, const float *q, int64_t n_q);
    void refill_memory();   // fills every memory slot with the block retrieved_ names
    // Forwards tokens at positions pos0.. in calls of n_batch (retrieval by the policy, capture by hooks).
    void run(const int32_t *tokens, int64_t n, int64_t pos0, ForwardHooks &hooks, LogitsMode mode,
             std::vector<float> &logits, const std::function<bool()> &keep_going);
    void require_sealed(const char *call) const;

    // The attention policy of every forward call: before a layer's attention,
    // the block's queries retrieve that layer's memory blocks into the
    // memory slots (and, in select, mark them used).
    struct RetrievalPolicy final : AttentionPolicy {
        explicit RetrievalPolicy(InfllmMethod &method) : m(method) {}
        void before_attention(int32_t layer, const float *q, int64_t n_q, KvStore &store) override;
        InfllmMethod &m;
        std::vector<char> *used = nullptr;
    };

    const Model &model_;
    Backend &backend_;
    InfllmParams p_;
    int32_t n_layer_, n_kv_, head_dim_;
    Forward forward_;
    KvStore cache_;
    std::vector<Fp16Rows> k_store_, v_store_;   // per layer: [token][n_kv * D] pre-RoPE keys, values
    ChunkFeeder feeder_;   // the document ids and the feed loop
    int64_t n_encoded_ = 0;
    int64_t n_blocks_ = 0;                      // complete blocks in the memory
    std::vector<std::vector<float>> kbar_;      // [l * n_kv + g]: [block][D] representative keys
    int64_t pend_base_ = 0;                     // first token not in a block yet
    std::vector<std::vector<float>> pend_;      // [l * n_kv + g]: attention mass of tokens pend_base_..
    // Layout of the working cache: sinks [0, n_sink_), k_ blocks, window = document [w0_, w1_).
    int64_t n_sink_ = 0, k_ = 0, w0_ = 0, w1_ = 0, prefix_ = 0;
    std::vector<std::vector<int64_t>> retrieved_;
    bool sealed_ = false;
    std::vector<int32_t> ctx_tokens_;
    int64_t max_slots_ = 0;
    int64_t block_copies_ = 0;
    std::vector<float> scores_;
    struct FillJob {
        int32_t g;
        int64_t slot, tok;
    };
    std::vector<FillJob> fill_jobs_;   // blocks to copy into memory slots, filled in parallel
    std::vector<uint16_t> gather_;
    RetrievalPolicy policy_{*this};
};

// Validates the INFLLM fields of params (LCTX_ERR_INVALID_ARG) and builds the method.
std::unique_ptr<Method> make_infllm_method(const Model &model, Backend &backend,
                                           const lctx_session_params &params);

} // namespace lctx
