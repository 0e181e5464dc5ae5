// GGUF load from memory, then tokenize and a short forward on what loads.
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = 1;
    mp.backend = "cpu";
    lctx_model *m = nullptr;
    if (fuzz::check(lctx_model_load_from_memory(data, size, &mp, &m), "lctx_model_load_from_memory") != LCTX_OK) {
        if (m) std::abort();   // *out is NULL on failure
        return 0;
    }
    // Everything the getters report, then tokens, pieces, chat and a forward.
    (void)lctx_model_architecture(m);
    (void)lctx_model_name(m);
    char buf[256];
    (void)lctx_model_meta_string(m, "general.name", buf, sizeof buf);
    const char text[] = "Once upon a time, <|im_start|> there\n was \xE2\x96\x81 a tiny model.";
    lctx_token toks[128];
    size_t n = 0;
    if (fuzz::check(lctx_tokenize(m, text, sizeof text - 1, true, true, toks, 128, &n), "lctx_tokenize") == LCTX_OK) {
        size_t need = 0;
        (void)fuzz::check(lctx_detokenize(m, toks, n, true, buf, sizeof buf, &need), "lctx_detokenize");
        for (size_t i = 0; i < n; ++i)
            (void)fuzz::check(lctx_token_to_piece(m, toks[i], true, buf, sizeof buf, &need), "lctx_token_to_piece");
        lctx_chat_message msg{"user", "hello"};
        (void)fuzz::check(lctx_chat_apply(m, &msg, 1, true, buf, sizeof buf, &need), "lctx_chat_apply");
        lctx_session_params sp;
        lctx_session_default_params(&sp);
        sp.method = LCTX_METHOD_FULL;   // this target means FULL (the library default is REFORM)
        sp.n_ctx = 32;
        sp.n_threads = 1;
        lctx_session *s = nullptr;
        if (fuzz::check(lctx_session_create(m, &sp, &s), "lctx_session_create") == LCTX_OK) {
            const size_t k = std::min<size_t>(n, 8);
            if (fuzz::check(lctx_feed_chunk(s, toks, k), "lctx_feed_chunk") == LCTX_OK &&
                fuzz::check(lctx_build_index(s), "lctx_build_index") == LCTX_OK) {
                lctx_selection *sel = nullptr;
                lctx_token q = toks[0];
                if (n > 0 && fuzz::check(lctx_select(s, &q, 1, &sel), "lctx_select") == LCTX_OK) {
                    if (fuzz::check(lctx_recompute(s, sel), "lctx_recompute") == LCTX_OK) {
                        lctx_token t = 0;
                        (void)fuzz::check(lctx_decode(s, nullptr, &t), "lctx_decode");
                    }
                    lctx_selection_free(sel);
                }
            }
            lctx_session_free(s);
        }
    }
    lctx_model_free(m);
    return 0;
}
