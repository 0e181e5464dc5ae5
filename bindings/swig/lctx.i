/*
 * lctx.i — the one SWIG interface for the Python and Java bindings.
 *
 * The functions come straight from include/lctx.h (%include below), so a
 * function appended to the header is wrapped without touching this file as
 * long as its arguments follow the header's conventions:
 *   - lctx_status results: raise/throw the lctx error (last-error message),
 *   - `TYPE **out` handle outputs: Python returns the handle, Java fills a long[1],
 *   - (const lctx_token *tokens|query, size_t n) inputs: buffers / int[],
 *   - (const char *text, size_t text_len) and (const void *data, size_t size).
 * Calls that fill caller buffers of unknown size are replaced by the
 * lctxsw_* helpers of lctx_swig_helpers.h, which do the capacity dance and
 * return owned arrays (Python bytes/array.array, Java byte[]/int[]/...).
 */
#if defined(SWIGJAVA)
%module LctxNative
#else
%module(package="lctx", threads="1") capi
#endif

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "lctx.h"
%}

/* const char * fields of the params structs (paths) are set from a copy that
 * the wrapper never frees: a few bytes per assignment, accepted. The method
 * structs (lctx_reform_params, lctx_kv_params, lctx_infllm_params,
 * lctx_ilre_params, lctx_reattention_params, lctx_refreshkv_params) are
 * pointed to from lctx_session_params: the caller keeps the proxy objects
 * alive until lctx_session_create returns (the library copies them). */
#pragma SWIG nowarn=451

%include <stdint.i>
%include <typemaps.i>

/* GCC attributes in the header (visibility, warn_unused_result) mean nothing here. */
#define __attribute__(x)

/* The raw buffer-filling calls are replaced by helpers of the same name. */
%ignore lctx_tokenize;
%ignore lctx_token_to_piece;
%ignore lctx_detokenize;
%ignore lctx_chat_apply;
%ignore lctx_model_meta_string;
%ignore lctx_selection_positions;
%ignore lctx_selection_scores;
%ignore lctx_session_logits;
%ignore lctx_session_select_scores; /* raw or ranked: lctxsw_session_select_scores; forced: lctxsw_session_select_forced */
%ignore lctx_session_attended;      /* the shares: lctxsw_session_attended */
%ignore lctx_log_set;
%ignore lctx_session_refreshkv_stats; /* per-layer counts: lctxsw_session_refreshkv_layer_steps */
%ignore lctx_chat_message; /* lctx_chat_apply takes (role, content, ...) strings */
%ignore lctx_session_op_times; /* one entry a call: lctxsw_session_op_times */
%rename(lctx_tokenize) lctxsw_tokenize;
%rename(lctx_token_to_piece) lctxsw_token_to_piece;
%rename(lctx_detokenize) lctxsw_detokenize;
%rename(lctx_chat_apply) lctxsw_chat_apply;
%rename(lctx_model_meta_string) lctxsw_model_meta_string;
%rename(lctx_selection_positions) lctxsw_selection_positions;
%rename(lctx_selection_scores) lctxsw_selection_scores;
%rename(lctx_session_logits) lctxsw_session_logits;
%rename(lctx_session_select_scores) lctxsw_session_select_scores;
%rename(lctx_session_attended) lctxsw_session_attended;
%rename(lctx_log_set) lctxsw_log_set;
%rename(lctx_session_refreshkv_stats) lctxsw_session_refreshkv_stats;
%rename(lctx_session_op_times) lctxsw_session_op_times;

#if defined(SWIGPYTHON)
%include "lctx_python.i"
#elif defined(SWIGJAVA)
%include "lctx_java.i"
#endif

%apply int32_t *OUTPUT { lctx_token *out_token };
/* lctx_decode_token: Python returns the log-probability, Java fills a float[1]. */
%apply float *OUTPUT { float *out_logprob };
/* lctx_method_from_name: Python returns the value, Java fills an int[1]. */
%apply int *OUTPUT { lctx_method *out };
/* lctx_session_op_times (the helper): Python returns (n_ops, lifetime_s), Java fills long[1] and double[1]. */
%apply int64_t *OUTPUT { int64_t *n_ops };
%apply double *OUTPUT { double *lifetime_s };

%{
#include "lctx_swig_helpers.h"
%}
%ignore lctxsw_bytes;
%ignore lctxsw_tokens;
%ignore lctxsw_positions;
%ignore lctxsw_floats;
%include "lctx_swig_helpers.h"

%include "lctx.h"
