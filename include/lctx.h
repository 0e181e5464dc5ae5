/*
 * lctx.h — the public C API of lctx, long-context inference for small models.
 *
 * Flow:
 *     lctx_model   *m = NULL;  lctx_model_load("model.gguf", &mp, &m);
 *     lctx_session *s = NULL;  lctx_session_create(m, &sp, &s);
 *     lctx_feed_chunk(s, doc_tokens, n)        (as many times as needed)
 *     lctx_build_index(s)
 *     lctx_select(s, question_tokens, n, &sel)
 *     lctx_recompute(s, sel)
 *     while (lctx_decode(s, &sampling, &tok) == LCTX_OK && !lctx_token_is_eog(m, tok)) ...
 *
 * Threading:
 *   - An lctx_model is immutable after load and may be shared by any number of
 *     sessions on any number of threads.
 *   - An lctx_session is not locked: use it from one thread at a time. It may
 *     move between threads. lctx_session_cancel() is the one call that is safe
 *     from any thread at any time.
 *   - Callbacks (progress) run only on the thread that made the lctx call. The
 *     log callback may be called from any thread.
 *
 * Errors:
 *   Every fallible call returns an lctx_status (LCTX_OK == 0, errors < 0). The
 *   message of the last failure is kept thread-locally (lctx_last_error()) and,
 *   for calls on a session, on the session (lctx_session_last_error()). No call
 *   aborts, throws, or prints to stdout.
 *
 * Ownership (the one rule):
 *   The library copies every input it keeps and never holds a caller's pointer
 *   after a call returns. Outputs go to caller buffers with an explicit capacity
 *   (the needed size is reported when too small) or to library-owned handles
 *   with their own *_free function. Every *_free accepts NULL.
 *
 * Parameter structs (the ABI rule):
 *   Every params struct (lctx_model_params, lctx_session_params,
 *   lctx_sampling_params and the method structs lctx_reform_params,
 *   lctx_kv_params, lctx_infllm_params, lctx_ilre_params,
 *   lctx_refreshkv_params) starts with uint32_t struct_size and
 *   has a lctx_*_default_params() function that fills the defaults and sets
 *   struct_size to the sizeof of the struct in the header you compiled
 *   against. Fields are only ever appended. The library reads exactly
 *   struct_size bytes of the caller's struct: a smaller struct (a caller built
 *   against an older lctx.h) is accepted and the fields it lacks take their
 *   defaults. A struct_size below 4 (the struct_size field itself; 0 = never
 *   filled) or above the library's own sizeof (a caller built against a newer
 *   lctx.h than the library it runs with) is refused with
 *   LCTX_ERR_INVALID_ARG. A NULL params pointer means all defaults.
 *
 * Methods:
 *   lctx_method values are append-only. The library's method registry
 *   (lctx_method_count(), lctx_method_name(), lctx_method_from_name(), ...)
 *   lists them with their names, so tools and bindings need not repeat it.
 */
#ifndef LCTX_H
#define LCTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LCTX_VERSION_MAJOR 0
#define LCTX_VERSION_MINOR 1
#define LCTX_VERSION_PATCH 0
#define LCTX_VERSION_NUMBER (LCTX_VERSION_MAJOR * 10000 + LCTX_VERSION_MINOR * 100 + LCTX_VERSION_PATCH)
#define LCTX_ABI_VERSION 1   /* bumped when something is removed or moved (1: method knobs moved to their own structs) */

#if defined(_WIN32)
#  if defined(LCTX_BUILD)
#    define LCTX_API __declspec(dllexport)
#  else
#    define LCTX_API __declspec(dllimport)
#  endif
#else
#  define LCTX_API __attribute__((visibility("default")))
#endif

#if defined(__GNUC__) || defined(__clang__)
#  define LCTX_NODISCARD __attribute__((warn_unused_result))
#else
#  define LCTX_NODISCARD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes. Values are append-only and never reused.                   */
/* ------------------------------------------------------------------------ */
typedef enum lctx_status {
    LCTX_OK                  = 0,
    LCTX_ERR_INVALID_ARG     = -1,  /* NULL handle, out-of-range value, bad token id */
    LCTX_ERR_IO              = -2,  /* file cannot be opened, read or written */
    LCTX_ERR_FORMAT          = -3,  /* malformed GGUF or index file */
    LCTX_ERR_UNSUPPORTED     = -4,  /* valid but not supported (architecture, tensor type, method, template) */
    LCTX_ERR_OUT_OF_MEMORY   = -5,
    LCTX_ERR_STATE           = -6,  /* call made in the wrong stage */
    LCTX_ERR_BUFFER_TOO_SMALL= -7,  /* caller buffer too small; the needed size was reported */
    LCTX_ERR_CANCELLED       = -8,  /* a progress callback or lctx_session_cancel() stopped the call */
    LCTX_ERR_CONTEXT_FULL    = -9,  /* the session's cache has no room for more tokens */
    LCTX_ERR_INTERNAL        = -10  /* a bug in lctx: please report it with the message */
} lctx_status;

typedef int32_t lctx_token;

typedef struct lctx_model     lctx_model;
typedef struct lctx_session   lctx_session;
typedef struct lctx_selection lctx_selection;

/* ------------------------------------------------------------------------ */
/* Library                                                                  */
/* ------------------------------------------------------------------------ */
LCTX_API int32_t     lctx_version_number(void);       /* LCTX_VERSION_NUMBER of the library */
LCTX_API const char *lctx_version(void);              /* "MAJOR.MINOR.PATCH" */
LCTX_API const char *lctx_build_info(void);           /* source revision, compiler, CPU variant in use */
/* Static text for a status; never NULL. */
LCTX_API const char *lctx_status_string(lctx_status status);
/* Message of the last failed call on this thread ("" if none). Valid until the
 * next failing lctx call on this thread. */
