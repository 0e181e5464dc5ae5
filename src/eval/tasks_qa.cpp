// Question answering over synthetic documents (stands in for RULER qa's
// SQuAD/HotpotQA): short biographies with facts (birth city and year,
// profession, a founded organisation with its year and size, an instrument).
// The gold document sits at the sample's depth; the others are distractors,
// several about people sharing the first or the last name of the gold person
// (never both), whose facts all differ from the gold ones. One question about
// one fact; scored with string_match_part.
// Units: distractor sentences (a document is a header and 5 sentences; the
// last distractor may be cut short).
#include <cmath>
#include <algorithm>

#include "eval/rng.h"
#include "eval/task_builders.h"
#include "eval/words.h"

namespace lctx::eval::detail {

namespace {

struct Person {
    std::string first, last, city, profession, org, instrument;
    int born = 0, founded = 0, members = 0;
    std::string name() const { return first + " " + last; }
};

std::string with_commas(int n) {
    std::string s = std::to_string(n);
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
        out += s[i];
    }
    return out;
}

Person random_person(Rng &r) {
    using namespace words;
    Person p;
    p.first = r.pick(first_names());
    p.last = r.pick(last_names());
    p.city = r.pick(cities());
    p.profession = r.pick(professions());
    std::string a = r.pick(adjectives()), n = r.pick(nouns());
    a[0] = char(a[0] - 'a' + 'A');
    n[0] = char(n[0] - 'a' + 'A');
    p.org = a + " " + n + " " + r.pick(org_kinds());
    p.instrument = r.pick(instruments());
    p.born = int(r.range(1900, 1955));   // founded by 2005: "by 2010" stays true
    p.founded = p.born + int(r.range(22, 50));
    p.members = int(r.range(1200, 9800));
    return p;
}

// Redraws every fact of d that equals the gold one.
void differ(Person &d, const Person &g, Rng &r) {
    while (d.city == g.city) d.city = r.pick(words::cities());
    while (d.profession == g.profession) d.profession = r.pick(words::professions());
    while (d.instrument == g.instrument) d.instrument = r.pick(words::instruments());
    while (d.org == g.org) d.org = random_person(r).org;
    while (d.born == g.born) {
        d.born = int(r.range(1900, 1955));
        d.founded = d.born + int(r.range(22, 50));
    }
    while (d.founded == g.founded) d.founded = d.born + int(r.range(22, 50));
    while (d.members == g.members) d.members = int(r.range(1200, 9800));
}

// Header and sentences of one document (varied phrasing).
std::vector<std::string> doc_lines(const Person &p, Rng &r) {
    const std::string n = p.name();
    const bool v = r.below(2) == 0;
    return {
        "Title: " + n,
        v ? n + " was born in " + p.city + " in " + std::to_string(p.born) + "."
          : "Born in " + std::to_string(p.born) + " in the city of " + p.city + ", " + n + " grew up near the river.",
        v ? n + " worked as a " + p.profession + " for most of a long career."
          : "By profession, " + n + " was a " + p.profession + ".",
        "In " + std::to_string(p.founded) + ", " + n + " founded the " + p.org + ".",
        "By 2010 the " + p.org + " had " + with_commas(p.members) + " members.",
        v ? "In the evenings " + n + " played the " + p.instrument + "."
          : n + " was also known for playing the " + p.instrument + " at local concerts.",
    };
}

} // namespace

Sample build_qa(const BuildInput &in, int64_t units) {
    Rng r(mix_seed(in.seed, 0x7161ULL));
    const Person gold = random_person(r);
    Rng dr(mix_seed(in.seed, 0x64697374ULL));   // distractor stream: independent of units
    std::vector<std::vector<std::string>> docs;
    int64_t left = units;
    while (left > 0) {
        Person d = random_person(dr);
        const uint64_t kind = dr.below(4);   // 1 in 4 shares the first name, 1 in 4 the last
        if (kind == 0) d.first = gold.first;
        if (kind == 1) d.last = gold.last;
        while (d.name() == gold.name()) d.last = dr.pick(words::last_names());
        differ(d, gold, dr);
        auto lines = doc_lines(d, dr);
        if (int64_t(lines.size()) > left) lines.resize(size_t(left));
        left -= int64_t(lines.size());
        docs.push_back(std::move(lines));
    }
    const size_t at = std::min(docs.size(), size_t(std::llround(in.depth * double(docs.size()))));
    const std::vector<std::string> gold_lines = doc_lines(gold, r);
    docs.insert(docs.begin() + long(at), gold_lines);

    std::string ctx;
    for (size_t i = 0; i < docs.size(); ++i) {
        ctx += "Document ";
        ctx += std::to_string(i + 1);
        ctx += ":\n";
        for (size_t j = 0; j < docs[i].size(); ++j) ctx += docs[i][j] + (j == 0 ? "\n" : " ");
        ctx.back() = '\n';
        ctx += "\n";
    }
    while (!ctx.empty() && ctx.back() == '\n') ctx.pop_back();

    Sample s;
    s.depth = in.depth;
    const std::string rule = "Answer the question based on the given documents. Only give me the answer and do not "
                             "output any other words.";
    s.document = rule + "\n\nThe following are given documents.\n\n" + ctx;
    const std::string n = gold.name();
    // The gold document's line that states the fact asked (doc_lines order):
    // gather recall's needle. The city, year or profession also occur in
    // distractor documents; this line, with the gold name or organisation,
    // occurs once.
    size_t fact = 0;
    switch (r.below(6)) {
    case 0: s.question = "In which city was " + n + " born?"; s.answers = {gold.city}; fact = 1; break;
    case 1: s.question = "In which year was " + n + " born?"; s.answers = {std::to_string(gold.born)}; fact = 1; break;
    case 2: s.question = "What was the profession of " + n + "?"; s.answers = {gold.profession}; fact = 2; break;
    case 3: s.question = "Which organization did " + n + " found?"; s.answers = {gold.org}; fact = 3; break;
    case 4:
        s.question = "How many members did the organization founded by " + n + " have by 2010?";
        s.answers = {with_commas(gold.members), std::to_string(gold.members)};
        fact = 4;
        break;
    default: s.question = "Which instrument did " + n + " play?"; s.answers = {gold.instrument}; fact = 5; break;
    }
    s.needles = {gold_lines[fact]};
    s.question = rule + "\n\nQuestion: " + s.question;
    s.mode = ScoreMode::kMatchPart;
    return s;
}

} // namespace lctx::eval::detail
