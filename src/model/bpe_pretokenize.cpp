#include "model/bpe_pretokenize.h"

#include "common/error.h"
#include "model/unicode.h"

namespace lctx {

std::vector<PreSplit> pre_splits_for(const std::string &pre, bool &clean_spaces) {
    if (pre == "gpt-2") {
        clean_spaces = true;
        return {PreSplit::GPT2};
    }
    if (pre == "smollm") {
        clean_spaces = false;
        return {PreSplit::DIGITS, PreSplit::GPT2};
    }
    fail(LCTX_ERR_UNSUPPORTED,
         "BPE pre-tokenizer '%s' (tokenizer.ggml.pre) is not supported; supported: 'gpt-2', 'smollm'",
         pre.empty() ? "<missing>" : pre.c_str());
}

namespace {

// Each number code point alone; the runs between them stay whole.
void split_digits(const std::vector<uint32_t> &cpts, size_t begin, size_t end, std::vector<size_t> &out) {
    size_t run = begin;
    for (size_t i = begin; i < end; ++i) {
        if (unicode::is_number(cpts[i])) {
            if (i > run) out.push_back(i - run);
            out.push_back(1);
            run = i + 1;
        }
    }
    if (end > run) out.push_back(end - run);
}

// The GPT-2 regex, hand-written as llama.cpp's custom splitter (which is
// what llama.cpp runs, including its handling of piece boundaries).
void split_gpt2(const std::vector<uint32_t> &cpts, size_t begin, size_t end, std::vector<size_t> &out) {
    constexpr uint32_t kNone = 0xFFFFFFFF;
    auto cpt_at = [&](size_t p) { return p < end ? cpts[p] : kNone; };
    enum Cls { NONE, WS, LETTER, NUMBER, OTHER };
    auto cls_at = [&](size_t p) -> Cls {
        if (p >= end) return NONE;
        const uint32_t c = cpts[p];
        if (unicode::is_whitespace(c)) return WS;
        if (unicode::is_letter(c)) return LETTER;
        if (unicode::is_number(c)) return NUMBER;
        return OTHER;
    };
    size_t prev_end = begin;
    auto emit = [&](size_t e) {
        if (e > prev_end) out.push_back(e - prev_end);
        prev_end = e;
    };

    for (size_t pos = begin; pos < end;) {
        const uint32_t c = cpts[pos];
        // 's|'t|'re|'ve|'m|'ll|'d
        if (c == '\'' && pos + 1 < end) {
            const uint32_t n1 = cpt_at(pos + 1);
            if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
                pos += 2;
                emit(pos);
                continue;
            }
            if (pos + 2 < end) {
                const uint32_t n2 = cpt_at(pos + 2);
                if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
                    pos += 3;
                    emit(pos);
                    continue;
                }
            }
        }
        // ' ?' followed by a run of one class: letters, numbers, or other.
        const Cls k = c == ' ' ? cls_at(pos + 1) : cls_at(pos);
        if (k == LETTER || k == NUMBER || k == OTHER) {
            if (c == ' ') ++pos;
            while (cls_at(pos) == k) ++pos;
            emit(pos);
            continue;
        }
        size_t nws = 0;
        while (cls_at(pos + nws) == WS) ++nws;
        // \s+(?!\S): leave the last space to prefix the next word.
        if (nws > 1 && pos + nws < end) {
            pos += nws - 1;
            emit(pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            emit(pos);
            continue;
        }
        emit(++pos);
    }
}

} // namespace

std::vector<size_t> pre_split(const std::vector<uint32_t> &cpts, const std::vector<PreSplit> &passes) {
    std::vector<size_t> pieces;
    if (cpts.empty()) return pieces;
    pieces.push_back(cpts.size());
    std::vector<size_t> next;
    for (const PreSplit p : passes) {
        next.clear();
        next.reserve(pieces.size() * 2);
        size_t start = 0;
        for (const size_t len : pieces) {
            if (p == PreSplit::DIGITS)
                split_digits(cpts, start, start + len, next);
            else
                split_gpt2(cpts, start, start + len, next);
            start += len;
        }
        pieces.swap(next);
    }
    return pieces;
}

} // namespace lctx
