#include "method_knobs.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace lctx::cli {

namespace {

enum class Kind { I32, U64, F32, BOOL, STR, EVICTOR, SCHEDULE };

struct Field {
    const char *family;   // "reform", "kv", "infllm", "ilre", "reattention", "refreshkv"
    const char *name;
    Kind kind;
    size_t offset;
};

// The C type a field of each kind has: the table below cannot give a field
// the wrong kind (apply_settings writes through that type).
template <Kind K> struct KindType;
template <> struct KindType<Kind::I32> { using type = int32_t; };
template <> struct KindType<Kind::U64> { using type = uint64_t; };
template <> struct KindType<Kind::F32> { using type = float; };
template <> struct KindType<Kind::BOOL> { using type = bool; };
template <> struct KindType<Kind::STR> { using type = const char *; };
template <> struct KindType<Kind::EVICTOR> { using type = lctx_evictor; };
template <> struct KindType<Kind::SCHEDULE> { using type = lctx_refreshkv_schedule; };

template <Kind K, class T> constexpr Field knob(const char *family, const char *name, size_t offset) {
    static_assert(std::is_same_v<T, typename KindType<K>::type>, "a knob's kind must match its field's C type");
    return {family, name, K, offset};
}

#define LCTX_KNOB(fam, type, field, kind) knob<Kind::kind, decltype(type::field)>(fam, #field, offsetof(type, field))

// The settable fields of each struct (struct_size and the pointers the
// session sets itself, such as refreshkv.gathered, are not settable).
const Field kFields[] = {
    LCTX_KNOB("reform", lctx_reform_params, chunk, I32),
    LCTX_KNOB("reform", lctx_reform_params, budget, I32),
    LCTX_KNOB("reform", lctx_reform_params, recompute, I32),
    LCTX_KNOB("reform", lctx_reform_params, sink, I32),
    LCTX_KNOB("reform", lctx_reform_params, recent, I32),
    LCTX_KNOB("reform", lctx_reform_params, obs, I32),
    LCTX_KNOB("reform", lctx_reform_params, keep_first, I32),
    LCTX_KNOB("reform", lctx_reform_params, keep_last, I32),
    LCTX_KNOB("reform", lctx_reform_params, pool_half, I32),
    LCTX_KNOB("reform", lctx_reform_params, h2o_per_chunk, BOOL),
    LCTX_KNOB("reform", lctx_reform_params, heads_path, STR),
    LCTX_KNOB("reform", lctx_reform_params, evictor, EVICTOR),
    LCTX_KNOB("reform", lctx_reform_params, repeat_window, I32),
    LCTX_KNOB("kv", lctx_kv_params, budget, I32),
    LCTX_KNOB("kv", lctx_kv_params, chunk, I32),
    LCTX_KNOB("kv", lctx_kv_params, sink, I32),
    LCTX_KNOB("kv", lctx_kv_params, recent, I32),
    LCTX_KNOB("kv", lctx_kv_params, obs, I32),
    LCTX_KNOB("kv", lctx_kv_params, snapkv_kernel, I32),
    LCTX_KNOB("kv", lctx_kv_params, infinipot_nuc_ratio, F32),
    LCTX_KNOB("kv", lctx_kv_params, infinipot_catalyst, STR),
    LCTX_KNOB("infllm", lctx_infllm_params, block, I32),
    LCTX_KNOB("infllm", lctx_infllm_params, repr, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, retrieval_layer, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, sink, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, window, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, chunk, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, budget, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, query_tokens, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, dca, BOOL),
    LCTX_KNOB("ilre", lctx_ilre_params, max_kernels, STR),
    LCTX_KNOB("ilre", lctx_ilre_params, avg_kernels, STR),
    LCTX_KNOB("ilre", lctx_ilre_params, profile_path, STR),
    LCTX_KNOB("ilre", lctx_ilre_params, score_distance, I32),
    LCTX_KNOB("ilre", lctx_ilre_params, repeat_window, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, n_global, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, n_local, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, span, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, top_k, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, n_spans, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, chunk, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, reuse_steps, I32),
    LCTX_KNOB("reattention", lctx_reattention_params, tile_max, BOOL),
    LCTX_KNOB("reattention", lctx_reattention_params, store_max_ram, U64),
    LCTX_KNOB("reattention", lctx_reattention_params, store_dir, STR),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, partial, I32),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, stride, I32),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, threshold, F32),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, schedule, SCHEDULE),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, pool_kernel, I32),
    LCTX_KNOB("refreshkv", lctx_refreshkv_params, max_partial_run, I32),
};

