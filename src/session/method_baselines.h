// The baselines of the papers behind one factory: TRUNCATE (method_truncate.h),
// the recurrent compressed-cache methods STREAMING, H2O, TOVA, SNAPKV and
// INFINIPOT (method_recurrent.h) and INFLLM (method_infllm.h).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"
#include "session/method.h"

namespace lctx {

bool is_baseline_method(lctx_method m);
// Validates params (LCTX_ERR_INVALID_ARG) and builds the method.
std::unique_ptr<Method> make_baseline_method(const Model &model, Backend &backend,
                                             const lctx_session_params &params);

} // namespace lctx