LCTX_API const char *lctx_last_error(void);

typedef enum lctx_log_level {
    LCTX_LOG_DEBUG = 0,
    LCTX_LOG_INFO  = 1,
    LCTX_LOG_WARN  = 2,
    LCTX_LOG_ERROR = 3
} lctx_log_level;

/* Global log sink; NULL restores the default (silent). May be called from any
 * thread; set it before loading models. Messages below min_level are dropped.
 * The callback is called with no lctx lock held (it may take locks of its own,
 * call lctx_log_set, or log through lctx), so a call already under way on
 * another thread may still reach the previous callback once after
 * lctx_log_set returns. */
typedef void (*lctx_log_fn)(lctx_log_level level, const char *message, void *user_data);
LCTX_API void lctx_log_set(lctx_log_fn fn, lctx_log_level min_level, void *user_data);

/* Progress of a long call: done in [0,1]. Every long call (feed_chunk,
 * build_index, select, recompute) reports done = 1.0 exactly once, at its end.
 * Return non-zero to cancel, at 1.0 too: the call then returns
 * LCTX_ERR_CANCELLED and leaves the session valid in the stage it had (a
 * cancelled feed keeps the tokens it had fully processed: see
 * lctx_session_n_fed; a cancelled build_index can be called again and goes
 * on where it stopped). */
typedef int (*lctx_progress_fn)(float done, void *user_data);

/* ------------------------------------------------------------------------ */
/* Model                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct lctx_model_params {
    uint32_t struct_size;   /* sizeof(lctx_model_params): set by default_params */
    int32_t  n_threads;     /* worker threads for sessions of this model; <= 0: all cores */
    bool     use_mmap;      /* map the file instead of reading it (falls back to reading) */
    const char *backend;    /* backend of this model's sessions: "cpu", or a backend module's name
                               ("cuda"); NULL or "": $LCTX_BACKEND if set, else the best one available.
                               One that cannot run here falls back to the CPU with a log line. Copied. */
    uint64_t max_memory;    /* bytes the model's data may take (the GGUF file or buffer, read, mapped or
                               copied); checked before loading: LCTX_ERR_OUT_OF_MEMORY with the sizes.
                               0: no limit */
} lctx_model_params;

LCTX_API void lctx_model_default_params(lctx_model_params *out);

/* params may be NULL (defaults). On failure *out is set to NULL. */
LCTX_API LCTX_NODISCARD lctx_status lctx_model_load(const char *path, const lctx_model_params *params,
                                                    lctx_model **out);
/* Loads from a caller buffer, which is copied. */
LCTX_API LCTX_NODISCARD lctx_status lctx_model_load_from_memory(const void *data, size_t size,
                                                                const lctx_model_params *params,
                                                                lctx_model **out);
LCTX_API void lctx_model_free(lctx_model *model);

/* Model information. Getters on a NULL model return 0 / "" . */
LCTX_API const char *lctx_model_architecture(const lctx_model *model); /* "llama", ... */
LCTX_API const char *lctx_model_name(const lctx_model *model);         /* general.name or "" */
LCTX_API int32_t lctx_model_n_layer(const lctx_model *model);
LCTX_API int32_t lctx_model_n_head(const lctx_model *model);
LCTX_API int32_t lctx_model_n_head_kv(const lctx_model *model);
LCTX_API int32_t lctx_model_head_dim(const lctx_model *model);
LCTX_API int32_t lctx_model_n_embd(const lctx_model *model);
LCTX_API int32_t lctx_model_n_vocab(const lctx_model *model);
LCTX_API int32_t lctx_model_n_ctx_train(const lctx_model *model);
LCTX_API uint64_t lctx_model_n_params(const lctx_model *model);
LCTX_API uint64_t lctx_model_size_bytes(const lctx_model *model);
/* Special tokens; -1 when the model has none. */
LCTX_API lctx_token lctx_model_token_bos(const lctx_model *model);
LCTX_API lctx_token lctx_model_token_eos(const lctx_model *model);
LCTX_API lctx_token lctx_model_token_eot(const lctx_model *model);
LCTX_API lctx_token lctx_model_token_pad(const lctx_model *model);
/* true for end-of-generation tokens (eos, eot, <|im_end|>, <end_of_turn>...). */
LCTX_API bool lctx_token_is_eog(const lctx_model *model, lctx_token token);
/* The GGUF chat template (tokenizer.chat_template) or "" if none. */
LCTX_API const char *lctx_model_chat_template(const lctx_model *model);
/* String metadata value by key, formatted as text (arrays abbreviated).
 * Returns the length needed (excluding NUL), or -1 if the key is absent.
 * Writes at most buf_size bytes including the NUL. */
LCTX_API int32_t lctx_model_meta_string(const lctx_model *model, const char *key, char *buf,
                                        size_t buf_size);

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */
/* ------------------------------------------------------------------------ */
/* Tokenizes UTF-8 text (text_len bytes). add_special: add BOS/EOS as the model
 * asks. parse_special: recognise special/control tokens written in the text
 * (e.g. "<|im_start|>"). On success *n_out is the number of tokens written.
 * If capacity is too small, returns LCTX_ERR_BUFFER_TOO_SMALL with *n_out set
 * to the needed count. */
LCTX_API LCTX_NODISCARD lctx_status lctx_tokenize(const lctx_model *model, const char *text, size_t text_len,
                                                  bool add_special, bool parse_special, lctx_token *tokens,
                                                  size_t capacity, size_t *n_out);
/* The text piece of one token (bytes, not NUL-terminated unless room allows).
 * special: render special/control tokens as their text (otherwise "").
 * *n_out = bytes needed; LCTX_ERR_BUFFER_TOO_SMALL if buf_size < *n_out. */