#undef LCTX_KNOB

// The structs method m reads, its own first.
std::vector<std::string> families_of(lctx_method m, bool rkv) {
    std::vector<std::string> f;
    switch (m) {
    case LCTX_METHOD_REFORM: f = {"reform"}; break;
    case LCTX_METHOD_ILRE: f = {"ilre"}; break;
    case LCTX_METHOD_REATTENTION: f = {"reattention"}; break;
    case LCTX_METHOD_REFRESHKV: f = {"refreshkv"}; break;
    case LCTX_METHOD_INFLLM: f = {"infllm", "kv"}; break;
    case LCTX_METHOD_TRUNCATE:
    case LCTX_METHOD_STREAMING:
    case LCTX_METHOD_H2O:
    case LCTX_METHOD_TOVA:
    case LCTX_METHOD_SNAPKV:
    case LCTX_METHOD_INFINIPOT: f = {"kv"}; break;
    default: break;   // FULL: no knobs
    }
    if (rkv) f.push_back("refreshkv");
    return f;
}

const Field *find_field(const std::string &family, const std::string &name) {
    for (const Field &f : kFields)
        if (family == f.family && name == f.name) return &f;
    return nullptr;
}

void *struct_of(MethodKnobs &k, const std::string &family) {
    if (family == "reform") return &k.reform;
    if (family == "kv") return &k.kv;
    if (family == "infllm") return &k.infllm;
    if (family == "ilre") return &k.ilre;
    if (family == "reattention") return &k.reattention;
    return &k.refreshkv;
}

bool parse_i64(const std::string &s, int64_t lo, int64_t hi, int64_t &out) {
    if (s.empty()) return false;
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    out = v;
    return true;
}

// The value of `text` for a field of kind k, normalized; false with a
// message on a value of the wrong type.
bool normalize(Kind k, const std::string &text, std::string &out, std::string &err) {
    switch (k) {
    case Kind::I32: {
        int64_t v;
        if (!parse_i64(text, INT32_MIN, INT32_MAX, v)) {
            err = "expected an integer from -2^31 to 2^31 - 1";
            return false;
        }
        out = std::to_string(v);
        return true;
    }
    case Kind::U64: {
        int64_t v;
        if (text.empty() || text[0] == '-' || !parse_i64(text, 0, INT64_MAX, v)) {
            err = "expected an integer from 0 to 2^63 - 1";
            return false;
        }
        out = std::to_string(v);
        return true;
    }
    case Kind::F32: {
        errno = 0;
        char *end = nullptr;
        const float v = text.empty() ? 0.0f : std::strtof(text.c_str(), &end);
        if (text.empty() || errno || *end || !std::isfinite(v)) {
            err = "expected a finite number";
            return false;
        }
        char b[32];
        std::snprintf(b, sizeof b, "%g", double(v));
        out = b;
        return true;
    }
    case Kind::BOOL:
        if (text == "1" || text == "true" || text == "on") out = "true";
        else if (text == "0" || text == "false" || text == "off") out = "false";
        else {
            err = "expected true or false (1/0, on/off)";
            return false;
        }
        return true;
    case Kind::EVICTOR:
        if (text != "h2o" && text != "tova" && text != "streaming" && text != "snapkv") {
            err = "expected h2o, tova, streaming or snapkv";
            return false;
        }
        out = text;
        return true;
    case Kind::SCHEDULE:
        if (text != "dynamic" && text != "fixed") {
            err = "expected dynamic or fixed";
            return false;
        }
        out = text;
        return true;
    case Kind::STR:
        if (text.empty()) {
            err = "expected a non-empty text";
            return false;
        }
        out = text;
        return true;
    }
    return false;
}

} // namespace

MethodKnobs::MethodKnobs() {
    lctx_reform_default_params(&reform);
    lctx_kv_default_params(&kv);
    lctx_infllm_default_params(&infllm);
    lctx_ilre_default_params(&ilre);
    lctx_reattention_default_params(&reattention);
    lctx_refreshkv_default_params(&refreshkv);
}

void MethodKnobs::attach(lctx_session_params &sp) {
    sp.reform = &reform;
    sp.kv = &kv;
    sp.infllm = &infllm;
    sp.ilre = &ilre;
    sp.reattention = &reattention;
    sp.refreshkv = &refreshkv;
}

