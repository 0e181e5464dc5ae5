#include "engine/kv_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>

#include <unistd.h>

#include "backend/budget_backend.h"
#include "common/error.h"

namespace lctx {

KvStore::KvStore(Backend &backend, const Hparams &hp, int64_t capacity, int32_t n_layers_used, KvType type)
    : be_(backend),
      n_layers_(n_layers_used < 0 ? hp.n_layer : n_layers_used), n_head_kv_(hp.n_head_kv),
      head_dim_(hp.head_dim), capacity_(capacity), type_(type) {
    if (capacity < 0) fail(LCTX_ERR_INVALID_ARG, "KV store capacity %lld is negative", (long long)capacity);
    if (n_layers_ > hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "KV store for %d layers requested, the model has %d", n_layers_, hp.n_layer);
    if (n_head_kv_ <= 0 || head_dim_ <= 0) fail(LCTX_ERR_INVALID_ARG, "KV store: invalid head geometry");
    for (int32_t l = 0; l < n_layers_; ++l) {   // gemma3's sliding layers rotate with their own base
        hp_.push_back(hp.rope_of(l));
        rot_.push_back(rope_delta_hparams(hp_.back()));
        inv_.push_back(rope_inverse_hparams(hp_.back()));
    }
    const int64_t per_layer_max = std::numeric_limits<int64_t>::max() / 8 / n_head_kv_ / head_dim_;
    if (capacity > per_layer_max)
        fail(LCTX_ERR_OUT_OF_MEMORY, "KV store of %lld slots does not fit in memory", (long long)capacity);
    const size_t per_layer = static_cast<size_t>(capacity) * static_cast<size_t>(n_head_kv_) * head_dim_;
    // Refuse what cannot fit in physical memory up front: touching an
    // over-committed allocation would get the process killed instead.
    const double total = 2.0 * n_layers_ * static_cast<double>(per_layer) * kv_type_size(type);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && total > static_cast<double>(pages) * static_cast<double>(page))
        fail(LCTX_ERR_OUT_OF_MEMORY, "a KV store of %lld slots x %d layers needs %.1f MiB, more than the %.1f MiB of RAM",
             (long long)capacity, n_layers_, total / (1024.0 * 1024.0),
             static_cast<double>(pages) * page / (1024.0 * 1024.0));
    // The session's max_memory (lctx_session_params), checked with the sizes
    // before anything is allocated; the buffers and positions are charged.
    const uint64_t pos_bytes = static_cast<uint64_t>(n_layers_) * n_head_kv_ * static_cast<uint64_t>(capacity) * 4;
    if (MemoryBudget *budget = budget_of(backend)) {
        const std::string what = format("a KV cache of %lld slots x %d layers x %d KV heads (%s)", (long long)capacity,
                                        n_layers_, n_head_kv_, type == KvType::F16 ? "f16" : "f32");
        budget->check(static_cast<uint64_t>(total) + pos_bytes, what.c_str());
        pos_charge_ = MemoryCharge(budget, pos_bytes, what.c_str());
    }
    try {
        for (int32_t l = 0; l < n_layers_; ++l) {
            k_.push_back(be_.alloc(per_layer * kv_type_size(type)));
            v_.push_back(be_.alloc(per_layer * kv_type_size(type)));
        }
        pos_.assign(static_cast<size_t>(n_layers_) * n_head_kv_ * capacity, 0);
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate a KV store of %lld slots x %d layers (%.1f MiB)",
             (long long)capacity, n_layers_, total / (1024.0 * 1024.0));
    } catch (const std::length_error &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "KV store of %lld slots is too large", (long long)capacity);
    }
}

size_t KvStore::bytes() const {
    return 2 * static_cast<size_t>(n_layers_) * n_head_kv_ * capacity_ * row_bytes() + pos_.size() * sizeof(int32_t);
}

uint8_t *KvStore::head_k(int32_t l, int32_t h) const {
    return static_cast<uint8_t *>(k_[static_cast<size_t>(l)]->data()) + static_cast<size_t>(h) * capacity_ * row_bytes();
}

uint8_t *KvStore::head_v(int32_t l, int32_t h) const {
    return static_cast<uint8_t *>(v_[static_cast<size_t>(l)]->data()) + static_cast<size_t>(h) * capacity_ * row_bytes();
}

int64_t KvStore::append(int64_t n) {
    if (n < 0) fail(LCTX_ERR_INVALID_ARG, "cannot append %lld slots", (long long)n);
    if (n > capacity_ - size_)
        fail(LCTX_ERR_CONTEXT_FULL, "KV cache full: %lld of %lld slots used, %lld more requested",
             (long long)size_, (long long)capacity_, (long long)n);
    const int64_t first = size_;
    size_ += n;
    return first;
}

