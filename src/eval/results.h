// The eval results file: JSON lines, append-only. A result row has method,
// task, length, sample, seed, score (or error), timings...; a run row
// ({"kind": "run", "command": ...}) records each command line that appended
// to the file. Rows are matched by (method, task, length, sample, seed) for
// resuming and reporting (the last row of a combination wins).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lctx::eval {

struct Row {
    std::string method, task, error;
    int64_t length = 0;
    int sample = 0;
    uint64_t seed = 0;
    double score = 0;        // 0..1; meaningless when error is set
    double wall_s = 0;       // whole combination, child process included
    double cpu_s = -1;       // CPU seconds of its process, every thread; < 0 in rows written before it was recorded
    double peak_rss_mib = 0;
    std::string cpu;         // the measuring machine's CPU model; empty in rows written before it was recorded
    std::string cpu_kernels; // the CPU kernels' instruction set ("avx512", "avx2"); empty in older rows
    std::string build;       // the lctx source revision that ran it (LCTX_REVISION); empty in older rows
    std::string attn, matmul;   // "bf16" for runs with --attn / --matmul bf16; empty: exact f32
    std::string kv;             // "f16" or "q8" for runs with --kv-type; empty: f32
    // --samples of the run that made it: sample i's needle depth is
    // (i + 0.5) / n_samples, so it names the sample as much as its index. 0: not recorded.
    int n_samples = 0;
    // Gather recall (docs/eval.md, "Recall and the oracle"): the share of the
    // needle's tokens the method kept or attended to; < 0 when the row has
    // none (a task without needles, a failed run, an older row, a qa row
    // from before its needle became the gold fact sentence).
    double recall = -1;
    bool ok() const { return error.empty(); }
};

std::string combo_key(const std::string &method, const std::string &task, int64_t length, int sample, uint64_t seed);
inline std::string combo_key(const Row &r) { return combo_key(r.method, r.task, r.length, r.sample, r.seed); }

struct ResultsFile {
    std::vector<Row> rows;               // last row per combination, in file order
    std::vector<std::string> commands;   // from run rows, in file order
    int bad_lines = 0;                   // lines that are not JSON or lack fields
    bool ends_with_newline = true;       // false: a line was cut (append a newline first)
};

// A missing file gives an empty result.
ResultsFile load_results(const std::string &path);

// "4k" / "4K" -> 4096, "128k" -> 131072, "1m" -> 1048576, "512" -> 512; -1 if bad.
int64_t parse_length(const std::string &s);
// 4096 -> "4K", 131072 -> "128K", 1048576 -> "1M", 500 -> "500".
std::string length_label(int64_t n);

} // namespace lctx::eval
