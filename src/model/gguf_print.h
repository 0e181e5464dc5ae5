// Human-readable dump of a GGUF file (for the `lctx` command line).
#pragma once

#include <cstdio>

#include "model/gguf.h"

namespace lctx {

// Version, alignment, every metadata key with its type and (abbreviated)
// value, the tensor table (name, type, shape, offset, bytes) and totals.
void print_gguf_summary(const GgufFile &file, FILE *out);

} // namespace lctx
