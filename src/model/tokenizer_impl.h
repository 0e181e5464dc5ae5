// Internals shared by the BPE and SentencePiece tokenizers: vocabulary
// tables, special-token partitioning, token_to_piece and detokenize, all
// following llama.cpp's llama_vocab so that outputs are identical.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer.h"

namespace lctx {

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

enum class VocabKind { SPM, BPE };

class TokenizerBase : public Tokenizer {
public:
    std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const override;
    std::string token_to_piece(int32_t id, bool special) const override;
    std::string detokenize(const int32_t *ids, size_t n, bool special) const override;

    // Reads tokens, scores, types, special ids and flags (the parts common to
    // both models), then derives EOG and the special-token list.
    void load_vocab(const GgufFile &file, VocabKind kind);

    int32_t find_token(std::string_view text) const {
        auto it = token_to_id_.find(text);
        return it == token_to_id_.end() ? -1 : it->second;
    }

protected:
    // Tokenizes one run of plain text (no special tokens inside).
    // prev_special: the fragment starts the input or follows a special token.
    virtual void encode_text(std::string_view text, bool prev_special, std::vector<int32_t> &out) const = 0;
    // Piece of a NORMAL token.
    virtual std::string normal_piece(int32_t id) const = 0;

    VocabKind kind_ = VocabKind::SPM;
    TokenMap token_to_id_;
    std::vector<float> scores_;
    std::vector<int32_t> special_order_; // control/user-defined/unknown ids, longest text first
    bool add_space_prefix_ = false;
    bool clean_spaces_ = false;
};

std::unique_ptr<TokenizerBase> make_spm_tokenizer(const GgufFile &file);
std::unique_ptr<TokenizerBase> make_bpe_tokenizer(const GgufFile &file);

} // namespace lctx
