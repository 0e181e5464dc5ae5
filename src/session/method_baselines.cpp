#include "session/method_baselines.h"

#include "session/baseline_params.h"
#include "session/method_infllm.h"
#include "session/method_recurrent.h"
#include "session/method_truncate.h"

namespace lctx {

bool is_baseline_method(lctx_method m) {
    switch (m) {
    case LCTX_METHOD_TRUNCATE: case LCTX_METHOD_STREAMING: case LCTX_METHOD_H2O: case LCTX_METHOD_TOVA:
    case LCTX_METHOD_SNAPKV: case LCTX_METHOD_INFINIPOT: case LCTX_METHOD_INFLLM:
        return true;
    default:
        return false;
    }
}

std::unique_ptr<Method> make_baseline_method(const Model &model, Backend &backend,
                                             const lctx_session_params &params) {
    if (params.method == LCTX_METHOD_INFLLM) return make_infllm_method(model, backend, params);
    const BaselineParams p = baseline_params_from(model.hparams(), params);
    if (params.method == LCTX_METHOD_TRUNCATE) return std::make_unique<TruncateMethod>(model, backend, p);
    return std::make_unique<RecurrentMethod>(model, backend, p);
}

} // namespace lctx
