// The ABI rule of lctx.h for params structs (struct_size first): a caller's
// struct may be smaller than ours (built against an older header; the tail
// takes the defaults) but never larger, and no byte past its struct_size is
// read. A struct of an older header ends on a field boundary: a struct_size
// that ends inside a field (half a pointer would be copied and the other half
// taken from the default) is refused. Every place that takes a params struct
// from outside reads it with read_params.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
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

// The fields of each public params struct, in order (ParamsFields<T>::list).
// A field appended to a struct in lctx.h is appended here too.
struct FieldSpan {
    size_t offset, size;
    const char *name;
};
#define LCTX_FIELD(T, f) FieldSpan{offsetof(T, f), sizeof(static_cast<T *>(nullptr)->f), #f}
template <class T> struct ParamsFields;
template <> struct ParamsFields<lctx_model_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_model_params, struct_size), LCTX_FIELD(lctx_model_params, n_threads),
        LCTX_FIELD(lctx_model_params, use_mmap),    LCTX_FIELD(lctx_model_params, backend),
        LCTX_FIELD(lctx_model_params, max_memory)};
};
template <> struct ParamsFields<lctx_session_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_session_params, struct_size), LCTX_FIELD(lctx_session_params, method),
        LCTX_FIELD(lctx_session_params, n_ctx),       LCTX_FIELD(lctx_session_params, n_threads),
        LCTX_FIELD(lctx_session_params, n_batch),     LCTX_FIELD(lctx_session_params, progress),
        LCTX_FIELD(lctx_session_params, progress_user_data), LCTX_FIELD(lctx_session_params, reform),
        LCTX_FIELD(lctx_session_params, kv),          LCTX_FIELD(lctx_session_params, infllm),
        LCTX_FIELD(lctx_session_params, kv_type),     LCTX_FIELD(lctx_session_params, ilre),
        LCTX_FIELD(lctx_session_params, max_memory),  LCTX_FIELD(lctx_session_params, reattention),
        LCTX_FIELD(lctx_session_params, refreshkv),   LCTX_FIELD(lctx_session_params, attn_precision),
        LCTX_FIELD(lctx_session_params, matmul_precision)};
};
template <> struct ParamsFields<lctx_reform_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_reform_params, struct_size), LCTX_FIELD(lctx_reform_params, chunk),
        LCTX_FIELD(lctx_reform_params, budget),      LCTX_FIELD(lctx_reform_params, recompute),
        LCTX_FIELD(lctx_reform_params, sink),        LCTX_FIELD(lctx_reform_params, recent),
        LCTX_FIELD(lctx_reform_params, obs),         LCTX_FIELD(lctx_reform_params, keep_first),
        LCTX_FIELD(lctx_reform_params, keep_last),   LCTX_FIELD(lctx_reform_params, pool_half),
        LCTX_FIELD(lctx_reform_params, h2o_per_chunk), LCTX_FIELD(lctx_reform_params, heads_path),
        LCTX_FIELD(lctx_reform_params, evictor),     LCTX_FIELD(lctx_reform_params, repeat_window)};
};
template <> struct ParamsFields<lctx_kv_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_kv_params, struct_size), LCTX_FIELD(lctx_kv_params, budget),
        LCTX_FIELD(lctx_kv_params, chunk),       LCTX_FIELD(lctx_kv_params, sink),
        LCTX_FIELD(lctx_kv_params, recent),      LCTX_FIELD(lctx_kv_params, obs),
        LCTX_FIELD(lctx_kv_params, snapkv_kernel), LCTX_FIELD(lctx_kv_params, infinipot_nuc_ratio),
        LCTX_FIELD(lctx_kv_params, infinipot_catalyst)};
};
template <> struct ParamsFields<lctx_infllm_params> {
    static constexpr FieldSpan list[] = {LCTX_FIELD(lctx_infllm_params, struct_size),
                                         LCTX_FIELD(lctx_infllm_params, block), LCTX_FIELD(lctx_infllm_params, repr)};
};
template <> struct ParamsFields<lctx_ilre_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_ilre_params, struct_size), LCTX_FIELD(lctx_ilre_params, retrieval_layer),
        LCTX_FIELD(lctx_ilre_params, sink),        LCTX_FIELD(lctx_ilre_params, window),
        LCTX_FIELD(lctx_ilre_params, chunk),       LCTX_FIELD(lctx_ilre_params, budget),
        LCTX_FIELD(lctx_ilre_params, query_tokens), LCTX_FIELD(lctx_ilre_params, dca),
        LCTX_FIELD(lctx_ilre_params, max_kernels), LCTX_FIELD(lctx_ilre_params, avg_kernels),
        LCTX_FIELD(lctx_ilre_params, profile_path), LCTX_FIELD(lctx_ilre_params, score_distance),
        LCTX_FIELD(lctx_ilre_params, repeat_window)};
};
template <> struct ParamsFields<lctx_reattention_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_reattention_params, struct_size), LCTX_FIELD(lctx_reattention_params, n_global),
        LCTX_FIELD(lctx_reattention_params, n_local),     LCTX_FIELD(lctx_reattention_params, span),
        LCTX_FIELD(lctx_reattention_params, top_k),       LCTX_FIELD(lctx_reattention_params, n_spans),
        LCTX_FIELD(lctx_reattention_params, chunk),       LCTX_FIELD(lctx_reattention_params, reuse_steps),
        LCTX_FIELD(lctx_reattention_params, tile_max),    LCTX_FIELD(lctx_reattention_params, store_max_ram),
        LCTX_FIELD(lctx_reattention_params, store_dir)};
};
template <> struct ParamsFields<lctx_refreshkv_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_refreshkv_params, struct_size), LCTX_FIELD(lctx_refreshkv_params, partial),
        LCTX_FIELD(lctx_refreshkv_params, stride),      LCTX_FIELD(lctx_refreshkv_params, threshold),
        LCTX_FIELD(lctx_refreshkv_params, schedule),    LCTX_FIELD(lctx_refreshkv_params, pool_kernel),
        LCTX_FIELD(lctx_refreshkv_params, max_partial_run), LCTX_FIELD(lctx_refreshkv_params, gathered)};
};
template <> struct ParamsFields<lctx_sampling_params> {
    static constexpr FieldSpan list[] = {
        LCTX_FIELD(lctx_sampling_params, struct_size), LCTX_FIELD(lctx_sampling_params, temperature),
        LCTX_FIELD(lctx_sampling_params, top_k),       LCTX_FIELD(lctx_sampling_params, top_p),
        LCTX_FIELD(lctx_sampling_params, min_p),       LCTX_FIELD(lctx_sampling_params, repeat_penalty),
        LCTX_FIELD(lctx_sampling_params, repeat_last_n), LCTX_FIELD(lctx_sampling_params, seed)};
};
#undef LCTX_FIELD

