/* Asks the installed library for a backend by name and prints its log lines
 * on stdout (packaging/test_install.sh): where the CUDA module was installed
 * beside liblctx.so, the registry must find it there, and on a machine
 * without a device the fallback line names that file.
 * usage: backend_probe MODEL.gguf BACKEND */
#include <stdio.h>

#include "lctx.h"

static void print_line(lctx_log_level level, const char *message, void *user_data) {
    (void)level;
    (void)user_data;
    printf("%s\n", message);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: backend_probe MODEL.gguf BACKEND\n");
        return 2;
    }
    lctx_log_set(print_line, LCTX_LOG_INFO, NULL);
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = 1;
    mp.backend = argv[2];
    lctx_model *m = NULL;
    if (lctx_model_load(argv[1], &mp, &m) != LCTX_OK) {
        fprintf(stderr, "load: %s\n", lctx_last_error());
        return 1;
    }
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.n_threads = 1;
    lctx_session *s = NULL;
    if (lctx_session_create(m, &sp, &s) != LCTX_OK) {
        fprintf(stderr, "session: %s\n", lctx_last_error());
        lctx_model_free(m);
        return 1;
    }
    printf("build: %s\n", lctx_build_info());
    lctx_session_free(s);
    lctx_model_free(m);
    return 0;
}
