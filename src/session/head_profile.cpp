#include "session/head_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/json.h"

namespace lctx {

const char *head_kind_name(HeadKind k) {
    switch (k) {
    case HeadKind::Q: return "Q";
    case HeadKind::K: return "K";
    case HeadKind::V: return "V";
    }
    return "?";
}

int32_t HeadProfile::exit_layer() const {
    int32_t e = 0;
    for (const HeadSpec &h : heads) e = std::max(e, h.layer);
    return e;
}

std::string HeadProfile::heads_string() const {
    std::string s;
    for (const HeadSpec &h : heads) {
        if (!s.empty()) s += ',';
        s += format("%s%d@L%d", head_kind_name(h.kind), h.head, h.layer);
    }
    return s;
}

std::string model_shape_key(const Hparams &hp) {
    return format("%s:L%d:E%d:H%d:KV%d:D%d:V%d:C%d", hp.arch.c_str(), hp.n_layer, hp.n_embd, hp.n_head,
                  hp.n_head_kv, hp.head_dim, hp.n_vocab, hp.n_ctx_train);
}

HeadProfile parse_head_profile(const std::string &text, const std::string &origin) {
    json::Value v;
    try {
        v = json::parse(text);
    } catch (const Error &e) {
        fail(LCTX_ERR_FORMAT, "head profile %s: %s", origin.c_str(), e.what());
    }
    auto bad = [&](const char *what) -> void {
        fail(LCTX_ERR_FORMAT, "head profile %s: %s", origin.c_str(), what);
    };
    if (!v.is_object()) bad("the top level must be an object");
    const json::Value *fmt = v.find("format");
    if (!fmt || !fmt->is_string() || fmt->str != "lctx-head-profile")
        bad("missing \"format\": \"lctx-head-profile\"");
    const json::Value *ver = v.find("version");
    if (!ver || !ver->is_number() || ver->num != 1) bad("unsupported \"version\" (expected 1)");
    HeadProfile p;
    p.origin = origin;
    if (const json::Value *n = v.find("name"); n && n->is_string()) p.name = n->str;
    if (const json::Value *m = v.find("model_shape"); m && m->is_string()) p.model_shape = m->str;
    if (const json::Value *ilre = v.find("ilre")) {
        const json::Value *l = ilre->find("retrieval_layer");
        if (!l || !l->is_number() || l->num != std::floor(l->num) || l->num < 0 || l->num > 1e6)
            bad("\"ilre\" must be an object with a non-negative integer \"retrieval_layer\"");
        p.ilre_layer = static_cast<int32_t>(l->num);
    }
    const json::Value *heads = v.find("heads");
    if (!heads || !heads->is_array() || heads->arr.empty()) bad("\"heads\" must be a non-empty array");
    if (heads->arr.size() > 64) bad("more than 64 heads");
    for (const json::Value &h : heads->arr) {
        const json::Value *l = h.find("layer"), *k = h.find("kind"), *j = h.find("head");
        if (!l || !k || !j || !l->is_number() || !k->is_string() || !j->is_number())
            bad("every head needs \"layer\" (number), \"kind\" (\"Q\", \"K\" or \"V\") and \"head\" (number)");
        if (l->num != std::floor(l->num) || j->num != std::floor(j->num) || l->num < 0 || j->num < 0 ||
            l->num > 1e6 || j->num > 1e6)
            bad("layer and head must be non-negative integers");
        HeadSpec s;
        s.layer = static_cast<int32_t>(l->num);
        s.head = static_cast<int32_t>(j->num);
        if (k->str == "Q") s.kind = HeadKind::Q;
        else if (k->str == "K") s.kind = HeadKind::K;
        else if (k->str == "V") s.kind = HeadKind::V;
        else bad("kind must be \"Q\", \"K\" or \"V\"");
        if (std::find(p.heads.begin(), p.heads.end(), s) != p.heads.end()) bad("a head is listed twice");
        p.heads.push_back(s);
    }
    return p;
}

std::string head_profile_json(const HeadProfile &p, const std::string &extra) {
    std::ostringstream o;
    o << "{\n  \"format\": \"lctx-head-profile\",\n  \"version\": 1,\n";
    o << "  \"name\": " << json::quote(p.name) << ",\n";
    o << "  \"model_shape\": " << json::quote(p.model_shape) << ",\n";
    o << "  \"heads\": [";
    for (size_t i = 0; i < p.heads.size(); ++i) {
        const HeadSpec &h = p.heads[i];
        o << (i ? ",\n    " : "\n    ") << "{\"layer\": " << h.layer << ", \"kind\": \"" << head_kind_name(h.kind)
          << "\", \"head\": " << h.head << "}";
    }
    o << "\n  ]";
    if (!extra.empty()) o << ",\n" << extra;
    o << "\n}\n";
    return o.str();
}

void validate_head_profile(const HeadProfile &p, const Hparams &hp) {
    if (p.heads.empty()) fail(LCTX_ERR_INVALID_ARG, "head profile %s lists no heads", p.origin.c_str());
    for (const HeadSpec &h : p.heads) {
        const int32_t n = h.kind == HeadKind::Q ? hp.n_head : hp.n_head_kv;
        if (h.layer < 0 || h.layer >= hp.n_layer || h.head < 0 || h.head >= n)
            fail(LCTX_ERR_INVALID_ARG, "head profile %s: head %s%d at layer %d does not exist in this model (%d "
                 "layers, %d query heads, %d KV heads)", p.origin.c_str(), head_kind_name(h.kind), h.head, h.layer,
                 hp.n_layer, hp.n_head, hp.n_head_kv);
    }
    if (p.ilre_layer >= hp.n_layer)
        fail(LCTX_ERR_INVALID_ARG, "head profile %s: ILRe retrieval layer %d does not exist in this model (%d layers)",
             p.origin.c_str(), p.ilre_layer, hp.n_layer);
    if (!p.model_shape.empty() && p.model_shape != model_shape_key(hp))
        LCTX_LOG_WARN("head profile %s was measured on a model of shape %s; this model is %s", p.origin.c_str(),
                      p.model_shape.c_str(), model_shape_key(hp).c_str());
}

HeadProfile fallback_head_profile(const Hparams &hp) {
    HeadProfile p;
    p.name = "fallback: four mid-layer V heads (uncalibrated)";
    p.origin = "fallback";
    const double fr[4] = {0.35, 0.45, 0.55, 0.65};
    for (int i = 0; i < 4; ++i) {
        HeadSpec s;
        s.layer = std::clamp(static_cast<int32_t>(std::floor(fr[i] * hp.n_layer)), 0, std::max(0, hp.n_layer - 1));
        s.kind = HeadKind::V;
        s.head = hp.n_head_kv > 0 ? i % hp.n_head_kv : 0;
        if (std::find(p.heads.begin(), p.heads.end(), s) == p.heads.end()) p.heads.push_back(s);
    }
    return p;
}

HeadProfile choose_head_profile(const Hparams &hp, const std::string &path) {
    if (!path.empty()) {
        std::ifstream f(path, std::ios::binary);
        if (!f) fail(LCTX_ERR_IO, "cannot open head profile '%s'", path.c_str());
        std::ostringstream ss;
        ss << f.rdbuf();
        if (ss.str().size() > (16u << 20)) fail(LCTX_ERR_FORMAT, "head profile '%s' is too large", path.c_str());
        HeadProfile p = parse_head_profile(ss.str(), path);
        validate_head_profile(p, hp);
        return p;
    }
    const std::string key = model_shape_key(hp);
    for (const char *text : builtin_head_profiles()) {
        HeadProfile p = parse_head_profile(text, "builtin");
        if (p.model_shape == key) {
            validate_head_profile(p, hp);
            return p;
        }
    }
    HeadProfile p = fallback_head_profile(hp);
    LCTX_LOG_WARN("REFORM: no head profile for this model (%s); using the uncalibrated fallback %s. Measure one "
                  "with 'lctx heads -m MODEL' and pass it as lctx_reform_params.heads_path / --heads.",
                  key.c_str(), p.heads_string().c_str());
    validate_head_profile(p, hp);
    return p;
}

} // namespace lctx
