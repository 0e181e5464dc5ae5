/* ask: load a model, read a (long) text file, ask a question, stream the answer.
 * usage: ask MODEL.gguf FILE.txt "question" [max_tokens]
 *
 * The session uses the library's default method, REFORM, so FILE.txt may be
 * far longer than the model's trained context (examples/make_haystack.py
 * writes one). The framing is the bindings' Conversation's: the chat
 * template's user turn holds the document, then "\n\n" + the question. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lctx.h>

static int fail(const char *what) {
    fprintf(stderr, "ask: %s: %s\n", what, lctx_last_error());
    return 1;
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    *n = buf ? fread(buf, 1, (size_t)size, f) : 0;
    if (buf) buf[*n] = 0;
    fclose(f);
    return buf;
}

/* Tokens of text in a malloc'd array (*n of them), or NULL. special: parse
 * special-token text (the template's markers); a document is plain text. */
static lctx_token *tokenize(const lctx_model *m, const char *text, bool bos, bool special, size_t *n) {
    size_t cap = strlen(text) + 8;
    lctx_token *t = malloc(cap * sizeof *t);
    if (t && lctx_tokenize(m, text, strlen(text), bos, special, t, cap, n) == LCTX_OK) return t;
    free(t);
    return NULL;
}

static int progress(float done, void *user_data) {
    const char *const *stage = user_data;
    fprintf(stderr, "\r%s %3.0f%%%s", *stage, 100.0 * done, done >= 1.0f ? "\n" : "");
    return 0; /* non-zero would cancel */
}

/* Text of a one-message chat with `user` as content, cut at `user` into the
 * part before (prefix) and after (suffix, ending with the assistant's turn). */
static void prompt_parts(const lctx_model *m, char *prefix, char *suffix, size_t cap) {
    const char *marker = "\x01lctx-user-turn\x01";
    lctx_chat_message msg = {"user", marker};
    char *buf = malloc(cap);
    size_t n = 0;
    strcpy(prefix, "");
    strcpy(suffix, "\n");
    if (buf && lctx_chat_apply(m, &msg, 1, true, buf, cap, &n) == LCTX_OK) {
        char *at = strstr(buf, marker);
        if (at) {
            snprintf(prefix, cap, "%.*s", (int)(at - buf), buf);
            snprintf(suffix, cap, "%s", at + strlen(marker));
        }
    }
    free(buf);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: ask MODEL.gguf FILE.txt \"question\" [max_tokens]\n");
        return 2;
    }
    int max_tokens = argc > 4 ? atoi(argv[4]) : 128;
    size_t doc_len = 0;
    char *doc = read_file(argv[2], &doc_len);
    if (!doc) { fprintf(stderr, "ask: cannot read %s\n", argv[2]); return 1; }

    lctx_model *m = NULL;
    if (lctx_model_load(argv[1], NULL, &m) != LCTX_OK) return fail("loading the model");
    char prefix[1024], suffix[1024];
    prompt_parts(m, prefix, suffix, sizeof prefix);

    const char *stage = "feed";
    lctx_session_params sp;
    lctx_session_default_params(&sp);          /* method REFORM: any length */
    sp.progress = progress;
    sp.progress_user_data = &stage;
    lctx_session *s = NULL;
    if (lctx_session_create(m, &sp, &s) != LCTX_OK) return fail("creating the session");

    /* The start of a user turn, the document (plain text), then the question. */
    size_t n_pre = 0, n_doc = 0, n_q = 0;
    const bool framed = prefix[0] != 0;   /* no chat template: BOS goes with the document */
    lctx_token *pre_tokens = tokenize(m, prefix, framed, true, &n_pre);
    lctx_token *doc_tokens = tokenize(m, doc, !framed, false, &n_doc);
    char *question = malloc(strlen(argv[3]) + strlen(suffix) + 3);
    sprintf(question, "\n\n%s%s", argv[3], suffix);
    lctx_token *q_tokens = tokenize(m, question, false, true, &n_q);
    if (!pre_tokens || !doc_tokens || !q_tokens) return fail("tokenizing");
    fprintf(stderr, "ask: %zu tokens (trained context %d)\n", n_pre + n_doc, (int)lctx_model_n_ctx_train(m));

    lctx_selection *sel = NULL;
    if (lctx_feed_chunk(s, pre_tokens, n_pre) != LCTX_OK) return fail("feeding the document");
    if (lctx_feed_chunk(s, doc_tokens, n_doc) != LCTX_OK) return fail("feeding the document");
    stage = "build_index";
    if (lctx_build_index(s) != LCTX_OK) return fail("building the index");
    stage = "select";
    if (lctx_select(s, q_tokens, n_q, &sel) != LCTX_OK) return fail("selecting");
    stage = "recompute";
    if (lctx_recompute(s, sel) != LCTX_OK) return fail("recomputing");

    lctx_token tok;
    char piece[256];
    for (int i = 0; i < max_tokens; i++) {
        if (lctx_decode(s, NULL, &tok) != LCTX_OK) return fail("decoding");
        if (lctx_token_is_eog(m, tok)) break;
        size_t n = 0;
        if (lctx_token_to_piece(m, tok, false, piece, sizeof piece, &n) == LCTX_OK) fwrite(piece, 1, n, stdout);
        fflush(stdout);
    }
    printf("\n");

    lctx_selection_free(sel);
    lctx_session_free(s);
    lctx_model_free(m);
    free(pre_tokens); free(doc_tokens); free(q_tokens); free(question); free(doc);
    return 0;
}
