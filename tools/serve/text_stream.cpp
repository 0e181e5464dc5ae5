#include "serve/text_stream.h"

#include <algorithm>

namespace lctx::serve {

TextStream::TextStream(std::vector<std::string> stops) {
    for (auto &s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

size_t utf8_incomplete_tail(const std::string &s) {
    // Walk back over continuation bytes to the lead byte of the last character.
    const size_t n = s.size();
    for (size_t back = 1; back <= 4 && back <= n; ++back) {
        const unsigned char c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;   // continuation byte
        size_t need = 1;
        if (c >= 0xF0) need = 4;
        else if (c >= 0xE0) need = 3;
        else if (c >= 0xC0) need = 2;
        return need > back ? back : 0;
    }
    return 0;   // no lead byte near the end: invalid bytes, sent as they are (replaced when serialised)
}

std::string TextStream::emit(size_t n) {
    std::string out = pending_.substr(0, n);
    pending_.erase(0, n);
    sent_ += out;
    return out;
}

std::string TextStream::push(const std::string &piece) {
    if (stopped_) return "";
    pending_ += piece;
    // A whole stop sequence can only lie in pending_: the part already sent
    // never ended with the start of one.
    size_t first = std::string::npos;
    for (const auto &s : stops_) first = std::min(first, pending_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = emit(first);
        pending_.clear();
        return out;
    }
    // Hold back the longest tail that begins some stop sequence.
    size_t hold = 0;
    for (const auto &s : stops_) {
        for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k)
            if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    }
    std::string head = pending_.substr(0, pending_.size() - hold);
    return emit(head.size() - utf8_incomplete_tail(head));
}

std::string TextStream::finish() {
    if (stopped_) return "";
    return emit(pending_.size());
}

} // namespace lctx::serve
