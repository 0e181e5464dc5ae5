// One small session per method through the C API, on a named backend: a
// 200-token document with budgets below it (every method evicts, selects or
// gathers), the first logits after recompute and three greedy tokens. The
// emulated-device test and the GPU test compare it against the CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "api/handles.h"
#include "engine_tiny_model.h"
#include "lctx.h"

namespace cuda_test {

struct SessionRun {
    std::string backend;   // the backend the session ran on (a fallback would say "cpu")
    std::vector<float> logits;
    std::vector<lctx_token> tokens;
};

#define OK_OR_RETURN(call)                                                                             \
    do {                                                                                               \
        const lctx_status st_ = (call);                                                                \
        if (st_ != LCTX_OK) {                                                                          \
            ADD_FAILURE() << #call << ": status " << st_ << ": " << lctx_last_error() << " (" << be << ")"; \
            return r;                                                                                  \
        }                                                                                              \
    } while (0)

inline SessionRun run_session(lctx_method method, const char *be) {
    SessionRun r;
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.backend = be;
    mp.n_threads = 2;
    lctx_model *m = nullptr;
    OK_OR_RETURN(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m));
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = method;
    sp.n_ctx = 512;
    // budgets below the 200-token document, so every method evicts, selects
    // or gathers (the defaults are sized for n_ctx_train = 4096 tokens)
    lctx_kv_params kv;
    lctx_kv_default_params(&kv);
    kv.budget = 96;
    kv.chunk = 64;
    sp.kv = &kv;
    lctx_reform_params rf;
    lctx_reform_default_params(&rf);
    rf.chunk = 64;
    rf.budget = 64;
    rf.recompute = 96;
    sp.reform = &rf;
    lctx_infllm_params inf;
    lctx_infllm_default_params(&inf);
    inf.block = 32;
    sp.infllm = &inf;
    lctx_session *s = nullptr;
    const lctx_status created = lctx_session_create(m, &sp, &s);
    if (created != LCTX_OK) {
        ADD_FAILURE() << "session_create: status " << created << ": " << lctx_last_error() << " (" << be << ")";
        lctx_model_free(m);
        return r;
    }
    r.backend = s->session->backend_name();
    std::vector<lctx_token> doc;
    for (int i = 0; i < 200; ++i) doc.push_back(150 + (i * 37) % 149);
    lctx_selection *sel = nullptr;
    auto body = [&]() {
        OK_OR_RETURN(lctx_feed_chunk(s, doc.data(), doc.size()));
        OK_OR_RETURN(lctx_build_index(s));
        const lctx_token q[] = {160, 170, 180};
        OK_OR_RETURN(lctx_select(s, q, 3, &sel));
        OK_OR_RETURN(lctx_recompute(s, sel));
        const float *l = lctx_session_logits(s);
        r.logits.assign(l, l + lctx_model_n_vocab(m));
        lctx_sampling_params samp;
        lctx_sampling_default_params(&samp);
        for (int i = 0; i < 3; ++i) {
            lctx_token t = 0;
            OK_OR_RETURN(lctx_decode(s, &samp, &t));
            r.tokens.push_back(t);
        }
        return r;
    };
    body();
    lctx_selection_free(sel);
    lctx_session_free(s);
    lctx_model_free(m);
    return r;
}

inline double rel(const std::vector<float> &a, const std::vector<float> &b) {
    double e = 0.0, s = 1e-6;
    for (size_t i = 0; i < a.size(); ++i) {
        e = std::max(e, std::fabs(double(a[i]) - b[i]));
        s = std::max(s, std::fabs(double(b[i])));
    }
    return e / s;
}

} // namespace cuda_test
