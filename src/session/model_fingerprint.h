// A fingerprint of a model's weights: hyper-parameters, every tensor's shape
// and type, and samples of its bytes (start, middle, end). Index files store
// it so that an index is never used with another model (or quantization).
#pragma once

#include <cstdint>

#include "model/model.h"

namespace lctx {

uint64_t model_fingerprint(const Model &model);

} // namespace lctx
