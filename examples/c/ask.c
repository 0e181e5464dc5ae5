/* ask: load a model, read a text file, ask a question, stream the answer.
 * usage: ask MODEL.gguf FILE.txt "question" [max_tokens] */
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

/* Tokens of text in a malloc'd array (*n of them), or NULL. */
static lctx_token *tokenize(const lctx_model *m, const char *text, bool bos, size_t *n) {
    size_t cap = strlen(text) + 8;
    lctx_token *t = malloc(cap * sizeof *t);
    if (t && lctx_tokenize(m, text, strlen(text), bos, true, t, cap, n) == LCTX_OK) return t;
    free(t);
    return NULL;
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

    lctx_session_params sp;
    lctx_session_default_params(&sp);
    lctx_session *s = NULL;
    if (lctx_session_create(m, &sp, &s) != LCTX_OK) return fail("creating the session");

    /* The document (framed as the start of a user turn), then the question. */
    char *framed = malloc(strlen(prefix) + doc_len + 1);
    sprintf(framed, "%s%s", prefix, doc);
    size_t n_doc = 0, n_q = 0;
    lctx_token *doc_tokens = tokenize(m, framed, true, &n_doc);
    char *question = malloc(strlen(argv[3]) + strlen(suffix) + 3);
    sprintf(question, "\n\n%s%s", argv[3], suffix);
    lctx_token *q_tokens = tokenize(m, question, false, &n_q);
    if (!doc_tokens || !q_tokens) return fail("tokenizing");

    lctx_selection *sel = NULL;
    if (lctx_feed_chunk(s, doc_tokens, n_doc) != LCTX_OK) return fail("feeding the document");
    if (lctx_build_index(s) != LCTX_OK) return fail("building the index");
    if (lctx_select(s, q_tokens, n_q, &sel) != LCTX_OK) return fail("selecting");
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
    free(doc_tokens); free(q_tokens); free(framed); free(question); free(doc);
    return 0;
}
