/*
 * lctx_swig_helpers.h — C helpers behind the SWIG bindings (Python, Java).
 *
 * The C API writes variable-sized outputs into caller buffers of a given
 * capacity. These helpers call it with a first guess, retry with the size it
 * reports, and return an owned array in a small by-value struct; each
 * language's typemap turns the struct into its native array (or raises the
 * lctx error for a failed status) and frees the data.
 */
#ifndef LCTX_SWIG_HELPERS_H
#define LCTX_SWIG_HELPERS_H

#include <stdlib.h>
#include <string.h>

#include "lctx.h"

typedef struct lctxsw_bytes { lctx_status status; char *data; size_t n; } lctxsw_bytes;      /* n bytes; data NULL: absent */
typedef struct lctxsw_tokens { lctx_status status; lctx_token *data; size_t n; } lctxsw_tokens;
typedef struct lctxsw_positions { lctx_status status; int64_t *data; size_t n; } lctxsw_positions;
typedef struct lctxsw_floats { lctx_status status; float *data; size_t n; } lctxsw_floats;

#ifndef SWIG
static lctxsw_bytes lctxsw_bytes_fail(lctx_status st, char *data) {
    lctxsw_bytes r;
    free(data);
    r.status = st; r.data = NULL; r.n = 0;
    return r;
}
#endif

static lctxsw_tokens lctxsw_tokenize(const lctx_model *model, const char *text, size_t text_len,
                                     bool add_special, bool parse_special) {
    /* Every token covers at least one byte, but BOS/EOS cover none. */
    lctxsw_tokens r = {LCTX_OK, NULL, 0};
    size_t cap = text_len + 8, n = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        r.data = (lctx_token *)malloc(cap * sizeof(lctx_token));
        if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
        r.status = lctx_tokenize(model, text, text_len, add_special, parse_special, r.data, cap, &n);
        if (r.status != LCTX_ERR_BUFFER_TOO_SMALL) break;
        free(r.data); r.data = NULL;
        cap = n;
    }
    if (r.status != LCTX_OK) { free(r.data); r.data = NULL; return r; }
    r.n = n;
    return r;
}

static lctxsw_bytes lctxsw_token_to_piece(const lctx_model *model, lctx_token token, bool special) {
    size_t cap = 64, n = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        char *buf = (char *)malloc(cap);
        if (!buf) return lctxsw_bytes_fail(LCTX_ERR_OUT_OF_MEMORY, NULL);
        lctx_status st = lctx_token_to_piece(model, token, special, buf, cap, &n);
        if (st == LCTX_OK) { lctxsw_bytes r = {LCTX_OK, buf, n}; return r; }
        free(buf);
        if (st != LCTX_ERR_BUFFER_TOO_SMALL) return lctxsw_bytes_fail(st, NULL);
        cap = n;
    }
    return lctxsw_bytes_fail(LCTX_ERR_INTERNAL, NULL);
}

static lctxsw_bytes lctxsw_detokenize(const lctx_model *model, const lctx_token *tokens, size_t n_tokens,
                                      bool special) {
    size_t cap = n_tokens * 8 + 16, n = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        char *buf = (char *)malloc(cap + 1);
        if (!buf) return lctxsw_bytes_fail(LCTX_ERR_OUT_OF_MEMORY, NULL);
        lctx_status st = lctx_detokenize(model, tokens, n_tokens, special, buf, cap + 1, &n);
        if (st == LCTX_OK) { lctxsw_bytes r = {LCTX_OK, buf, n}; return r; }
        free(buf);
        if (st != LCTX_ERR_BUFFER_TOO_SMALL) return lctxsw_bytes_fail(st, NULL);
        cap = n;
    }
    return lctxsw_bytes_fail(LCTX_ERR_INTERNAL, NULL);
}

