// The KV store of one sequence. Per layer and KV head it holds `capacity`
// slots; a slot holds a key, a value and its own position id, so every
// (layer, KV head) can be evicted, compacted and renumbered on its own (H2O,
// SnapKV, InfLLM, RefreshKV) through one mechanism. The number of filled
// slots, size(), is common to all of them.
//
// Keys are stored after RoPE at their slot's position: attention reads them
// as they are, and moving a slot to another position re-rotates its key by
// the delta (compact_head, reposition). unrotated_keys() rotates back for
// methods that score position-free keys (ReAttention). docs/kv-storage.md
// has the measurements behind this choice.
//
// Memory is backend memory (Backend::alloc); element type f32, f16 or q8. The
// session code never touches it directly: the forward pass stores and
// attends through attention_args(), methods move slots with the calls below.
//
// Sliding-window release (window_slack >= 0; docs/models.md, "KV memory of
// the sliding layers"): a sliding layer (Hparams::window_of > 0) holds only
// slots [first_held(l), size()) in a buffer of about window + slack slots.
// The caller promises, with raise_floor(p), that no query at a position < p
// reads the store again; append() then drops the leading slots whose
// position is <= p - window (no such query can see them) and moves the rest
// to the buffer's start when it runs out of room, or grows it. Slot indices
// stay logical (the same for every layer), so the forward pass, truncate()
// and the per-slot positions are unchanged; reading a dropped slot is an
// internal error. A compacting buffer rather than a ring: the held slots
// stay contiguous and in slot order, so attention reads them in place as
// one range. Stores that reorder slots (compact, reposition) do not release.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "common/memory_budget.h"
#include "model/model.h"

namespace lctx {

class KvStore {
public:
    // capacity: maximum slots. n_layers_used < 0: all layers of hp. Throws
    // LCTX_ERR_OUT_OF_MEMORY when it cannot be allocated (or exceeds RAM).
    // window_slack >= 0: the sliding layers release slots out of the window
    // (see above); they start with window + window_slack slots (the most the
    // caller appends between two raise_floor calls: its batch size).
    KvStore(Backend &backend, const Hparams &hp, int64_t capacity, int32_t n_layers_used = -1,
            KvType type = KvType::F32, int64_t window_slack = -1);

    Backend &backend() const { return be_; }
    int64_t size() const { return size_; }
    int64_t capacity() const { return capacity_; }
    int32_t n_layers() const { return n_layers_; }
    int32_t n_head_kv() const { return n_head_kv_; }
    int32_t head_dim() const { return head_dim_; }
    KvType type() const { return type_; }
    size_t bytes() const;   // memory held by keys, values and positions

    // Sliding-window release (see above). raise_floor: no query at a position
    // below p will attend to this store until it is emptied (truncate(0),
    // clear()); the floor only rises. first_held: the first slot layer l
    // still holds (0 unless it released some).
    bool releases_window() const { return window_slack_ >= 0; }
    void raise_floor(int32_t p) { floor_ = std::max<int64_t>(floor_, p); }
    int64_t first_held(int32_t layer) const { return lo_[static_cast<size_t>(layer)]; }
    int64_t layer_slots(int32_t layer) const { return cap_[static_cast<size_t>(layer)]; }   // allocated
    // ranges clipped to the slots layer l holds (empty ranges removed).
    std::vector<std::pair<int64_t, int64_t>> held(int32_t layer,
                                                  const std::vector<std::pair<int64_t, int64_t>> &ranges) const;

    // Position of slot s of (layer, head); positions(l, h) points at slot 0.
    const int32_t *positions(int32_t layer, int32_t head) const {
        return pos_.data() + (static_cast<size_t>(layer) * n_head_kv_ + head) * capacity_;
    }
    int32_t position(int32_t layer, int32_t head, int64_t slot) const { return positions(layer, head)[slot]; }

    // Reserves n slots at the end; throws LCTX_ERR_CONTEXT_FULL when there is no room.
    int64_t append(int64_t n);
    void truncate(int64_t new_size);   // drops slots >= new_size
    void clear() { truncate(0); }

    // Sets the position of slots [slot0, slot0 + n) of every layer and head.
    void set_positions(int64_t slot0, const int32_t *pos, int64_t n);
    // Sets the position of slots [slot0, slot0 + n) of one (layer, head)
    // without touching its keys (the caller wrote keys for these positions).
    void set_head_positions(int32_t layer, int32_t head, int64_t slot0, const int32_t *pos, int64_t n);

    // The forward pass: writes n rows of rotated keys and values of every KV
    // head of `layer` ([n][n_head_kv * head_dim] backend memory, row stride
    // ld floats) into slots [slot0, slot0 + n).
    void store(int32_t layer, int64_t slot0, const float *k, const float *v, int64_t n, int64_t ld);
    // Attention arguments for `layer` over its first n_kv slots (the caller
    // fills the query side).
    AttentionArgs attention_args(int32_t layer, int64_t n_kv) const;

    // Attention arguments over the listed slot ranges of `layer` (ascending,
    // disjoint): a single range is read in place; otherwise
    // the slots are gathered into `scratch` (kept by the caller while the
    // arguments are used), positions included.
    struct GatherScratch {
        std::unique_ptr<Buffer> k, v;
        std::vector<int32_t> pos;
    };
    AttentionArgs attention_args(int32_t layer, const std::vector<std::pair<int64_t, int64_t>> &ranges,
                                 GatherScratch &scratch) const;

