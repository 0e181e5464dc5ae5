// Index persistence (REFORM, ILRe): lctx_index_save, lctx_session_load_index.
#include <string>

#include "api/handles.h"
#include "session/index_file.h"
#include "session/session_params.h"

using lctx::api::guarded;
using lctx::api::require;

extern "C" {

LCTX_API lctx_status lctx_index_save(lctx_session *s, const char *path) {
    if (!s || !s->session)
        return lctx::api::set_error(LCTX_ERR_INVALID_ARG, "lctx_index_save: session is NULL");
    return guarded(s, [&] {
        require(path, "lctx_index_save", "path");
        s->session->save_index(path);
    });
}

LCTX_API lctx_status lctx_session_load_index(const lctx_model *model, const char *path,
                                             const lctx_session_params *params, lctx_session **out) {
    if (out) *out = nullptr;
    return guarded(nullptr, [&] {
        require(out, "lctx_session_load_index", "out");
        require(model, "lctx_session_load_index", "model");
        require(path, "lctx_session_load_index", "path");
        lctx_session_params p = lctx::read_session_params(params);
        // The file's kind picks the method (the container is verified in full by the method's reader).
        p.method = lctx::read_index_kind(path) == lctx::IndexKind::ILRE ? LCTX_METHOD_ILRE : LCTX_METHOD_REFORM;
        auto s = std::make_unique<lctx_session>();
        s->owner = model;
        s->session = std::make_unique<lctx::Session>(*model->model, p, model->backend);
        s->session->load_index(path);
        *out = s.release();
    });
}

} // extern "C"