LCTX_API LCTX_NODISCARD lctx_status lctx_token_to_piece(const lctx_model *model, lctx_token token, bool special,
                                                        char *buf, size_t buf_size, size_t *n_out);
/* Text of a token sequence (joins pieces; SentencePiece leading space removed).
 * Writes a NUL when room allows; *n_out = bytes needed excluding the NUL. */
LCTX_API LCTX_NODISCARD lctx_status lctx_detokenize(const lctx_model *model, const lctx_token *tokens,
                                                    size_t n_tokens, bool special, char *buf, size_t buf_size,
                                                    size_t *n_out);

/* One chat message. */
typedef struct lctx_chat_message {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} lctx_chat_message;

/* Formats messages with the model's chat template (ChatML and Gemma are
 * recognised from the GGUF template; others give LCTX_ERR_UNSUPPORTED).
 * add_assistant: end with the prefix that starts the assistant's turn.
 * Output as lctx_detokenize (NUL when room allows, *n_out excludes it). */
LCTX_API LCTX_NODISCARD lctx_status lctx_chat_apply(const lctx_model *model, const lctx_chat_message *messages,
                                                    size_t n_messages, bool add_assistant, char *buf,
                                                    size_t buf_size, size_t *n_out);

/* ------------------------------------------------------------------------ */
/* Sessions: one document (or conversation) read with one method            */
/* ------------------------------------------------------------------------ */
typedef enum lctx_method {
    LCTX_METHOD_FULL        = 0,  /* everything in one KV cache */
    LCTX_METHOD_REFORM      = 1,
    LCTX_METHOD_ILRE        = 2,
    LCTX_METHOD_REATTENTION = 3,
    LCTX_METHOD_REFRESHKV   = 4,
    LCTX_METHOD_TRUNCATE    = 5,
    LCTX_METHOD_STREAMING   = 6,
    LCTX_METHOD_H2O         = 7,
    LCTX_METHOD_TOVA        = 8,
    LCTX_METHOD_SNAPKV      = 9,
    LCTX_METHOD_INFINIPOT   = 10,
    LCTX_METHOD_INFLLM      = 11
} lctx_method;

/* The method registry. The values this library knows are 0 ..
 * lctx_method_count() - 1. A method's name is its LCTX_METHOD_* suffix in
 * lower case ("full", "reform", "h2o", ...), the name `lctx run --method`
 * takes. The strings are static. */
LCTX_API int32_t lctx_method_count(void);
/* Name of a method; NULL for a value this library does not know. */
LCTX_API const char *lctx_method_name(lctx_method method);
/* One line describing the method; NULL for a value this library does not know. */
LCTX_API const char *lctx_method_description(lctx_method method);
/* true when lctx_session_create accepts the method (false: it returns
 * LCTX_ERR_UNSUPPORTED, or the value is unknown). */
LCTX_API bool lctx_method_is_implemented(lctx_method method);
/* The method of a name (ASCII case-insensitive). An unknown name returns
 * LCTX_ERR_INVALID_ARG with the known names in the message; *out is then
 * left unchanged. */
LCTX_API LCTX_NODISCARD lctx_status lctx_method_from_name(const char *name, lctx_method *out);

/* Stages of a session, in order. */
typedef enum lctx_stage {
    LCTX_STAGE_FEEDING    = 0,  /* accepts feed_chunk; next: build_index */
    LCTX_STAGE_INDEXED    = 1,  /* accepts select */
    LCTX_STAGE_SELECTED   = 2,  /* accepts recompute (or select again) */
    LCTX_STAGE_DECODING   = 3   /* accepts decode; select starts a new question */
} lctx_stage;

/* REFORM's knobs (LCTX_METHOD_REFORM). 0 = derived from the model's trained
 * context n_ctx_train (values given for an 8K model such as SmolLM2). The
 * session's n_ctx is REFORM's decode cache: gathered tokens + question +
 * answer. */
/* Eviction rules of a compressed working cache (REFORM's encoder). */
typedef enum lctx_evictor {
    LCTX_EVICTOR_H2O       = 0,
    LCTX_EVICTOR_TOVA      = 1,
    LCTX_EVICTOR_STREAMING = 2,
    LCTX_EVICTOR_SNAPKV    = 3
} lctx_evictor;

typedef struct lctx_reform_params {
    uint32_t    struct_size;   /* sizeof(lctx_reform_params): set by lctx_reform_default_params */
    int32_t     chunk;         /* C: tokens per encoding step; n_ctx_train/4 (2048) */
    int32_t     budget;        /* B: working-cache tokens per layer and KV head; = chunk (2048) */
    int32_t     recompute;     /* R: document tokens gathered for recompute; n_ctx_train/2 (4096) */
    int32_t     sink;          /* first tokens the working cache always keeps; min(256, B/8) */
    int32_t     recent;        /* most recent tokens it always keeps; min(256, B/8) */
    int32_t     obs;           /* last queries of each chunk whose attention scores eviction; 128 */
    int32_t     keep_first;    /* first document tokens always gathered; min(256, R/8) */
    int32_t     keep_last;     /* last document tokens always gathered; min(256, R/8) */
    int32_t     pool_half;     /* score max-pool half width (kernel 2*half+1); 64; < 0: no pooling */
    bool        h2o_per_chunk; /* true: eviction scores of the last chunk only (default: accumulated) */
    const char *heads_path;    /* JSON head profile (lctx heads); NULL: the built-in profile for the
                                  model, else a fallback of mid-layer V heads (with a log warning) */
    lctx_evictor evictor;      /* how the working cache is evicted after each chunk: LCTX_EVICTOR_H2O
                                  (default; obs 128, scores summed over chunks), _TOVA (the chunk's last
                                  query), _STREAMING (sinks + most recent), _SNAPKV (32 queries, pooled by 7);
                                  obs = 0 takes the evictor's own default */
    int32_t     repeat_window; /* repeated text competes for the recompute budget once: a token whose
                                  `repeat_window` tokens up to it, or from it on, occurred earlier in the
                                  input ranks below every other (docs/methods/reform.md); 0: 16; < 0: off */
} lctx_reform_params;