/* Messages come flattened as role, content, role, content, ... */
static lctxsw_bytes lctxsw_chat_apply(const lctx_model *model, const char *const *strings, size_t n_strings,
                                      bool add_assistant) {
    size_t n_msg = n_strings / 2, cap = 256, n = 0;
    lctx_chat_message *msgs = (lctx_chat_message *)calloc(n_msg ? n_msg : 1, sizeof(lctx_chat_message));
    if (!msgs) return lctxsw_bytes_fail(LCTX_ERR_OUT_OF_MEMORY, NULL);
    for (size_t i = 0; i < n_msg; ++i) {
        msgs[i].role = strings[2 * i];
        msgs[i].content = strings[2 * i + 1];
        cap += strlen(msgs[i].content) + 32;
    }
    lctxsw_bytes r = {LCTX_ERR_INTERNAL, NULL, 0};
    for (int attempt = 0; attempt < 2; ++attempt) {
        char *buf = (char *)malloc(cap + 1);
        if (!buf) { r = lctxsw_bytes_fail(LCTX_ERR_OUT_OF_MEMORY, NULL); break; }
        lctx_status st = lctx_chat_apply(model, msgs, n_msg, add_assistant, buf, cap + 1, &n);
        if (st == LCTX_OK) { r.status = LCTX_OK; r.data = buf; r.n = n; break; }
        free(buf);
        r = lctxsw_bytes_fail(st, NULL);
        if (st != LCTX_ERR_BUFFER_TOO_SMALL) break;
        cap = n;
    }
    free(msgs);
    return r;
}

/* data NULL (status OK) when the key is absent. */
static lctxsw_bytes lctxsw_model_meta_string(const lctx_model *model, const char *key) {
    lctxsw_bytes r = {LCTX_OK, NULL, 0};
    int32_t need = lctx_model_meta_string(model, key, NULL, 0);
    if (need < 0) return r;
    r.data = (char *)malloc((size_t)need + 1);
    if (!r.data) return lctxsw_bytes_fail(LCTX_ERR_OUT_OF_MEMORY, NULL);
    int32_t got = lctx_model_meta_string(model, key, r.data, (size_t)need + 1);
    r.n = (size_t)(got < need ? got : need);
    return r;
}

