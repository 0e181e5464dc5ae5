#include "session/ilre_params.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "session/head_profile.h"
#include "session/session_params.h"

namespace lctx {

namespace {

// A size field: > 0 taken as given, 0 derived, < 0 refused.
int64_t size_field(int32_t user, int64_t derived, const char *name) { return size_knob("ILRe", name, user, derived); }

} // namespace

std::vector<int32_t> parse_kernel_list(const char *text, const char *what) {
    std::vector<int32_t> out;
    const std::string s = text;
    auto bad = [&](const char *why) -> void {
        fail(LCTX_ERR_INVALID_ARG, "ILRe: %s \"%s\": %s (write e.g. \"2,4,8\" or \"1-16\")", what, s.c_str(), why);
    };
    auto number = [&](const char *&p) -> int64_t {
        if (*p < '0' || *p > '9') bad("expected a number");
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p++ - '0');
            if (v > (1 << 16)) bad("a kernel is larger than 65536");
        }
        return v;
    };
    const char *p = s.c_str();
    while (*p) {
        while (*p == ' ') ++p;
        const int64_t a = number(p);
        int64_t b = a;
        while (*p == ' ') ++p;
        if (*p == '-') {
            ++p;
            while (*p == ' ') ++p;
            b = number(p);
            if (b < a) bad("a range runs backwards");
        }
        for (int64_t v = a; v <= b; ++v) {
            if (v < 1) bad("kernels must be positive");
            if (std::find(out.begin(), out.end(), static_cast<int32_t>(v)) != out.end()) bad("a kernel is listed twice");
            if (out.size() >= 64) bad("more than 64 kernels");
            out.push_back(static_cast<int32_t>(v));
        }
        while (*p == ' ') ++p;
        if (*p == ',') {
            ++p;
            if (!*p) bad("trailing comma");
        } else if (*p) {
            bad("unexpected character");
        }
    }
    if (out.empty()) bad("no kernels");
    return out;
}

int32_t ilre_default_layer(const Hparams &hp, const std::string &profile_path, std::string &origin) {
    if (!profile_path.empty()) {
        HeadProfile p = choose_head_profile(hp, profile_path);
        if (p.ilre_layer < 0)
            fail(LCTX_ERR_INVALID_ARG, "ILRe: profile %s has no \"ilre\" retrieval layer: measure one with "
                 "'lctx heads --ilre'", profile_path.c_str());
        origin = profile_path;
        return p.ilre_layer;
    }
    const std::string key = model_shape_key(hp);
    for (const char *text : builtin_head_profiles()) {
        HeadProfile p = parse_head_profile(text, "builtin");
        if (p.model_shape == key && p.ilre_layer >= 0 && p.ilre_layer < hp.n_layer) {
            origin = "builtin";
            return p.ilre_layer;
        }
    }
    const int32_t layer = std::clamp(hp.n_layer / 8, std::min(1, hp.n_layer - 1), std::max(0, hp.n_layer - 1));
    origin = "fallback";
    LCTX_LOG_WARN("ILRe: no measured retrieval layer for this model (%s); using the uncalibrated fallback layer %d "
                  "(n_layer/8). Measure one with 'lctx heads --ilre -m MODEL' and pass it as "
                  "lctx_ilre_params.profile_path / --ilre-profile.", key.c_str(), layer);
    return layer;
}

IlreParams ilre_params_from(const Model &model, const lctx_session_params &sp) {
    const Hparams &hp = model.hparams();
    const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
    const lctx_ilre_params r = read_ilre_params(sp.ilre);
    IlreParams p;
    p.kv_type = kv_type_of(sp);
    if (r.retrieval_layer < -1 || r.retrieval_layer >= hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "ILRe: retrieval_layer = %d is out of range [0, %d) (-1: the model's profile)",
             r.retrieval_layer, hp.n_layer);
    if (r.retrieval_layer >= 0) {
        p.retrieval_layer = r.retrieval_layer;
        p.layer_origin = "params";
    } else {
        p.retrieval_layer = ilre_default_layer(hp, r.profile_path ? r.profile_path : "", p.layer_origin);
    }
    p.chunk = size_field(r.chunk, std::clamp<int64_t>(pow2_floor(n_train / 8), 16, 1024), "chunk");
    p.sink = size_field(r.sink, 4, "sink");
    p.window = size_field(r.window, std::max<int64_t>(1, p.chunk / 2), "window");
    if (sp.n_ctx < 0) fail(LCTX_ERR_INVALID_ARG, "ILRe: n_ctx = %d is negative (0: the trained context)", sp.n_ctx);
    p.n_ctx = sp.n_ctx > 0 ? sp.n_ctx : n_train;
    // Half the decode cache, so the gathered tokens leave room for the question and answer.
    p.budget = size_field(r.budget, std::min<int64_t>(4096, std::max<int64_t>(p.n_ctx / 2, 8)), "budget");
    p.query_tokens = size_field(r.query_tokens, 0, "query_tokens");
    p.dca = r.dca;
    if (r.score_distance < LCTX_ILRE_SCORE_AUTO || r.score_distance > (1 << 20))
        fail(LCTX_ERR_INVALID_ARG, "ILRe: score_distance = %d is out of range [-2, 2^20] (-2: auto, -1: each key at "
             "its own position, >= 0: every key at that distance)", r.score_distance);
    p.score_distance = r.score_distance;
    p.repeat_window = repeat_window_knob("ILRe", r.repeat_window);
    p.dca_after = n_train;
    if (r.max_kernels) p.max_kernels = parse_kernel_list(r.max_kernels, "max_kernels");
    if (r.avg_kernels) p.avg_kernels = parse_kernel_list(r.avg_kernels, "avg_kernels");
    p.n_batch = sp.n_batch > 0 ? sp.n_batch : 512;

    const int64_t kMax = int64_t(1) << 24;
    auto at_most = [&](const char *name, int64_t v) {
        if (v > kMax) fail(LCTX_ERR_INVALID_ARG, "ILRe: %s = %lld exceeds %lld", name, (long long)v, (long long)kMax);
    };
    at_most("chunk", p.chunk);
    at_most("sink", p.sink);
    at_most("window", p.window);
    at_most("budget", p.budget);
    if (p.sink + p.budget >= p.n_ctx)
        fail(LCTX_ERR_INVALID_ARG, "ILRe: sink (%lld) + budget (%lld) leave no room for the question and answer in "
             "n_ctx = %lld: lower the budget or raise n_ctx", (long long)p.sink, (long long)p.budget,
             (long long)p.n_ctx);
    if (hp.n_ctx_train > 0 && p.n_ctx > hp.n_ctx_train)
        LCTX_LOG_WARN("ILRe: n_ctx %lld exceeds the model's trained context %d", (long long)p.n_ctx, hp.n_ctx_train);
    if (hp.n_ctx_train > 0 && p.sink + p.window + p.chunk > hp.n_ctx_train)
        LCTX_LOG_WARN("ILRe: sink + window + chunk = %lld exceeds the model's trained context %d",
                      (long long)(p.sink + p.window + p.chunk), hp.n_ctx_train);
    return p;
}

} // namespace lctx
