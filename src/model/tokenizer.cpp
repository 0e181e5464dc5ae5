#include "model/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"
#include "model/gguf.h"
#include "model/tokenizer_impl.h"

namespace lctx {

bool Tokenizer::is_control(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return false;
    const TokenAttr a = attrs_[static_cast<size_t>(id)];
    return a == TokenAttr::CONTROL || a == TokenAttr::USER_DEFINED || a == TokenAttr::UNKNOWN;
}

bool Tokenizer::is_eog(int32_t id) const {
    return id >= 0 && std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile &file) {
    const std::string model = file.get_string("tokenizer.ggml.model");
    if (model == "llama") return make_spm_tokenizer(file);
    if (model == "gpt2") return make_bpe_tokenizer(file);
    fail(LCTX_ERR_UNSUPPORTED, "tokenizer.ggml.model '%s' is not supported (only 'llama' SentencePiece and 'gpt2' BPE)",
         model.c_str());
}

namespace {

// Token texts llama.cpp recognises as end-of-turn / end-of-generation /
// fill-in-the-middle markers when the metadata does not name them.
const char *const k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                   "<|end_of_text|>", "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>",
                                   "<end_of_utterance>"};
// "</s>" is on llama.cpp's list too (added for PaddleOCR): it also makes
// Gemma 3's user-defined "</s>" (id 212) an end of generation and CONTROL,
// so that text "</s>" is no longer matched without parse_special.
const char *const k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>",
                                   "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
                                   "<end_of_utterance>"};
const char *const k_eom_texts[] = {"<|eom_id|>"};
const char *const k_fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                                       "▁<PRE>", "<|code_prefix|>"};
const char *const k_fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                                       "▁<SUF>", "<|code_suffix|>"};
const char *const k_fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                                       "▁<MID>", "<|code_middle|>"};
const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"};
const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char *const k_fim_sep_texts[] = {"<|file_sep|>"};

template <size_t N> bool in_list(const std::string &s, const char *const (&list)[N]) {
    for (const char *t : list)
        if (s == t) return true;
    return false;
}

struct Fragment {
    int32_t token;  // -1: plain text at [off, off+len)
    size_t off, len;
};

} // namespace

