// Tokenize/detokenize round trip on arbitrary bytes, with the SentencePiece
// tokenizer of stories260K (tests/data) and the micro model, and the BPE
// tokenizer of SmolLM2 when models/ has it (scripts/setup.sh fetches it).
#include "fuzz_common.h"

namespace {

const lctx_model *load(const std::string &path) {
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = 1;
    mp.backend = "cpu";
    lctx_model *m = nullptr;
    if (lctx_model_load(path.c_str(), &mp, &m) != LCTX_OK) return nullptr;
    return m;
}

std::vector<const lctx_model *> models() {
    std::vector<const lctx_model *> out{fuzz::micro_model()};
    if (const lctx_model *m = load(std::string(LCTX_SOURCE_DIR) + "/tests/data/stories260K.gguf")) out.push_back(m);
    else {
        std::fprintf(stderr, "fuzz_tokenizer: tests/data/stories260K.gguf does not load\n");
        std::abort();
    }
    if (const lctx_model *m = load(std::string(LCTX_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
        out.push_back(m);
    return out;
}

// ASCII control characters other than tab and newlines: byte-level BPE
// vocabularies (SmolLM2's) map some of them to tokens that detokenize to
// nothing, in llama.cpp as in lctx, so they are left out of the round trip.
bool has_control(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' && p[i] != '\r') || p[i] == 0x7F) return true;
    return false;
}

bool valid_utf8(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n;) {
        const uint8_t c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // Never destroyed (reachable through the pointer): the models live as
    // long as the process, without a leak report at exit.
    static const std::vector<const lctx_model *> &ms = *new std::vector<const lctx_model *>(models());
    if (size == 0) return 0;
    const uint8_t flags = data[0];
    const char *text = reinterpret_cast<const char *>(data + 1);
    const size_t len = size - 1;
    const lctx_model *m = ms[flags % ms.size()];
    const bool add_special = flags & 4, parse_special = flags & 8;
    std::vector<lctx_token> toks(len + 4);
    size_t n = 0;
    // A small buffer first: the needed count comes back with BUFFER_TOO_SMALL.
    lctx_status st = fuzz::check(lctx_tokenize(m, text, len, add_special, parse_special, toks.data(), 1, &n),
                                 "lctx_tokenize");
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) toks.resize(n);
    else if (st != LCTX_OK) return 0;
    if (fuzz::check(lctx_tokenize(m, text, len, add_special, parse_special, toks.data(), toks.size(), &n),
                    "lctx_tokenize") != LCTX_OK)
        std::abort();   // the size it asked for must do
    toks.resize(n);
    size_t need = 0;
    std::string out(len + 16, '\0');
    st = fuzz::check(lctx_detokenize(m, toks.data(), toks.size(), parse_special, out.data(), out.size(), &need),
                     "lctx_detokenize");
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        out.resize(need + 1);
        if (fuzz::check(lctx_detokenize(m, toks.data(), toks.size(), parse_special, out.data(), out.size(), &need),
                        "lctx_detokenize") != LCTX_OK)
            std::abort();
    } else if (st != LCTX_OK) {
        std::abort();
    }
    out.resize(need);
    // Round trip: plain text (no specials added or parsed) that is valid
    // UTF-8, has no leading space (SentencePiece's prefix space is removed on
    // the way back), no U+2581 (SentencePiece's own space mark, rendered as a
    // space) and no control characters comes back byte for byte.
    // SmolLM2's byte-level vocabulary also drops the lead byte of some 4-byte
    // sequences (unassigned planes; llama.cpp gives the same tokens and text),
    // so 4-byte sequences are left out for the BPE model.
    const bool bpe = flags % ms.size() == 2;
    bool four_byte = false;
    for (size_t i = 0; i < len; ++i) four_byte |= data[1 + i] >= 0xF0;
    if (!add_special && !parse_special && valid_utf8(data + 1, len) && (len == 0 || text[0] != ' ') &&
        !(bpe && four_byte) &&
        !has_control(data + 1, len) && std::string(text, len).find("\xE2\x96\x81") == std::string::npos &&
        out != std::string(text, len)) {
        std::fprintf(stderr, "fuzz_tokenizer: round trip differs (%zu bytes in, %zu out)\n", len, out.size());
        std::abort();
    }
    for (lctx_token t : toks) {
        char piece[64];
        (void)fuzz::check(lctx_token_to_piece(m, t, flags & 16, piece, sizeof piece, &need), "lctx_token_to_piece");
    }
    return 0;
}