    // Host copies of rows: keys as stored (rotated), values, n rows of
    // head_dim floats from slot0 of (layer, head).
    void read_keys(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const;
    void read_values(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const;
    // Keys rotated back to position 0 (the pre-RoPE projections, up to rounding).
    void unrotated_keys(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const;
    // Writes host rows of (layer, head), ld floats apart (0: head_dim): keys
    // must already be rotated to the slots' positions (or use write_unrotated).
    void write_rows(int32_t layer, int32_t head, int64_t slot0, int64_t n, const float *k, const float *v,
                    int64_t ld = 0);
    // Writes pre-RoPE keys (rotated here to pos[]) and values into slots
    // [slot0, slot0 + n) of (layer, head) and sets their positions.
    void write_unrotated(int32_t layer, int32_t head, int64_t slot0, int64_t n, const float *k, const float *v,
                         const int32_t *pos);

    // Keeps slots keep[] (ascending, unique) of (layer, head), moved to slots
    // 0..k-1 with positions new_pos[0..k) (keys re-rotated by the delta).
    // Slots >= k of this head are stale afterwards: the caller truncates once
    // every head holds k slots.
    void compact_head(int32_t layer, int32_t head, const std::vector<int64_t> &keep, const int32_t *new_pos);
    // Keeps the same slots keep[] (ascending) of every layer and head, in order.
    void compact(const std::vector<int64_t> &keep_slots);
    // Moves slot s of every layer and head to position new_pos[s] (size()
    // entries), re-rotating the keys by the delta.
    void reposition(const std::vector<int32_t> &new_pos);
    // Copies slots src_slots[0..n) of (src_layer, head) of `src` (same
    // geometry and type; another store) into slots [slot0, slot0 + n) of this
    // store's (layer, head), keys, values and positions as they are
    // (RefreshKV's partial cache, which holds only the layers that keep one,
    // gathers its rows from the full cache with this).
    void copy_head_rows(int32_t layer, int32_t head, int64_t slot0, const KvStore &src, int32_t src_layer,
                        const int64_t *src_slots, int64_t n);
    // Copies the first n slots of every layer and head of `src` (same
    // geometry and type) into this store, which then holds n slots.
    void copy_from(const KvStore &src, int64_t n);

private:
    // One stored row of head_dim values, in storage elements (the strides
    // the backend's row calls and attention take) and in bytes.
    int64_t row_elems() const { return kv_row_elems(type_, head_dim_); }
    size_t row_bytes() const { return kv_row_bytes(type_, head_dim_); }
    uint8_t *head_k(int32_t l, int32_t h) const;
    uint8_t *head_v(int32_t l, int32_t h) const;
    int32_t *pos_of(int32_t l, int32_t h) {
        return pos_.data() + (static_cast<size_t>(l) * n_head_kv_ + h) * capacity_;
    }
    // Throws unless keep is ascending, unique and inside [0, size()).
    void check_keep(const char *who, const std::vector<int64_t> &keep) const;
    // Rotates n stored keys of (l, h) from slot0 by delta[i] (f16: via f32).
    void rotate_keys(int32_t l, int32_t h, int64_t slot0, int64_t n, const int32_t *delta);
    // Row of slot s of (l, h) in its layer's buffer (slot s must be held).
    uint8_t *row_k(int32_t l, int32_t h, int64_t s) const { return head_k(l, h) + (s - base_[l]) * row_bytes(); }
    uint8_t *row_v(int32_t l, int32_t h, int64_t s) const { return head_v(l, h) + (s - base_[l]) * row_bytes(); }
    // Throws LCTX_ERR_INTERNAL unless slots [s0, s0 + n) of layer l are held.
    void check_held(const char *who, int32_t l, int64_t s0, int64_t n) const;
    void check_no_release(const char *who) const;
    // append(): drops what the floor allows and makes room for slots up to `end` in layer l.
    void make_room(int32_t l, int64_t end);

    Backend &be_;
    // Per layer (Hparams::rope_of): the rotation, the delta rotation
    // (rope_delta_hparams) and the inverse one (rope_inverse_hparams).
    std::vector<Hparams> hp_, rot_, inv_;
    int32_t n_layers_, n_head_kv_, head_dim_;
    int64_t capacity_, size_ = 0;
    KvType type_;
    std::vector<std::unique_ptr<Buffer>> k_, v_;   // per layer: [head][cap_[l]][head_dim]
    // Per layer: slots allocated, slot held in row 0, first held slot
    // (global layers, or no release: capacity_, 0, 0).
    std::vector<int64_t> cap_, base_, lo_;
    std::vector<int32_t> window_;                  // per layer: its window if it releases, else 0
    int64_t window_slack_ = -1;
    int64_t floor_ = std::numeric_limits<int32_t>::min();
    std::vector<int32_t> pos_;                     // [layer][head][slot], every slot (4 bytes each)
    MemoryCharge pos_charge_;                      // pos_ on the session's max_memory (if any)
};

} // namespace lctx
