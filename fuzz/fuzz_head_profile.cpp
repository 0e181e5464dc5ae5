// Head-profile JSON (lctx_reform_params.heads_path, `lctx heads` output):
// parse, validate against the micro model, print and parse again; and
// through the C API as a REFORM session's profile file.

#include "api/handles.h"
#include "common/error.h"
#include "fuzz_common.h"
#include "scratch_path.h"
#include "session/head_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string json(reinterpret_cast<const char *>(data), size);
    const lctx::Hparams &hp = fuzz::micro_model()->model->hparams();
    bool valid = false;
    try {
        lctx::HeadProfile p = lctx::parse_head_profile(json, "fuzz");
        lctx::validate_head_profile(p, hp);
        valid = true;
        // What lctx writes it reads back the same: the same heads at once, and
        // the same text from the second print on (the first print replaces
        // invalid UTF-8 in the name by \ufffd escapes).
        const lctx::HeadProfile q = lctx::parse_head_profile(lctx::head_profile_json(p), "fuzz (printed)");
        const std::string once = lctx::head_profile_json(q);
        const lctx::HeadProfile r = lctx::parse_head_profile(once, "fuzz (printed twice)");
        if (lctx::head_profile_json(r) != once || q.heads_string() != p.heads_string() ||
            r.heads_string() != p.heads_string()) {
            std::fprintf(stderr, "fuzz_head_profile: print/parse round trip differs\n");
            std::abort();
        }
    } catch (const lctx::Error &e) {
        if (e.status() == LCTX_ERR_INTERNAL) std::abort();
    }
    // The file route: a REFORM session given this profile.
    static const std::string path = scratch::path("lctx_fuzz_profile", "scratch.json");   // removed at exit
    if (FILE *f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(data, 1, size, f);
        std::fclose(f);
    }
    lctx_reform_params rp;
    lctx_reform_default_params(&rp);
    rp.heads_path = path.c_str();
    rp.chunk = 16;
    rp.budget = 16;
    rp.recompute = 32;
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_REFORM;
    sp.n_ctx = 64;
    sp.n_threads = 1;
    sp.reform = &rp;
    lctx_session *s = nullptr;
    const lctx_status st = fuzz::check(lctx_session_create(fuzz::micro_model(), &sp, &s), "lctx_session_create");
    if (valid && st != LCTX_OK) {
        std::fprintf(stderr, "fuzz_head_profile: a valid profile was refused: %s\n", lctx_last_error());
        std::abort();
    }
    if (s) {
        const lctx_token doc[20] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24};
        if (fuzz::check(lctx_feed_chunk(s, doc, 20), "lctx_feed_chunk") == LCTX_OK &&
            fuzz::check(lctx_build_index(s), "lctx_build_index") == LCTX_OK) {
            lctx_selection *sel = nullptr;
            if (fuzz::check(lctx_select(s, doc, 3, &sel), "lctx_select") == LCTX_OK) lctx_selection_free(sel);
        }
        lctx_session_free(s);
    }
    return 0;
}
