// REFORM head profiles: the (layer, Q|K|V, head) triples whose pre-RoPE
// projections, L2-normalised and concatenated, form the per-token embedding
// (spec §3). Layers are 0-based; Q heads index query heads, K/V heads index
// KV heads. Profiles are JSON files written by `lctx heads`; the library
// carries built-in ones (chosen by the model's shape key) and falls back to
// four mid-layer V heads for an unknown model, with a log warning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"

namespace lctx {

enum class HeadKind : int32_t { Q = 0, K = 1, V = 2 };

struct HeadSpec {
    int32_t layer = 0;
    HeadKind kind = HeadKind::V;
    int32_t head = 0;
    bool operator==(const HeadSpec &o) const { return layer == o.layer && kind == o.kind && head == o.head; }
};

struct HeadProfile {
    std::string name;          // free text, e.g. the model the profile was measured on
    std::string model_shape;   // model_shape_key() of that model ("" = any)
    std::vector<HeadSpec> heads;
    std::string origin;        // "builtin", "fallback" or the file path (not serialised)
    // ILRe's retrieval layer measured on this model (`lctx heads --ilre`,
    // member "ilre": {"retrieval_layer": N, ...}); -1 when not measured.
    int32_t ilre_layer = -1;

    int32_t exit_layer() const;    // deepest layer used (E)
    std::string heads_string() const;   // "V3@L12,K0@L8,..." (canonical, for fingerprints)
};

const char *head_kind_name(HeadKind k);   // "Q", "K", "V"

// "llama:L30:E576:H9:KV3:D64:V49152:C8192": what a profile must match.
std::string model_shape_key(const Hparams &hp);

// Parses a profile JSON (LCTX_ERR_FORMAT on malformed text or fields).
HeadProfile parse_head_profile(const std::string &json_text, const std::string &origin);
// Serialises the profile; `extra_fields` (already JSON, "" for none) is
// inserted as further members of the top-level object (e.g. the MNR table).
std::string head_profile_json(const HeadProfile &p, const std::string &extra_fields = "");

// Refuses (LCTX_ERR_INVALID_ARG) heads outside the model or an empty list.
void validate_head_profile(const HeadProfile &p, const Hparams &hp);

// Four V heads spread over 35%..65% of the depth: the documented fallback.
HeadProfile fallback_head_profile(const Hparams &hp);

// path non-empty: that file (LCTX_ERR_IO / FORMAT / INVALID_ARG). Otherwise
// the built-in profile whose shape key matches, else the fallback (warning).
HeadProfile choose_head_profile(const Hparams &hp, const std::string &path);

// Built-in profiles: JSON texts, also committed under data/heads/.
const std::vector<const char *> &builtin_head_profiles();

} // namespace lctx