std::string knob_keys(lctx_method m, bool rkv) {
    const std::vector<std::string> fams = families_of(m, rkv);
    std::string s;
    for (size_t i = 0; i < fams.size(); ++i)
        for (const Field &f : kFields) {
            if (fams[i] != f.family) continue;
            if (!s.empty()) s += ", ";
            s += i == 0 ? std::string(f.name) : fams[i] + "." + f.name;
        }
    return s;
}

bool parse_method_variant(const std::string &text, const std::string &base, lctx_method m, bool rkv,
                          MethodVariant &out, std::string &err) {
    out = MethodVariant{};
    out.base = base;
    const std::vector<std::string> fams = families_of(m, rkv);
    const size_t colon = text.find(':');
    std::string rest = colon == std::string::npos ? std::string() : text.substr(colon + 1);
    std::vector<std::pair<std::string, KnobSetting>> shown;   // (as shown in the name, qualified setting)
    while (colon != std::string::npos) {
        const size_t next = rest.find(':');
        const std::string item = rest.substr(0, next);
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
            err = "'" + item + "' is not KEY=VALUE";
            return false;
        }
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        if (fams.empty()) {
            err = "'" + base + "' has no parameters to set";
            return false;
        }
        // "family.field", or a field of the first of the method's structs that has it.
        const Field *f = nullptr;
        const size_t dot = key.find('.');
        if (dot != std::string::npos) {
            const std::string fam = key.substr(0, dot);
            if (std::find(fams.begin(), fams.end(), fam) != fams.end()) f = find_field(fam, key.substr(dot + 1));
        } else {
            for (const auto &fam : fams)
                if ((f = find_field(fam, key))) break;
        }
        if (!f) {
            err = "'" + key + "' is not a parameter of " + base + " (" + knob_keys(m, rkv) + ")";
            return false;
        }
        KnobSetting s{std::string(f->family) + "." + f->name, "",
                      f->kind == Kind::STR || f->kind == Kind::EVICTOR || f->kind == Kind::SCHEDULE};
        std::string why;
        if (!normalize(f->kind, value, s.value, why)) {
            err = s.key + "=" + value + ": " + why;
            return false;
        }
        for (const auto &p : shown)
            if (p.second.key == s.key) {
                err = s.key + " is set twice";
                return false;
            }
        shown.push_back({f->family == fams[0] ? std::string(f->name) : s.key, s});
        if (next == std::string::npos) break;
        rest = rest.substr(next + 1);
    }
    std::sort(shown.begin(), shown.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    out.name = base;
    for (const auto &p : shown) {
        out.name += ":" + p.first + "=" + p.second.value;
        out.settings.push_back(p.second);
    }
    return true;
}

void apply_settings(const std::vector<KnobSetting> &settings, MethodKnobs &knobs) {
    for (const KnobSetting &s : settings) {
        const size_t dot = s.key.find('.');
        const std::string fam = s.key.substr(0, dot);
        const Field *f = find_field(fam, s.key.substr(dot + 1));
        if (!f) continue;   // parse_method_variant made every key
        char *p = static_cast<char *>(struct_of(knobs, fam)) + f->offset;
        switch (f->kind) {
        case Kind::I32: *reinterpret_cast<int32_t *>(p) = int32_t(std::strtol(s.value.c_str(), nullptr, 10)); break;
        case Kind::U64: *reinterpret_cast<uint64_t *>(p) = std::strtoull(s.value.c_str(), nullptr, 10); break;
        case Kind::F32: *reinterpret_cast<float *>(p) = std::strtof(s.value.c_str(), nullptr); break;
        case Kind::BOOL: *reinterpret_cast<bool *>(p) = s.value == "true"; break;
        case Kind::STR:
            knobs.strings.push_back(s.value);
            *reinterpret_cast<const char **>(p) = knobs.strings.back().c_str();
            break;
        case Kind::EVICTOR:
            *reinterpret_cast<lctx_evictor *>(p) = s.value == "tova"      ? LCTX_EVICTOR_TOVA
                                                   : s.value == "streaming" ? LCTX_EVICTOR_STREAMING
                                                   : s.value == "snapkv"    ? LCTX_EVICTOR_SNAPKV
                                                                            : LCTX_EVICTOR_H2O;
            break;
        case Kind::SCHEDULE:
            *reinterpret_cast<lctx_refreshkv_schedule *>(p) =
                s.value == "fixed" ? LCTX_REFRESHKV_FIXED : LCTX_REFRESHKV_DYNAMIC;
            break;
        }
    }
}

} // namespace lctx::cli
