// RefreshKV decoding (docs/methods/refreshkv.md): the prompt's cache C_f is
// kept whole and grows with every generated token; each layer also keeps a
// partial cache C_p of K slots per KV head. Most decode steps attend over
// C_p only; at every S-th step a layer whose mean pre-RoPE query has drifted
// from the one of its last full step (cosine <= s) attends over C_f instead
// and rebuilds its C_p from that step's probabilities. The decision, the
// attention and the refresh happen inside the layer's attention, through the
// AttentionPolicy seam (plan / after_attention): no extra pass.
//
// Sliding-window layers (Gemma 3's local layers) keep no partial cache: they
// attend densely over their window at every step, which is already a small
// cache (docs/methods/refreshkv.md, "Sliding-window layers"). So the full
// cache may release their out-of-window slots as FULL's does, and C_p holds
// only the other layers.
//
// RefreshKvPolicy is the policy; FullMethod (method_full.h, as
// LCTX_METHOD_REFRESHKV) and
// GatheredDecoder (REFORM, ILRe with --decode refreshkv) drive it:
//   begin_prompt(end) before forwarding a prompt whose last token lands in
//   slot end - 1 (all layers attend in full; C_p is built from that token),
//   begin_step() before each single decoded token.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/attention_policy.h"
#include "engine/kv_store.h"
#include "lctx.h"
#include "model/model.h"

namespace lctx {

struct RefreshKvConfig {
    int64_t partial = 0;          // K; 0: round(L / 8) of each prompt, at least 1
    int32_t stride = 10;          // S
    float threshold = 0.85f;      // s
    bool fixed = false;           // fixed schedule (every S steps, all layers)
    int32_t pool_kernel = 7;      // odd
    int32_t max_partial_run = 0;  // > 0: force a refresh after this many steps without one
};

// The documented defaults filled in and checked (LCTX_ERR_INVALID_ARG naming
// the field); the threshold's default depends on the model.
RefreshKvConfig refreshkv_config_from(const Hparams &hp, const lctx_refreshkv_params &p);
// The RefreshKV decoding REFORM and ILRe ask for (sp.refreshkv->gathered),
// or nothing (dense decoding).
std::optional<RefreshKvConfig> gathered_refreshkv(const Hparams &hp, const lctx_session_params &sp);
// The calibrated threshold of a model (docs/methods/refreshkv.md, "Calibration").
float refreshkv_default_threshold(const Hparams &hp);

// The address of an optional's value, or null (for a temporary passed on).
template <class T> const T *opt_ptr(const std::optional<T> &o) { return o ? &*o : nullptr; }

struct RefreshKvStats {
    int64_t partial = 0, n_steps = 0;
    // Per layer; a sliding-window layer (dense over its window) counts neither.
    std::vector<int64_t> layer_full, layer_partial;
    std::vector<char> keeps_partial;   // per layer: keeps a partial cache
    double full_s = 0, partial_s = 0, refresh_s = 0;
    // Mean of n_steps / (full steps, at least 1) over the layers that keep a
    // partial cache; 1 when none does, 0 before a prompt.
    double effective_stride() const;
};

class RefreshKvPolicy final : public AttentionPolicy {
public:
    RefreshKvPolicy(Backend &backend, const Hparams &hp, KvType kv_type, const RefreshKvConfig &cfg);

    // The next forward call(s) are a prompt ending at slot end - 1 of the
    // cache (end = cache size after it): full attention everywhere, and C_p
    // of every layer is initialised from the last token (SnapKV, window 1).
    // Resets the step counter and the statistics.
    void begin_prompt(int64_t end);
    // The next forward call is one decoded token (step i + 1).
    void begin_step();
    // Undoes begin_step() when the forward call failed before it started.
    void cancel_step();
    bool ready() const { return ready_; }   // C_p built (a prompt went through)

    const RefreshKvStats &stats() const { return stats_; }
    const RefreshKvConfig &config() const { return cfg_; }
    int64_t partial() const { return K_; }
    // Slots of (layer, KV head) in C_p and their positions (tests); empty
    // for a sliding-window layer.
    std::vector<int32_t> partial_positions(int32_t layer, int32_t head) const;
    // Whether layer l keeps a partial cache (false: sliding window, dense).
    bool keeps_partial(int32_t layer) const { return cp_layer_[static_cast<size_t>(layer)] >= 0; }

    void before_attention(int32_t layer, const float *q, int64_t n_q, KvStore &store) override;
    AttentionPlan plan(int32_t layer, KvStore &store, int64_t n_kv, int64_t n_q) override;
    void after_attention(int32_t layer, KvStore &store, int64_t n_kv, int64_t n_q) override;

private:
    enum class Mode { IDLE, PROMPT, STEP };
    // Rebuilds C_p[layer] from probs_ (the group-max probabilities of the
    // token in slot n_kv - 1 over slots [0, n_kv)).
    void refresh(int32_t layer, const KvStore &store, int64_t n_kv);
    bool decide(int32_t layer) const;

    Backend &be_;
    Hparams hp_;
    KvType kv_type_;
    RefreshKvConfig cfg_;
    int32_t n_layer_, H_, H_kv_, D_;
    Mode mode_ = Mode::IDLE;
    int64_t prompt_end_ = 0;
    int64_t K_ = 0;
    int64_t step_ = 0;          // i, 1-based once decoding
    bool ready_ = false;
    std::vector<int32_t> cp_layer_;               // per layer: its layer in cp_, -1 for a sliding one
    int32_t n_cp_layers_ = 0;
    // C_p: K + 1 slots per (layer, KV head) for the layers that keep one
    // (cp_layer_); its own per-layer RoPE parameters are never used (its
    // slots are only copied in and attended).
    std::unique_ptr<KvStore> cp_;
    std::vector<int64_t> live_;                   // per layer: live slots (<= K)
    std::vector<std::deque<int64_t>> fifo_;       // per layer: eviction order of the live slots
    std::vector<int64_t> spare_;                  // per layer: the slot the next token enters
    std::vector<std::vector<float>> qbar_, qref_; // per layer: this step's and the last full step's mean query
    std::vector<int64_t> last_full_;              // per layer: step of the last full attention
    std::vector<char> full_;                      // per layer: this step attends in full
    std::vector<float> probs_;                    // [H_kv][n_kv] group-max probabilities
    RefreshKvStats stats_;
    std::chrono::steady_clock::time_point t0_;
};

// A change of decoding asked for between questions (lctx_session_set_refreshkv),
// applied by the next recompute so that an answer in progress keeps its own.
// FullMethod and GatheredDecoder hold one each.
class PendingDecoding {
public:
    // cfg null: dense decoding; else RefreshKV with *cfg.
    void set(Backend &backend, const Hparams &hp, KvType kv_type, const RefreshKvConfig *cfg) {
        next_ = cfg ? std::make_unique<RefreshKvPolicy>(backend, hp, kv_type, *cfg) : nullptr;
        pending_ = true;
    }
    // Moves a pending choice into `current` (null: dense); nothing if none is pending.
    void apply(std::unique_ptr<RefreshKvPolicy> &current) {
        if (!pending_) return;
        current = std::move(next_);
        pending_ = false;
    }

private:
    bool pending_ = false;
    std::unique_ptr<RefreshKvPolicy> next_;
};

} // namespace lctx
