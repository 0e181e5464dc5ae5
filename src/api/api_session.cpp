// Sessions, the five stages, the method registry, parameters and selections.
#include <algorithm>
#include <cstring>

#include "api/handles.h"
#include "backend/op_timing_backend.h"
#include "session/method_registry.h"
#include "session/refreshkv.h"
#include "session/session_params.h"

using lctx::api::guarded;
using lctx::api::require;

namespace {

// Entry points that take a session: a NULL session is reported thread-locally.
template <class Body>
lctx_status on_session(lctx_session *s, const char *fn, Body &&body) {
    if (!s || !s->session)
        return lctx::api::set_error(LCTX_ERR_INVALID_ARG, std::string(fn) + ": session is NULL");
    return guarded(s, std::forward<Body>(body));
}

// The registry row of a value passed by a caller; read as a plain int, so a
// value outside the enum is answered (NULL/false), not undefined behaviour.
const lctx::MethodInfo *row(const lctx_method &method) {
    int32_t value = 0;
    std::memcpy(&value, &method, sizeof value);
    return lctx::find_method(value);
}

} // namespace

extern "C" {

LCTX_API void lctx_session_default_params(lctx_session_params *out) {
    if (!out) return;
    *out = lctx_session_params{};
    out->struct_size = sizeof(lctx_session_params);
    out->method = LCTX_METHOD_REFORM;   // the library default (issue 16): long inputs work out of the box
    out->n_ctx = 0;
    out->n_threads = 0;
    out->n_batch = 512;
    out->progress = nullptr;
    out->progress_user_data = nullptr;
}

// The method registry (session/method_registry.h).
LCTX_API int32_t lctx_method_count(void) { return static_cast<int32_t>(lctx::methods().size()); }

LCTX_API const char *lctx_method_name(lctx_method method) {
    const lctx::MethodInfo *m = row(method);
    return m ? m->name : nullptr;
}

LCTX_API const char *lctx_method_description(lctx_method method) {
    const lctx::MethodInfo *m = row(method);
    return m ? m->description : nullptr;
}

LCTX_API bool lctx_method_is_implemented(lctx_method method) {
    const lctx::MethodInfo *m = row(method);
    return m && m->implemented();
}

LCTX_API lctx_status lctx_method_from_name(const char *name, lctx_method *out) {
    return guarded(nullptr, [&] {
        require(name, "lctx_method_from_name", "name");
        require(out, "lctx_method_from_name", "out");
        const lctx::MethodInfo *m = lctx::find_method(std::string_view(name));
        if (!m)
            lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_method_from_name: unknown method '%s' (methods: %s)", name,
                       lctx::method_names().c_str());
        *out = m->id;
    });
}

LCTX_API void lctx_reform_default_params(lctx_reform_params *out) {
    if (!out) return;
    *out = lctx_reform_params{};   // every size 0: derived from the model (see lctx.h)
    out->struct_size = sizeof(lctx_reform_params);
    out->h2o_per_chunk = false;
    out->heads_path = nullptr;
}

LCTX_API void lctx_kv_default_params(lctx_kv_params *out) {
    if (!out) return;
    *out = lctx_kv_params{};       // every size 0: derived from the model and the method (see lctx.h)
    out->struct_size = sizeof(lctx_kv_params);
    out->infinipot_nuc_ratio = 0.0f;
    out->infinipot_catalyst = nullptr;
}

LCTX_API void lctx_infllm_default_params(lctx_infllm_params *out) {
    if (!out) return;
    *out = lctx_infllm_params{};   // 0: 128-token blocks, 4 representative tokens
    out->struct_size = sizeof(lctx_infllm_params);
}

LCTX_API void lctx_ilre_default_params(lctx_ilre_params *out) {
    if (!out) return;
    *out = lctx_ilre_params{};     // sizes 0: derived from the model (see lctx.h)
    out->struct_size = sizeof(lctx_ilre_params);
    out->retrieval_layer = -1;     // the model's profile
    out->dca = true;               // acts only past the trained context
    out->max_kernels = nullptr;
    out->avg_kernels = nullptr;
    out->profile_path = nullptr;
    out->score_distance = -1;   // each key at its own position (auto: docs/methods/ilre.md)
}

