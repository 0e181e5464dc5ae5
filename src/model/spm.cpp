// SentencePiece (tokenizer.ggml.model = "llama"): llama.cpp's greedy bigram
// merging by token score, over UTF-8 characters, with <0xXX> byte fallback.
#include <queue>

#include "common/error.h"
#include "model/gguf.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace lctx {
namespace {

const char *const k_space_marker = "\xE2\x96\x81";  // U+2581 "▁"

struct Symbol {
    int prev, next;
    size_t off, n;  // bytes in the escaped text
};

struct Bigram {
    int left, right;
    float score;
    size_t size;
};

// Highest score first; among equal scores the leftmost pair.
struct BigramLess {
    bool operator()(const Bigram &l, const Bigram &r) const {
        return l.score < r.score || (l.score == r.score && l.left > r.left);
    }
};

class SpmTokenizer final : public TokenizerBase {
protected:
    void encode_text(std::string_view raw, bool prev_special, std::vector<int32_t> &out) const override {
        // Escape spaces (and add the prefix space after BOS / specials).
        std::string text;
        text.reserve(raw.size() + 8);
        if (add_space_prefix_ && prev_special) text += k_space_marker;
        for (char c : raw) {
            if (c == ' ')
                text += k_space_marker;
            else
                text.push_back(c);
        }
        if (text.empty()) return;

        std::vector<Symbol> sym;
        sym.reserve(text.size());
        for (size_t off = 0; off < text.size();) {
            const size_t n = std::min(unicode::utf8_len(text[off]), text.size() - off);
            const int idx = static_cast<int>(sym.size());
            sym.push_back({idx - 1, off + n == text.size() ? -1 : idx + 1, off, n});
            off += n;
        }

        std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
        auto try_add = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            const std::string_view s(text.data() + sym[l].off, sym[l].n + sym[r].n);
            const int32_t id = find_token(s);
            if (id < 0) return;
            queue.push({l, r, scores_[static_cast<size_t>(id)], s.size()});
        };
        for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

        while (!queue.empty()) {
            const Bigram b = queue.top();
            queue.pop();
            Symbol &l = sym[b.left];
            Symbol &r = sym[b.right];
            if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
            l.n += r.n;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) sym[r.next].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }

        for (int i = 0; i != -1; i = sym[i].next) {
            const std::string_view s(text.data() + sym[i].off, sym[i].n);
            const int32_t id = find_token(s);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // Merged symbols are always tokens, so this is one character
            // the vocabulary lacks: emit its bytes.
            for (char c : s) out.push_back(byte_token(static_cast<uint8_t>(c)));
        }
    }

    std::string normal_piece(int32_t id) const override {
        const std::string &t = texts_[static_cast<size_t>(id)];
        std::string r;
        r.reserve(t.size());
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, 3, k_space_marker) == 0) {
                r.push_back(' ');
                i += 3;
            } else {
                r.push_back(t[i++]);
            }
        }
        return r;
    }

private:
    int32_t byte_token(uint8_t c) const {
        static const char hex[] = "0123456789ABCDEF";
        const char buf[7] = {'<', '0', 'x', hex[c >> 4], hex[c & 15], '>', 0};
        int32_t id = find_token(std::string_view(buf, 6));
        if (id >= 0) return id;
        id = find_token(std::string_view(reinterpret_cast<const char *>(&c), 1));
        if (id >= 0) return id;
        // llama.cpp would throw std::out_of_range here; fall back to <unk>.
        if (unk_ >= 0) return unk_;
        fail(LCTX_ERR_FORMAT, "SentencePiece vocabulary has no token for byte 0x%02X and no unknown token", c);
    }
};

} // namespace

std::unique_ptr<TokenizerBase> make_spm_tokenizer(const GgufFile &file) {
    auto t = std::make_unique<SpmTokenizer>();
    t->load_vocab(file, VocabKind::SPM);
    return t;
}

} // namespace lctx
