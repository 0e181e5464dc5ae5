// Haystacks: the text the needles hide in, as a list of sentences so that
// needles go in at sentence boundaries and the length is set in sentences.
//   noise: RULER's repeated "The grass is green. The sky is blue. ..." cycle.
//   prose: generated filler prose (sentences composed from word lists, varied
//          templates, paragraphs of 4-8 sentences); stands in for RULER's
//          Paul Graham essays. It contains no digits and no needle value word.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lctx::eval {

enum class Haystack { kNoise, kProse };

// The first n sentences of the haystack stream of this seed. A prefix of a
// longer stream: sentences(h, seed, n) is a prefix of sentences(h, seed, n+k).
std::vector<std::string> haystack_sentences(Haystack h, uint64_t seed, int64_t n);

// A text item placed before sentence `pos` (0..sentences.size()).
struct Insert {
    int64_t pos;
    std::string text;
};

// Joins the sentences with the inserts in place (stable for equal positions).
// Prose starts a paragraph every 4-8 sentences (from the seed); noise is one
// paragraph. Inserted sentences are joined like any other sentence.
std::string join_haystack(Haystack h, uint64_t seed, const std::vector<std::string> &sentences,
                          std::vector<Insert> inserts);

// Sentence index for a depth in [0, 1] of a haystack of n sentences.
int64_t depth_pos(double depth, int64_t n);

} // namespace lctx::eval
