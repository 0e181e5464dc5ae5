// Tokenizer built from GGUF metadata (tokenizer.ggml.*): byte-level BPE
// ("gpt2" model, with the pre-tokenizer named by tokenizer.ggml.pre) and
// SentencePiece ("llama" model, scores + byte fallback). Output matches
// llama.cpp's llama_tokenize / llama_token_to_piece for the same file.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lctx {

class GgufFile;

// tokenizer.ggml.token_type values (as in llama.cpp).
enum class TokenAttr : int32_t {
    UNDEFINED = 0, NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6,
};

class Tokenizer {
public:
    virtual ~Tokenizer() = default;

    // Throws lctx::Error(LCTX_ERR_FORMAT / LCTX_ERR_UNSUPPORTED) on bad or
    // unsupported metadata.
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile &file);

    // add_special: BOS/EOS as the model's add_bos/add_eos flags say.
    // parse_special: special/control/user-defined token texts in `text`
    // become those tokens (otherwise they are tokenized as plain text).
    virtual std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const = 0;
    // Bytes of one token as llama_token_to_piece(lstrip=0) gives them.
    // special: control tokens render as their text, else as "".
    virtual std::string token_to_piece(int32_t id, bool special) const = 0;
    // Joined pieces (SentencePiece: the leading space of the first is removed).
    virtual std::string detokenize(const int32_t *ids, size_t n, bool special) const = 0;

    int32_t n_vocab() const { return static_cast<int32_t>(texts_.size()); }
    const std::string &token_text(int32_t id) const { return texts_.at(static_cast<size_t>(id)); }
    TokenAttr token_attr(int32_t id) const { return attrs_.at(static_cast<size_t>(id)); }
    bool is_control(int32_t id) const;   // CONTROL or USER_DEFINED or UNKNOWN special

    int32_t bos() const { return bos_; }   // -1 if none
    int32_t eos() const { return eos_; }
    int32_t eot() const { return eot_; }
    int32_t pad() const { return pad_; }
    int32_t unk() const { return unk_; }
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    bool is_eog(int32_t id) const;       // eos, eot, and end-of-turn control tokens

protected:
    std::vector<std::string> texts_;
    std::vector<TokenAttr> attrs_;
    std::vector<int32_t> eog_ids_;
    int32_t bos_ = -1, eos_ = -1, eot_ = -1, pad_ = -1, unk_ = -1;
    bool add_bos_ = false, add_eos_ = false;
};

} // namespace lctx
