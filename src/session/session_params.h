// The public params structs read by the ABI rule of lctx.h (common/params_abi.h):
// NULL gives the defaults, a smaller struct (an older lctx.h) gets the
// defaults for its missing tail, a bad struct_size is LCTX_ERR_INVALID_ARG.
// Each result is a full struct whose struct_size is sizeof the struct.
#pragma once

#include <cstring>

#include "backend/backend.h"
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

inline lctx_ilre_params read_ilre_params(const lctx_ilre_params *p) {
    return read_params(p, lctx_ilre_default_params, "lctx_ilre_params", "lctx_ilre_default_params");
}

inline lctx_reattention_params read_reattention_params(const lctx_reattention_params *p) {
    return read_params(p, lctx_reattention_default_params, "lctx_reattention_params",
                       "lctx_reattention_default_params");
}

inline lctx_refreshkv_params read_refreshkv_params(const lctx_refreshkv_params *p) {
    return read_params(p, lctx_refreshkv_default_params, "lctx_refreshkv_params", "lctx_refreshkv_default_params");
}

// The largest power of two <= x (1 for x < 2): sizes derived from n_ctx_train.
inline int64_t pow2_floor(int64_t x) {
    int64_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

// A size knob of a method struct: 0 means "derived" (the header's rule), a
// positive value is taken as given, a negative one is refused
// (LCTX_ERR_INVALID_ARG naming the field): only the fields whose comment in
// lctx.h gives a meaning to negative values read them otherwise.
inline int64_t size_knob(const char *who, const char *field, int32_t user, int64_t derived) {
    if (user < 0)
        fail(LCTX_ERR_INVALID_ARG, "%s: %s = %d is negative: give a positive value, or 0 for the default", who, field,
             user);
    return user > 0 ? user : derived;
}

// The repeat_window knob of REFORM and ILRe (selector.h mark_repeats): 0 gives
// the default 16, a negative value turns the filter off (0 here), 2..2^24 is
// taken as given; 1 (every token seen before would be marked) and larger
// values are refused (LCTX_ERR_INVALID_ARG naming the field).
inline int64_t repeat_window_knob(const char *who, int32_t user) {
    if (user == 1 || user > (1 << 24))
        fail(LCTX_ERR_INVALID_ARG, "%s: repeat window (repeat_window) = %d is out of range: -1 (off), 0 (16) or "
             "2..2^24", who, user);
    return user > 0 ? user : user < 0 ? 0 : 16;
}

// The session's KV element type, read as a plain int (a value outside the
// enum is the caller's error: LCTX_ERR_INVALID_ARG).
inline KvType kv_type_of(const lctx_session_params &sp) {
    int32_t v = 0;
    std::memcpy(&v, &sp.kv_type, sizeof v);
    if (v == LCTX_KV_F32) return KvType::F32;
    if (v == LCTX_KV_F16) return KvType::F16;
    if (v == LCTX_KV_Q8) return KvType::Q8;
    fail(LCTX_ERR_INVALID_ARG,
         "lctx_session_params.kv_type %d is not an lctx_kv_type (LCTX_KV_F32, LCTX_KV_F16 or LCTX_KV_Q8)", v);
}

// An lctx_precision field's value; fails on a value outside the enum, and
// on LCTX_PRECISION_INT8 where int8_allowed is false (attention has no
// int8 arithmetic), naming the field.
inline lctx_precision precision_of(const lctx_precision &field, const char *name, bool int8_allowed) {
    int32_t v = 0;
    std::memcpy(&v, &field, sizeof v);
    if (v == LCTX_PRECISION_F32 || v == LCTX_PRECISION_BF16) return static_cast<lctx_precision>(v);
    if (v == LCTX_PRECISION_INT8) {
        if (int8_allowed) return LCTX_PRECISION_INT8;
        fail(LCTX_ERR_INVALID_ARG,
             "lctx_session_params.%s: LCTX_PRECISION_INT8 is for matmul_precision only (use F32 or BF16)", name);
    }
    fail(LCTX_ERR_INVALID_ARG,
         "lctx_session_params.%s %d is not an lctx_precision (LCTX_PRECISION_F32, _BF16 or _INT8)", name, v);
}

} // namespace lctx
