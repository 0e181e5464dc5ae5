// Method variants of `lctx eval --methods`: a method name followed by
// settings of its parameter structs, e.g. "reform:recompute=4096" or
// "h2o:budget=1024:chunk=512" (docs/eval.md, "Method variants").
//
// A setting's key is a field of one of the method's structs in
// include/lctx.h: "recompute" (the method's own struct first) or qualified,
// "refreshkv.stride". Values are checked for their type here; ranges are the
// library's to check when the session is created.
#pragma once

#include <list>
#include <string>
#include <vector>

#include "lctx.h"

namespace lctx::cli {

// Every method struct, filled with its defaults. Not copyable: the
// session params it fills point into it, and string values live in it.
struct MethodKnobs {
    lctx_reform_params reform;
    lctx_kv_params kv;
    lctx_infllm_params infllm;
    lctx_ilre_params ilre;
    lctx_reattention_params reattention;
    lctx_refreshkv_params refreshkv;
    std::list<std::string> strings;   // storage of string values (stable addresses)

    MethodKnobs();
    MethodKnobs(const MethodKnobs &) = delete;
    MethodKnobs &operator=(const MethodKnobs &) = delete;

    // Points every method pointer of `sp` at these structs.
    void attach(lctx_session_params &sp);
};

struct KnobSetting {
    std::string key;     // qualified: "reform.recompute"
    std::string value;   // normalized: "4096", "0.5", "true", "fixed"
    bool text = false;   // a text or enum value (quoted in JSON); else a number or true/false
};

// A parsed --methods entry.
struct MethodVariant {
    std::string base;                    // the method part: "reform", "reform+refreshkv", "oracle"
    std::vector<KnobSetting> settings;   // sorted by key, each key once
    std::string name;                    // canonical: base + ":key=value"... (unqualified where the key is
                                         // the method's own struct's); the rows' "method"
};

// Parses "BASE[:KEY=VALUE]..." for method m (rkv: decoded with RefreshKV,
// whose keys are then allowed too). false with a message in err on an
// unknown key, a value of the wrong type, or a key given twice.
bool parse_method_variant(const std::string &text, const std::string &base, lctx_method m, bool rkv,
                          MethodVariant &out, std::string &err);

// Applies settings (as parse_method_variant left them) to knobs.
void apply_settings(const std::vector<KnobSetting> &settings, MethodKnobs &knobs);

// The keys method m accepts (for messages and --help), e.g. "chunk, budget, recompute, ...".
std::string knob_keys(lctx_method m, bool rkv);

} // namespace lctx::cli