LCTX_API void lctx_reattention_default_params(lctx_reattention_params *out) {
    if (!out) return;
    *out = lctx_reattention_params{};
    out->struct_size = sizeof(lctx_reattention_params);
    out->n_global = -1;            // -1: derived from the model (see lctx.h)
    out->n_local = -1;
    out->span = -1;
    out->top_k = -1;
    out->n_spans = -1;
    out->chunk = -1;
    out->reuse_steps = 1;
    out->tile_max = false;
    out->store_max_ram = 0;        // RAM only
    out->store_dir = nullptr;
}

LCTX_API void lctx_refreshkv_default_params(lctx_refreshkv_params *out) {
    if (!out) return;
    *out = lctx_refreshkv_params{};   // 0: K = L/8, S = 10, the model's threshold, pool kernel 7
    out->struct_size = sizeof(lctx_refreshkv_params);
    out->schedule = LCTX_REFRESHKV_DYNAMIC;
    out->max_partial_run = 0;
    out->gathered = false;
}

LCTX_API lctx_status lctx_session_create(const lctx_model *model, const lctx_session_params *params,
                                         lctx_session **out) {
    if (out) *out = nullptr;
    return guarded(nullptr, [&] {
        require(out, "lctx_session_create", "out");
        require(model, "lctx_session_create", "model");
        const lctx_session_params p = lctx::read_session_params(params);
        auto s = std::make_unique<lctx_session>();
        s->owner = model;
        s->session = std::make_unique<lctx::Session>(*model->model, p, model->backend);
        *out = s.release();
    });
}

LCTX_API void lctx_session_free(lctx_session *session) { delete session; }

LCTX_API const char *lctx_session_last_error(const lctx_session *session) {
    return session ? session->last_error.c_str() : "";
}

LCTX_API void lctx_session_cancel(lctx_session *session) {
    if (session && session->session) session->session->cancel();
}

LCTX_API lctx_stage lctx_session_stage(const lctx_session *session) {
    return session && session->session ? session->session->stage() : LCTX_STAGE_FEEDING;
}

LCTX_API int64_t lctx_session_n_fed(const lctx_session *session) {
    return session && session->session ? session->session->n_fed() : 0;
}

LCTX_API lctx_status lctx_feed_chunk(lctx_session *s, const lctx_token *tokens, size_t n_tokens) {
    return on_session(s, "lctx_feed_chunk", [&] { s->session->feed(tokens, n_tokens); });
}

LCTX_API lctx_status lctx_build_index(lctx_session *s) {
    return on_session(s, "lctx_build_index", [&] { s->session->build_index(); });
}

LCTX_API lctx_status lctx_select(lctx_session *s, const lctx_token *query, size_t n_query, lctx_selection **out) {
    if (out) *out = nullptr;
    return on_session(s, "lctx_select", [&] {
        require(out, "lctx_select", "out");
        auto sel = std::make_unique<lctx_selection>();
        sel->sel = std::move(*s->session->select(query, n_query));
        *out = sel.release();
    });
}

LCTX_API lctx_status lctx_recompute(lctx_session *s, const lctx_selection *selection) {
    return on_session(s, "lctx_recompute", [&] {
        require(selection, "lctx_recompute", "selection");
        s->session->recompute(selection->sel);
    });
}

LCTX_API void lctx_sampling_default_params(lctx_sampling_params *out) {
    if (!out) return;
    *out = lctx_sampling_params{};
    out->struct_size = sizeof(lctx_sampling_params);
    out->temperature = 0.0f;
    out->top_k = 0;
    out->top_p = 1.0f;
    out->min_p = 0.0f;
    out->repeat_penalty = 1.0f;
    out->repeat_last_n = 64;
    out->seed = 0;
}