LCTX_API void lctx_reform_default_params(lctx_reform_params *out);

/* The KV-cache baselines' knobs (TRUNCATE, STREAMING, H2O, TOVA, SNAPKV,
 * INFINIPOT; INFLLM reads budget, chunk, sink, recent and obs too). 0 =
 * derived from n_ctx_train (values given for an 8K model). The session's
 * n_ctx is their decode cache: the kept document KV plus the question and
 * answer. The recurrent ones (STREAMING, H2O, TOVA, SNAPKV, INFINIPOT)
 * forward the document chunk by chunk through all layers on top of a
 * compressed cache that is evicted back to `budget` slots per layer and KV
 * head after each chunk (positions renumbered to stay consecutive), and
 * decode straight from that cache. */
typedef struct lctx_kv_params {
    uint32_t    struct_size;   /* sizeof(lctx_kv_params): set by lctx_kv_default_params */
    int32_t     budget;        /* STREAMING/H2O/TOVA/SNAPKV/INFINIPOT: KV slots kept per layer and KV head,
                                  sinks and recent included; n_ctx_train/4 (2048, REFORM's working budget).
                                  TRUNCATE: document tokens kept (first half + last half); n_ctx_train/2 (4096).
                                  INFLLM: retrieved memory tokens per layer and KV head; n_ctx_train/4 (2048) */
    int32_t     chunk;         /* tokens forwarded per step; n_ctx_train/4 (2048); INFLLM: 512; SNAPKV:
                                  n_ctx_train - budget (6144), so inputs that fit the trained context are
                                  one full prefill compressed with the question */
                               /* INFLLM's n_ctx (question + answer room) defaults to what keeps positions
                                  inside n_ctx_train: n_ctx_train - (sink + memory + window + block - 1) */
    int32_t     sink;          /* first document tokens always kept; min(256, budget/8) (INFLLM: 128);
                                  < 0: none */
    int32_t     recent;        /* most recent tokens always kept; min(256, budget/8) (INFLLM: its local
                                  window, n_ctx_train/4); < 0: none */
    int32_t     obs;           /* queries at the end of each chunk whose attention scores eviction:
                                  H2O 128 (the REFORM paper's H2O), SNAPKV 32 (its window), TOVA 1 (last query);
                                  INFLLM: queries that pick each block's representative tokens, 128 */
    int32_t     snapkv_kernel; /* SNAPKV: width of the average pooling of scores; 7 */
    float       infinipot_nuc_ratio; /* INFINIPOT: share of the kept non-protected slots chosen by novelty
                                        (NuC, surprisal of the token); the rest by the catalyst prompt's
                                        attention (CaP); 0: 0.25, < 0: CaP only */
    const char *infinipot_catalyst;  /* INFINIPOT: catalyst prompt text; NULL: a built-in one */
} lctx_kv_params;

LCTX_API void lctx_kv_default_params(lctx_kv_params *out);

/* InfLLM's own knobs (LCTX_METHOD_INFLLM), on top of lctx_kv_params. */
typedef struct lctx_infllm_params {
    uint32_t struct_size;      /* sizeof(lctx_infllm_params): set by lctx_infllm_default_params */
    int32_t  block;            /* tokens per memory block; 0: 128 */
    int32_t  repr;             /* representative tokens per block; 0: 4 */
} lctx_infllm_params;

LCTX_API void lctx_infllm_default_params(lctx_infllm_params *out);

/* ILRe's knobs (LCTX_METHOD_ILRE; docs/methods/ilre.md). The document is
 * read by the first `retrieval_layer` layers only, chunk by chunk, each chunk
 * attending to the first `sink` tokens and the `window` tokens before it; the
 * retrieval layer's keys of every token form the index. select() scores the
 * index by the question's softmax attention there, pools the scores with
 * every (max kernel, average kernel) pair and gathers `budget` tokens (+ the
 * sinks) for recompute. 0 = derived from the model (values for an 8K model). */
typedef struct lctx_ilre_params {
    uint32_t    struct_size;      /* sizeof(lctx_ilre_params): set by lctx_ilre_default_params */
    int32_t     retrieval_layer;  /* 0-based layer whose keys are indexed (layers below it run in full);
                                     -1 (default): the model's profile (lctx heads --ilre), else n_layer/8 */
    int32_t     sink;             /* first document tokens every chunk attends to, always gathered; 4 */
    int32_t     window;           /* tokens before a chunk that it attends to; chunk/2 (512) */
    int32_t     chunk;            /* tokens per encoding step (the first has sink more);
                                     min(1024, n_ctx_train/8) (1024) */
    int32_t     budget;           /* B: document tokens gathered besides the sinks; min(4096, n_ctx/2) (4096) */
    int32_t     query_tokens;     /* score with the last N tokens of the question only; 0: all of them */
    bool        dca;              /* true (default): past the trained context, re-rotate the sinks' keys and
                                     the index keys so that every distance stays within about two chunks;
                                     inputs within the trained context are not touched. false: never */
    const char *max_kernels;      /* block max-pool sizes, e.g. "2,4,8" (NULL: "2,4,8") */
    const char *avg_kernels;      /* average-pool sizes, e.g. "1-16" or "1,3,5" (NULL: "1-16") */
    const char *profile_path;     /* JSON profile holding the retrieval layer (lctx heads --ilre);
                                     NULL: the built-in one for the model */
    int32_t     score_distance;   /* -1 (default): the question scores each key at its own position (with
                                     dca's shifts); >= 0: position-free scoring, every key as if it sat this
                                     many positions before the question (dca then only moves the sinks);
                                     LCTX_ILRE_SCORE_AUTO (-2): -1 while the document and question fit the
                                     trained context, else position-free at 1024 */
    int32_t     repeat_window;    /* repeated text competes for the budget once: a token whose
                                     `repeat_window` tokens up to it, or from it on, occurred earlier in the
                                     input scores 0 before pooling (docs/methods/ilre.md); 0: 16; < 0: off */
} lctx_ilre_params;

