// Byte-level BPE (tokenizer.ggml.model = "gpt2"): pre-tokenize, map bytes to
// GPT-2's printable stand-ins, then merge adjacent symbols by merge rank
// (lowest first, leftmost on ties), as llama.cpp's llm_tokenizer_bpe.
#include <queue>

#include "common/error.h"
#include "model/bpe_pretokenize.h"
#include "model/gguf.h"
#include "model/tokenizer_impl.h"
#include "model/unicode.h"

namespace lctx {
namespace {

struct Symbol {
    int prev, next;
    size_t off, n;  // bytes in the encoded word
};

struct Bigram {
    int left, right;
    int rank;
    size_t size;
};

// Lowest rank first; among equal ranks the leftmost pair.
struct BigramAfter {
    bool operator()(const Bigram &l, const Bigram &r) const {
        return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    }
};

// Separates the two halves of a merge key; 0xFF never occurs in UTF-8.
constexpr char kSep = '\xFF';

class BpeTokenizer final : public TokenizerBase {
public:
    void load(const GgufFile &f) {
        load_vocab(f, VocabKind::BPE);
        const std::string pre = f.get_string_or("tokenizer.ggml.pre", "");
        passes_ = pre_splits_for(pre, clean_spaces_);
        const std::vector<std::string> merges = f.get_string_array("tokenizer.ggml.merges");
        ranks_.reserve(merges.size());
        for (size_t i = 0; i < merges.size(); ++i) {
            const std::string &m = merges[i];
            // Split at the first space after the first byte (a merge half
            // may itself start with a space).
            const size_t sp = m.find(' ', 1);
            if (sp == std::string::npos) continue;
            std::string key = m.substr(0, sp);
            key.push_back(kSep);
            key.append(m, sp + 1, std::string::npos);
            ranks_.emplace(std::move(key), static_cast<int32_t>(i));  // the first occurrence wins
        }
    }

protected:
    void encode_text(std::string_view text, bool, std::vector<int32_t> &out) const override {
        const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
        const std::vector<size_t> words = pre_split(cpts, passes_);
        std::string utf8, word, key;
        std::vector<Symbol> sym;
        std::vector<Bigram> heap_storage;
        size_t start = 0;
        for (const size_t len : words) {
            utf8.clear();
            for (size_t i = start; i < start + len; ++i) unicode::append_utf8(utf8, cpts[i]);
            start += len;
            word.clear();
            for (char c : utf8) word += unicode::byte_to_unicode(static_cast<uint8_t>(c));
            encode_word(word, sym, heap_storage, key, out);
        }
    }

    std::string normal_piece(int32_t id) const override {
        // Undo the byte-level mapping; a character outside it is rendered as
        // llama.cpp's llama_decode_text does.
        const std::string &t = texts_[static_cast<size_t>(id)];
        std::string r;
        for (const uint32_t c : unicode::decode_utf8(t)) {
            const int b = unicode::unicode_to_byte(c);
            if (b >= 0) {
                r.push_back(static_cast<char>(b));
                continue;
            }
            std::string u;
            unicode::append_utf8(u, c);
            r += "[UNK_BYTE_0x";
            for (char ch : u) r += format("%02x", static_cast<uint8_t>(ch));
            r += t + "]";
        }
        return r;
    }

private:
    int rank_of(std::string_view l, std::string_view r, std::string &key) const {
        key.assign(l);
        key.push_back(kSep);
        key.append(r);
        auto it = ranks_.find(std::string_view(key));
        return it == ranks_.end() ? -1 : it->second;
    }

    void encode_word(const std::string &w, std::vector<Symbol> &sym, std::vector<Bigram> &storage, std::string &key,
                     std::vector<int32_t> &out) const {
        if (w.empty()) return;
        sym.clear();
        for (size_t off = 0; off < w.size();) {
            const size_t n = std::min(unicode::utf8_len(w[off]), w.size() - off);
            const int idx = static_cast<int>(sym.size());
            sym.push_back({idx - 1, off + n == w.size() ? -1 : idx + 1, off, n});
            off += n;
        }
        storage.clear();
        std::priority_queue<Bigram, std::vector<Bigram>, BigramAfter> queue(BigramAfter{}, std::move(storage));
        auto try_add = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            const int rank = rank_of(std::string_view(w.data() + sym[l].off, sym[l].n),
                                     std::string_view(w.data() + sym[r].off, sym[r].n), key);
            if (rank < 0) return;
            queue.push({l, r, rank, sym[l].n + sym[r].n});
        };
        for (int i = 1; i < static_cast<int>(sym.size()); ++i) try_add(i - 1, i);

        while (!queue.empty()) {
            const Bigram b = queue.top();
            queue.pop();
            Symbol &l = sym[b.left];
            Symbol &r = sym[b.right];
            // Symbols only grow rightwards from fixed starts, so an unchanged
            // size means an unchanged text.
            if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
            l.n += r.n;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) sym[r.next].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }

        for (int i = 0; i != -1; i = sym[i].next) {
            const std::string_view s(w.data() + sym[i].off, sym[i].n);
            const int32_t id = find_token(s);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            // No such token: llama.cpp looks each raw byte up on its own.
            for (char c : s) {
                const int32_t bid = find_token(std::string_view(&c, 1));
                if (bid >= 0) out.push_back(bid);
            }
        }
    }

    std::vector<PreSplit> passes_;
    TokenMap ranks_;
};

} // namespace

std::unique_ptr<TokenizerBase> make_bpe_tokenizer(const GgufFile &file) {
    auto t = std::make_unique<BpeTokenizer>();
    t->load(file);
    return t;
}

} // namespace lctx
