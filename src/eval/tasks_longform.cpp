// Long-form tasks (issue 19): answers that are long and depend on the input
// throughout, for decode policies that change the cache while they answer
// (RefreshKV).
//   kv_list  kKvPairs records "Record KEY: VALUE." spread over a noise
//            haystack, record j at a random sentence boundary of the j-th of
//            kKvPairs equal parts (so document order = generation order).
//            The answer lists every record in document order, one
//            "KEY: VALUE" per line; scored by exact pairs in order
//            (ScoreMode::kPairsInOrder, score.h).
//   ppl      numbered paragraphs of prose; the prompt ends by asking for
//            paragraph k (at the sample's depth) and the ones after it word
//            for word, and the held-out continuation is that text, verbatim.
//            Teacher-forced, its perplexity measures how well a decode
//            policy keeps the part of the input the continuation moves
//            through (ScoreMode::kPerplexity; lctx eval scores the first
//            answer_tokens tokens of it).
#include <algorithm>
#include <set>

#include "eval/haystack.h"
#include "eval/rng.h"
#include "eval/task_builders.h"
#include "eval/words.h"

namespace lctx::eval::detail {

namespace {
constexpr int kPpParagraph = 5;     // sentences per ppl paragraph
constexpr int kPpCopyParas = 8;     // paragraphs in the continuation (>= ~500 tokens: more than the 256 scored)
} // namespace

Sample build_kv_list(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x6b766c69ULL));
    std::set<std::string> used;
    std::vector<std::string> keys, values;
    while (int(keys.size()) < kKvPairs) {
        std::string k = r.pick(words::adjectives()) + "-" + r.pick(words::nouns());
        if (used.insert(k).second) keys.push_back(k);
    }
    while (int(values.size()) < kKvPairs) {
        std::string v = std::to_string(r.range(1000, 9999));
        if (used.insert(v).second) values.push_back(v);
    }
    const auto sentences = haystack_sentences(Haystack::kNoise, in.seed, units);
    const int64_t n = int64_t(sentences.size());
    std::vector<Insert> inserts;
    Sample s;
    for (int j = 0; j < kKvPairs; ++j) {
        // Part j is [j n / N, (j + 1) n / N]; equal positions keep j order (stable join).
        const int64_t lo = j * n / kKvPairs, hi = (j + 1) * n / kKvPairs;
        inserts.push_back({r.range(lo, hi), "Record " + keys[j] + ": " + values[j] + "."});
        s.answers.push_back(keys[j] + ": " + values[j]);
    }
    s.document = "The following text contains " + std::to_string(kKvPairs) +
                 " records of the form \"Record KEY: VALUE.\" hidden among other sentences. Memorize every record "
                 "and its order.\n\n" + join_haystack(Haystack::kNoise, in.seed, sentences, inserts);
    s.question = "List all " + std::to_string(kKvPairs) +
                 " records of the text above in the order they appear, one per line, as KEY: VALUE. Answer with "
                 "the list only.";
    s.mode = ScoreMode::kPairsInOrder;
    return s;
}

Sample build_ppl(const BuildInput &in, int64_t units) {
    const auto sentences = haystack_sentences(Haystack::kProse, in.seed, units);
    const int64_t n = int64_t(sentences.size());
    const int64_t paras = (n + kPpParagraph - 1) / kPpParagraph;
    std::vector<std::string> text(static_cast<size_t>(paras));   // "Paragraph i. s s s s s"
    for (int64_t p = 0; p < paras; ++p) {
        text[size_t(p)] = "Paragraph " + std::to_string(p + 1) + ".";
        for (int64_t i = p * kPpParagraph; i < std::min(n, (p + 1) * kPpParagraph); ++i)
            text[size_t(p)] += " " + sentences[size_t(i)];
    }
    // The copied paragraph (0-based) at the depth, early enough that
    // kPpCopyParas paragraphs follow when the document has them.
    const int64_t k = std::clamp<int64_t>(depth_pos(in.depth, paras), 0, std::max<int64_t>(0, paras - kPpCopyParas));
    Sample s;
    s.document = "The text below is made of numbered paragraphs.";
    for (const auto &t : text) s.document += "\n\n" + t;
    s.question = "Paragraph " + std::to_string(k + 1) + " and the paragraphs after it, repeated word for word:";
    std::string cont;
    for (int64_t p = k; p < std::min(paras, k + kPpCopyParas); ++p) cont += "\n\n" + text[size_t(p)];
    s.answers = {cont};
    s.depth = paras > 0 ? double(k) / double(paras) : 0.0;
    s.mode = ScoreMode::kPerplexity;
    return s;
}

} // namespace lctx::eval::detail
