#include "engine/kv_cache.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <unistd.h>

#include "common/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace lctx {

KvCache::KvCache(const Hparams &hp, int64_t capacity, int32_t n_layers_used)
    : n_layers_(n_layers_used < 0 ? hp.n_layer : n_layers_used),
      n_head_kv_(hp.n_head_kv),
      head_dim_(hp.head_dim),
      capacity_(capacity) {
    if (capacity < 0) fail(LCTX_ERR_INVALID_ARG, "KV cache capacity %lld is negative", (long long)capacity);
    if (n_layers_ > hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "KV cache for %d layers requested, the model has %d", n_layers_, hp.n_layer);
    if (n_head_kv_ <= 0 || head_dim_ <= 0) fail(LCTX_ERR_INVALID_ARG, "KV cache: invalid head geometry");
    const int64_t per_layer_max = std::numeric_limits<int64_t>::max() / 8 / n_head_kv_ / head_dim_;
    if (capacity > per_layer_max)
        fail(LCTX_ERR_OUT_OF_MEMORY, "KV cache of %lld slots does not fit in memory", (long long)capacity);
    const size_t per_layer = static_cast<size_t>(capacity) * static_cast<size_t>(n_head_kv_) * head_dim_;
    // Refuse what cannot fit in physical memory up front: zero-filling an
    // over-committed allocation would get the process killed instead.
    const double total = 2.0 * n_layers_ * static_cast<double>(per_layer) * sizeof(float);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && total > static_cast<double>(pages) * static_cast<double>(page))
        fail(LCTX_ERR_OUT_OF_MEMORY, "a KV cache of %lld slots x %d layers needs %.1f MiB, more than the %.1f MiB of RAM",
             (long long)capacity, n_layers_, total / (1024.0 * 1024.0),
             static_cast<double>(pages) * page / (1024.0 * 1024.0));
    try {
        k_.resize(static_cast<size_t>(n_layers_));
        v_.resize(static_cast<size_t>(n_layers_));
        for (int32_t l = 0; l < n_layers_; ++l) {
            k_[l].resize(per_layer);
            v_[l].resize(per_layer);
        }
        pos_.resize(static_cast<size_t>(capacity));
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate a KV cache of %lld slots x %d layers (%.1f MiB)",
             (long long)capacity, n_layers_, 2.0 * n_layers_ * per_layer * sizeof(float) / (1024.0 * 1024.0));
    } catch (const std::length_error &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "KV cache of %lld slots is too large", (long long)capacity);
    }
}

int64_t KvCache::append(int64_t n) {
    if (n < 0) fail(LCTX_ERR_INVALID_ARG, "cannot append %lld slots", (long long)n);
    if (n > capacity_ - size_)
        fail(LCTX_ERR_CONTEXT_FULL, "KV cache full: %lld of %lld slots used, %lld more requested",
             (long long)size_, (long long)capacity_, (long long)n);
    const int64_t first = size_;
    size_ += n;
    return first;
}

void KvCache::truncate(int64_t new_size) {
    if (new_size < 0) new_size = 0;
    if (new_size < size_) size_ = new_size;
}

void KvCache::compact(const std::vector<int64_t> &keep_slots) {
    const int64_t n = static_cast<int64_t>(keep_slots.size());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t s = keep_slots[i];
        if (s < 0 || s >= size_ || (i > 0 && s <= keep_slots[i - 1]))
            fail(LCTX_ERR_INVALID_ARG, "compact: slot %lld at index %lld is out of range or not ascending",
                 (long long)s, (long long)i);
    }
    // Ascending and unique, so keep_slots[i] >= i: moving forward in order
    // never overwrites a slot that is still to be read.
    const size_t row = static_cast<size_t>(head_dim_) * sizeof(float);
    for (int32_t l = 0; l < n_layers_; ++l) {
        for (int32_t h = 0; h < n_head_kv_; ++h) {
            float *k = keys(l) + h * head_stride();
            float *v = values(l) + h * head_stride();
            for (int64_t i = 0; i < n; ++i) {
                const int64_t s = keep_slots[i];
                if (s == i) continue;
                std::memmove(k + i * head_dim_, k + s * head_dim_, row);
                std::memmove(v + i * head_dim_, v + s * head_dim_, row);
            }
        }
    }
    for (int64_t i = 0; i < n; ++i) pos_[i] = pos_[keep_slots[i]];
    size_ = n;
}

void KvCache::reposition(const std::vector<int32_t> &new_pos, const Hparams &hp) {
    if (static_cast<int64_t>(new_pos.size()) != size_)
        fail(LCTX_ERR_INVALID_ARG, "reposition: %zu positions given for %lld slots", new_pos.size(),
             (long long)size_);
    if (hp.n_head_kv != n_head_kv_ || hp.head_dim != head_dim_)
        fail(LCTX_ERR_INVALID_ARG, "reposition: hyper-parameters do not match the cache");
    std::vector<int32_t> delta(static_cast<size_t>(size_));
    bool any = false;
    for (int64_t s = 0; s < size_; ++s) {
        const int64_t d = int64_t(new_pos[s]) - pos_[s];
        if (d < std::numeric_limits<int32_t>::min() || d > std::numeric_limits<int32_t>::max())
            fail(LCTX_ERR_INVALID_ARG, "reposition: position delta of slot %lld overflows", (long long)s);
        delta[s] = static_cast<int32_t>(d);
        any = any || d != 0;
    }
    if (any) {
        // Rotations compose additively in the position (linear and YaRN
        // angles are linear in it), but the magnitude factor mscale must be
        // applied once only: cancel it for the delta rotation.
        Hparams rot = hp;
        float mscale = hp.yarn_attn_factor;
        if (hp.rope_scaling == RopeScaling::YARN && hp.yarn_ext_factor != 0.0f)
            mscale *= 1.0f + 0.1f * std::log(1.0f / hp.rope_freq_scale);
        rot.yarn_attn_factor = hp.yarn_attn_factor / mscale;
        for (int32_t l = 0; l < n_layers_; ++l)
            for (int32_t h = 0; h < n_head_kv_; ++h)
                cpu::rope(rot, keys(l) + h * head_stride(), head_dim_, size_, 1, delta.data());
    }
    for (int64_t s = 0; s < size_; ++s) pos_[s] = new_pos[s];
}

} // namespace lctx
