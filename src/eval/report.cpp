#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "eval/task.h"

namespace lctx::eval {

namespace {

std::string fmt(const char *f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

struct Cell {
    double sum = 0;
    int n = 0, errors = 0;
    double mean() const { return n ? sum / n : 0; }
};

std::string header(const std::vector<int64_t> &lengths) {
    std::string h = "| method |", sep = "|---|";
    for (int64_t L : lengths) {
        h += ' ';
        h += length_label(L);
        h += " |";
        sep += "---:|";
    }
    return h + "\n" + sep + "\n";
}

// " [lo-hi] n=N": an interval in %, and the samples behind it.
std::string interval_text(const Interval &iv, int n) {
    return " [" + fmt("%.0f", 100.0 * iv.lo) + "-" + fmt("%.0f", 100.0 * iv.hi) + "] n=" + std::to_string(n);
}

// Perplexity cells hold the sum of log(ppl): their value is the geometric
// mean. Accuracy cells over 2+ samples also carry their interval and count.
std::string score_cell(const Cell &c, bool perplexity) {
    if (c.n == 0 && c.errors == 0) return "-";
    if (c.n == 0) return "err";
    std::string s = perplexity ? fmt("%.3f", std::exp(c.mean())) : fmt("%.1f", 100.0 * c.mean());
    if (!perplexity && c.n >= 2) s += interval_text(wilson_interval(c.sum, c.n), c.n);
    if (c.errors) s += " (" + fmt("%.0f", c.errors) + " err)";
    return s;
}

// Methods that read the input chunk by chunk into a cache of fixed size and
// scan what they keep once per query (REFORM, ILRe, the recurrent eviction
// baselines, InfLLM): the same work per input token at any length past their
// working cache, so their time grows linearly with the input (docs/eval.md).
// InfLLM also scores every memory block once per forward call and layer, a
// term that grows with the input but stays near 1% of a 1M row. "reform:..."
// variants and "reform+refreshkv" count as their base method.
bool cost_grows_linearly(const std::string &m) {
    const std::string base = m.substr(0, m.find_first_of(":+"));
    for (const char *lin : {"reform", "ilre", "streaming", "h2o", "tova", "snapkv", "infinipot", "infllm"})
        if (base == lin) return true;
    return false;
}

// " (est. 2.5 h/sample)" for a length past the method's measured ones: the
// median wall time per sample extrapolated from its largest measured length.
// A method whose cost grows linearly (above) grows linearly from there: one
// measured length is enough. Any other grows along the power law through its
// two largest measured lengths (exponent clamped to [1, 2]: linear to
// quadratic in the input; none with fewer than two). The oracle and
// truncation read the same number of tokens at every length past their
// window, so theirs is the time at their largest measured length (one is
// enough). bench/eval_plan.py prices them all the same way.
std::string estimate_text(const std::map<std::pair<std::string, int64_t>, double> &time, const std::string &m,
                          int64_t L) {
    std::vector<std::pair<int64_t, double>> pts;   // ascending length
    for (const auto &[k, t] : time)
        if (k.first == m && t > 0) pts.emplace_back(k.second, t);
    if (pts.empty() || L <= pts.back().first) return "";
    const std::string base = m.substr(0, m.find(':'));
    const bool flat = base == "oracle" || base == "truncate", linear = cost_grows_linearly(m);
    if (!flat && !linear && pts.size() < 2) return "";
    const auto &[l2, t2] = pts.back();
    double est = t2;
    if (linear) {
        est = t2 * double(L) / double(l2);
    } else if (!flat) {
        const auto &[l1, t1] = pts[pts.size() - 2];
        const double b = std::clamp(std::log(t2 / t1) / std::log(double(l2) / double(l1)), 1.0, 2.0);
        est = t2 * std::pow(double(L) / double(l2), b);
    }
    if (est >= 3600) return " (est. " + fmt("%.1f", est / 3600) + " h/sample)";
    if (est >= 60) return " (est. " + fmt("%.0f", est / 60) + " min/sample)";
    return " (est. " + fmt("%.0f", est) + " s/sample)";
}

} // namespace

Interval wilson_interval(double successes, double n, double z) {
    if (!(n > 0)) return {};
    const double p = std::clamp(successes / n, 0.0, 1.0), z2 = z * z;
    const double denom = 1.0 + z2 / n, centre = (p + z2 / (2.0 * n)) / denom;
    const double half = z * std::sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * double(n))) / denom;
    return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

Interval task_average_interval(const std::vector<double> &sums, const std::vector<int> &counts, double z) {
    double mean_sum = 0, inv_n = 0;
    int tasks = 0;
    for (size_t t = 0; t < sums.size() && t < counts.size(); ++t) {
        if (counts[t] <= 0) continue;
        mean_sum += sums[t] / counts[t];
        inv_n += 1.0 / counts[t];
        ++tasks;
    }
    if (tasks == 0) return {};
    const double mean = mean_sum / tasks, n_eff = double(tasks) * tasks / inv_n;
    return wilson_interval(mean * n_eff, n_eff, z);
}

std::string markdown_report(const std::vector<Row> &rows, const std::vector<std::string> &commands) {
    std::vector<std::string> methods, tasks;
    std::set<int64_t> length_set;
    for (const auto &r : rows) {
        if (std::find(methods.begin(), methods.end(), r.method) == methods.end()) methods.push_back(r.method);
        length_set.insert(r.length);
    }
    for (const auto &t : task_names())
        if (std::any_of(rows.begin(), rows.end(), [&](const Row &r) { return r.task == t; })) tasks.push_back(t);
    for (const auto &r : rows)
        if (std::find(tasks.begin(), tasks.end(), r.task) == tasks.end()) tasks.push_back(r.task);
    const std::vector<int64_t> lengths(length_set.begin(), length_set.end());
    // The rows of a table: one per method (but `skip`), a cell per length.
    auto table_rows = [&](const std::function<std::string(const std::string &, int64_t)> &cell,
                          const std::string &skip = "") {
        std::string t;
        for (const auto &m : methods) {
            if (m == skip) continue;
            t += "| " + m + " |";
            for (int64_t L : lengths) t.append(" ").append(cell(m, L)).append(" |");
            t += "\n";
        }
        return t;
    };

    // (task, method, length) -> scores; (method, length) -> time and memory.
    std::map<std::tuple<std::string, std::string, int64_t>, Cell> cells;
    std::map<std::pair<std::string, int64_t>, std::vector<double>> walls, cpu_secs;
    std::map<std::pair<std::string, int64_t>, double> rss;
    std::map<std::pair<std::string, int64_t>, std::set<std::string>> cpus;
    std::map<std::string, int> rows_per_cpu, rows_per_build;
    std::map<std::pair<std::string, int64_t>, Cell> recall;
    for (const auto &r : rows) {
        if (r.ok() && r.recall >= 0) {
            Cell &c = recall[{r.method, r.length}];
            c.sum += r.recall, ++c.n;
        }
        // The machine a row was timed on: its CPU model and, where recorded,
        // the kernels it ran (one model may have AVX-512 on one machine only).
        const std::string cpu = (r.cpu.empty() ? "not recorded" : r.cpu) +
                                (r.cpu_kernels.empty() ? "" : ", " + r.cpu_kernels + " kernels");
        cpus[{r.method, r.length}].insert(cpu);
        ++rows_per_cpu[cpu];
        ++rows_per_build[r.build.empty() ? "not recorded" : r.build];
        Cell &c = cells[{r.task, r.method, r.length}];
        if (r.ok()) c.sum += is_perplexity_task(r.task) ? std::log(std::max(r.score, 1e-30)) : r.score, ++c.n;
        else ++c.errors;
        walls[{r.method, r.length}].push_back(r.wall_s);
        if (r.cpu_s >= 0) cpu_secs[{r.method, r.length}].push_back(r.cpu_s);
        double &m = rss[{r.method, r.length}];
        m = std::max(m, r.peak_rss_mib);
    }

    // The median, not the mean: one run slowed by other work on the machine
    // should not move a method's time.
    auto medians = [](std::map<std::pair<std::string, int64_t>, std::vector<double>> &lists) {
        std::map<std::pair<std::string, int64_t>, double> out;
        for (auto &[k, v] : lists) {
            std::sort(v.begin(), v.end());
            const size_t n = v.size();
            out[k] = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        }
        return out;
    };
    const std::map<std::pair<std::string, int64_t>, double> time = medians(walls), cpu_time = medians(cpu_secs);
    std::string md = "# lctx eval results\n\n";
    std::vector<std::string> scored;   // the tasks of the average: accuracies, not perplexities
    for (const auto &t : tasks)
        if (!is_perplexity_task(t)) scored.push_back(t);
    md += "Mean score in % over samples (RULER scoring: string_match_all; qa: string_match_part; kv_list: "
          "pairs_in_order, the F1 of exact KEY: VALUE pairs in order). Perplexity tasks (ppl): the geometric mean "
          "over samples of the held-out continuation's perplexity, lower is better, not in the average. "
          "\"err\": every sample failed; \"(k err)\": k samples failed and are left out of the mean. "
          "[lo-hi]: the 95% Wilson interval, n: the samples behind it (a task cell shows them from 2 samples on; "
          "an average's interval is centred on it, with the effective count T^2 / sum(1/n_t) of its T tasks' "
          "sample counts n_t: all its samples when the tasks hold equal counts, fewer when they do not). "
          "\"est.\": a length the method did not run, with the "
          "wall time per sample extrapolated from its largest length: linearly for the methods whose work per "
          "token does not grow with the input (REFORM, ILRe, the recurrent eviction baselines, InfLLM), "
          "otherwise along the power law through its two largest lengths (the oracle and truncation, which read "
          "the same tokens "
          "at every length: the time at their largest) (docs/eval.md).\n\n";
    md += "## Average over tasks\n\n" + header(lengths);
    md += table_rows([&](const std::string &m, int64_t L) {
            double sum = 0;
            int n = 0, samples = 0;
            std::vector<double> sums;
            std::vector<int> counts;
            for (const auto &t : scored) {
                auto it = cells.find({t, m, L});
                if (it != cells.end() && it->second.n) {
                    sum += it->second.mean(), ++n, samples += it->second.n;
                    sums.push_back(it->second.sum);
                    counts.push_back(it->second.n);
                }
            }
            std::string cell = n ? fmt("%.1f", 100.0 * sum / n) : std::string("-").append(estimate_text(time, m, L));
            if (n) cell += interval_text(task_average_interval(sums, counts), samples);
            if (n && n < int(scored.size())) cell += " (" + fmt("%.0f", n) + "/" + fmt("%.0f", double(scored.size())) + " tasks)";
            return cell;
        });
    // The oracle's ceiling: each method's task average as a share of the
    // oracle's, over the tasks both ran at that length.
    if (std::find(methods.begin(), methods.end(), std::string(kOracleMethod)) != methods.end()) {
        md += "\n## Accuracy as a share of the oracle\n\nThe oracle is FULL on a short window of the same sample "
              "(the same seed and needles, the haystack cut to the model's trained range; docs/eval.md): the model's "
              "own ceiling on the task. A cell is the method's average over the tasks the oracle ran at that length, "
              "divided by the oracle's average over the same tasks; \"n/a\" where the oracle scored 0.\n\n" +
              header(lengths);
        md += table_rows([&](const std::string &m, int64_t L) {
                double ms = 0, os = 0;
                int n = 0;
                for (const auto &t : scored) {
                    auto a = cells.find({t, m, L}), o = cells.find({t, std::string(kOracleMethod), L});
                    if (a == cells.end() || o == cells.end() || !a->second.n || !o->second.n) continue;
                    ms += a->second.mean(), os += o->second.mean(), ++n;
                }
                return n == 0 ? std::string("-") : os <= 0 ? std::string("n/a") : fmt("%.0f%%", 100.0 * ms / os);
            }, kOracleMethod);
    }
    if (!recall.empty()) {
        md += "\n## Gather recall\n\nMean share of the needle tokens (the occurrences of the expected answers in "
              "the document, on the tasks that have needles; for qa, the gold document's sentence with the fact asked, "
              "and only in rows that say \"recall_of\") that the method kept for the answer: in its selection "
              "(REFORM, ILRe, truncation), in the final cache of at least one layer and KV head (the eviction "
              "methods, InfLLM), or in the attention window of at least one layer at the question's last token "
              "(ReAttention). FULL and RefreshKV keep everything. n: the samples behind it.\n\n" + header(lengths);
        md += table_rows([&](const std::string &m, int64_t L) {
            auto it = recall.find({m, L});
            return it == recall.end() ? std::string("-")
                                      : fmt("%.2f", it->second.mean()) + " n=" + std::to_string(it->second.n);
        });
    }
    for (const auto &t : tasks) {
        const bool ppl = is_perplexity_task(t);
        md += "\n## " + t + (ppl ? " (perplexity, lower is better)" : "") + "\n\n" + header(lengths);
        md += table_rows([&](const std::string &m, int64_t L) {
            auto it = cells.find({t, m, L});
            return it == cells.end() ? std::string("-") : score_cell(it->second, ppl);
        });
    }
    md += "\n## Time and memory\n\nMedian wall time per sample (seconds; model load, encoding, question and answer), "
          "the median CPU seconds of the samples that recorded them (\"CPU\": every thread of the run; unlike wall "
          "time, it does not grow when other work shares the machine) and the largest peak RSS (MiB) of one "
          "run.\n\n" + header(lengths);
    md += table_rows([&](const std::string &m, int64_t L) {
        auto it = time.find({m, L});
        if (it == time.end()) return std::string("-");
        auto c = cpu_time.find({m, L});
        return fmt("%.1f s", it->second) + (c == cpu_time.end() ? "" : fmt(", CPU %.1f s", c->second)) + ", " +
               fmt("%.0f MiB", rss.at({m, L})) + (cpus.at({m, L}).size() > 1 ? " (mixed CPUs)" : "");
    });
    // Times are only comparable on the same kind of machine: say which.
    md += "\nRows per CPU (the `cpu` field of each row):";
    for (const auto &[cpu, n] : rows_per_cpu) md += " " + cpu + ": " + std::to_string(n) + ";";
    md.back() = '.';
    // A float-level change between builds can flip a near tie in an answer:
    // say which builds the rows come from.
    md += "\nRows per build (the `build` field: the lctx source revision):";
    for (const auto &[build, n] : rows_per_build) md += " " + build + ": " + std::to_string(n) + ";";
    md.back() = '.';
    md += "\n";
    if (!commands.empty()) {
        md += "\n## Commands\n\n```sh\n";
        std::set<std::string> seen;
        for (const auto &c : commands)
            if (seen.insert(c).second) md += c + "\n";
        md += "```\n";
    }
    return md;
}

} // namespace lctx::eval
