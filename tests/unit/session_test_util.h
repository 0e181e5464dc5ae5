// Helpers shared by the session-level tests: random document tokens for the
// tiny model's vocabulary and feeding a document in given call sizes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "session/session.h"

namespace session_test {

// lctx_session_params that owns its method structs (reform_p, kv_p,
// infllm_p; defaults from the lctx_*_default_params functions): the reform,
// kv, infllm, ilre and reattention pointers of a copy point at the copy's own structs.
struct SessionParams : lctx_session_params {
    lctx_reform_params reform_p;
    lctx_kv_params kv_p;
    lctx_infllm_params infllm_p;
    lctx_ilre_params ilre_p;
    lctx_reattention_params reattention_p;

    SessionParams() {
        lctx_session_default_params(this);
        lctx_reform_default_params(&reform_p);
        lctx_kv_default_params(&kv_p);
        lctx_infllm_default_params(&infllm_p);
        lctx_ilre_default_params(&ilre_p);
        lctx_reattention_default_params(&reattention_p);
        link();
    }
    SessionParams(const SessionParams &o)
        : lctx_session_params(o), reform_p(o.reform_p), kv_p(o.kv_p), infllm_p(o.infllm_p), ilre_p(o.ilre_p),
          reattention_p(o.reattention_p) {
        link();
    }
    SessionParams &operator=(const SessionParams &o) {
        static_cast<lctx_session_params &>(*this) = o;
        reform_p = o.reform_p;
        kv_p = o.kv_p;
        infllm_p = o.infllm_p;
        ilre_p = o.ilre_p;
        reattention_p = o.reattention_p;
        link();
        return *this;
    }
    void link() {
        reform = &reform_p;
        kv = &kv_p;
        infllm = &infllm_p;
        ilre = &ilre_p;
        reattention = &reattention_p;
    }
};

// n ids in [lo, hi), deterministic from seed (the tiny model's vocabulary is 300).
inline std::vector<int32_t> random_tokens(int n, uint32_t seed, int lo = 3, int hi = 299) {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t &x : t) x = lo + int32_t(rng() % uint32_t(hi - lo));
    return t;
}

// Feeds doc in calls of sizes[0], sizes[1], ... (cycling), then build_index.
inline void feed_split(lctx::Session &s, const std::vector<int32_t> &doc, const std::vector<size_t> &sizes) {
    size_t at = 0, i = 0;
    while (at < doc.size()) {
        const size_t n = std::min(sizes[i++ % sizes.size()], doc.size() - at);
        s.feed(doc.data() + at, n);
        at += n;
    }
    s.build_index();
}

} // namespace session_test
