// Index file load (lctx_session_load_index) on the micro model. The input is
// the payload of a REFORM index; the target wraps it in a container with the
// right size and checksum, so the payload parser is fuzzed and not only the
// checksum. An input whose first byte is odd is written as it is (the
// container checks). What loads is questioned (select, recompute, decode).

#include "fuzz_common.h"
#include "scratch_path.h"
#include "session/hash64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::string path = scratch::path("lctx_fuzz_index", "scratch.lctx");   // removed at exit
    std::string file;
    if (size > 0 && (data[0] & 1)) {
        file.assign(reinterpret_cast<const char *>(data + 1), size - 1);
    } else {
        const size_t n = size ? size - 1 : 0;
        const uint8_t *payload = size ? data + 1 : data;
        const uint32_t version = 2, kind = 1;
        const uint64_t total = 24 + n + 8;
        file.append("LCTXRIDX", 8);
        file.append(reinterpret_cast<const char *>(&version), 4);
        file.append(reinterpret_cast<const char *>(&kind), 4);
        file.append(reinterpret_cast<const char *>(&total), 8);
        file.append(reinterpret_cast<const char *>(payload), n);
        lctx::Hash64 h;
        h.update(file.data(), file.size());
        const uint64_t sum = h.digest();
        file.append(reinterpret_cast<const char *>(&sum), 8);
    }
    if (FILE *f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(file.data(), 1, file.size(), f);
        std::fclose(f);
    }
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.n_ctx = 64;
    sp.n_threads = 1;
    lctx_reform_params rp;
    lctx_reform_default_params(&rp);
    rp.recompute = 32;
    sp.reform = &rp;
    lctx_session *s = nullptr;
    if (fuzz::check(lctx_session_load_index(fuzz::micro_model(), path.c_str(), &sp, &s), "lctx_session_load_index") !=
        LCTX_OK) {
        if (s) std::abort();
        return 0;
    }
    const lctx_token q[3] = {40, 41, 42};
    lctx_selection *sel = nullptr;
    if (fuzz::check(lctx_select(s, q, 3, &sel), "lctx_select") == LCTX_OK) {
        if (fuzz::check(lctx_recompute(s, sel), "lctx_recompute") == LCTX_OK) {
            lctx_token t = 0;
            (void)fuzz::check(lctx_decode(s, nullptr, &t), "lctx_decode");
        }
        lctx_selection_free(sel);
    }
    lctx_session_free(s);
    return 0;
}