void KvStore::truncate(int64_t new_size) {
    if (new_size < 0) new_size = 0;
    if (new_size < size_) size_ = new_size;
}

void KvStore::set_positions(int64_t slot0, const int32_t *pos, int64_t n) {
    if (n <= 0) return;
    for (int32_t l = 0; l < n_layers_; ++l)
        for (int32_t h = 0; h < n_head_kv_; ++h) std::memcpy(pos_of(l, h) + slot0, pos, n * sizeof(int32_t));
}

void KvStore::copy_head_rows(int32_t layer, int32_t head, int64_t slot0, const KvStore &src,
                             const int64_t *src_slots, int64_t n) {
    if (n <= 0) return;
    if (&src == this || src.type_ != type_ || src.head_dim_ != head_dim_ || src.n_head_kv_ != n_head_kv_ ||
        layer < 0 || layer >= n_layers_ || layer >= src.n_layers_ || head < 0 || head >= n_head_kv_ || slot0 < 0 ||
        slot0 + n > capacity_)
        fail(LCTX_ERR_INTERNAL, "copy_head_rows: stores or slots do not match");
    for (int64_t i = 0; i < n; ++i)
        if (src_slots[i] < 0 || src_slots[i] >= src.capacity_)
            fail(LCTX_ERR_INTERNAL, "copy_head_rows: source slot %lld outside the store", (long long)src_slots[i]);
    be_.gather_rows(type_, head_k(layer, head) + slot0 * row_bytes(), src.head_k(layer, head), src_slots, n, head_dim_);
    be_.gather_rows(type_, head_v(layer, head) + slot0 * row_bytes(), src.head_v(layer, head), src_slots, n, head_dim_);
    const int32_t *sp = src.positions(layer, head);
    int32_t *dp = pos_of(layer, head) + slot0;
    for (int64_t i = 0; i < n; ++i) dp[i] = sp[src_slots[i]];
}

void KvStore::set_head_positions(int32_t layer, int32_t head, int64_t slot0, const int32_t *pos, int64_t n) {
    if (n <= 0) return;
    std::memcpy(pos_of(layer, head) + slot0, pos, n * sizeof(int32_t));
}

void KvStore::store(int32_t layer, int64_t slot0, const float *k, const float *v, int64_t n, int64_t ld) {
    const int64_t D = head_dim_;
    for (int32_t h = 0; h < n_head_kv_; ++h) {
        be_.store_rows(type_, head_k(layer, h) + slot0 * row_bytes(), D, k + h * D, ld, n, D);
        be_.store_rows(type_, head_v(layer, h) + slot0 * row_bytes(), D, v + h * D, ld, n, D);
    }
}

AttentionArgs KvStore::attention_args(int32_t layer, int64_t n_kv) const {
    AttentionArgs a;
    a.k = k_[static_cast<size_t>(layer)]->data();
    a.v = v_[static_cast<size_t>(layer)]->data();
    a.kv_type = type_;
    a.ld_kv = head_dim_;
    a.kv_head_stride = capacity_ * head_dim_;
    a.n_kv = n_kv;
    a.n_head_kv = n_head_kv_;
    a.head_dim = head_dim_;
    a.kv_pos = positions(layer, 0);
    a.kv_pos_head_stride = capacity_;
    return a;
}

AttentionArgs KvStore::attention_args(int32_t layer, const std::vector<std::pair<int64_t, int64_t>> &ranges,
                                      GatherScratch &scratch) const {
    if (ranges.size() == 1) {   // one range: read in place from its first slot
        const auto [b, e] = ranges[0];
        if (b < 0 || e > size_ || b > e) fail(LCTX_ERR_INTERNAL, "attention range outside the store");
        AttentionArgs a = attention_args(layer, e);
        if (b == 0) return a;
        a.k = head_k(layer, 0) + b * row_bytes();
        a.v = head_v(layer, 0) + b * row_bytes();
        a.n_kv = e - b;
        a.kv_pos = positions(layer, 0) + b;
        return a;
    }
    int64_t n = 0;
    for (const auto &[b, e] : ranges) {
        if (b < 0 || e > size_ || b > e) fail(LCTX_ERR_INTERNAL, "attention ranges outside the store");
        n += e - b;
    }
    const size_t bytes = static_cast<size_t>(n_head_kv_) * std::max<int64_t>(n, 1) * row_bytes();
    if (!scratch.k || scratch.k->size() < bytes) {
        scratch.k = be_.alloc(bytes);
        scratch.v = be_.alloc(bytes);
    }
    scratch.pos.resize(static_cast<size_t>(n_head_kv_) * n);
    for (int32_t h = 0; h < n_head_kv_; ++h) {
        int64_t at = 0;
        for (const auto &[b, e] : ranges) {
            const size_t off = static_cast<size_t>(h * n + at) * row_bytes();
            be_.copy(static_cast<uint8_t *>(scratch.k->data()) + off, head_k(layer, h) + b * row_bytes(),
                     static_cast<size_t>(e - b) * row_bytes());
            be_.copy(static_cast<uint8_t *>(scratch.v->data()) + off, head_v(layer, h) + b * row_bytes(),
                     static_cast<size_t>(e - b) * row_bytes());
            std::copy(positions(layer, h) + b, positions(layer, h) + e, scratch.pos.begin() + h * n + at);
            at += e - b;
        }
    }
    AttentionArgs a = attention_args(layer, n);   // the same geometry, read from the gathered copy
    a.k = scratch.k->data();
    a.v = scratch.v->data();
    a.kv_head_stride = n * head_dim_;
    a.kv_pos = scratch.pos.data();
    a.kv_pos_head_stride = n;
    return a;
}