void TokenizerBase::load_vocab(const GgufFile &f, VocabKind kind) {
    kind_ = kind;
    std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (tokens.empty()) fail(LCTX_ERR_FORMAT, "tokenizer.ggml.tokens is empty");
    if (tokens.size() > static_cast<size_t>(INT32_MAX))
        fail(LCTX_ERR_FORMAT, "tokenizer.ggml.tokens has too many entries (%zu)", tokens.size());
    const size_t n = tokens.size();
    scores_ = f.get_float_array_or_empty("tokenizer.ggml.scores");
    if (!scores_.empty() && scores_.size() != n)
        fail(LCTX_ERR_FORMAT, "tokenizer.ggml.scores has %zu entries but there are %zu tokens", scores_.size(), n);
    if (scores_.empty()) scores_.assign(n, 0.0f);
    const std::vector<int32_t> types = f.get_int_array_or_empty("tokenizer.ggml.token_type");
    if (!types.empty() && types.size() != n)
        fail(LCTX_ERR_FORMAT, "tokenizer.ggml.token_type has %zu entries but there are %zu tokens", types.size(), n);

    texts_.resize(n);
    attrs_.resize(n);
    token_to_id_.clear();
    token_to_id_.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        std::string &w = tokens[i];
        // llama.cpp renames empty tokens so that they can never match text.
        if (w.empty()) w = "[EMPTY_" + std::to_string(i) + "]";
        token_to_id_[w] = static_cast<int32_t>(i);  // a later duplicate wins, as in llama.cpp
        texts_[i] = std::move(w);
        if (types.empty()) {
            attrs_[i] = TokenAttr::NORMAL;
        } else {
            const int32_t t = types[i];
            attrs_[i] = (t >= 1 && t <= 6) ? static_cast<TokenAttr>(t) : TokenAttr::UNDEFINED;
        }
    }

    // Defaults per model type, then metadata overrides (out-of-range ids are
    // ignored with a warning, as llama.cpp does: 0xFFFFFFFF means "none").
    const int32_t nv = static_cast<int32_t>(n);
    if (kind == VocabKind::SPM) {
        bos_ = 1, eos_ = 2, unk_ = 0;
        add_bos_ = true;
        add_space_prefix_ = true;
        clean_spaces_ = false;
    } else {
        bos_ = 11, eos_ = 11, unk_ = -1;
        add_bos_ = false;
        add_space_prefix_ = false;
    }
    pad_ = -1;
    eot_ = -1;
    add_eos_ = false;
    int32_t eom = -1, fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
    auto read_id = [&](const char *key, int32_t &dst) {
        const GgufValue *v = f.find(key);
        if (!v) return;
        const int64_t id = f.get_int(key);
        if (id < 0 || id >= nv) {
            LCTX_LOG_WARN("tokenizer: %s = %lld is out of range (n_vocab %d), ignored", key, (long long)id, nv);
            return;
        }
        dst = static_cast<int32_t>(id);
    };
    read_id("tokenizer.ggml.bos_token_id", bos_);
    read_id("tokenizer.ggml.eos_token_id", eos_);
    read_id("tokenizer.ggml.eot_token_id", eot_);
    read_id("tokenizer.ggml.eom_token_id", eom);
    read_id("tokenizer.ggml.unknown_token_id", unk_);
    read_id("tokenizer.ggml.padding_token_id", pad_);
    read_id("tokenizer.ggml.fim_pre_token_id", fim_pre);
    read_id("tokenizer.ggml.fim_suf_token_id", fim_suf);
    read_id("tokenizer.ggml.fim_mid_token_id", fim_mid);
    read_id("tokenizer.ggml.fim_pad_token_id", fim_pad);
    read_id("tokenizer.ggml.fim_rep_token_id", fim_rep);
    read_id("tokenizer.ggml.fim_sep_token_id", fim_sep);
    if (bos_ >= nv) bos_ = -1;
    if (eos_ >= nv) eos_ = -1;
    add_bos_ = f.get_bool_or("tokenizer.ggml.add_bos_token", add_bos_);
    add_eos_ = f.get_bool_or("tokenizer.ggml.add_eos_token", add_eos_);
    add_space_prefix_ = f.get_bool_or("tokenizer.ggml.add_space_prefix", add_space_prefix_);

    // Recognise special tokens by text (first match in id order) and force
    // them to CONTROL, as llama.cpp does for files that mistype them.
    auto make_control = [&](int32_t id) {
        if (attrs_[static_cast<size_t>(id)] != TokenAttr::CONTROL) {
            LCTX_LOG_WARN("tokenizer: control-looking token %d '%s' is not CONTROL; treating it as CONTROL", id,
                          texts_[static_cast<size_t>(id)].c_str());
            attrs_[static_cast<size_t>(id)] = TokenAttr::CONTROL;
        }
    };
    auto detect = [&](int32_t &dst, auto &list) {
        if (dst != -1) return;
        for (int32_t i = 0; i < nv; ++i) {
            if (in_list(texts_[static_cast<size_t>(i)], list)) {
                dst = i;
                make_control(i);
                return;
            }
        }
    };
    detect(eot_, k_eot_texts);
    detect(eom, k_eom_texts);
    detect(fim_pre, k_fim_pre_texts);
    detect(fim_suf, k_fim_suf_texts);
    detect(fim_mid, k_fim_mid_texts);
    detect(fim_pad, k_fim_pad_texts);
    detect(fim_rep, k_fim_rep_texts);
    detect(fim_sep, k_fim_sep_texts);

    eog_ids_.clear();
    auto add_eog = [&](int32_t id) {
        if (id >= 0 && !is_eog(id)) eog_ids_.push_back(id);
    };
    add_eog(fim_pad);
    add_eog(fim_rep);
    add_eog(fim_sep);
    for (int32_t i = 0; i < nv; ++i) {
        if (in_list(texts_[static_cast<size_t>(i)], k_eog_texts)) {
            add_eog(i);
            make_control(i);
        }
    }
    add_eog(eos_);
    add_eog(eot_);
    add_eog(eom);
    std::sort(eog_ids_.begin(), eog_ids_.end());

    // Special texts matched before regular tokenization, longest first. The
    // same std::sort call as llama.cpp so ties between equal lengths break
    // the same way.
    special_order_.clear();
    for (int32_t i = 0; i < nv; ++i) {
        const TokenAttr a = attrs_[static_cast<size_t>(i)];
        if (a == TokenAttr::CONTROL || a == TokenAttr::USER_DEFINED || a == TokenAttr::UNKNOWN)
            special_order_.push_back(i);
    }
    std::sort(special_order_.begin(), special_order_.end(), [&](int32_t a, int32_t b) {
        return texts_[static_cast<size_t>(a)].size() > texts_[static_cast<size_t>(b)].size();
    });
}

