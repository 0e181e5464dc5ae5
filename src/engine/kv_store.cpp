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

KvStore::KvStore(Backend &backend, const Hparams &hp, int64_t capacity, int32_t n_layers_used, KvType type,
                 int64_t window_slack)
    : be_(backend),
      n_layers_(n_layers_used < 0 ? hp.n_layer : n_layers_used), n_head_kv_(hp.n_head_kv),
      head_dim_(hp.head_dim), capacity_(capacity), type_(type), window_slack_(window_slack < 0 ? -1 : window_slack) {
    if (capacity < 0) fail(LCTX_ERR_INVALID_ARG, "KV store capacity %lld is negative", (long long)capacity);
    if (n_layers_ > hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "KV store for %d layers requested, the model has %d", n_layers_, hp.n_layer);
    if (n_head_kv_ <= 0 || head_dim_ <= 0) fail(LCTX_ERR_INVALID_ARG, "KV store: invalid head geometry");
    for (int32_t l = 0; l < n_layers_; ++l) {   // gemma3's sliding layers rotate with their own base
        hp_.push_back(hp.rope_of(l));
        rot_.push_back(rope_delta_hparams(hp_.back()));
        inv_.push_back(rope_inverse_hparams(hp_.back()));
    }
    const int64_t per_layer_max = std::numeric_limits<int64_t>::max() / 8 / n_head_kv_ / (head_dim_ + 8);
    if (capacity > per_layer_max)
        fail(LCTX_ERR_OUT_OF_MEMORY, "KV store of %lld slots does not fit in memory", (long long)capacity);
    // Slots allocated per layer: a releasing sliding layer starts with its
    // window + the slack (and grows in append() if a caller needs more).
    double slots = 0;
    int32_t n_sliding = 0;
    for (int32_t l = 0; l < n_layers_; ++l) {
        const int32_t w = window_slack_ >= 0 ? hp.window_of(l) : 0;
        window_.push_back(w);
        cap_.push_back(w > 0 ? std::min<int64_t>(capacity, int64_t(w) + window_slack_) : capacity);
        base_.push_back(0);
        lo_.push_back(0);
        slots += static_cast<double>(cap_.back());
        n_sliding += w > 0;
    }
    const size_t head_row = static_cast<size_t>(n_head_kv_) * kv_row_bytes(type, head_dim_);   // bytes
    // Refuse what cannot fit in physical memory up front: touching an
    // over-committed allocation would get the process killed instead.
    const double total = 2.0 * slots * static_cast<double>(head_row);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && total > static_cast<double>(pages) * static_cast<double>(page))
        fail(LCTX_ERR_OUT_OF_MEMORY, "a KV store of %lld slots x %d layers needs %.1f MiB, more than the %.1f MiB of RAM",
             (long long)capacity, n_layers_, total / (1024.0 * 1024.0),
             static_cast<double>(pages) * page / (1024.0 * 1024.0));
    // The session's max_memory (lctx_session_params), checked with the sizes
    // before anything is allocated; the buffers and positions are charged.
    const uint64_t pos_bytes = static_cast<uint64_t>(n_layers_) * n_head_kv_ * static_cast<uint64_t>(capacity) * 4;
    if (MemoryBudget *budget = budget_of(backend)) {
        std::string what = format("a KV cache of %lld slots x %d layers x %d KV heads (%s)", (long long)capacity,
                                  n_layers_, n_head_kv_, kv_type_name(type));
        if (n_sliding > 0)
            what += format(", %d sliding layers holding %lld slots", n_sliding,
                           (long long)std::min<int64_t>(capacity, int64_t(hp.swa_window) + window_slack_));
        budget->check(static_cast<uint64_t>(total) + pos_bytes, what.c_str());
        pos_charge_ = MemoryCharge(budget, pos_bytes, what.c_str());
    }
    try {
        for (int32_t l = 0; l < n_layers_; ++l) {
            const size_t per_layer = static_cast<size_t>(cap_[static_cast<size_t>(l)]) * head_row;
            k_.push_back(be_.alloc(per_layer));
            v_.push_back(be_.alloc(per_layer));
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
    size_t slots = 0;
    for (int64_t c : cap_) slots += static_cast<size_t>(c);
    return 2 * slots * n_head_kv_ * row_bytes() + pos_.size() * sizeof(int32_t);
}

uint8_t *KvStore::head_k(int32_t l, int32_t h) const {
    const size_t L = static_cast<size_t>(l);
    return static_cast<uint8_t *>(k_[L]->data()) + static_cast<size_t>(h) * cap_[L] * row_bytes();
}

uint8_t *KvStore::head_v(int32_t l, int32_t h) const {
    const size_t L = static_cast<size_t>(l);
    return static_cast<uint8_t *>(v_[L]->data()) + static_cast<size_t>(h) * cap_[L] * row_bytes();
}

void KvStore::check_held(const char *who, int32_t l, int64_t s0, int64_t n) const {
    if (n > 0 && s0 < lo_[static_cast<size_t>(l)])
        fail(LCTX_ERR_INTERNAL, "%s: slot %lld of layer %d was released (it holds slots from %lld, out of the sliding "
             "window)", who, (long long)s0, l, (long long)lo_[static_cast<size_t>(l)]);
}

void KvStore::check_no_release(const char *who) const {
    if (releases_window())
        fail(LCTX_ERR_INTERNAL, "%s: not available on a KV store that releases sliding-window slots", who);
}

std::vector<std::pair<int64_t, int64_t>> KvStore::held(int32_t layer,
                                                       const std::vector<std::pair<int64_t, int64_t>> &ranges) const {
    const int64_t lo = lo_[static_cast<size_t>(layer)];
    if (lo == 0) return ranges;
    std::vector<std::pair<int64_t, int64_t>> out;
    for (const auto &[b, e] : ranges)
        if (e > lo) out.emplace_back(std::max(b, lo), e);
    return out;
}

void KvStore::make_room(int32_t l, int64_t end) {
    const size_t L = static_cast<size_t>(l);
    // Drop the leading slots no query at a position >= floor_ can see
    // (pos_q - pos_k >= window); positions ascend in slot order here, so the
    // first visible slot ends the scan.
    const int64_t limit = floor_ - window_[L];
    int64_t lo = lo_[L];
    for (; lo < size_; ++lo) {
        bool invisible = true;
        for (int32_t h = 0; h < n_head_kv_ && invisible; ++h) invisible = positions(l, h)[lo] <= limit;
        if (!invisible) break;
    }
    lo_[L] = lo;
    if (end - base_[L] <= cap_[L]) return;
    const int64_t n_held = size_ - lo, rb = static_cast<int64_t>(row_bytes());
    if (end - lo <= cap_[L]) {   // move the held slots to the buffer's start
        std::vector<int64_t> idx(static_cast<size_t>(n_held));
        for (int64_t i = 0; i < n_held; ++i) idx[i] = lo - base_[L] + i;
        for (int32_t h = 0; h < n_head_kv_; ++h) {
            be_.gather_rows(type_, head_k(l, h), head_k(l, h), idx.data(), n_held, head_dim_);
            be_.gather_rows(type_, head_v(l, h), head_v(l, h), idx.data(), n_held, head_dim_);
        }
        base_[L] = lo;
        return;
    }
    // More slots in the window than allocated (a batch larger than the
    // slack, or a floor held back): grow by half at least.
    const int64_t cap = std::min(capacity_, std::max(end - lo, cap_[L] + cap_[L] / 2));
    const size_t bytes = static_cast<size_t>(cap) * n_head_kv_ * rb;
    std::unique_ptr<Buffer> k, v;
    try {
        k = be_.alloc(bytes);
        v = be_.alloc(bytes);
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot grow sliding layer %d of the KV store to %lld slots", l, (long long)cap);
    }
    for (int32_t h = 0; h < n_head_kv_; ++h) {
        be_.copy(static_cast<uint8_t *>(k->data()) + static_cast<size_t>(h) * cap * rb, row_k(l, h, lo),
                 static_cast<size_t>(n_held * rb));
        be_.copy(static_cast<uint8_t *>(v->data()) + static_cast<size_t>(h) * cap * rb, row_v(l, h, lo),
                 static_cast<size_t>(n_held * rb));
    }
    k_[L] = std::move(k);
    v_[L] = std::move(v);
    cap_[L] = cap;
    base_[L] = lo;
}

int64_t KvStore::append(int64_t n) {
    if (n < 0) fail(LCTX_ERR_INVALID_ARG, "cannot append %lld slots", (long long)n);
    if (n > capacity_ - size_)
        fail(LCTX_ERR_CONTEXT_FULL, "KV cache full: %lld of %lld slots used, %lld more requested",
             (long long)size_, (long long)capacity_, (long long)n);
    for (int32_t l = 0; l < n_layers_; ++l)
        if (window_[static_cast<size_t>(l)] > 0) make_room(l, size_ + n);   // may throw: nothing appended yet
    const int64_t first = size_;
    size_ += n;
    return first;
}

void KvStore::truncate(int64_t new_size) {
    if (new_size < 0) new_size = 0;
    if (new_size < size_) size_ = new_size;
    for (size_t L = 0; L < lo_.size(); ++L) {   // released slots >= new_size are gone anyway
        lo_[L] = std::min(lo_[L], size_);
        if (base_[L] > size_) base_[L] = size_;
    }
    if (size_ == 0) floor_ = std::numeric_limits<int32_t>::min();   // an empty store: a new sequence
}

void KvStore::set_positions(int64_t slot0, const int32_t *pos, int64_t n) {
    if (n <= 0) return;
    for (int32_t l = 0; l < n_layers_; ++l)
        for (int32_t h = 0; h < n_head_kv_; ++h) std::memcpy(pos_of(l, h) + slot0, pos, n * sizeof(int32_t));
}

void KvStore::copy_head_rows(int32_t layer, int32_t head, int64_t slot0, const KvStore &src, int32_t src_layer,
                             const int64_t *src_slots, int64_t n) {
    if (n <= 0) return;
    if (&src == this || src.type_ != type_ || src.head_dim_ != head_dim_ || src.n_head_kv_ != n_head_kv_ ||
        layer < 0 || layer >= n_layers_ || src_layer < 0 || src_layer >= src.n_layers_ || head < 0 ||
        head >= n_head_kv_ || slot0 < 0 || slot0 + n > capacity_)
        fail(LCTX_ERR_INTERNAL, "copy_head_rows: stores or slots do not match");
    check_held("copy_head_rows", layer, slot0, n);
    const size_t SL = static_cast<size_t>(src_layer);
    const int64_t src_base = src.base_[SL], src_lo = src.lo_[SL];
    std::vector<int64_t> rows(src_slots, src_slots + n);   // the source layer's buffer rows
    for (int64_t &r : rows) {
        if (r < src_lo || r >= src.capacity_)
            fail(LCTX_ERR_INTERNAL, "copy_head_rows: source slot %lld outside the store or released", (long long)r);
        r -= src_base;
    }
    be_.gather_rows(type_, row_k(layer, head, slot0), src.head_k(src_layer, head), rows.data(), n, head_dim_);
    be_.gather_rows(type_, row_v(layer, head, slot0), src.head_v(src_layer, head), rows.data(), n, head_dim_);
    const int32_t *sp = src.positions(src_layer, head);
    int32_t *dp = pos_of(layer, head) + slot0;
    for (int64_t i = 0; i < n; ++i) dp[i] = sp[src_slots[i]];
}

void KvStore::set_head_positions(int32_t layer, int32_t head, int64_t slot0, const int32_t *pos, int64_t n) {
    if (n <= 0) return;
    std::memcpy(pos_of(layer, head) + slot0, pos, n * sizeof(int32_t));
}

void KvStore::store(int32_t layer, int64_t slot0, const float *k, const float *v, int64_t n, int64_t ld) {
    const int64_t D = head_dim_, R = row_elems();
    check_held("store", layer, slot0, n);
    for (int32_t h = 0; h < n_head_kv_; ++h) {
        be_.store_rows(type_, row_k(layer, h, slot0), R, k + h * D, ld, n, D);
        be_.store_rows(type_, row_v(layer, h, slot0), R, v + h * D, ld, n, D);
    }
}

AttentionArgs KvStore::attention_args(int32_t layer, int64_t n_kv) const {
    check_held("attention_args", layer, 0, n_kv);   // a releasing layer is read through the ranges version
    AttentionArgs a;
    a.k = k_[static_cast<size_t>(layer)]->data();
    a.v = v_[static_cast<size_t>(layer)]->data();
    a.kv_type = type_;
    a.ld_kv = row_elems();
    a.kv_head_stride = cap_[static_cast<size_t>(layer)] * row_elems();
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
        check_held("attention_args", layer, b, e - b);
        if (b == 0) return attention_args(layer, e);
        AttentionArgs a = attention_args(layer, 0);
        a.k = row_k(layer, 0, b);
        a.v = row_v(layer, 0, b);
        a.n_kv = e - b;
        a.kv_pos = positions(layer, 0) + b;
        return a;
    }
    int64_t n = 0;
    for (const auto &[b, e] : ranges) {
        if (b < 0 || e > size_ || b > e) fail(LCTX_ERR_INTERNAL, "attention ranges outside the store");
        check_held("attention_args", layer, b, e - b);
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
            be_.copy(static_cast<uint8_t *>(scratch.k->data()) + off, row_k(layer, h, b),
                     static_cast<size_t>(e - b) * row_bytes());
            be_.copy(static_cast<uint8_t *>(scratch.v->data()) + off, row_v(layer, h, b),
                     static_cast<size_t>(e - b) * row_bytes());
            std::copy(positions(layer, h) + b, positions(layer, h) + e, scratch.pos.begin() + h * n + at);
            at += e - b;
        }
    }
    AttentionArgs a = attention_args(layer, n);   // the same geometry, read from the gathered copy
    a.k = scratch.k->data();
    a.v = scratch.v->data();
    a.kv_head_stride = n * row_elems();
    a.kv_pos = scratch.pos.data();
    a.kv_pos_head_stride = n;
    return a;
}

