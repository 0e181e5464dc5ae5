// RULER-style synthetic tasks for long-context evaluation (docs/eval.md).
// A sample is fully determined by (task, seed, target length, sample index,
// number of samples) and the token counter; its length is measured in model
// tokens through the caller's counter.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lctx::eval {

enum class ScoreMode {
    kMatchAll,   // string_match_all: fraction of the expected strings found
    kMatchPart,  // string_match_part: 1 if any expected string is found
    kPairsInOrder,  // pairs_in_order: "KEY: VALUE" pairs of the answer against the expected ones, in order (score.h)
    kPerplexity,    // perplexity: answers[0] is a held-out continuation, teacher-forced; the score is its
                    // perplexity (lower is better), not a fraction
};
const char *score_mode_name(ScoreMode m);   // "string_match_all", "string_match_part", "pairs_in_order", "perplexity"

struct Sample {
    std::string task;
    uint64_t seed = 0;                 // the sample's own seed (sample_seed())
    std::string document;              // task instructions + context: goes where the document goes
    std::string question;              // the question after the document
    // How the answer of a model without a chat template starts: the plain
    // prompt ends with it (a base model otherwise tends to go on with the
    // document). niah, vt, cwe, fwe: the question restated ("The special
    // magic number for X mentioned in the provided text is"), the others
    // "Answer:", the perplexity task none. Chat prompts do not use it.
    std::string answer_prefix;
    std::vector<std::string> answers;  // expected strings
    // The texts whose tokens gather recall measures, when not the answers:
    // qa's gold fact sentence (its answer also occurs in distractor
    // documents). Empty: every occurrence of the answers.
    std::vector<std::string> needles;
    // What gather recall looks for: the needles, else the answers.
    const std::vector<std::string> &needle_texts() const { return needles.empty() ? answers : needles; }
    ScoreMode mode = ScoreMode::kMatchAll;
    int answer_tokens = 32;            // tokens to generate
    double depth = -1;                 // depth of the (first) needle / gold document in [0,1]; -1: spread
    int64_t n_tokens = 0;              // counter(prompt_text()) of the final sample
};

// document + "\n\n" + question (+ "\n" + answer_prefix with
// with_prefix): the text whose length is fitted.
std::string prompt_text(const Sample &s, bool with_prefix = false);

using TokenCounter = std::function<int64_t(const std::string &)>;

struct SampleRequest {
    std::string task;
    uint64_t seed = 0;          // the sample seed (see sample_seed)
    int64_t target_tokens = 0;  // the prompt must not exceed this
    int sample_index = 0;       // i of n: depth (i + 0.5) / n
    int n_samples = 1;
    bool with_prefix = false;   // the answer prefix is part of the prompt (a plain prompt)
};

// The task names, in the order of the report.
const std::vector<std::string> &task_names();
bool is_task(const std::string &name);
int answer_tokens(const std::string &task);
// Tasks scored by perplexity (ScoreMode::kPerplexity): their rows' score is a
// perplexity, reported apart from the accuracies.
bool is_perplexity_task(const std::string &task);

// Seed of one sample from the run's seed.
uint64_t sample_seed(uint64_t run_seed, const std::string &task, int64_t length, int sample_index);

// How far below the target a fitted sample may be: max(32, target / 100).
int64_t length_tolerance(int64_t target);

// Generates a sample whose counter(prompt_text()) is <= target_tokens and,
// unless the task's smallest sample is already close, within
// length_tolerance() of it. Throws lctx::Error (LCTX_ERR_INVALID_ARG) for an
// unknown task or a target too small for the task.
Sample generate(const SampleRequest &req, const TokenCounter &count_tokens);

} // namespace lctx::eval
