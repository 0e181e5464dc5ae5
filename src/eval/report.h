// Markdown report of eval results: mean score (%) per task and on average
// over tasks (rows: method, columns: length), mean time and max peak RSS per
// method and length, and the command lines that produced the results.
#pragma once

#include <string>
#include <vector>

#include "eval/results.h"

namespace lctx::eval {

std::string markdown_report(const std::vector<Row> &rows, const std::vector<std::string> &commands);

} // namespace lctx::eval
