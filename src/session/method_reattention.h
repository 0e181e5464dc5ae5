// ReAttention (docs/methods/reattention.md): every step (a document chunk,
// a question chunk, or one decoded token) runs all layers; each layer appends
// its keys (before RoPE) and values to the full store, scores the middle
// tokens against the step's queries without positions, votes for spans, and
// attends over [global | spans | local] re-numbered to consecutive positions.
//
// The attention window is an ordinary KvStore. The local tokens (the last
// n_local, the step's own included) sit in it rotated once, at positions that
// stay fixed until the region is moved down ("rebase"); each layer writes its
// global tokens and spans just below them, at the positions that continue the
// local ones downwards, and attends to that one slot range. Only distances
// matter to RoPE, so this equals the paper's numbering 0..n-1.
//
// feed = prefill chunks (the first G + L tokens at once, then `chunk`);
// select = every position (the retrieval happens inside attention);
// recompute = back to the document, then the question as steps, its last
// token alone (the decode path, as the paper does); decode = one-token steps.
#pragma once

#include <memory>
#include <vector>

#include "engine/forward.h"
#include "engine/kv_store.h"
#include "lctx.h"
#include "session/chunk_feeder.h"
#include "session/method.h"
#include "session/reattention_params.h"
#include "session/reattention_store.h"

namespace lctx {

class ReattentionMethod : public Method {
public:
    ReattentionMethod(const Model &model, Backend &backend, const lctx_session_params &params);
    ~ReattentionMethod() override;

    void feed(const int32_t *tokens, size_t n, Progress &progress) override;
    void finish(Progress &progress) override;
    Selection select(const std::vector<int32_t> &query, Progress &progress) override;
    void recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) override;
    void append(int32_t token, std::vector<float> &logits) override;
    const std::vector<int32_t> &context_tokens() const override { return tokens_; }
    int64_t n_fed() const override { return static_cast<int64_t>(feeder_.ids.size()); }
    uint64_t state_digest() const override;
    bool attended_share(std::vector<float> &share) const override;

    // Introspection for tests and tools.
    const ReattentionParams &params() const { return p_; }
    const ReattentionStore &store() const { return store_; }
    // The spans (absolute token indices, ascending) each layer attended to in
    // the last step; empty for a layer that had no middle.
    const std::vector<std::vector<int64_t>> &last_selection() const { return last_sel_; }
    // Steps run so far, and how many of them selected spans.
    int64_t steps() const { return steps_; }
    int64_t selecting_steps() const { return selecting_steps_; }
    // Times the local tokens were moved back down the window.
    int64_t rebases() const { return rebases_; }

private:
    class WindowPolicy;
    friend class WindowPolicy;

    // One step: c tokens after the n_ stored ones, through every layer.
    void step(const int32_t *tokens, int64_t c, LogitsMode mode, std::vector<float> &logits,
              const std::function<bool()> &keep_going);
    // Refills the window from the store for the n_ stored tokens, in the
    // current layout: all of them while they fit in G + L, else the last L.
    void rebuild();
    // Writes tokens [t0, t1) of every layer into the window at slot t - bs_,
    // rotated at position t - bp_.
    void fill_window(int64_t t0, int64_t t1);
    // The winners of layer l for the step's queries q ([c][n_head * head_dim], pre-RoPE).
    std::vector<int64_t> select_spans(int32_t layer, const float *q, int64_t c, int64_t n_total);
    // A sliding layer whose window, for every query of a c-token step, ends
    // inside the local tokens: global tokens and spans would be masked out, so
    // none are selected or placed (Gemma 3's local layers; docs/methods/reattention.md).
    bool sees_local_only(int32_t layer, int64_t c) const;
    // Tokens tok[0..n) of `layer`, read from the store and rotated at pos[],
    // written into window slots [slot0, slot0 + n) (positions included).
    void copy_to_window(int32_t layer, const int64_t *tok, int64_t n, int64_t slot0, const int32_t *pos);
    // Global tokens + spans of layer l written below slot ls; returns the first slot.
    int64_t place_selected(int32_t layer, const std::vector<int64_t> &sel, int64_t ls, int64_t local_pos);
    int64_t slot_of(int64_t t) const { return t - bs_; }
    int32_t pos_of(int64_t t) const { return static_cast<int32_t>(t - bp_); }

    const Model &model_;
    Backend &be_;
    ReattentionParams p_;
    Forward forward_;
    KvStore window_;
    ReattentionStore store_;
    ChunkFeeder feeder_;
    std::unique_ptr<WindowPolicy> policy_;

    int64_t n_ = 0;          // tokens in the store: document, then question and answer
    bool sealed_ = false;
    std::vector<int32_t> tokens_;   // the same tokens
    // Window layout: token t sits in slot t - bs_ at position t - bp_.
    int64_t bs_ = 0, bp_ = 0;
    int64_t doc_bs_ = 0, doc_bp_ = 0;   // the layout when the document was complete
    bool dirty_ = false;     // the window no longer matches the store (cancelled step, new question)
    std::vector<std::vector<int64_t>> last_sel_;
    std::vector<int64_t> sel_age_;   // decode steps each layer's selection has been reused
    int64_t steps_ = 0, selecting_steps_ = 0, rebases_ = 0;
    std::vector<float> scratch_logits_;
    std::vector<float> rows_k_, rows_v_;   // copy_to_window's rows, reused across layers and steps
};

} // namespace lctx
