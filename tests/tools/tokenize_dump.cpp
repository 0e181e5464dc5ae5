// lctx_tokenize_dump MODEL.gguf MODE IN OUT
// Reads length-prefixed records from IN (u32 little-endian byte length, then
// the bytes) and writes one text line per record to OUT:
//   MODE tok:<add_special><parse_special>  (e.g. tok:10) -> token ids, space separated
//   MODE detok:<special>                  records are ids (u32 count, i32 ids) -> hex of llama_detokenize-style text
//   MODE pieces:<special>                 (IN ignored) one line per vocab id: hex of token_to_piece
//   MODE chat:<add_assistant>             MODEL is a template text file; each record is a u32
//                                         message count then role/content records -> hex of apply_chat
//   MODE info                             (IN ignored) "key value" lines: special ids, flags, eog ids
// plus "ERR <message>" lines on errors. Used by tests/reference/test_tokenizer_llamacpp.py.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace {

std::string hex(const std::string &s) {
    static const char d[] = "0123456789abcdef";
    std::string r;
    for (unsigned char c : s) {
        r.push_back(d[c >> 4]);
        r.push_back(d[c & 15]);
    }
    return r;
}

bool read_u32(std::istream &in, uint32_t &v) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char *>(b), 4)) return false;
    v = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    return true;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s MODEL.gguf MODE IN OUT\n", argv[0]);
        return 2;
    }
    try {
        const std::string mode = argv[2];
        std::ifstream in(argv[3], std::ios::binary);
        std::ofstream out(argv[4], std::ios::binary);
        if (mode.rfind("chat:", 0) == 0) {
            std::ifstream tf(argv[1], std::ios::binary);
            const std::string tmpl((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
            const bool add = mode.size() > 5 && mode[5] == '1';
            auto read_str = [&](std::string &s) {
                uint32_t n = 0;
                if (!read_u32(in, n)) return false;
                s.assign(n, '\0');
                return static_cast<bool>(in.read(s.data(), n));
            };
            uint32_t count;
            while (read_u32(in, count)) {
                std::vector<lctx::ChatMessage> msgs(count);
                for (auto &m : msgs) read_str(m.role), read_str(m.content);
                try {
                    out << hex(lctx::apply_chat(lctx::detect_chat_format(tmpl), tmpl, msgs, add)) << '\n';
                } catch (const lctx::Error &e) {
                    out << "ERR " << e.what() << '\n';
                }
            }
            return 0;
        }
        auto file = lctx::GgufFile::open(argv[1]);
        auto tok = lctx::Tokenizer::from_gguf(*file);
        if (mode == "info") {
            out << "n_vocab " << tok->n_vocab() << "\nbos " << tok->bos() << "\neos " << tok->eos() << "\neot "
                << tok->eot() << "\npad " << tok->pad() << "\nunk " << tok->unk() << "\nadd_bos " << tok->add_bos()
                << "\nadd_eos " << tok->add_eos() << "\neog";
            for (int32_t id = 0; id < tok->n_vocab(); ++id)
                if (tok->is_eog(id)) out << ' ' << id;
            out << "\ncontrol";
            for (int32_t id = 0; id < tok->n_vocab(); ++id)
                if (tok->token_attr(id) == lctx::TokenAttr::CONTROL) out << ' ' << id;
            out << '\n';
        } else if (mode.rfind("pieces:", 0) == 0) {
            const bool special = mode.size() > 7 && mode[7] == '1';
            for (int32_t id = 0; id < tok->n_vocab(); ++id) out << hex(tok->token_to_piece(id, special)) << '\n';
        } else if (mode.rfind("tok:", 0) == 0 && mode.size() == 6) {
            const bool add_special = mode[4] == '1', parse_special = mode[5] == '1';
            uint32_t n;
            while (read_u32(in, n)) {
                std::string s(n, '\0');
                in.read(s.data(), n);
                std::vector<int32_t> ids = tok->tokenize(s, add_special, parse_special);
                for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
                out << '\n';
            }
        } else if (mode.rfind("detok:", 0) == 0 && mode.size() == 7) {
            const bool special = mode[6] == '1';
            uint32_t n;
            while (read_u32(in, n)) {
                std::vector<int32_t> ids(n);
                for (auto &id : ids) {
                    uint32_t v = 0;
                    read_u32(in, v);
                    id = static_cast<int32_t>(v);
                }
                try {
                    out << hex(tok->detokenize(ids.data(), ids.size(), special)) << '\n';
                } catch (const lctx::Error &e) {
                    out << "ERR " << e.what() << '\n';
                }
            }
        } else {
            std::fprintf(stderr, "unknown mode '%s'\n", mode.c_str());
            return 2;
        }
    } catch (const lctx::Error &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