void KvStore::read_keys(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const {
    be_.load_rows(type_, out, head_dim_, head_k(layer, head) + slot0 * row_bytes(), head_dim_, n, head_dim_);
}

void KvStore::read_values(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const {
    be_.load_rows(type_, out, head_dim_, head_v(layer, head) + slot0 * row_bytes(), head_dim_, n, head_dim_);
}

void KvStore::unrotated_keys(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const {
    read_keys(layer, head, slot0, n, out);
    std::vector<int32_t> back(static_cast<size_t>(n));
    const int32_t *p = positions(layer, head) + slot0;
    for (int64_t i = 0; i < n; ++i) back[i] = -p[i];
    // out is host memory: a backend that cannot read it rotates a copy in its own memory.
    const Hparams &inverse = inv_[static_cast<size_t>(layer)];
    if (be_.host_memory()) {
        be_.rope(inverse, out, head_dim_, n, 1, back.data());
        return;
    }
    const size_t bytes = static_cast<size_t>(n * head_dim_) * sizeof(float);
    std::unique_ptr<Buffer> b = be_.alloc(bytes);
    be_.from_host(b->data(), out, bytes);
    be_.rope(inverse, b->f32(), head_dim_, n, 1, back.data());
    be_.to_host(out, b->data(), bytes);
}

void KvStore::write_rows(int32_t layer, int32_t head, int64_t slot0, int64_t n, const float *k, const float *v,
                         int64_t ld) {
    if (ld <= 0) ld = head_dim_;
    be_.store_rows(type_, head_k(layer, head) + slot0 * row_bytes(), head_dim_, k, ld, n, head_dim_);
    be_.store_rows(type_, head_v(layer, head) + slot0 * row_bytes(), head_dim_, v, ld, n, head_dim_);
}

void KvStore::write_unrotated(int32_t layer, int32_t head, int64_t slot0, int64_t n, const float *k,
                              const float *v, const int32_t *pos) {
    if (n <= 0) return;
    const int64_t D = head_dim_;
    if (type_ == KvType::F32 && be_.host_memory()) {
        // Rotate in place in the store, as the keys arrive (no scratch copy).
        float *kd = reinterpret_cast<float *>(head_k(layer, head)) + slot0 * D;
        std::memcpy(kd, k, static_cast<size_t>(n * D) * sizeof(float));
        be_.rope(hp_[static_cast<size_t>(layer)], kd, D, n, 1, pos);
    } else {
        std::vector<float> tmp(k, k + n * D);   // local: callers fill heads in parallel
        be_.rope(hp_[static_cast<size_t>(layer)], tmp.data(), D, n, 1, pos);
        be_.store_rows(type_, head_k(layer, head) + slot0 * row_bytes(), D, tmp.data(), D, n, D);
    }
    be_.store_rows(type_, head_v(layer, head) + slot0 * row_bytes(), D, v, D, n, D);
    set_head_positions(layer, head, slot0, pos, n);
}

void KvStore::rotate_keys(int32_t l, int32_t h, int64_t slot0, int64_t n, const int32_t *delta) {
    const int64_t D = head_dim_;
    if (type_ == KvType::F32) {
        be_.rope(rot_[static_cast<size_t>(l)], reinterpret_cast<float *>(head_k(l, h)) + slot0 * D, D, n, 1, delta);
        return;
    }
    // f16: widen, rotate, narrow (one rounding per move).
    std::vector<float> tmp(static_cast<size_t>(n * D));
    be_.load_rows(type_, tmp.data(), D, head_k(l, h) + slot0 * row_bytes(), D, n, D);
    be_.rope(rot_[static_cast<size_t>(l)], tmp.data(), D, n, 1, delta);
    be_.store_rows(type_, head_k(l, h) + slot0 * row_bytes(), D, tmp.data(), D, n, D);
}

void KvStore::check_keep(const char *who, const std::vector<int64_t> &keep) const {
    for (size_t i = 0; i < keep.size(); ++i) {
        const int64_t s = keep[i];
        if (s < 0 || s >= size_ || (i > 0 && s <= keep[i - 1]))
            fail(LCTX_ERR_INVALID_ARG, "%s: slot %lld at index %zu is out of range or not ascending", who,
                 (long long)s, i);
    }
}

void KvStore::compact_head(int32_t layer, int32_t head, const std::vector<int64_t> &keep, const int32_t *new_pos) {
    const int64_t nk = static_cast<int64_t>(keep.size());
    check_keep("compact_head", keep);
    int32_t *pos = pos_of(layer, head);
    std::vector<int32_t> delta(static_cast<size_t>(nk));
    for (int64_t i = 0; i < nk; ++i) {   // keep is ascending, so keep[i] >= i: reads stay ahead of writes
        delta[i] = new_pos[i] - pos[keep[i]];
        pos[i] = new_pos[i];
    }
    be_.gather_rows(type_, head_k(layer, head), head_k(layer, head), keep.data(), nk, head_dim_);
    be_.gather_rows(type_, head_v(layer, head), head_v(layer, head), keep.data(), nk, head_dim_);
    rotate_keys(layer, head, 0, nk, delta.data());
}

void KvStore::compact(const std::vector<int64_t> &keep_slots) {
    const int64_t n = static_cast<int64_t>(keep_slots.size());
    check_keep("compact", keep_slots);
    for (int32_t l = 0; l < n_layers_; ++l)
        for (int32_t h = 0; h < n_head_kv_; ++h) {
            be_.gather_rows(type_, head_k(l, h), head_k(l, h), keep_slots.data(), n, head_dim_);
            be_.gather_rows(type_, head_v(l, h), head_v(l, h), keep_slots.data(), n, head_dim_);
            int32_t *pos = pos_of(l, h);
            for (int64_t i = 0; i < n; ++i) pos[i] = pos[keep_slots[i]];
        }
    size_ = n;
}

void KvStore::reposition(const std::vector<int32_t> &new_pos) {
    if (static_cast<int64_t>(new_pos.size()) != size_)
        fail(LCTX_ERR_INVALID_ARG, "reposition: %zu positions given for %lld slots", new_pos.size(), (long long)size_);
    if (size_ == 0) return;
    std::vector<int32_t> delta(static_cast<size_t>(size_));
    for (int32_t l = 0; l < n_layers_; ++l)
        for (int32_t h = 0; h < n_head_kv_; ++h) {
            int32_t *pos = pos_of(l, h);
            bool any = false;
            for (int64_t s = 0; s < size_; ++s) {
                const int64_t d = int64_t(new_pos[s]) - pos[s];
                if (d < std::numeric_limits<int32_t>::min() || d > std::numeric_limits<int32_t>::max())
                    fail(LCTX_ERR_INVALID_ARG, "reposition: position delta of slot %lld overflows", (long long)s);
                delta[s] = static_cast<int32_t>(d);
                any = any || d != 0;
            }
            if (any) rotate_keys(l, h, 0, size_, delta.data());
            std::memcpy(pos, new_pos.data(), static_cast<size_t>(size_) * sizeof(int32_t));
        }
}

void KvStore::copy_from(const KvStore &src, int64_t n) {
    if (&src.be_ != &be_) fail(LCTX_ERR_INVALID_ARG, "copy_from: the stores live on different backends");
    if (src.n_head_kv_ != n_head_kv_ || src.head_dim_ != head_dim_ || src.type_ != type_ ||
        src.n_layers_ < n_layers_)
        fail(LCTX_ERR_INVALID_ARG, "copy_from: the stores have different geometry");
    if (n > capacity_ || n > src.size_)
        fail(LCTX_ERR_INVALID_ARG, "copy_from: %lld slots do not fit (capacity %lld, source %lld)", (long long)n,
             (long long)capacity_, (long long)src.size_);
    const size_t bytes = static_cast<size_t>(n) * row_bytes();
    for (int32_t l = 0; l < n_layers_; ++l)
        for (int32_t h = 0; h < n_head_kv_; ++h) {
            be_.copy(head_k(l, h), src.head_k(l, h), bytes);
            be_.copy(head_v(l, h), src.head_v(l, h), bytes);
            std::memcpy(pos_of(l, h), src.positions(l, h), static_cast<size_t>(n) * sizeof(int32_t));
        }
    size_ = n;
}

} // namespace lctx