LCTX_API lctx_status lctx_decode(lctx_session *s, const lctx_sampling_params *sampling, lctx_token *out_token) {
    return on_session(s, "lctx_decode", [&] {
        require(out_token, "lctx_decode", "out_token");
        *out_token = s->session->decode(lctx::read_sampling_params(sampling));
    });
}

LCTX_API lctx_status lctx_decode_token(lctx_session *s, lctx_token token, float *out_logprob) {
    return on_session(s, "lctx_decode_token", [&] {
        const float lp = s->session->decode_token(token);
        if (out_logprob) *out_logprob = lp;
    });
}

LCTX_API lctx_status lctx_session_set_refreshkv(lctx_session *s, const lctx_refreshkv_params *params) {
    return on_session(s, "lctx_session_set_refreshkv", [&] { s->session->set_refreshkv(params); });
}

LCTX_API lctx_status lctx_session_refreshkv_stats(const lctx_session *cs, lctx_refreshkv_stats *stats,
                                                  int64_t *layer_full, int64_t *layer_partial, size_t capacity) {
    auto *s = const_cast<lctx_session *>(cs);
    return on_session(s, "lctx_session_refreshkv_stats", [&] {
        const lctx::RefreshKvPolicy *p = s->session->method().refreshkv();
        if (!p)
            lctx::fail(LCTX_ERR_UNSUPPORTED, "lctx_session_refreshkv_stats: this session does not decode with RefreshKV "
                       "(method '%s'; REFORM and ILRe need refreshkv->gathered; "
                       "lctx_session_set_refreshkv switches a session's decoding)", lctx::method_name(s->session->method_id()));
        const lctx::RefreshKvStats &st = p->stats();
        if (stats) {
            uint32_t size = 0;
            std::memcpy(&size, stats, sizeof size);
            if (size < sizeof(uint32_t))
                lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_session_refreshkv_stats: stats->struct_size is %u: set it to "
                           "sizeof(lctx_refreshkv_stats)", size);
            lctx_refreshkv_stats out{};
            out.struct_size = static_cast<uint32_t>(std::min<size_t>(size, sizeof out));
            out.n_layer = static_cast<int32_t>(st.layer_full.size());
            out.partial = st.partial;
            out.n_steps = st.n_steps;
            for (int64_t f : st.layer_full) out.n_full += f;
            for (int64_t f : st.layer_partial) out.n_partial += f;
            out.effective_stride = st.effective_stride();
            out.full_attention_s = st.full_s;
            out.partial_attention_s = st.partial_s;
            out.refresh_s = st.refresh_s;
            std::memcpy(static_cast<void *>(stats), &out, out.struct_size);
        }
        const size_t n = std::min(capacity, st.layer_full.size());
        if (layer_full) std::copy_n(st.layer_full.begin(), n, layer_full);
        if (layer_partial) std::copy_n(st.layer_partial.begin(), n, layer_partial);
    });
}

LCTX_API lctx_status lctx_session_op_times(const lctx_session *cs, lctx_op_time *ops, size_t capacity,
                                           size_t *n_ops, double *lifetime_s) {
    auto *s = const_cast<lctx_session *>(cs);
    return on_session(s, "lctx_session_op_times", [&] {
        require(n_ops, "lctx_session_op_times", "n_ops");
        if (capacity > 0 && !ops)
            lctx::fail(LCTX_ERR_INVALID_ARG, "lctx_session_op_times: ops is NULL but capacity is %zu", capacity);
        const lctx::OpTimingBackend *t = s->session->op_timing();
        if (!t)
            lctx::fail(LCTX_ERR_UNSUPPORTED, "lctx_session_op_times: the session was created without "
                       "LCTX_PROFILE_OPS set in the environment, so its ops were not timed");
        const std::vector<lctx::OpTimingBackend::Entry> e = t->entries();
        for (size_t i = 0; i < e.size() && i < capacity; ++i) ops[i] = {e[i].op, e[i].calls, e[i].seconds, e[i].bytes};
        *n_ops = e.size();
        if (lifetime_s) *lifetime_s = t->lifetime_s();
    });
}

