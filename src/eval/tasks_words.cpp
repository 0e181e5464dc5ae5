// Aggregation tasks over word lists (RULER cwe and fwe).
//   cwe: a numbered list "1. word 2. word ..." where 10 common words appear
//        freq_cw times each and the others freq_ucw times (30 and 3 from 4K
//        tokens on, as RULER; fewer below so that short lists still fit).
//        Units: the number of uncommon words. Answer: the 10 common words.
//   fwe: 6-letter coded words with Zipf counts (alpha 2, vocabulary 2000,
//        count of rank k = floor(N k^-2 / zeta(2))); rank 1 is the noise
//        word "...." as in RULER. Units: N. Answer: ranks 2-4.
#include <algorithm>
#include <cmath>
#include <set>

#include "eval/rng.h"
#include "eval/task_builders.h"
#include "eval/words.h"

namespace lctx::eval::detail {

namespace {
constexpr int kCommon = 10;
constexpr int kFweVocab = 2000;
constexpr double kZeta2 = 1.6449340668482264;   // pi^2 / 6
} // namespace

Sample build_cwe(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x637765ULL));
    const int freq_cw = in.target_tokens >= 4096 ? 30 : int(std::clamp<int64_t>(in.target_tokens * 30 / 4096, 3, 30));
    const int freq_ucw = in.target_tokens >= 4096 ? 3 : 1;
    const size_t need = size_t(kCommon + units);
    std::vector<std::string> pool = words::cwe_words();
    for (size_t i = 0; pool.size() < need; ++i) pool.push_back(words::pseudo_word(i));
    r.shuffle(pool);
    pool.resize(need);

    std::vector<std::string> list;
    for (size_t i = 0; i < pool.size(); ++i)
        for (int k = 0; k < (i < kCommon ? freq_cw : freq_ucw); ++k) list.push_back(pool[i]);
    r.shuffle(list);
    std::string ctx;
    for (size_t i = 0; i < list.size(); ++i) {
        if (i) ctx += ' ';
        ctx += std::to_string(i + 1);
        ctx += ". ";
        ctx += list[i];
    }

    Sample s;
    s.document = "Below is a numbered list of words. In these words, some appear more often than others. "
                 "Memorize the ones that appear most often.\n" + ctx;
    s.question = "Question: What are the 10 most common words in the above list? Answer with the 10 words only.";
    s.answer_prefix = "Answer: The 10 most common words in the list are:";
    s.answers.assign(pool.begin(), pool.begin() + kCommon);
    s.mode = ScoreMode::kMatchAll;
    return s;
}

Sample build_fwe(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x667765ULL));
    std::set<std::string> seen;
    std::vector<std::string> vocab;
    while (int(vocab.size()) < kFweVocab) {
        std::string w;
        for (int i = 0; i < 6; ++i) w += char('a' + r.below(26));
        if (seen.insert(w).second) vocab.push_back(w);
    }
    vocab[0] = "....";   // the most frequent "word" is noise, as in RULER
    std::vector<std::string> text;
    for (int k = 1; k <= kFweVocab; ++k) {
        const int64_t c = int64_t(std::floor(double(units) * std::pow(double(k), -2.0) / kZeta2));
        if (c == 0) break;
        for (int64_t j = 0; j < c; ++j) text.push_back(vocab[k - 1]);
    }
    r.shuffle(text);
    std::string ctx;
    for (size_t i = 0; i < text.size(); ++i) {
        if (i) ctx += ' ';
        ctx += text[i];
    }

    Sample s;
    s.document = "Read the following coded text and track the frequency of each coded word. Find the three most "
                 "frequently appeared coded words.\n" + ctx;
    s.question = "Question: Do not provide any explanation. Please ignore the dots '....'. What are the three most "
                 "frequently appeared words in the above coded text? Answer with the three words only.";
    s.answer_prefix = "Answer: The three most frequent words in the coded text are:";
    s.answers = {vocab[1], vocab[2], vocab[3]};
    s.mode = ScoreMode::kMatchAll;
    return s;
}

} // namespace lctx::eval::detail
