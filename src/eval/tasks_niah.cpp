// Needle-in-a-haystack tasks (RULER niah_*): sentences "One of the special
// magic numbers for KEY is: VALUE." hidden in a haystack.
//   niah_single     1 key, 1 value; value a 7-digit number (noise haystack, as
//                   RULER niah_single_1), a word or a uuid (prose haystack, as
//                   niah_single_2/3), chosen by the sample seed
//   niah_multikey   1 real key among 3 distractor keys (prose)
//   niah_multivalue 1 key with 4 values, all to be answered (prose)
//   niah_multiquery 4 keys, 2-4 of them asked together (prose)
// The first needle asked for sits at the sample's depth; the others at
// random sentence boundaries.
#include <set>

#include "eval/haystack.h"
#include "eval/rng.h"
#include "eval/task_builders.h"
#include "eval/words.h"

namespace lctx::eval::detail {

namespace {

enum class Value { kNumber, kWord, kUuid };

struct NiahSpec {
    Haystack haystack;
    Value value;
    int n_keys;     // needles with distinct keys
    int n_values;   // values per key
    int n_query;    // keys asked (the first n_query)
};

const char *type_name(Value v, bool plural) {
    switch (v) {
    case Value::kWord: return plural ? "words" : "word";
    case Value::kUuid: return plural ? "uuids" : "uuid";
    default: return plural ? "numbers" : "number";
    }
}

std::string uuid(Rng &r) {
    static const char *hex = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < 32; ++i) {
        if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
        s += hex[r.below(16)];
    }
    return s;
}

std::string make_value(Value v, Rng &r) {
    switch (v) {
    case Value::kWord: return r.pick(words::value_words());
    case Value::kUuid: return uuid(r);
    default: return std::to_string(r.range(1000000, 9999999));
    }
}

std::string join_keys(const std::vector<std::string> &keys) {
    std::string s;
    for (size_t i = 0; i < keys.size(); ++i)
        s += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
    return s;
}

Sample build_niah(const BuildInput &in, int64_t units, const NiahSpec &spec) {
    Rng r(mix_seed(in.seed, 0x6e696168ULL));
    std::set<std::string> used;
    std::vector<std::string> keys;
    while (int(keys.size()) < spec.n_keys) {
        std::string k = r.pick(words::adjectives()) + "-" + r.pick(words::nouns());
        if (used.insert(k).second) keys.push_back(k);
    }
    std::vector<std::vector<std::string>> values(keys.size());
    for (auto &vs : values)
        while (int(vs.size()) < spec.n_values) {
            std::string v = make_value(spec.value, r);
            if (used.insert(v).second) vs.push_back(v);
        }

    const auto sentences = haystack_sentences(spec.haystack, in.seed, units);
    const int64_t n = int64_t(sentences.size());
    const char *types = type_name(spec.value, true);
    std::vector<Insert> inserts;
    Sample s;
    for (size_t k = 0; k < keys.size(); ++k)
        for (size_t j = 0; j < values[k].size(); ++j) {
            const bool anchor = k == 0 && j == 0;
            const int64_t pos = anchor ? depth_pos(in.depth, n) : r.range(0, n);
            inserts.push_back({pos, "One of the special magic " + std::string(types) + " for " + keys[k] +
                                        " is: " + values[k][j] + "."});
            if (int(k) < spec.n_query) s.answers.push_back(values[k][j]);
        }
    s.depth = in.depth;
    s.document = "Some special magic " + std::string(types) +
                 " are hidden within the following text. Make sure to memorize it. I will quiz you about the " +
                 types + " afterwards.\n" + join_haystack(spec.haystack, in.seed, sentences, inserts);
    const std::vector<std::string> asked(keys.begin(), keys.begin() + spec.n_query);
    // The question, and restated as the start of an answer (Sample::answer_prefix).
    const bool one = spec.n_query == 1 && spec.n_values == 1;
    const std::string what = one ? type_name(spec.value, false) : types;
    std::string subject = "special magic " + what + " for ";
    subject += one ? keys[0] : join_keys(asked);
    subject += " mentioned in the provided text";
    s.question = std::string(one ? "What is the " : "What are all the ") + subject + "? Answer with the " + what +
                 " only.";
    s.answer_prefix = "The " + subject + (one ? " is" : " are");
    s.mode = ScoreMode::kMatchAll;
    return s;
}

} // namespace

Sample build_niah_single(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x73696e67ULL));
    const Value v = static_cast<Value>(r.below(3));
    return build_niah(in, units, {v == Value::kNumber ? Haystack::kNoise : Haystack::kProse, v, 1, 1, 1});
}

Sample build_niah_multikey(const BuildInput &in, int64_t units) {
    return build_niah(in, units, {Haystack::kProse, Value::kNumber, 4, 1, 1});
}

Sample build_niah_multivalue(const BuildInput &in, int64_t units) {
    return build_niah(in, units, {Haystack::kProse, Value::kNumber, 1, 4, 1});
}

Sample build_niah_multiquery(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x71756572ULL));
    return build_niah(in, units, {Haystack::kProse, Value::kNumber, 4, 1, int(r.range(2, 4))});
}

} // namespace lctx::eval::detail
