// The ABI rule of lctx.h for params structs (struct_size first): a caller's
// struct may be smaller than ours (built against an older header; the tail
// takes the defaults) but never larger, and no byte past its struct_size is
// read. Every place that takes a params struct from outside reads it with
// read_params.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "lctx.h"

namespace lctx {

// The caller's struct_size, checked: at least the struct_size field itself,
// at most sizeof(T). type_name and default_fn name the struct and its
// lctx_*_default_params function in the message (LCTX_ERR_INVALID_ARG).
inline void check_struct_size(uint32_t size, size_t ours, const char *type_name, const char *default_fn) {
    if (size == 0)
        fail(LCTX_ERR_INVALID_ARG, "%s.struct_size is 0: fill the struct with %s() first", type_name, default_fn);
    if (size < sizeof(uint32_t))
        fail(LCTX_ERR_INVALID_ARG, "%s.struct_size is %u, smaller than the struct_size field itself (%zu): fill "
             "the struct with %s()", type_name, size, sizeof(uint32_t), default_fn);
    if (size > ours)
        fail(LCTX_ERR_INVALID_ARG, "%s.struct_size is %u, larger than this library's %s (%zu bytes, lctx %d.%d.%d): "
             "the caller was built against a newer lctx.h than the library it runs with", type_name, size, type_name,
             ours, LCTX_VERSION_MAJOR, LCTX_VERSION_MINOR, LCTX_VERSION_PATCH);
}

// A full T: the defaults of fill_defaults, overwritten by the first
// struct_size bytes of *user (NULL: the defaults). The result's struct_size
// is sizeof(T).
template <class T>
T read_params(const T *user, void (*fill_defaults)(T *), const char *type_name, const char *default_fn) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>);
    static_assert(offsetof(T, struct_size) == 0 && sizeof(T{}.struct_size) == sizeof(uint32_t));
    T p;
    fill_defaults(&p);
    if (!user) return p;
    uint32_t size = 0;
    std::memcpy(&size, user, sizeof size);
    check_struct_size(size, sizeof(T), type_name, default_fn);
    std::memcpy(static_cast<void *>(&p), user, size);
    p.struct_size = static_cast<uint32_t>(sizeof(T));
    return p;
}

} // namespace lctx