void KvStore::read_keys(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const {
    check_held("read_keys", layer, slot0, n);
    be_.load_rows(type_, out, head_dim_, row_k(layer, head, slot0), row_elems(), n, head_dim_);
}

void KvStore::read_values(int32_t layer, int32_t head, int64_t slot0, int64_t n, float *out) const {
    check_held("read_values", layer, slot0, n);
    be_.load_rows(type_, out, head_dim_, row_v(layer, head, slot0), row_elems(), n, head_dim_);
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
    check_held("write_rows", layer, slot0, n);
    be_.store_rows(type_, row_k(layer, head, slot0), row_elems(), k, ld, n, head_dim_);
    be_.store_rows(type_, row_v(layer, head, slot0), row_elems(), v, ld, n, head_dim_);
}

void KvStore::write_unrotated(int32_t layer, int32_t head, int64_t slot0, int64_t n, const float *k,
                              const float *v, const int32_t *pos) {
    if (n <= 0) return;
    check_held("write_unrotated", layer, slot0, n);
    const int64_t D = head_dim_;
    if (type_ == KvType::F32 && be_.host_memory()) {
        // Rotate in place in the store, as the keys arrive (no scratch copy).
        float *kd = reinterpret_cast<float *>(row_k(layer, head, slot0));
        std::memcpy(kd, k, static_cast<size_t>(n * D) * sizeof(float));
        be_.rope(hp_[static_cast<size_t>(layer)], kd, D, n, 1, pos);
    } else {
        std::vector<float> tmp(k, k + n * D);   // local: callers fill heads in parallel
        be_.rope(hp_[static_cast<size_t>(layer)], tmp.data(), D, n, 1, pos);
        be_.store_rows(type_, row_k(layer, head, slot0), row_elems(), tmp.data(), D, n, D);
    }
    be_.store_rows(type_, row_v(layer, head, slot0), row_elems(), v, D, n, D);
    set_head_positions(layer, head, slot0, pos, n);
}

void KvStore::rotate_keys(int32_t l, int32_t h, int64_t slot0, int64_t n, const int32_t *delta) {
    const int64_t D = head_dim_;
    if (type_ == KvType::F32) {
        be_.rope(rot_[static_cast<size_t>(l)], reinterpret_cast<float *>(head_k(l, h)) + slot0 * D, D, n, 1, delta);
        return;
    }
    // f16, q8: widen, rotate, narrow (one rounding per move).
    std::vector<float> tmp(static_cast<size_t>(n * D));
    be_.load_rows(type_, tmp.data(), D, head_k(l, h) + slot0 * row_bytes(), row_elems(), n, D);
    be_.rope(rot_[static_cast<size_t>(l)], tmp.data(), D, n, 1, delta);
    be_.store_rows(type_, head_k(l, h) + slot0 * row_bytes(), row_elems(), tmp.data(), D, n, D);
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
    check_no_release("compact_head");
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
    check_no_release("compact");
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
    check_no_release("reposition");
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
    check_no_release("copy_from");
    src.check_no_release("copy_from");
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