static lctxsw_positions lctxsw_selection_positions(const lctx_selection *selection) {
    lctxsw_positions r = {LCTX_OK, NULL, 0};
    int64_t n = lctx_selection_size(selection);
    r.data = (int64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.n = (size_t)lctx_selection_positions(selection, r.data, n);
    return r;
}

static lctxsw_floats lctxsw_selection_scores(const lctx_selection *selection) {
    lctxsw_floats r = {LCTX_OK, NULL, 0};
    int64_t n = lctx_selection_size(selection);
    r.data = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.n = (size_t)lctx_selection_scores(selection, r.data, n);
    return r;
}

/* A copy of the n_vocab logits (the model gives n_vocab); empty before recompute. */
static lctxsw_floats lctxsw_session_logits(const lctx_session *session, const lctx_model *model) {
    lctxsw_floats r = {LCTX_OK, NULL, 0};
    const float *logits = lctx_session_logits(session);
    int32_t n = lctx_model_n_vocab(model);
    if (!logits || n <= 0) return r;
    r.data = (float *)malloc((size_t)n * sizeof(float));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    memcpy(r.data, logits, (size_t)n * sizeof(float));
    r.n = (size_t)n;
    return r;
}

/* lctx_session_refreshkv_stats without the per-layer arrays: sets
 * stats->struct_size itself (the proxy's struct is this library's size). */
static lctx_status lctxsw_session_refreshkv_stats(const lctx_session *session, lctx_refreshkv_stats *stats) {
    if (stats) stats->struct_size = (uint32_t)sizeof(lctx_refreshkv_stats);
    return lctx_session_refreshkv_stats(session, stats, NULL, NULL, 0);
}

/* Per-layer RefreshKV step counts (n_layer entries): full steps if `full`,
 * else partial steps. The status of lctx_session_refreshkv_stats (e.g.
 * LCTX_ERR_UNSUPPORTED for a session that does not decode with RefreshKV). */
static lctxsw_positions lctxsw_session_refreshkv_layer_steps(const lctx_session *session, bool full) {
    lctxsw_positions r = {LCTX_OK, NULL, 0};
    lctx_refreshkv_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = (uint32_t)sizeof st;
    r.status = lctx_session_refreshkv_stats(session, &st, NULL, NULL, 0);
    if (r.status != LCTX_OK) return r;
    size_t n = st.n_layer > 0 ? (size_t)st.n_layer : 0;
    r.data = (int64_t *)malloc((n ? n : 1) * sizeof(int64_t));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.status = lctx_session_refreshkv_stats(session, &st, full ? r.data : NULL, full ? NULL : r.data, n);
    if (r.status != LCTX_OK) { free(r.data); r.data = NULL; return r; }
    r.n = n;
    return r;
}

/* lctx_session_op_times one entry at a time: the number of ops into *n_ops
 * and the session's lifetime into *lifetime_s; the index-th op (the header's
 * fixed order) into *op when op is not NULL and index < *n_ops. The status of
 * lctx_session_op_times (LCTX_ERR_UNSUPPORTED without LCTX_PROFILE_OPS). */
static lctx_status lctxsw_session_op_times(const lctx_session *session, int64_t index, lctx_op_time *op,
                                           int64_t *n_ops, double *lifetime_s) {
    size_t n = 0;
    lctx_status st = lctx_session_op_times(session, NULL, 0, &n, lifetime_s);
    *n_ops = (int64_t)n;
    if (st != LCTX_OK || !op || index < 0 || (size_t)index >= n) return st;
    lctx_op_time *all = (lctx_op_time *)malloc(n * sizeof *all);
    if (!all) return LCTX_ERR_OUT_OF_MEMORY;
    st = lctx_session_op_times(session, all, n, &n, lifetime_s);
    if (st == LCTX_OK && (size_t)index < n) *op = all[index];
    free(all);
    return st;
}

/* Every scored document token's score from the session's last successful
 * select (lctx_session_select_scores): the raw scores, or with `ranked` the
 * ones select ranked by. The status of lctx_session_select_scores on failure. */
static lctxsw_floats lctxsw_session_select_scores(const lctx_session *session, bool ranked) {
    lctxsw_floats r = {LCTX_OK, NULL, 0};
    int64_t n = 0;
    r.status = lctx_session_select_scores(session, NULL, NULL, 0, &n, NULL, NULL);
    if (r.status != LCTX_OK) return r;
    r.data = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.status = lctx_session_select_scores(session, ranked ? NULL : r.data, ranked ? r.data : NULL, n, &n, NULL, NULL);
    if (r.status != LCTX_OK) { free(r.data); r.data = NULL; return r; }
    r.n = (size_t)n;
    return r;
}

/* Per stored token, the share of layers whose attention window held it at
 * the latest step (lctx_session_attended; ReAttention). The status of
 * lctx_session_attended on failure (LCTX_ERR_UNSUPPORTED for a method whose
 * decode attends to its whole cache). */
static lctxsw_floats lctxsw_session_attended(const lctx_session *session) {
    lctxsw_floats r = {LCTX_OK, NULL, 0};
    int64_t n = 0;
    r.status = lctx_session_attended(session, NULL, 0, &n);
    if (r.status != LCTX_OK) return r;
    r.data = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.status = lctx_session_attended(session, r.data, n, &n);
    if (r.status != LCTX_OK) { free(r.data); r.data = NULL; return r; }
    r.n = (size_t)n;
    return r;
}

/* The forced ranges of the last select as {forced_first, forced_last}: the
 * first and last document tokens gathered whatever their scores. */
static lctxsw_positions lctxsw_session_select_forced(const lctx_session *session) {
    lctxsw_positions r = {LCTX_OK, NULL, 0};
    int64_t n = 0, first = 0, last = 0;
    r.status = lctx_session_select_scores(session, NULL, NULL, 0, &n, &first, &last);
    if (r.status != LCTX_OK) return r;
    r.data = (int64_t *)malloc(2 * sizeof(int64_t));
    if (!r.data) { r.status = LCTX_ERR_OUT_OF_MEMORY; return r; }
    r.data[0] = first;
    r.data[1] = last;
    r.n = 2;
    return r;
}

#endif /* LCTX_SWIG_HELPERS_H */
