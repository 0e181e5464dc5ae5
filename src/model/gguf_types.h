// Helpers shared by the GGUF reader files: value type names and sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/gguf.h"

namespace lctx {

bool gguf_valid_value_type(uint32_t t);
// Bytes of one scalar value; 0 for STRING and ARRAY.
size_t gguf_scalar_size(GgufValueType t);
const char *gguf_value_type_name(GgufValueType t);  // "uint32", "string", "array"
std::string gguf_type_name(const GgufValue &v);     // "uint32", "array[string]", "array[array[int8]]"

} // namespace lctx
