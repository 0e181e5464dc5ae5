// KV cache of one sequence: per layer, per KV head, keys (after RoPE at the
// slot's position) and values in f32, plus the position id of every slot.
// Slots are in insertion order; methods may drop slots (compact) and move
// positions (reposition, which re-rotates the keys by the position delta).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace lctx {

class KvCache {
public:
    // capacity: maximum number of slots. Throws LCTX_ERR_OUT_OF_MEMORY if
    // the allocation fails.
    KvCache(const Hparams &hp, int64_t capacity, int32_t n_layers_used = -1);

    int64_t size() const { return size_; }
    int64_t capacity() const { return capacity_; }
    int32_t n_layers() const { return n_layers_; }
    int32_t n_head_kv() const { return n_head_kv_; }
    int32_t head_dim() const { return head_dim_; }

    // Layout: keys(layer) + h * head_stride() + slot * head_dim.
    float *keys(int32_t layer) { return k_[layer].data(); }
    float *values(int32_t layer) { return v_[layer].data(); }
    const float *keys(int32_t layer) const { return k_[layer].data(); }
    const float *values(int32_t layer) const { return v_[layer].data(); }
    int64_t head_stride() const { return capacity_ * head_dim_; }
    const int32_t *positions() const { return pos_.data(); }
    int32_t *positions() { return pos_.data(); }

    // Reserves n new slots at the end (filled by the forward pass); throws
    // LCTX_ERR_CONTEXT_FULL when there is no room.
    int64_t append(int64_t n);
    void truncate(int64_t new_size);     // drop slots >= new_size
    void clear() { size_ = 0; }
    // Keep only the slots listed (ascending) for all layers, in order.
    void compact(const std::vector<int64_t> &keep_slots);
    // Moves slot s to position new_pos[s] (size() entries): every cached key
    // is re-rotated by the delta new_pos[s] - positions()[s] (RoPE of hp).
    void reposition(const std::vector<int32_t> &new_pos, const Hparams &hp);

private:
    int32_t n_layers_, n_head_kv_, head_dim_;
    int64_t capacity_, size_ = 0;
    std::vector<std::vector<float>> k_, v_;
    std::vector<int32_t> pos_;
};

} // namespace lctx
