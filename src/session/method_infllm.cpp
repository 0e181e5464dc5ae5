#include "session/method_infllm.h"

#include "common/error.h"

namespace lctx {

std::unique_ptr<Method> make_infllm_method(const Model &, cpu::ThreadPool &, const lctx_session_params &) {
    fail(LCTX_ERR_UNSUPPORTED, "method 'infllm' is not implemented yet in this version of lctx");
}

} // namespace lctx