/* lctx_ilre_params.score_distance: keys at their positions within the trained
 * context, position-free scoring past it (docs/methods/ilre.md). */
#define LCTX_ILRE_SCORE_AUTO (-2)

LCTX_API void lctx_ilre_default_params(lctx_ilre_params *out);

/* ReAttention's knobs (LCTX_METHOD_REATTENTION; docs/methods/reattention.md).
 * Every layer keeps the keys and values of every token before RoPE. Each
 * step (a chunk of the document, or one token) scores the "middle" tokens
 * (all but the first n_global and the last n_local) against the step's
 * queries without positions, keeps each (head, query)'s top_k, votes for
 * n_spans winners, widens each to `span` neighbours, and attends over
 * [global | spans | local] numbered 0..n-1 with RoPE at those positions.
 * -1 = derived from the model's trained context n_train (the values given
 * are for an 8K model such as SmolLM2 and are the paper's). */
typedef struct lctx_reattention_params {
    uint32_t    struct_size;     /* sizeof(lctx_reattention_params): set by lctx_reattention_default_params */
    int32_t     n_global;        /* G: first tokens always attended; 32 */
    int32_t     n_local;         /* L: last tokens always attended, the step's own included; n_train / 2 (4096) */
    int32_t     span;            /* m: tokens around each winner (even); 32 */
    int32_t     top_k;           /* k: middle tokens each (query head, query token) votes for; 4 */
    int32_t     n_spans;         /* k': winners of the vote; (n_train - G - L) / m (127).
                                    0: no middle at all (StreamingLLM-like: global + local only) */
    int32_t     chunk;           /* tokens per prefill step after the first (which takes G + L): at most 512;
                                    min(512, L / 2) (512) */
    int32_t     reuse_steps;     /* decode: a layer's selection is reused for this many tokens; 1 (every token) */
    bool        tile_max;        /* false (default): exact top-k. true: the paper's released kernel's
                                    approximation, at most one candidate per aligned 128-key tile */
    uint64_t    store_max_ram;   /* bytes of the K/V store kept in RAM; past it the store continues in a
                                    memory-mapped file in store_dir (removed when the session is freed).
                                    0: RAM only */
    const char *store_dir;       /* directory of that file; NULL: $TMPDIR, else /tmp */
} lctx_reattention_params;

LCTX_API void lctx_reattention_default_params(lctx_reattention_params *out);

/* RefreshKV's knobs (LCTX_METHOD_REFRESHKV, and the RefreshKV decoding of
 * REFORM and ILRe; docs/methods/refreshkv.md). The prompt is prefilled with
 * full attention; then each layer decodes over a small partial cache of
 * `partial` slots per KV head, and a layer whose mean query drifts from the
 * one of its last full step (cosine <= threshold, checked every `stride`
 * steps) runs one step of full attention and rebuilds its partial cache from
 * that step's probabilities (max over each GQA group, max-pooled by
 * `pool_kernel`, top `partial` - 1 + the current token). 0 = default. */
typedef enum lctx_refreshkv_schedule {
    LCTX_REFRESHKV_DYNAMIC = 0,   /* query-drift check every `stride` steps, per layer (the method) */
    LCTX_REFRESHKV_FIXED   = 1    /* every layer refreshes every `stride` steps (the paper's ablation) */
} lctx_refreshkv_schedule;

typedef struct lctx_refreshkv_params {
    uint32_t struct_size;      /* sizeof(lctx_refreshkv_params): set by lctx_refreshkv_default_params */
    int32_t  partial;          /* K: partial-cache slots per layer and KV head; 0: round(L / 8), L the prompt
                                  (the cache after the question, before the answer), at least 1 */
    int32_t  stride;           /* S: steps between query checks (dynamic) or refreshes (fixed); 0: 10 */
    float    threshold;        /* s: a layer refreshes when the cosine of its mean pre-RoPE query with the one of
                                  its last full step is <= s; 0: the model's calibrated value (SmolLM2-135M:
                                  0.9; other models: 0.85, the paper's Llama-3.1 value); < -1: never refresh
                                  (SnapKV), >= 1: refresh at every check */
    lctx_refreshkv_schedule schedule;  /* LCTX_REFRESHKV_DYNAMIC (default) or LCTX_REFRESHKV_FIXED */
    int32_t  pool_kernel;      /* max-pool width over the scores (odd); 0: 7 */
    int32_t  max_partial_run;  /* > 0: a layer also refreshes after this many steps without one; 0: never
                                  (the paper) */
    bool     gathered;         /* REFORM and ILRe: decode their recomputed cache with RefreshKV (lctx run
                                  --decode refreshkv); false (default): dense decoding. LCTX_METHOD_REFRESHKV
                                  ignores it */
} lctx_refreshkv_params;

LCTX_API void lctx_refreshkv_default_params(lctx_refreshkv_params *out);

/* The common fields of a session, and each method family's knobs behind a
 * pointer (NULL: that struct's defaults; the library copies what it points
 * to). Knobs of a family the method does not use are ignored. */
