// Library-level entry points: versions, status strings, last error.
#include <cstring>

#include "api/handles.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "lctx_revision.h"   // generated: LCTX_REVISION

namespace {
thread_local std::string t_last_error;
}

namespace lctx::api {

lctx_status set_error(lctx_status status, const std::string &message, lctx_session *session) {
    t_last_error = message;
    if (session) session->last_error = message;
    return status;
}

void copy_out(const std::string &s, char *buf, size_t buf_size, size_t *n_out, const char *fn) {
    require(n_out, fn, "n_out");
    *n_out = s.size();
    if (buf_size > 0 && !buf) fail(LCTX_ERR_INVALID_ARG, "%s: buf is NULL but buf_size is %zu", fn, buf_size);
    if (buf_size < s.size())
        fail(LCTX_ERR_BUFFER_TOO_SMALL, "%s: the buffer holds %zu bytes, %zu are needed", fn, buf_size, s.size());
    if (!s.empty()) std::memcpy(buf, s.data(), s.size());
    if (buf_size > s.size()) buf[s.size()] = '\0';
}

} // namespace lctx::api

extern "C" {

LCTX_API int32_t lctx_version_number(void) { return LCTX_VERSION_NUMBER; }

LCTX_API const char *lctx_version(void) {
#define LCTX_STR2(x) #x
#define LCTX_STR(x) LCTX_STR2(x)
    return LCTX_STR(LCTX_VERSION_MAJOR) "." LCTX_STR(LCTX_VERSION_MINOR) "." LCTX_STR(LCTX_VERSION_PATCH);
}

LCTX_API const char *lctx_build_info(void) {
    static const std::string info = std::string("lctx ") + lctx_version() + " (" LCTX_REVISION "); compiler " __VERSION__ +
                                    "; cpu kernels " + lctx::cpu_backend_variant() +
                                    "; " + lctx::backends_summary();
    return info.c_str();
}

LCTX_API const char *lctx_status_string(lctx_status status) {
    switch (status) {
    case LCTX_OK: return "ok";
    case LCTX_ERR_INVALID_ARG: return "invalid argument";
    case LCTX_ERR_IO: return "input/output error";
    case LCTX_ERR_FORMAT: return "malformed file";
    case LCTX_ERR_UNSUPPORTED: return "not supported";
    case LCTX_ERR_OUT_OF_MEMORY: return "out of memory";
    case LCTX_ERR_STATE: return "call made in the wrong stage";
    case LCTX_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case LCTX_ERR_CANCELLED: return "cancelled";
    case LCTX_ERR_CONTEXT_FULL: return "context full";
    case LCTX_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

LCTX_API const char *lctx_last_error(void) { return t_last_error.c_str(); }

} // extern "C"
