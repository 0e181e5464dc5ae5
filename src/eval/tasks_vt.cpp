// Variable tracking (RULER vt): chains "VAR ABCDE = 12345." then
// "VAR FGHIJ = VAR ABCDE." ... hidden in the noise haystack. One chain is
// asked for (4 hops: 5 variables hold its value); 2 distractor chains with
// other values are interleaved. Each chain's statements keep their order and
// are spread over the whole input at random sentence boundaries.
#include <algorithm>
#include <set>

#include "eval/haystack.h"
#include "eval/rng.h"
#include "eval/task_builders.h"

namespace lctx::eval::detail {

namespace {
constexpr int kChains = 3;   // the asked chain + 2 distractors
constexpr int kHops = 4;     // kHops + 1 variables per chain
} // namespace

Sample build_vt(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x7674ULL));
    std::set<std::string> names;
    std::set<int64_t> vals;
    std::vector<std::vector<std::string>> chains(kChains);
    std::vector<int64_t> values;
    for (auto &c : chains) {
        while (int(c.size()) < kHops + 1) {
            std::string v;
            for (int i = 0; i < 5; ++i) v += char('A' + r.below(26));
            if (names.insert(v).second) c.push_back(v);
        }
        int64_t x;
        do x = r.range(10000, 99999); while (!vals.insert(x).second);
        values.push_back(x);
    }
    const auto sentences = haystack_sentences(Haystack::kNoise, in.seed, units);
    const int64_t n = int64_t(sentences.size());
    std::vector<Insert> inserts;
    for (int c = 0; c < kChains; ++c) {
        std::vector<int64_t> pos(kHops + 1);
        for (auto &p : pos) p = r.range(0, n);
        std::sort(pos.begin(), pos.end());
        for (int h = 0; h <= kHops; ++h)
            inserts.push_back({pos[h], "VAR " + chains[c][h] + " = " +
                                           (h == 0 ? std::to_string(values[c]) : "VAR " + chains[c][h - 1]) + "."});
    }
    // Equal positions: the stable join keeps chain order within a chain.
    std::stable_sort(inserts.begin(), inserts.end(), [](const Insert &a, const Insert &b) { return a.pos < b.pos; });
    Sample s;
    s.document = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n" +
                 join_haystack(Haystack::kNoise, in.seed, sentences, inserts);
    s.question = "Question: Find all variables that are assigned the value " + std::to_string(values[0]) +
                 " in the text above. Answer with the variable names only.";
    s.answer_prefix = "Answer: The variables assigned the value " + std::to_string(values[0]) + " are:";
    s.answers = chains[0];
    s.mode = ScoreMode::kMatchAll;
    return s;
}

} // namespace lctx::eval::detail
