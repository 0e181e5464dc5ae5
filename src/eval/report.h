// Markdown report of eval results: mean score (%) per task and on average
// over tasks (rows: method, columns: length) with 95% Wilson intervals and
// sample counts, median time and max peak RSS per method and length, and the
// command lines that produced the results.
#pragma once

#include <string>
#include <vector>

#include "eval/results.h"

namespace lctx::eval {

// The method name of the oracle rows (FULL on a short window of each sample;
// docs/eval.md): the report divides each method's accuracy by theirs.
inline constexpr const char *kOracleMethod = "oracle";

std::string markdown_report(const std::vector<Row> &rows, const std::vector<std::string> &commands);

// The Wilson score interval (95%: z = 1.96) of a proportion: `successes` out
// of n trials. Scores in [0, 1] that are not 0/1 (multivalue, cwe, fwe) are
// summed as fractional successes, the usual approximation. n = 0 gives [0, 1].
struct Interval {
    double lo = 0, hi = 1;
};
Interval wilson_interval(double successes, double n, double z = 1.96);

// The interval of an average over tasks that hold different numbers of
// samples (task t: score sum sums[t] over counts[t] samples): the Wilson
// interval around the average of the task means, with the effective sample
// count T^2 / sum(1 / n_t) that the average's variance implies when every
// task shares one proportion. With equal counts it is the Wilson interval of
// all the samples pooled. Tasks with no samples are skipped.
Interval task_average_interval(const std::vector<double> &sums, const std::vector<int> &counts, double z = 1.96);

} // namespace lctx::eval
