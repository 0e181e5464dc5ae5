#include "eval/results.h"

#include <fstream>
#include <map>

#include "common/json.h"

namespace lctx::eval {

std::string combo_key(const std::string &method, const std::string &task, int64_t length, int sample, uint64_t seed) {
    return method + "|" + task + "|" + std::to_string(length) + "|" + std::to_string(sample) + "|" +
           std::to_string(seed);
}

ResultsFile load_results(const std::string &path) {
    ResultsFile out;
    std::ifstream f(path, std::ios::binary);
    if (!f) return out;
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    out.ends_with_newline = text.empty() || text.back() == '\n';
    std::map<std::string, size_t> at;   // key -> index in rows
    size_t start = 0;
    while (start < text.size()) {
        size_t end = text.find('\n', start);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(start, end - start);
        start = end + 1;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json::Value j;
        if (!json::try_parse(line, j) || j.type != json::Value::Type::OBJECT) {
            ++out.bad_lines;
            continue;
        }
        if (j.get_str("kind") == "run") {
            out.commands.push_back(j.get_str("command"));
            continue;
        }
        Row r;
        r.method = j.get_str("method");
        r.task = j.get_str("task");
        r.length = int64_t(j.get_num("length", -1));
        r.sample = int(j.get_num("sample", -1));
        r.seed = uint64_t(j.get_num("seed", 0));
        r.error = j.get_str("error");
        const json::Value *score = j.find("score");
        if (r.method.empty() || r.task.empty() || r.length < 0 || r.sample < 0 ||
            (r.error.empty() && (!score || score->type != json::Value::Type::NUMBER))) {
            ++out.bad_lines;
            continue;
        }
        r.score = r.error.empty() ? score->num : 0;
        r.wall_s = j.get_num("wall_s");
        r.cpu_s = j.get_num("cpu_s", -1);
        r.peak_rss_mib = j.get_num("peak_rss_mib");
        r.cpu = j.get_str("cpu");
        r.cpu_kernels = j.get_str("cpu_kernels");
        r.build = j.get_str("build");
        r.attn = j.get_str("attn");
        r.matmul = j.get_str("matmul");
        r.kv = j.get_str("kv");
        r.n_samples = int(j.get_num("n_samples", 0));
        const json::Value *recall = j.find("recall");
        if (recall && recall->type == json::Value::Type::NUMBER) r.recall = recall->num;
        // qa rows written before "recall_of" measured every occurrence of the
        // answer, most of them in distractor documents: not the gold fact's
        // recall, so not counted (docs/eval.md, "Recall and the oracle").
        if (r.task == "qa" && j.get_str("recall_of").empty()) r.recall = -1;
        auto it = at.find(combo_key(r));
        if (it != at.end()) out.rows[it->second] = r;
        else at[combo_key(r)] = out.rows.size(), out.rows.push_back(r);
    }
    return out;
}

int64_t parse_length(const std::string &s) {
    if (s.empty()) return -1;
    int64_t mult = 1;
    std::string num = s;
    const char last = s.back();
    if (last == 'k' || last == 'K') mult = 1024, num.pop_back();
    else if (last == 'm' || last == 'M') mult = 1024 * 1024, num.pop_back();
    if (num.empty() || num.size() > 9) return -1;
    int64_t v = 0;
    for (char c : num) {
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
    }
    return v > 0 ? v * mult : -1;
}

std::string length_label(int64_t n) {
    if (n >= 1024 * 1024 && n % (1024 * 1024) == 0) return std::to_string(n / (1024 * 1024)) + "M";
    if (n >= 1024 && n % 1024 == 0) return std::to_string(n / 1024) + "K";
    return std::to_string(n);
}

} // namespace lctx::eval
