#include "eval/haystack.h"

#include <algorithm>
#include <cmath>

#include "eval/rng.h"
#include "eval/words.h"

namespace lctx::eval {

namespace {

const char *const kNoise[] = {"The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
                              "There and back again."};

std::string cap(std::string s) {
    if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
    return s;
}

std::string article(const std::string &w) {
    return std::string(w.find_first_of("aeiou") == 0 ? "an " : "a ") + w;
}

// One filler sentence from one of several templates.
std::string prose_sentence(Rng &r) {
    using namespace words;
    auto N = [&] { return r.pick(nouns()); };
    auto A = [&] { return r.pick(adjectives()); };
    auto V = [&] { return r.pick(verbs_past()); };
    auto D = [&] { return r.pick(adverbs()); };
    auto P = [&] { return r.pick(places()); };
    switch (r.below(10)) {
    case 0: return "The " + A() + " " + N() + " " + V() + " the " + N() + " near the " + P() + ".";
    case 1: return cap(article(A())) + " " + N() + " " + D() + " " + V() + " " + article(N()) + ".";
    case 2: return "Nobody expected the " + N() + " to be so " + A() + ", yet it was.";
    case 3: return "Every morning the " + N() + " " + V() + " the " + A() + " " + N() + " " + D() + ".";
    case 4: return "Beyond the " + P() + ", " + article(A()) + " " + N() + " waited for the " + N() + ".";
    case 5: return "They " + V() + " the " + N() + " and then " + V() + " the " + A() + " " + N() + ".";
    case 6: return "It is said that " + article(A()) + " " + N() + " is rarely " + A() + " enough for " +
                   article(N()) + ".";
    case 7: return "When the " + N() + " grew " + A() + ", the " + N() + " " + D() + " " + V() + " it.";
    case 8: return "Later that day, someone " + V() + " " + article(N()) + " by the " + P() + ".";
    default: return cap(D()) + ", the " + A() + " " + N() + " " + V() + " every " + N() + " in the " + P() + ".";
    }
}

} // namespace

std::vector<std::string> haystack_sentences(Haystack h, uint64_t seed, int64_t n) {
    std::vector<std::string> out;
    out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
    Rng r(mix_seed(seed, 0x6861795354ULL));
    for (int64_t i = 0; i < n; ++i) out.push_back(h == Haystack::kNoise ? kNoise[i % 5] : prose_sentence(r));
    return out;
}

std::string join_haystack(Haystack h, uint64_t seed, const std::vector<std::string> &sentences,
                          std::vector<Insert> inserts) {
    std::stable_sort(inserts.begin(), inserts.end(), [](const Insert &a, const Insert &b) { return a.pos < b.pos; });
    Rng para(mix_seed(seed, 0x70617261ULL));
    int64_t left_in_para = para.range(4, 8);
    std::string out;
    bool first = true;
    auto put = [&](const std::string &s, bool counts) {
        if (!first) out += " ";
        first = false;
        out += s;
        if (h == Haystack::kProse && counts && --left_in_para == 0) {
            out += "\n\n";
            first = true;
            left_in_para = para.range(4, 8);
        }
    };
    size_t k = 0;
    for (size_t i = 0; i <= sentences.size(); ++i) {
        while (k < inserts.size() && inserts[k].pos <= int64_t(i)) put(inserts[k++].text, false);
        if (i < sentences.size()) put(sentences[i], true);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return out;
}

int64_t depth_pos(double depth, int64_t n) {
    return std::clamp<int64_t>(static_cast<int64_t>(std::llround(depth * double(n))), 0, n);
}

} // namespace lctx::eval
