// The report's oracle and recall tables (src/eval/report.cpp): the share of
// the oracle and the mean recall worked out by hand from the rows below.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "eval/report.h"

using namespace lctx::eval;

namespace {

Row row(const std::string &method, const std::string &task, int sample, double score, double recall = -1) {
    Row r;
    r.method = method, r.task = task, r.length = 8192, r.sample = sample, r.score = score, r.recall = recall;
    return r;
}

// A vt row of sample 0 at length L that took wall seconds.
Row at(const std::string &method, int64_t L, double wall) {
    Row r = row(method, "vt", 0, 0);
    r.length = L, r.wall_s = wall;
    return r;
}

std::string section(const std::string &md, const std::string &title) {
    const size_t at = md.find(title);
    if (at == std::string::npos) return "";
    return md.substr(at, md.find("\n## ", at + 1) - at);
}

} // namespace

TEST(EvalReport, ShareOfTheOracleAndRecall) {
    std::vector<Row> rows = {
        // niah_single: reform 0.5, oracle 1.0; vt: reform 0.25, oracle 0.5; cwe: only reform (not in the share).
        row("reform", "niah_single", 0, 1, 1.0), row("reform", "niah_single", 1, 0, 0.5),
        row("reform", "vt", 0, 0.25, 0.0), row("reform", "cwe", 0, 1),
        row("oracle", "niah_single", 0, 1, 1.0), row("oracle", "niah_single", 1, 1, 1.0), row("oracle", "vt", 0, 0.5, 1.0),
        // truncate scored 0 where the oracle scored 1: 0%; snapkv ran no task the oracle ran.
        row("truncate", "niah_single", 0, 0, 0.0), row("snapkv", "cwe", 0, 1),
    };
    Row err = row("reform", "vt", 1, 0, 0.9);   // a failed run: neither its score nor its recall counts
    err.error = "timed out";
    rows.push_back(err);
    const std::string md = markdown_report(rows, {});
    const std::string share = section(md, "## Accuracy as a share of the oracle");
    ASSERT_FALSE(share.empty()) << md;
    // (0.5 + 0.25) / (1.0 + 0.5) = 50%.
    EXPECT_NE(share.find("| reform | 50% |"), std::string::npos) << share;
    EXPECT_NE(share.find("| truncate | 0% |"), std::string::npos) << share;
    EXPECT_NE(share.find("| snapkv | - |"), std::string::npos) << share;
    EXPECT_EQ(share.find("| oracle |"), std::string::npos) << share;
    const std::string recall = section(md, "## Gather recall");
    // reform: (1.0 + 0.5 + 0.0) / 3; cwe and the error row carry none.
    EXPECT_NE(recall.find("| reform | 0.50 n=3 |"), std::string::npos) << recall;
    EXPECT_NE(recall.find("| oracle | 1.00 n=3 |"), std::string::npos) << recall;
    EXPECT_NE(recall.find("| snapkv | - |"), std::string::npos) << recall;
}

TEST(EvalReport, NoOracleNoShareTableAndZeroOracleIsNotADivision) {
    std::vector<Row> rows = {row("reform", "vt", 0, 1)};
    EXPECT_EQ(markdown_report(rows, {}).find("share of the oracle"), std::string::npos);
    EXPECT_EQ(markdown_report(rows, {}).find("## Gather recall"), std::string::npos);
    rows.push_back(row("oracle", "vt", 0, 0));
    const std::string share = section(markdown_report(rows, {}), "## Accuracy as a share of the oracle");
    EXPECT_NE(share.find("| reform | n/a |"), std::string::npos) << share;
}

// A length a method did not run: its time per sample extrapolated from its two
// largest lengths (10 s at 8K, 160 s at 32K: quadratic, so 2,560 s at 128K;
// a slope past 2 is clamped: 10 s -> 400 s gives 6,400 s, not 16,000 s).
TEST(EvalReport, EstimatedTimeForLengthsNotRun) {
    const std::vector<Row> rows = {at("full", 8192, 10), at("full", 32768, 160), at("steep", 8192, 10),
                                   at("steep", 32768, 400), at("once", 32768, 50), at("ilre", 131072, 100)};
    const std::string avg = section(markdown_report(rows, {}), "## Average over tasks");
    EXPECT_NE(avg.find("| full | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 43 min/sample) |"), std::string::npos) << avg;
    EXPECT_NE(avg.find("| steep | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 1.8 h/sample) |"), std::string::npos) << avg;
    // One measured length: no curve, no estimate; before the measured ones: none either.
    EXPECT_NE(avg.find("| once | - | 0.0 [0-79] n=1 | - |"), std::string::npos) << avg;
    EXPECT_NE(avg.find("| ilre | - | - | 0.0 [0-79] n=1 |"), std::string::npos) << avg;
}

