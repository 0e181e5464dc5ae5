// The public params structs read by the ABI rule of lctx.h (common/params_abi.h):
// NULL gives the defaults, a smaller struct (an older lctx.h) gets the
// defaults for its missing tail, a bad struct_size is LCTX_ERR_INVALID_ARG.
// Each result is a full struct whose struct_size is sizeof the struct.
#pragma once

#include "common/params_abi.h"
#include "lctx.h"

namespace lctx {

inline lctx_session_params read_session_params(const lctx_session_params *p) {
    return read_params(p, lctx_session_default_params, "lctx_session_params", "lctx_session_default_params");
}

inline lctx_sampling_params read_sampling_params(const lctx_sampling_params *p) {
    return read_params(p, lctx_sampling_default_params, "lctx_sampling_params", "lctx_sampling_default_params");
}

inline lctx_reform_params read_reform_params(const lctx_reform_params *p) {
    return read_params(p, lctx_reform_default_params, "lctx_reform_params", "lctx_reform_default_params");
}

inline lctx_kv_params read_kv_params(const lctx_kv_params *p) {
    return read_params(p, lctx_kv_default_params, "lctx_kv_params", "lctx_kv_default_params");
}

inline lctx_infllm_params read_infllm_params(const lctx_infllm_params *p) {
    return read_params(p, lctx_infllm_default_params, "lctx_infllm_params", "lctx_infllm_default_params");
}

} // namespace lctx
