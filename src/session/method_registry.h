// The method registry: the one table of every lctx_method (value, name,
// one-line description, implemented or not, and the factory that builds it).
// The session, the C API (lctx_method_*), the CLI and `lctx eval` read it;
// the bindings check their own method lists against it through the C API.
// A new method is one row of kMethods below (and its value appended to
// lctx_method in lctx.h).
//
// Header-only: the build lists every .cpp of a layer by hand (CMakeLists.txt),
// and this table needs no list entry of its own. Included by session.cpp and
// the C API (api_session.cpp).
#pragma once

#include <cctype>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "backend/backend.h"
#include "lctx.h"
#include "model/model.h"
#include "session/method.h"
#include "session/method_baselines.h"
#include "session/method_full.h"
#include "session/method_ilre.h"
#include "session/method_reattention.h"
#include "session/method_reform.h"
#include "session/session_params.h"

namespace lctx {

// What a factory gets to build a method. params is the session's normalized
// copy (full-size struct; reform/kv/infllm/ilre/refreshkv point at full-size copies).
struct MethodArgs {
    const Model &model;
    const lctx_session_params &params;
    Backend &backend;
    int64_t n_ctx;     // params.n_ctx, or the model's trained context when <= 0
    int32_t n_batch;   // params.n_batch, or 512 when <= 0
};

using MethodFactory = std::unique_ptr<Method> (*)(const MethodArgs &args);

struct MethodInfo {
    lctx_method id;
    const char *name;         // lower-case LCTX_METHOD_* suffix: "full", "reform", ...
    const char *description;  // one line
    MethodFactory make;       // nullptr: not implemented (sessions get LCTX_ERR_UNSUPPORTED)
    constexpr bool implemented() const { return make != nullptr; }
};

namespace method_registry_detail {

// The factories are the one place that constructs Method classes.
inline std::unique_ptr<Method> make_full(const MethodArgs &a) {
    return std::make_unique<FullMethod>(a.model, a.backend, a.n_ctx, a.n_batch, kv_type_of(a.params));
}

inline std::unique_ptr<Method> make_reform(const MethodArgs &a) {
    return std::make_unique<ReformMethod>(a.model, a.backend, a.params);
}

inline std::unique_ptr<Method> make_ilre(const MethodArgs &a) {
    return std::make_unique<IlreMethod>(a.model, a.backend, a.params);
}

inline std::unique_ptr<Method> make_reattention(const MethodArgs &a) {
    return std::make_unique<ReattentionMethod>(a.model, a.backend, a.params);
}

inline std::unique_ptr<Method> make_refreshkv(const MethodArgs &a) {
    const lctx_refreshkv_params p = read_refreshkv_params(a.params.refreshkv);
    const KvType kv = kv_type_of(a.params);
    auto policy = std::make_unique<RefreshKvPolicy>(a.backend, a.model.hparams(), kv,
                                                    refreshkv_config_from(a.model.hparams(), p));
    return std::make_unique<FullMethod>(a.model, a.backend, a.n_ctx, a.n_batch, kv, std::move(policy));
}

// TRUNCATE, STREAMING, H2O, TOVA, SNAPKV, INFINIPOT, INFLLM (by params.method).
inline std::unique_ptr<Method> make_baseline(const MethodArgs &a) {
    return make_baseline_method(a.model, a.backend, a.params);
}

inline constexpr MethodInfo kMethods[] = {
    {LCTX_METHOD_FULL, "full", "full attention over the whole input in one KV cache", make_full},
    {LCTX_METHOD_REFORM, "reform", "REFORM: chunked encoding, cosine retrieval of token embeddings, recompute",
     make_reform},
    {LCTX_METHOD_ILRE, "ilre", "ILRe: intermediate-layer retrieval with multi-kernel pooling, recompute",
     make_ilre},
    {LCTX_METHOD_REATTENTION, "reattention", "ReAttention: top-k attention over the pre-RoPE cache, positions "
     "re-assigned", make_reattention},
    {LCTX_METHOD_REFRESHKV, "refreshkv", "RefreshKV: decoding over a partial cache refreshed by full attention",
     make_refreshkv},
    {LCTX_METHOD_TRUNCATE, "truncate", "truncation: the first and last tokens of the budget, full attention",
     make_baseline},
    {LCTX_METHOD_STREAMING, "streaming", "StreamingLLM: attention sinks + the most recent tokens", make_baseline},
    {LCTX_METHOD_H2O, "h2o", "H2O: heavy hitters by the attention of each chunk's last queries", make_baseline},
    {LCTX_METHOD_TOVA, "tova", "TOVA: the tokens the last query of each chunk attends to most", make_baseline},
    {LCTX_METHOD_SNAPKV, "snapkv", "SnapKV: pooled attention of each chunk's last queries, then the question's",
     make_baseline},
    {LCTX_METHOD_INFINIPOT, "infinipot", "InfiniPot: catalyst-prompt attention (CaP) + token novelty (NuC)",
     make_baseline},
    {LCTX_METHOD_INFLLM, "infllm", "InfLLM: sinks + local window + retrieved memory blocks per KV head",
     make_baseline},
};

constexpr bool in_enum_order() {
    for (size_t i = 0; i < std::size(kMethods); ++i)
        if (static_cast<size_t>(kMethods[i].id) != i) return false;
    return true;
}
static_assert(in_enum_order(), "kMethods must list every lctx_method in value order");

inline bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

} // namespace method_registry_detail

// Every method, in enum order: methods()[i].id == i.
inline std::span<const MethodInfo> methods() { return method_registry_detail::kMethods; }

// The row of a value (read as a plain int: values outside the enum are the
// caller's error), or nullptr.
inline const MethodInfo *find_method(int32_t value) {
    const auto all = methods();
    if (value < 0 || static_cast<size_t>(value) >= all.size()) return nullptr;
    return &all[static_cast<size_t>(value)];
}

// The row of a name (ASCII case-insensitive), or nullptr.
inline const MethodInfo *find_method(std::string_view name) {
    for (const MethodInfo &m : methods())
        if (method_registry_detail::iequals(name, m.name)) return &m;
    return nullptr;
}

// "full, reform, ..." (implemented_only: those sessions can be created with).
inline std::string method_names(bool implemented_only = false) {
    std::string s;
    for (const MethodInfo &m : methods())
        if (!implemented_only || m.implemented()) s += (s.empty() ? "" : ", ") + std::string(m.name);
    return s;
}

} // namespace lctx