/* Element type of KV caches. LCTX_KV_Q8 (opt-in, lossy, CPU backend only):
 * each row of a key or value head as int8 codes and one f32 scale, about a
 * quarter of f32; decode reads it in place (docs/kv-storage.md has its
 * speed and its effect on logits and answers). */
typedef enum lctx_kv_type {
    LCTX_KV_F32 = 0,
    LCTX_KV_F16 = 1,
    LCTX_KV_Q8  = 2
} lctx_kv_type;

/* Arithmetic of the products in attention (attn_precision) and in the weight
 * matrix products (matmul_precision). docs/bf16.md has the speed and the
 * effect on logits and answers of each. */
typedef enum lctx_precision {
    LCTX_PRECISION_F32 = 0,   /* exact f32 (default) */
    LCTX_PRECISION_BF16 = 1,  /* opt-in, lossy, CPUs with AVX512_BF16: both factors rounded to bf16, sums in
                                 f32, in the work on many tokens at once (prefill, chunk encoding, recompute).
                                 Attention: q, k, v and the probabilities; matmuls: the weights (after
                                 dequantizing) and the activations. Decode steps, other CPUs and other backends
                                 stay f32 */
    LCTX_PRECISION_INT8 = 2   /* matmul_precision only; opt-in, lossy, CPUs with AVX2: the activations rounded to
                                 int8 in blocks of 32 (one f32 scale each), summed in integers with the
                                 weights' own codes (Q4_0, Q4_1, Q4_K, Q5_0, Q5_1; others stay f32), as
                                 llama.cpp multiplies them, in prefill, encoding and decode steps. Other
                                 CPUs and other backends stay f32 (docs/int8.md) */
} lctx_precision;

typedef struct lctx_session_params {
    uint32_t    struct_size;   /* sizeof(lctx_session_params): set by default_params */
    lctx_method method;        /* LCTX_METHOD_*; default LCTX_METHOD_REFORM (inputs that fit its budgets
                                  get FULL's answer; longer ones stay within the trained context) */
    int32_t     n_ctx;         /* FULL: KV cache capacity in tokens (document + question +
                                  answer); other methods: their decode cache (see their structs).
                                  <= 0: n_ctx_train of the model. */
    int32_t     n_threads;     /* <= 0: the model's n_threads */
    int32_t     n_batch;       /* tokens per forward batch while feeding; <= 0: 512 */
    lctx_progress_fn progress; /* optional, called during long calls */
    void       *progress_user_data;
    const lctx_reform_params *reform;  /* REFORM; NULL: lctx_reform_default_params */
    const lctx_kv_params     *kv;      /* TRUNCATE ... INFINIPOT and INFLLM; NULL: lctx_kv_default_params */
    const lctx_infllm_params *infllm;  /* INFLLM; NULL: lctx_infllm_default_params */
    lctx_kv_type kv_type;      /* element type of every KV cache of the session: LCTX_KV_F32 (default),
                                  LCTX_KV_F16 (half the memory) or LCTX_KV_Q8 (about a quarter; CPU
                                  only); docs/kv-storage.md has their effect */
    const lctx_ilre_params   *ilre;    /* ILRE; NULL: lctx_ilre_default_params */
    uint64_t    max_memory;    /* bytes the session may allocate: KV caches, REFORM's embedding store, ILRe's key index,
                                  InfLLM's memory store, forward buffers, an index being loaded. Every
                                  large allocation is checked first: one that would pass the limit fails
                                  with LCTX_ERR_OUT_OF_MEMORY naming the sizes (the session stays valid).
                                  0: no limit (allocations beyond the machine's RAM are still refused) */
    const lctx_reattention_params *reattention; /* REATTENTION; NULL: lctx_reattention_default_params */
    const lctx_refreshkv_params *refreshkv; /* REFRESHKV, and REFORM/ILRe with refreshkv->gathered; NULL:
                                  lctx_refreshkv_default_params */
    lctx_precision attn_precision;   /* LCTX_PRECISION_F32 (default) or LCTX_PRECISION_BF16 (see the enum) */
    lctx_precision matmul_precision; /* LCTX_PRECISION_F32 (default), LCTX_PRECISION_BF16 or _INT8 */
} lctx_session_params;

LCTX_API void lctx_session_default_params(lctx_session_params *out);

/* params may be NULL (defaults). An unimplemented method returns
 * LCTX_ERR_UNSUPPORTED (see lctx_method_is_implemented). The session keeps a reference to the model: free the
 * session before the model. */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_create(const lctx_model *model, const lctx_session_params *params,
                                                        lctx_session **out);
LCTX_API void lctx_session_free(lctx_session *session);
/* Message of the last failure of a call on this session ("" if none). */
LCTX_API const char *lctx_session_last_error(const lctx_session *session);
/* Thread-safe: asks the running call on this session to stop soon. A cancel
 * that finds no call running, or comes after the call's last check, is kept:
 * the next long call or lctx_decode returns LCTX_ERR_CANCELLED at once and
 * consumes it. A cancel is never lost and stops exactly one call. */
LCTX_API void lctx_session_cancel(lctx_session *session);
LCTX_API lctx_stage lctx_session_stage(const lctx_session *session);
/* Number of document tokens fed so far. */
LCTX_API int64_t lctx_session_n_fed(const lctx_session *session);

/* Stage 1: append document tokens. May be called any number of times. */
LCTX_API LCTX_NODISCARD lctx_status lctx_feed_chunk(lctx_session *session, const lctx_token *tokens,
                                                    size_t n_tokens);
