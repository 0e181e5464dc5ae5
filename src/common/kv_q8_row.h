// Layout of a q8 KV row (lctx_kv_type LCTX_KV_Q8, docs/kv-storage.md): the
// d values of one key or value row as d int8 codes, zero bytes up to a
// multiple of 4, then one f32 scale = max |x| / 127 (NaN when the row holds a
// NaN or an infinity); x ~ code * scale. A row is q8_row_bytes(d) bytes and
// the strides of q8 storage count bytes.
#pragma once

#include <cstdint>
#include <cstring>

namespace lctx {

// static: internal linkage, so the copies in the ISA-specific kernel
// translation units never merge at link time (kernels/cpu/simd_impl.h).
static inline int64_t q8_scale_offset(int64_t d) { return (d + 3) / 4 * 4; }
static inline int64_t q8_row_bytes(int64_t d) { return q8_scale_offset(d) + 4; }
static inline float q8_row_scale(const uint8_t *row, int64_t d) {
    float s;
    std::memcpy(&s, row + q8_scale_offset(d), sizeof s);
    return s;
}

} // namespace lctx
