#include "session/reform_profile.h"

namespace lctx {

const char *ReformProfile::name(int part) {
    static const char *const names[N_PARTS] = {"head_capture", "exit_norm", "exit_proj", "exit_capture",
                                               "score_accum",  "evict_keep", "kv_compact", "store"};
    return part >= 0 && part < N_PARTS ? names[part] : "?";
}

double ReformProfile::parts_total() const {
    double t = 0.0;
    for (double s : seconds) t += s;
    return t;
}

} // namespace lctx
