// The transformer forward pass (the architectures of docs/models.md). Prefill batches and
// single-token decode share this one code path: a batch of tokens with
// explicit position ids is appended to a KV store and attends to what the
// attention policy picks (default: every filled slot), causally by position.
// All ops run on the backend (backend/backend.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "engine/attention_policy.h"
#include "engine/kv_store.h"
#include "model/model.h"

namespace lctx {

// Hooks for methods that look inside the forward pass. All optional.
// A long batch is processed in sub-batches (at most 512 tokens) that each go
// through all layers: on_qkv / on_hidden are then called once per layer per
// sub-batch, sub-batches in token order, n_tok being the sub-batch's size.
struct ForwardHooks {
    // Called for each layer with the pre-RoPE q [n_tok][n_head*head_dim]
    // (after the biases of qwen2 and the per-head Q/K norms of gemma3/qwen3),
    // k and v [n_tok][n_head_kv*head_dim] of the batch.
    std::function<void(int32_t layer, const float *q, const float *k, const float *v, int64_t n_tok)> on_qkv;
    // Called for each layer with the residual stream after the layer,
    // [n_tok][n_embd].
    std::function<void(int32_t layer, const float *hidden, int64_t n_tok)> on_hidden;
    // If set, per layer: [n_head_kv][cache slots] attention mass received by
    // every cache slot from the batch's queries i >= obs_begin (slots the
    // policy leaves out receive 0).
    std::vector<std::vector<float>> *col_sums = nullptr;
    int64_t obs_begin = 0;
};

enum class LogitsMode { NONE, LAST, ALL };

// Optional per-op wall-clock breakdown (lctx bench --profile). Times are
// added to seconds[op] across calls; with ForwardOptions::profile null the
// forward pass reads no clock. HOOKS is the time in ForwardHooks callbacks,
// POLICY the attention policy's own work, COL_SCORES the column scores
// (the kernel's column pass on the CPU backend, scattering them into the
// hook's arrays, zeroing those): ATTENTION excludes them.
struct ForwardProfile {
    enum Op { EMBED, NORM, QKV, ROPE, KV_STORE, ATTENTION, ATTN_OUT, FFN_GATE_UP, SWIGLU, FFN_DOWN, RESIDUAL,
              OUTPUT, HOOKS, POLICY, COL_SCORES, N_OPS };
    double seconds[N_OPS] = {};
    int64_t tokens = 0;         // tokens forwarded while profiling
    int64_t layer_tokens = 0;   // tokens x layers run: rows through the Q/K/V projections
    // Rows through the output projection and the MLP, summed over layers:
    // layer_tokens less the last layer's rows that nothing reads.
    int64_t mlp_rows = 0;
    // (query, key) pairs attended per query head, summed over layers,
    // counting every slot filled before a query's sub-batch as visible, up
    // to a sliding-window layer's window (dense causal attention).
    double attn_pairs = 0.0;
    // Per layer: the time of the ops run inside that layer (hooks included).
    std::vector<double> layer_seconds;
    static const char *name(int op);
    double total() const;
    // Floating-point operations of the profiled work: the layers' weight
    // matmuls (Q/K/V for layer_tokens rows, output and MLP for mlp_rows) and
    // attention's two products over attn_pairs.
    double matmul_flops(const Hparams &hp) const;
    double attention_flops(const Hparams &hp) const;
};

struct ForwardOptions {
    int32_t n_layers = -1;            // layers to run (early exit); -1: all
    LogitsMode logits = LogitsMode::LAST;
    ForwardHooks *hooks = nullptr;
    // Progress / cancellation between layers: return false to stop (the
    // batch's slots are then removed from the cache and Error CANCELLED thrown).
    std::function<bool()> keep_going;
    ForwardProfile *profile = nullptr;   // optional, see ForwardProfile
    AttentionPolicy *policy = nullptr;   // null: dense (every filled slot)
    // The last layer run computes its attention, output projection and MLP
    // only for the rows whose result is used (the logits' rows): the others
    // need only their K/V there. true: every row, as the layers before it
    // (tests compare the two).
    bool every_row_last_layer = false;
};

class Forward {
public:
    Forward(const Model &model, Backend &backend);

    // Runs tokens[0..n) at positions pos[0..n) on top of `cache`, appending
    // their K/V. Writes logits (n_vocab per requested token) into `logits`.
    // opt.n_layers = -1 runs the cache's layers; logits after an early exit
    // apply the output norm and head to that layer's hidden state.
    // A sub-batch attends to the slots filled so far, so a token never sees
    // a later sub-batch's token even at a smaller position.
    // The last layer's outputs of rows that no logits or on_hidden hook read
    // are not computed (ForwardOptions::every_row_last_layer); column scores
    // keep its attention on every row, but not its output projection and MLP.
    // Throws lctx::Error on bad ids (LCTX_ERR_INVALID_ARG), a full cache
    // (LCTX_ERR_CONTEXT_FULL) or cancellation; the cache is then unchanged.
    void run(const int32_t *tokens, const int32_t *pos, int64_t n, KvStore &cache, const ForwardOptions &opt,
             std::vector<float> &logits);

private:
    // Scratch of at least n floats in backend memory.
    float *scratch(std::unique_ptr<Buffer> &b, int64_t n);

    const Model &model_;
    Backend &be_;
    // Scratch buffers reused across calls.
    std::unique_ptr<Buffer> x_, xn_, q_, k_, v_, attn_, gate_, up_, tmp_;
    std::vector<float> hq_, hk_, hv_, hx_;   // host copies for hooks when buffers are not host memory
    KvStore::GatherScratch gather_;
    std::vector<Hparams> rope_hp_;   // per layer: RoPE base of sliding / global layers (Hparams::rope_of)
};

} // namespace lctx
