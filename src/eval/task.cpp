// Task registry and the length fit shared by every task.
#include "eval/task.h"

#include <algorithm>

#include "common/error.h"
#include "eval/rng.h"
#include "eval/task_builders.h"

namespace lctx::eval {

namespace {

using detail::TaskDef;

const TaskDef kTasks[] = {
    // niah 64 (not 32): small models restate the question before a uuid,
    // which alone is ~25 tokens.
    {"niah_single", detail::build_niah_single, 1, 64},
    {"niah_multikey", detail::build_niah_multikey, 1, 64},
    {"niah_multivalue", detail::build_niah_multivalue, 1, 64},
    {"niah_multiquery", detail::build_niah_multiquery, 1, 64},
    {"vt", detail::build_vt, 1, 48},
    {"cwe", detail::build_cwe, 10, 120},
    {"fwe", detail::build_fwe, 80, 50},
    {"qa", detail::build_qa, 1, 32},
    {"essay_niah", detail::build_essay_niah, 1, 32},
    {"kv_list", detail::build_kv_list, 1, detail::kKvAnswerTokens},
    {"ppl", detail::build_ppl, 1, detail::kPplTokens, true},
};

const TaskDef *find(const std::string &name) {
    for (const auto &t : kTasks)
        if (name == t.name) return &t;
    return nullptr;
}

} // namespace

const char *score_mode_name(ScoreMode m) {
    switch (m) {
    case ScoreMode::kMatchPart: return "string_match_part";
    case ScoreMode::kPairsInOrder: return "pairs_in_order";
    case ScoreMode::kPerplexity: return "perplexity";
    default: return "string_match_all";
    }
}

std::string prompt_text(const Sample &s, bool with_prefix) {
    std::string text = s.document + "\n\n" + s.question;
    if (with_prefix && !s.answer_prefix.empty()) text += "\n" + s.answer_prefix;
    return text;
}

const std::vector<std::string> &task_names() {
    static const std::vector<std::string> v = [] {
        std::vector<std::string> out;
        for (const auto &t : kTasks) out.push_back(t.name);
        return out;
    }();
    return v;
}

bool is_task(const std::string &name) { return find(name) != nullptr; }

int answer_tokens(const std::string &task) {
    const TaskDef *t = find(task);
    return t ? t->answer_tokens : 32;
}

bool is_perplexity_task(const std::string &task) {
    const TaskDef *t = find(task);
    return t && t->perplexity;
}

uint64_t sample_seed(uint64_t run_seed, const std::string &task, int64_t length, int sample_index) {
    return mix_seed(mix_seed(mix_seed(run_seed, hash_str(task)), uint64_t(length)), uint64_t(sample_index));
}

int64_t length_tolerance(int64_t target) { return std::max<int64_t>(32, target / 100); }

Sample generate(const SampleRequest &req, const TokenCounter &count_tokens) {
    const TaskDef *t = find(req.task);
    if (!t) fail(LCTX_ERR_INVALID_ARG, "unknown task '%s'", req.task.c_str());
    if (req.n_samples < 1 || req.sample_index < 0 || req.sample_index >= req.n_samples)
        fail(LCTX_ERR_INVALID_ARG, "sample index %d out of range for %d samples", req.sample_index, req.n_samples);
    const detail::BuildInput in{req.seed, req.target_tokens, (req.sample_index + 0.5) / req.n_samples};
    const int64_t target = req.target_tokens, tol = length_tolerance(target);

    Sample best;
    int64_t best_units = -1;
    auto measure = [&](int64_t units) {
        Sample s = t->build(in, units);
        if (s.answer_prefix.empty() && !t->perplexity) s.answer_prefix = "Answer:";
        s.n_tokens = count_tokens(prompt_text(s, req.with_prefix));
        if (s.n_tokens <= target && (best_units < 0 || s.n_tokens > best.n_tokens)) {
            best = s;
            best_units = units;
        }
        return s.n_tokens;
    };

    // Bracket [lo, hi]: count(lo) <= target < count(hi); first guesses from
    // the tokens per unit measured on two small samples, then interpolation.
    int64_t lo = t->min_units, c_lo = measure(lo);
    if (c_lo > target)
        fail(LCTX_ERR_INVALID_ARG, "target length %lld is too small for task %s (its smallest prompt has %lld tokens)",
             (long long)target, t->name, (long long)c_lo);
    const int64_t probe = lo + 64, c_probe = measure(probe);
    const double per_unit = std::max(0.05, double(c_probe - c_lo) / double(probe - lo));
    int64_t hi = -1, c_hi = 0;
    if (c_probe <= target) lo = probe, c_lo = c_probe;
    else hi = probe, c_hi = c_probe;
    for (int iter = 0; iter < 48 && target - c_lo > tol; ++iter) {
        int64_t u;
        if (hi < 0) {
            u = lo + std::max<int64_t>(1, int64_t(double(target - c_lo) / per_unit * 0.995));
        } else {
            if (hi - lo <= 1) break;
            // Interpolation, with a bisection step every other time so a
            // lopsided bracket still shrinks fast.
            u = iter % 2 ? lo + (hi - lo) / 2
                         : lo + int64_t(double(hi - lo) * double(target - c_lo) / double(std::max<int64_t>(1, c_hi - c_lo)));
            u = std::clamp(u, lo + 1, hi - 1);
        }
        const int64_t c = measure(u);
        if (c <= target) lo = u, c_lo = c;
        else hi = u, c_hi = c;
    }
    best.task = t->name;
    best.seed = req.seed;
    best.answer_tokens = t->answer_tokens;
    return best;
}

} // namespace lctx::eval