// The last field listed ends within the struct's tail padding: a field
// appended to lctx.h but not to the list above is caught when it is larger
// than the padding.
template <class T> constexpr bool fields_cover() {
    const FieldSpan &last = ParamsFields<T>::list[std::size(ParamsFields<T>::list) - 1];
    return last.offset + last.size <= sizeof(T) && sizeof(T) - (last.offset + last.size) < alignof(T);
}

// Refuses a struct_size that ends inside a field of T (LCTX_ERR_INVALID_ARG).
template <class T> void check_field_boundary(uint32_t size, const char *type_name, const char *default_fn) {
    for (const FieldSpan &f : ParamsFields<T>::list)
        if (size > f.offset && size < f.offset + f.size)
            fail(LCTX_ERR_INVALID_ARG, "%s.struct_size is %u: it ends inside the field '%s' (bytes %zu to %zu); "
                 "the struct of any lctx.h ends on a field: fill the struct with %s()", type_name, size, f.name,
                 f.offset, f.offset + f.size, default_fn);
}

// A full T: the defaults of fill_defaults, overwritten by the first
// struct_size bytes of *user (NULL: the defaults). The result's struct_size
// is sizeof(T).
template <class T>
T read_params(const T *user, void (*fill_defaults)(T *), const char *type_name, const char *default_fn) {
    static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>);
    static_assert(offsetof(T, struct_size) == 0 && sizeof(T{}.struct_size) == sizeof(uint32_t));
    static_assert(fields_cover<T>(), "a field of this struct is missing from ParamsFields");
    T p;
    fill_defaults(&p);
    if (!user) return p;
    uint32_t size = 0;
    std::memcpy(&size, user, sizeof size);
    check_struct_size(size, sizeof(T), type_name, default_fn);
    check_field_boundary<T>(size, type_name, default_fn);
    std::memcpy(static_cast<void *>(&p), user, size);
    p.struct_size = static_cast<uint32_t>(sizeof(T));
    return p;
}

} // namespace lctx