// The oracle and truncation read the same tokens at every length past their
// window: past their largest measured length they cost what they cost there,
// from one measured length on.
TEST(EvalReport, OracleAndTruncationEstimatesAreFlat) {
    const std::vector<Row> rows = {at("truncate", 8192, 5), at("truncate", 32768, 90), at("oracle", 32768, 12),
                                   at("truncate:budget=1024", 8192, 7), at("reform", 131072, 1)};
    const std::string avg = section(markdown_report(rows, {}), "## Average over tasks");
    // A power law through 5 s and 90 s would say 90 * 4^2 = 1,440 s (24 min) at 128K.
    EXPECT_NE(avg.find("| truncate | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 2 min/sample) |"), std::string::npos)
        << avg;
    EXPECT_NE(avg.find("| oracle | - | 0.0 [0-79] n=1 | - (est. 12 s/sample) |"), std::string::npos) << avg;
    EXPECT_NE(avg.find("| truncate:budget=1024 | 0.0 [0-79] n=1 | - (est. 7 s/sample) | - (est. 7 s/sample) |"),
              std::string::npos)
        << avg;
}

// The methods that read the input chunk by chunk into a fixed cache grow
// linearly past their largest measured length, whatever slope their short
// runs show: an 8K run of a few chunks carries the model's load and the first,
// cheaper chunks.
TEST(EvalReport, ChunkedMethodsEstimatesAreLinear) {
    const std::vector<Row> rows = {at("h2o", 8192, 10),          at("h2o", 32768, 100),
                                   at("infllm", 8192, 10),       at("infllm", 32768, 100),
                                   at("reattention", 8192, 10),  at("reattention", 32768, 100),
                                   at("reform:recompute=4096", 8192, 30), at("ilre+refreshkv", 32768, 45),
                                   at("full", 131072, 1)};
    const std::string avg = section(markdown_report(rows, {}), "## Average over tasks");
    // h2o and InfLLM: 100 s x 4 = 400 s (7 min) at 128K; the power law through 10 s and 100 s would say 1,000 s.
    EXPECT_NE(avg.find("| h2o | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 7 min/sample) |"), std::string::npos) << avg;
    EXPECT_NE(avg.find("| infllm | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 7 min/sample) |"), std::string::npos)
        << avg;
    // ReAttention scores every key per query: the power law, 100 x 4^1.66 = 1,000 s (17 min).
    EXPECT_NE(avg.find("| reattention | 0.0 [0-79] n=1 | 0.0 [0-79] n=1 | - (est. 17 min/sample) |"),
              std::string::npos)
        << avg;
    // One measured length is enough for a linear method and its variants: 30 s x 4, 30 s x 16; 45 s x 4.
    EXPECT_NE(avg.find("| reform:recompute=4096 | 0.0 [0-79] n=1 | - (est. 2 min/sample) | - (est. 8 min/sample) |"),
              std::string::npos)
        << avg;
    EXPECT_NE(avg.find("| ilre+refreshkv | - | 0.0 [0-79] n=1 | - (est. 3 min/sample) |"), std::string::npos) << avg;
}

// Time per sample is the median: one run slowed by other work (300 s among
// runs of about 10 s) does not move it; an even count takes the middle two.
TEST(EvalReport, TimeIsTheMedianOfTheRuns) {
    std::vector<Row> rows;
    for (double wall : {9.0, 10.0, 11.0, 300.0}) {
        Row r = row("reform", "vt", int(rows.size()), 0);
        r.wall_s = wall;
        rows.push_back(r);
    }
    Row one = row("full", "vt", 0, 0);
    one.wall_s = 7;
    rows.push_back(one);
    const std::string t = section(markdown_report(rows, {}), "## Time and memory");
    EXPECT_NE(t.find("Median wall time"), std::string::npos) << t;
    EXPECT_NE(t.find("| reform | 10.5 s, "), std::string::npos) << t;
    EXPECT_NE(t.find("| full | 7.0 s, "), std::string::npos) << t;
}

// CPU seconds: the median over the samples that recorded them (rows written
// before cpu_s have none); a cell without any shows wall time and memory only.
TEST(EvalReport, CpuSecondsBesideWallTime) {
    std::vector<Row> rows;
    const double cpu[] = {-1, 40, 20, 30};   // the first row predates cpu_s
    for (double c : cpu) {
        Row r = row("reform", "vt", int(rows.size()), 0);
        r.wall_s = 50, r.cpu_s = c, r.peak_rss_mib = 100;
        rows.push_back(r);
    }
    Row old = row("full", "vt", 0, 0);
    old.wall_s = 7, old.peak_rss_mib = 200;
    rows.push_back(old);
    const std::string t = section(markdown_report(rows, {}), "## Time and memory");
    EXPECT_NE(t.find("| reform | 50.0 s, CPU 30.0 s, 100 MiB |"), std::string::npos) << t;
    EXPECT_NE(t.find("| full | 7.0 s, 200 MiB |"), std::string::npos) << t;
}