/* Stage 2: finish reading; the document is sealed. */
LCTX_API LCTX_NODISCARD lctx_status lctx_build_index(lctx_session *session);
/* Stage 3: choose the document tokens that matter for a question. The
 * selection is library-owned; free it with lctx_selection_free. */
LCTX_API LCTX_NODISCARD lctx_status lctx_select(lctx_session *session, const lctx_token *query, size_t n_query,
                                                lctx_selection **out);
/* Stage 4: build the decode cache from the selection (+ its query). */
LCTX_API LCTX_NODISCARD lctx_status lctx_recompute(lctx_session *session, const lctx_selection *selection);

typedef struct lctx_sampling_params {
    uint32_t struct_size;       /* sizeof(lctx_sampling_params) */
    float    temperature;       /* <= 0: greedy (argmax) */
    int32_t  top_k;             /* <= 0: off */
    float    top_p;             /* >= 1: off */
    float    min_p;             /* <= 0: off */
    float    repeat_penalty;    /* 1: off; applied to the last repeat_last_n tokens */
    int32_t  repeat_last_n;     /* window for repeat_penalty; 0: off, -1: whole context */
    uint64_t seed;              /* same seed and inputs => same tokens */
} lctx_sampling_params;

LCTX_API void lctx_sampling_default_params(lctx_sampling_params *out); /* greedy */

/* Stage 5: sample the next token from the decode cache and append it. The
 * first call samples from the logits left by recompute. */
LCTX_API LCTX_NODISCARD lctx_status lctx_decode(lctx_session *session, const lctx_sampling_params *sampling,
                                                lctx_token *out_token);
/* Logits (n_vocab floats) that the next lctx_decode samples from; NULL before
 * recompute. Valid until the next call on this session. After lctx_decode or
 * lctx_decode_token this runs the forward pass of the token just returned
 * (work the next decode would otherwise do), so it can take as long as a
 * decode step; NULL if that fails (lctx_session_last_error says why). */
LCTX_API const float *lctx_session_logits(const lctx_session *session);
/* Stage 5 with the caller's token instead of a sampled one (teacher forcing,
 * e.g. the perplexity of a known continuation): *out_logprob (may be NULL) is
 * the natural log of the probability of `token` under the logits the next
 * lctx_decode would sample from; the token then enters the decode cache as a
 * sampled one would. */
LCTX_API LCTX_NODISCARD lctx_status lctx_decode_token(lctx_session *session, lctx_token token,
                                                      float *out_logprob);

/* RefreshKV decoding statistics since the last lctx_recompute (sessions of
 * LCTX_METHOD_REFRESHKV, or REFORM/ILRe with refreshkv->gathered). A layer
 * step is one layer of one decoded token; the prompt is not counted. A
 * sliding-window layer (Gemma 3's local layers) keeps no partial cache: it
 * attends over its whole window at every step, counts neither full nor
 * partial steps and is left out of effective_stride. */
typedef struct lctx_refreshkv_stats {
    uint32_t struct_size;        /* set by the caller to sizeof(lctx_refreshkv_stats); the library writes
                                    no byte past it */
    int32_t  n_layer;            /* layers */
    int64_t  partial;            /* K in use (partial-cache slots per layer and KV head) */
    int64_t  n_steps;            /* decoded tokens */
    int64_t  n_full;             /* layer steps with full attention (and a refresh), all layers */
    int64_t  n_partial;          /* layer steps over the partial cache, all layers */
    double   effective_stride;   /* mean over the layers with a partial cache of n_steps / (full steps of the
                                    layer, at least 1); 1 if no layer has one */
    double   full_attention_s;   /* wall time in full-attention steps' attention, refresh included */
    double   partial_attention_s;/* wall time in partial steps' attention (row copy included) */
    double   refresh_s;          /* of full_attention_s: rebuilding the partial caches (pool, top-k, gather) */
} lctx_refreshkv_stats;

/* Fills *stats and, per layer, the full and partial step counts into
 * layer_full / layer_partial (each may be NULL; min(capacity, n_layer)
 * entries). LCTX_ERR_UNSUPPORTED for a session that does not decode with
 * RefreshKV. */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_refreshkv_stats(const lctx_session *session,
                                                                 lctx_refreshkv_stats *stats, int64_t *layer_full,
                                                                 int64_t *layer_partial, size_t capacity);

/* Sets how the session decodes its next questions, from the next
 * lctx_recompute on (an answer in progress keeps its decoding). params
 * non-NULL: RefreshKV with those knobs (its `gathered` field is not read);
 * NULL: dense decoding, every step attending over the whole decode cache.
 * The document is not read again, so one session answers a question both
 * ways: a LCTX_METHOD_FULL session switched to RefreshKV answers as a
 * LCTX_METHOD_REFRESHKV session does and back as FULL does (the same
 * logits), a REFRESHKV session switched to dense answers as FULL does, and
 * REFORM or ILRe decode their recomputed cache either way.
 * For sessions of LCTX_METHOD_FULL, LCTX_METHOD_REFRESHKV, REFORM and ILRe,
 * in any stage. Other methods: LCTX_ERR_UNSUPPORTED; bad knobs:
 * LCTX_ERR_INVALID_ARG. Nothing changes on an error. */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_set_refreshkv(lctx_session *session,
                                                               const lctx_refreshkv_params *params);

/* Where a session's time went, per backend op (docs/profiling.md). Only for
 * a session created while the environment variable LCTX_PROFILE_OPS is set
 * (not empty, not "0"); others get LCTX_ERR_UNSUPPORTED. Each backend call
 * of the session is timed on its thread, until the backend has finished it
 * (a device backend is synchronized after each op, which costs it some
 * speed); a call inside another (an op issued in a parallel loop) counts in
 * the outer one only. What no op accounts for is the methods' own host work. */
