// The text of an answer as it is generated, token piece by token piece: what
// may be sent to the client now, and where a stop sequence ends it. Text that
// could be the start of a stop sequence, or that ends inside a UTF-8
// character (a token may carry half of one), is held back until the next
// piece decides it; a stop sequence found is cut off with what follows.
#pragma once

#include <string>
#include <vector>

namespace lctx::serve {

class TextStream {
  public:
    explicit TextStream(std::vector<std::string> stops);

    // Appends a piece; returns the text that can be sent now (maybe "").
    // After a stop sequence: stopped() is true and later pieces are ignored.
    std::string push(const std::string &piece);
    // The text held back, at the end of generation.
    std::string finish();
    bool stopped() const { return stopped_; }
    // Everything returned so far.
    const std::string &text() const { return sent_; }

  private:
    std::string emit(size_t n);

    std::vector<std::string> stops_;
    std::string pending_, sent_;
    bool stopped_ = false;
};

// Bytes at the end of s that begin a UTF-8 character not complete yet (0..3).
size_t utf8_incomplete_tail(const std::string &s);

} // namespace lctx::serve