std::vector<int32_t> TokenizerBase::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    // Split the input at special-token texts: each special token in turn
    // (longest first) cuts every remaining text fragment at all of its
    // occurrences, exactly like llama.cpp's tokenizer_st_partition.
    std::vector<Fragment> frags;
    if (!text.empty()) frags.push_back({-1, 0, text.size()});
    std::vector<Fragment> next;
    for (const int32_t sid : special_order_) {
        const TokenAttr a = attrs_[static_cast<size_t>(sid)];
        // Without parse_special only USER_DEFINED texts are still split out.
        if (!parse_special && (a == TokenAttr::CONTROL || a == TokenAttr::UNKNOWN)) continue;
        const std::string &st = texts_[static_cast<size_t>(sid)];
        next.clear();
        bool changed = false;
        for (const Fragment &fr : frags) {
            if (fr.token >= 0) {
                next.push_back(fr);
                continue;
            }
            const std::string_view region = text.substr(0, fr.off + fr.len);
            size_t pos = fr.off;
            for (;;) {
                const size_t m = region.find(st, pos);
                if (m == std::string_view::npos) break;
                changed = true;
                if (m > pos) next.push_back({-1, pos, m - pos});
                next.push_back({sid, 0, 0});
                pos = m + st.size();
            }
            if (pos < fr.off + fr.len) next.push_back({-1, pos, fr.off + fr.len - pos});
        }
        if (changed) frags.swap(next);
    }

    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 2);
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    bool prev_special = true;
    for (const Fragment &fr : frags) {
        if (fr.token >= 0) {
            out.push_back(fr.token);
            prev_special = true;
        } else {
            encode_text(text.substr(fr.off, fr.len), prev_special, out);
            prev_special = false;
        }
    }
    if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
    return out;
}

std::string TokenizerBase::token_to_piece(int32_t id, bool special) const {
    if (id < 0 || id >= n_vocab()) fail(LCTX_ERR_INVALID_ARG, "token id %d is out of range [0, %d)", id, n_vocab());
    const TokenAttr a = attrs_[static_cast<size_t>(id)];
    switch (a) {
    case TokenAttr::CONTROL:
    case TokenAttr::UNKNOWN:
        return special ? texts_[static_cast<size_t>(id)] : std::string();
    case TokenAttr::USER_DEFINED:
        return texts_[static_cast<size_t>(id)];
    case TokenAttr::NORMAL:
        return normal_piece(id);
    case TokenAttr::BYTE:
        if (kind_ == VocabKind::SPM) {
            // "<0xXX>": llama.cpp reads the two hex digits with strtol.
            const std::string &t = texts_[static_cast<size_t>(id)];
            const std::string hex = t.size() > 3 ? t.substr(3, 2) : std::string();
            return std::string(1, static_cast<char>(std::strtol(hex.c_str(), nullptr, 16)));
        }
        return std::string();
    default:
        return std::string();  // UNUSED / UNDEFINED render as nothing
    }
}

std::string TokenizerBase::detokenize(const int32_t *ids, size_t n, bool special) const {
    std::string out;
    // llama_detokenize: with add_space_prefix, one leading space of the first
    // token's piece is dropped (even if that piece is empty, only the first).
    bool remove_space = add_space_prefix_;
    for (size_t i = 0; i < n; ++i) {
        std::string piece = token_to_piece(ids[i], special);
        size_t skip = (remove_space && !piece.empty() && piece[0] == ' ') ? 1 : 0;
        remove_space = false;
        out.append(piece, skip, std::string::npos);
    }
    if (!clean_spaces_ || out.empty()) return out;

    // clean_up_tokenization_spaces, as llama.cpp's three passes.
    std::string a;
    a.reserve(out.size());
    a.push_back(out[0]);
    for (size_t i = 1; i < out.size(); ++i) {  // " ?", " !", " .", " ,"
        const char x = out[i];
        if (out[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) a.pop_back();
        a.push_back(x);
    }
    std::string b;
    b.reserve(a.size());
    b.push_back(a[0]);
    for (size_t i = 1; i < a.size(); ++i) {  // " ' " -> "'"
        const char x = a[i];
        if (x == '\'' && i + 1 < a.size() && a[i - 1] == ' ' && a[i + 1] == ' ') {
            b.pop_back();
            // llama.cpp blanks the skipped space in place, so the character
            // after it never sees a space before it.
            a[++i] = '\0';
        }
        b.push_back(x);
    }
    std::string c;
    c.reserve(b.size());
    c.push_back(b[0]);
    for (size_t i = 1; i < b.size(); ++i) {  // " 's", " 'm", " 're", " 've"
        const char x = b[i];
        if (b[i - 1] == ' ' && x == '\'' && i + 1 < b.size()) {
            const char x1 = b[i + 1];
            if (x1 == 's' || x1 == 'm') {
                c.pop_back();
            } else if (i + 2 < b.size() && ((x1 == 'r' && b[i + 2] == 'e') || (x1 == 'v' && b[i + 2] == 'e'))) {
                c.pop_back();
            }
        }
        c.push_back(x);
    }
    return c;
}

} // namespace lctx
