// Hash helpers for Method::state_digest: the filled slots of a KvStore and
// plain vectors, folded into one Hash64.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/kv_store.h"
#include "session/embedding_store.h"
#include "session/hash64.h"

namespace lctx {

// Every held slot of every (layer, KV head): keys as stored, values,
// positions (a sliding layer that released slots out of its window hashes
// the slots it holds, from KvStore::first_held).
inline void digest_kv(Hash64 &h, const KvStore &kv) {
    h.add(kv.size());
    std::vector<float> rows(static_cast<size_t>(kv.size()) * kv.head_dim());
    for (int32_t l = 0; l < kv.n_layers(); ++l)
        for (int32_t g = 0; g < kv.n_head_kv(); ++g) {
            const int64_t s0 = kv.first_held(l), n = kv.size() - s0;
            if (n <= 0) continue;
            const size_t floats = static_cast<size_t>(n) * kv.head_dim();
            kv.read_keys(l, g, s0, n, rows.data());
            h.update(rows.data(), floats * sizeof(float));
            kv.read_values(l, g, s0, n, rows.data());
            h.update(rows.data(), floats * sizeof(float));
            h.update(kv.positions(l, g) + s0, static_cast<size_t>(n) * sizeof(int32_t));
        }
}

// Every committed row of an embedding store (fp16, as stored).
inline void digest_store(Hash64 &h, const EmbeddingStore &st) {
    h.add(st.size());
    for (int64_t t = 0; t < st.size();) {
        const int64_t len = std::min(st.size() - t, st.contiguous_from(t));
        h.update(st.row(t), static_cast<size_t>(len) * st.dim() * sizeof(uint16_t));
        t += len;
    }
}

template <class T> void digest_vec(Hash64 &h, const std::vector<T> &v) {
    h.add(static_cast<uint64_t>(v.size()));
    h.update(v.data(), v.size() * sizeof(T));
}

template <class T> void digest_vecs(Hash64 &h, const std::vector<std::vector<T>> &vs) {
    h.add(static_cast<uint64_t>(vs.size()));
    for (const auto &v : vs) digest_vec(h, v);
}

} // namespace lctx