LCTX_API lctx_status lctx_session_select_scores(const lctx_session *cs, float *scores, float *ranked,
                                                int64_t capacity, int64_t *n_tokens, int64_t *forced_first,
                                                int64_t *forced_last) {
    auto *s = const_cast<lctx_session *>(cs);
    return on_session(s, "lctx_session_select_scores", [&] {
        require(n_tokens, "lctx_session_select_scores", "n_tokens");
        lctx::TokenScores ts;
        if (!s->session->method().token_scores(ts))
            lctx::fail(LCTX_ERR_UNSUPPORTED, "lctx_session_select_scores: method '%s' does not score every document "
                       "token (REFORM and ILRe do)", lctx::method_name(s->session->method_id()));
        if (!ts.raw)
            lctx::fail(LCTX_ERR_STATE, "lctx_session_select_scores: no lctx_select has succeeded on this session yet");
        const int64_t n = static_cast<int64_t>(ts.raw->size());
        *n_tokens = n;
        if (forced_first) *forced_first = ts.forced_first;
        if (forced_last) *forced_last = ts.forced_last;
        if ((scores || ranked) && capacity < n)
            lctx::fail(LCTX_ERR_BUFFER_TOO_SMALL, "lctx_session_select_scores: capacity %lld, %lld scores",
                       (long long)capacity, (long long)n);
        if (scores) std::copy(ts.raw->begin(), ts.raw->end(), scores);
        if (ranked) std::copy(ts.ranked->begin(), ts.ranked->end(), ranked);
    });
}

LCTX_API lctx_status lctx_session_attended(const lctx_session *cs, float *share, int64_t capacity,
                                           int64_t *n_tokens) {
    auto *s = const_cast<lctx_session *>(cs);
    return on_session(s, "lctx_session_attended", [&] {
        require(n_tokens, "lctx_session_attended", "n_tokens");
        std::vector<float> v;
        if (!s->session->method().attended_share(v))
            lctx::fail(LCTX_ERR_UNSUPPORTED, "lctx_session_attended: method '%s' attends to its whole cache; the "
                       "positions of lctx_select are what it keeps", lctx::method_name(s->session->method_id()));
        const int64_t n = static_cast<int64_t>(v.size());
        *n_tokens = n;
        if (share && capacity < n)
            lctx::fail(LCTX_ERR_BUFFER_TOO_SMALL, "lctx_session_attended: capacity %lld, %lld tokens",
                       (long long)capacity, (long long)n);
        if (share) std::copy(v.begin(), v.end(), share);
    });
}

LCTX_API const float *lctx_session_logits(const lctx_session *cs) {
    auto *s = const_cast<lctx_session *>(cs);
    if (!s || !s->session) return nullptr;
    const float *out = nullptr;
    if (guarded(s, [&] { out = s->session->next_logits(); }) != LCTX_OK) return nullptr;
    return out;
}

LCTX_API void lctx_selection_free(lctx_selection *selection) { delete selection; }

LCTX_API int64_t lctx_selection_size(const lctx_selection *sel) {
    return sel ? static_cast<int64_t>(sel->sel.positions.size()) : 0;
}

LCTX_API int64_t lctx_selection_positions(const lctx_selection *sel, int64_t *positions, int64_t capacity) {
    if (!sel || !positions || capacity <= 0) return 0;
    int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(sel->sel.positions.size()));
    std::copy_n(sel->sel.positions.begin(), n, positions);
    return n;
}

LCTX_API int64_t lctx_selection_scores(const lctx_selection *sel, float *scores, int64_t capacity) {
    if (!sel || !scores || capacity <= 0) return 0;
    int64_t n = std::min<int64_t>(capacity, static_cast<int64_t>(sel->sel.scores.size()));
    std::copy_n(sel->sel.scores.begin(), n, scores);
    return n;
}

} // extern "C"