typedef struct lctx_op_time {
    const char *op;     /* "matmul", "attention", "to_host", ... (static; the Backend method's name) */
    int64_t calls;
    double  seconds;    /* wall time inside the op, summed over its calls */
    int64_t bytes;      /* to_host, from_host, copy: bytes moved; alloc: bytes allocated; else 0 */
} lctx_op_time;

/* Writes the ops called so far, up to `capacity` of them, in a fixed order,
 * into ops (may be NULL with capacity 0); *n_ops (required) receives how many
 * there are in all, and *lifetime_s (may be NULL) the seconds since the
 * session was created. */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_op_times(const lctx_session *session, lctx_op_time *ops,
                                                          size_t capacity, size_t *n_ops, double *lifetime_s);

/* Index persistence (REFORM and ILRe): a document is encoded once (feed +
 * build_index) and questioned many times, also by other processes. A REFORM
 * file holds the token ids, the per-token embeddings, the final working cache,
 * the head profile; an ILRe file the token ids, the key index, the shallow
 * caches and the retrieval layer; both a fingerprint of the model, a version
 * and a checksum.
 * lctx_index_save: the session must be REFORM or ILRe and indexed (any stage
 * after lctx_build_index). lctx_session_load_index: creates a session of the
 * file's method in stage INDEXED; params may be NULL, its method is ignored,
 * and its selection and decode fields (REFORM: reform->recompute,
 * reform->keep_first/keep_last, reform->pool_half; ILRe: ilre->budget,
 * ilre->query_tokens, the kernels; n_ctx, n_threads, kv_type) apply; the
 * encoding sizes come from the file. A file
 * made for another model, truncated or altered is refused (LCTX_ERR_FORMAT,
 * or LCTX_ERR_INVALID_ARG for another model or head profile); the whole file
 * is checksummed before anything sized by it is allocated.
 * The save is durable: a unique temporary file in path's directory (no
 * symbolic link followed), fsync, rename over path, fsync of the directory;
 * a failed save (LCTX_ERR_IO) leaves a previous file at path whole.
 * docs/index-format.md describes the format (version 2; version 1 files are
 * refused: rebuild them). */
LCTX_API LCTX_NODISCARD lctx_status lctx_index_save(lctx_session *session, const char *path);
LCTX_API LCTX_NODISCARD lctx_status lctx_session_load_index(const lctx_model *model, const char *path,
                                                            const lctx_session_params *params,
                                                            lctx_session **out);

/* Selections */
LCTX_API void    lctx_selection_free(lctx_selection *selection);
LCTX_API int64_t lctx_selection_size(const lctx_selection *selection);  /* selected document tokens */
/* Copies min(capacity, size) positions (sorted ascending) / scores; returns the count copied. */
LCTX_API int64_t lctx_selection_positions(const lctx_selection *selection, int64_t *positions, int64_t capacity);
LCTX_API int64_t lctx_selection_scores(const lctx_selection *selection, float *scores, int64_t capacity);

/* The per-token scores behind the last successful lctx_select of a session
 * whose method scores every document token (REFORM and ILRe): one score per
 * document token, position t at index t, as select computed them (nothing is
 * scored again). For diagnostics: was a passage gathered, and by how much did
 * it miss (docs/methods/reform.md, "Probing a selection").
 *   scores: each token's own score. REFORM: the mean per-head cosine of its
 *           embedding with the best-matching question token; ILRe: the largest
 *           attention probability a question head gives it at the retrieval
 *           layer.
 *   ranked: the score the selection ranks tokens by. REFORM: `scores`
 *           max-pooled over reform->pool_half tokens on each side; the top
 *           tokens by (ranked desc, scores desc, position asc) fill the budget
 *           left by the forced ones. ILRe: `scores` again (its allocator pools
 *           them in blocks). lctx_selection_scores of the selection gives
 *           these at the selection's positions.
 *   capacity: entries in each non-NULL buffer; either buffer may be NULL.
 *   *n_tokens (required): the number of scored tokens, set on LCTX_OK and on
 *           LCTX_ERR_BUFFER_TOO_SMALL (a non-NULL buffer with capacity below
 *           it). Pass both buffers NULL to ask for the size.
 *   *forced_first, *forced_last (each may be NULL): the first and last
 *           document tokens gathered whatever their scores (REFORM:
 *           keep_first/keep_last; ILRe: the sinks; all tokens when the document
 *           fits the budget).
 * LCTX_ERR_UNSUPPORTED for a method without per-token scores,
 * LCTX_ERR_STATE when no select has succeeded on the session yet (a select
 * that failed or was cancelled leaves none: the last one did not finish). */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_select_scores(const lctx_session *session, float *scores,
                                                               float *ranked, int64_t capacity, int64_t *n_tokens,
                                                               int64_t *forced_first, int64_t *forced_last);

/* What the latest step's attention could see, for a method that attends to a
 * different part of its cache at each step (ReAttention): share[t], for each
 * stored token t (document, then question and answer so far), is the share
 * of layers whose attention window ([global | selected spans | local]) held
 * it, in [0, 1]; all 0 before the first step. For diagnostics: was a passage
 * in view when the answer was decoded.
 *   capacity: entries in share (may be NULL to ask for the size);
 *   *n_tokens (required): the number of stored tokens, set on LCTX_OK and
 *           on LCTX_ERR_BUFFER_TOO_SMALL.
 * LCTX_ERR_UNSUPPORTED for a method whose decode attends to its whole cache:
 * for those, the positions of lctx_select are what the cache keeps. */
LCTX_API LCTX_NODISCARD lctx_status lctx_session_attended(const lctx_session *session, float *share,
                                                          int64_t capacity, int64_t *n_tokens);

#ifdef __cplusplus
}
#endif

#endif /* LCTX_H */
