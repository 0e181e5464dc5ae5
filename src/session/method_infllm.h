// InfLLM baseline (Xiao et al. 2024): block memory with representative
// tokens; each chunk (and each decode step) attends to the initial tokens,
// the memory blocks retrieved for it per layer and KV head, and a local
// window. The full KV of the document is kept (fp16) as the memory store.
#pragma once

#include <memory>

#include "kernels/cpu/thread_pool.h"
#include "lctx.h"
#include "model/model.h"
#include "session/method.h"

namespace lctx {

// Validates the INFLLM fields of params (LCTX_ERR_INVALID_ARG) and builds the method.
std::unique_ptr<Method> make_infllm_method(const Model &model, cpu::ThreadPool &pool,
                                           const lctx_session_params &params);

} // namespace lctx
