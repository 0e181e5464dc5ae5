// lctx run -m MODEL --file DOC --question TEXT: answers a question about a
// long document. REFORM by default (encode once, gather, recompute); FULL and
// a head+tail truncation baseline for comparison. Answer on stdout; with
// --json one JSON object with the answer, spans, timings and memory.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli.h"
#include "method_knobs.h"
#include "op_times.h"
#include "common/json.h"
#include "probe.h"

namespace lctx::cli {

namespace {

// Progress on stderr, one line per stage ("encoding", "indexing",
// "selecting", "recompute", "decoding"): a bar, the tokens done (or a
// percentage), and the rate and ETA only once they mean something (half a
// second into the stage, with tokens done: a few tokens over microseconds is
// noise, and "0 tok/s" on a short input is wrong). Redrawn at most 10 times a
// second; each stage ends with its time (and rate, when measured).
constexpr double kMinRateSeconds = 0.5;

// " (N tok/s)" when the time is long enough to make the rate meaningful, else "".
std::string rate_text(int64_t tokens, double seconds) {
    if (tokens <= 0 || seconds < kMinRateSeconds) return "";
    char b[64];
    std::snprintf(b, sizeof b, " (%.0f tok/s)", tokens / seconds);
    return b;
}

struct Progress {
    bool show = false;
    std::string stage;
    double t0 = 0, last_draw = 0;
    int64_t total = 0;               // tokens of the stage; 0: it is shown as a percentage
    double call_base = 0, call_span = 1;   // the running library call covers [base, base + span) of the stage
    size_t last_len = 0;

    void begin(const char *name, int64_t tokens) {
        if (!show) return;
        stage = name;
        t0 = now_s();
        last_draw = 0;
        total = tokens;
        last_len = 0;
        call_base = 0;
        call_span = tokens > 0 ? double(tokens) : 1.0;
        draw(0, true, false);
    }
    // The next library call covers `span` units (tokens, or 1 for a fraction) from `base`.
    void call(double base, double span) { call_base = base, call_span = span; }
    void on_call(float done) { update(call_base + double(done) * call_span); }
    void update(double units) { if (show && !stage.empty()) draw(units, false, false); }
    void end(double units) {
        if (!show || stage.empty()) return;
        draw(units, true, true);
        std::fputc('\n', stderr);
        std::fflush(stderr);
        stage.clear();
    }

  private:
    void draw(double units, bool force, bool final) {
        const double t = now_s();
        if (!force && t - last_draw < 0.1) return;
        last_draw = t;
        const double dt = t - t0;
        const double frac = total > 0 ? std::min(1.0, units / double(total)) : std::min(1.0, units);
        const int w = 30, fill = final ? w : int(w * frac);
        std::string line = "\r" + stage + std::string(stage.size() < 9 ? 9 - stage.size() : 0, ' ') + " [" +
                           std::string(size_t(fill), '#') + std::string(size_t(w - fill), ' ') + "] ";
        char b[160];
        const long long done = static_cast<long long>(units + 0.5);
        if (final) {
            if (total > 0) std::snprintf(b, sizeof b, "%lld tokens in %.2f s%s", done, dt, rate_text(done, dt).c_str());
            else std::snprintf(b, sizeof b, "done in %.2f s", dt);
        } else if (total > 0) {
            int n = std::snprintf(b, sizeof b, "%lld/%lld tokens", done, (long long)total);
            if (done > 0 && dt >= kMinRateSeconds)
                std::snprintf(b + n, sizeof b - size_t(n), "  %.0f tok/s  ETA %.0f s", done / dt,
                              (double(total) - double(done)) / (done / dt));
        } else {
            std::snprintf(b, sizeof b, "%3.0f%%", 100.0 * frac);
        }
        line += b;
        const size_t len = line.size();
        if (len < last_len) line += std::string(last_len - len, ' ');   // blank what the last line had beyond
        last_len = len;
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
    }
};

int on_progress(float done, void *user_data) {
    static_cast<Progress *>(user_data)->on_call(done);
    return 0;
}

// The non-empty lines of text (a trailing \r dropped).
std::vector<std::string> split_lines(const std::string &text) {
    std::vector<std::string> lines;
    for (size_t at = 0; at < text.size();) {
        size_t end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        std::string line = text.substr(at, end - at);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) lines.push_back(line);
        at = end + 1;
    }
    return lines;
}

// One probe on stderr (without --json).
void print_probe(const std::string &text, const ProbeReport &r) {
    if (r.spans.empty()) {
        std::fprintf(stderr, "probe \"%s\": not found in the input tokens\n", text.c_str());
        return;
    }
    std::string where;
    for (const SpanProbe &p : r.spans)
        where += (where.empty() ? "" : ", ") + std::to_string(p.span.begin) + "-" + std::to_string(p.span.end) + " (" +
                 std::to_string(p.n_gathered) + "/" + std::to_string(p.span.end - p.span.begin) + " gathered)";
    char lowest[32] = "none";
    if (r.has_lowest) std::snprintf(lowest, sizeof lowest, "%.4f", r.lowest_selected);
    std::fprintf(stderr, "probe \"%s\": tokens %s; best token %lld: score %.4f, ranked %.4f, rank %lld of %lld "
                 "(raw rank %lld); lowest selected %s, highest %.4f\n", text.c_str(), where.c_str(),
                 (long long)r.best_pos, r.best_raw, r.best_ranked, (long long)r.rank, (long long)r.n_scored,
                 (long long)r.raw_rank, lowest, r.highest_ranked);
}

} // namespace

int cmd_run(int argc, char **argv) {
    const std::string usage_text = std::string(
        "usage: lctx run -m MODEL --file DOC --question TEXT [options]\n"
        "  --file FILE          the document: UTF-8 text, not empty (invalid UTF-8 is refused with the byte\n"
        "                       offset of the first bad sequence)\n"
        "  --lossy              accept invalid UTF-8 in the document and questions: each invalid sequence\n"
        "                       becomes U+FFFD\n"
        "  --question TEXT      the question (or --question-file FILE)\n"
        "  --questions FILE     several questions about the document, one per line: the document is read\n"
        "                       once, each question answered from it (one JSON line each with --json)\n"
        "  --method M           the method (default reform):\n") + method_usage("                         ") +
        "Numbers are checked: a value out of its range (below, or past 2^31 - 1) is refused.\n"
        "  --budget N           REFORM: recompute budget (default n_ctx_train/2); ILRe: gathered tokens\n"
        "                       (min(4096, n_ctx_train/2)); baselines: kv_budget\n"
        "                       (truncate: tokens kept, n_ctx_train/2; others: KV slots, n_ctx_train/4)\n"
        "  --chunk N            tokens per encoding step (default n_ctx_train/4)\n"
        "  --working N          REFORM working-cache budget (default = chunk)\n"
        "  --heads FILE         REFORM head profile (JSON from 'lctx heads')\n"
        "  --repeat-window N    REFORM, ILRe: a token whose N tokens up to it, or from it on, occurred earlier\n"
        "                       in the input ranks below all others, so repeated text is gathered once\n"
        "                       (default 16; -1: off; otherwise >= 2)\n"
        "  --layer N            ILRe retrieval layer, 0..n_layer-1 (default -1: the model's profile)\n"
        "  --window N           ILRe window of the shallow layers (default chunk/2)\n"
        "  --no-dca             ILRe: no bounded distances past the trained context (DCA is on by default)\n"
        "  --query-tokens N     ILRe: score with the last N tokens of the question only (default: all)\n"
        "  --score-distance N   ILRe: position-free scoring, every key as if N positions before the question;\n"
        "                       -1 (default): each key at its own position; -2: -1 while the input fits the\n"
        "                       trained context, 1024 past it\n"
        "  --ilre-profile FILE  ILRe profile with the retrieval layer (JSON from 'lctx heads --ilre')\n"
        "  --global N, --local N, --span N, --vote-k N, --spans N\n"
        "                       ReAttention: G, L, m, k, k' (-1, the default: derived from the trained context,\n"
        "                       32, n_ctx_train/2, 32, 4, (n_ctx_train - G - L)/m; --spans 0: global + local only;\n"
        "                       G >= 0, L >= 1, m >= 2 and even, k 1..64, all at most 2^20)\n"
        "  --tile-max           ReAttention: the reference kernel's approximate top-k (one key per 128)\n"
        "  --reuse N            ReAttention: decode steps a layer's selection is reused, >= 1 (default 1)\n"
        "  --store-ram MIB      ReAttention: K/V store in RAM up to MIB, then in a file (default 0: RAM only)\n"
        "  --store-dir DIR      ReAttention: directory of that file (default $TMPDIR or /tmp)\n"
        "  --kv-type T          element type of KV caches and stores: f32 (default), f16 or q8 (CPU only, lossy)\n"
        "  --save-index FILE    save the REFORM or ILRe index after encoding (its directory is checked first; a\n"
        "                       save that fails later still answers, then exits 1)\n"
        "  --index FILE         load a saved REFORM or ILRe index instead of reading --file\n"
        "  --decode D           REFORM, ILRe: dense (default) or refreshkv (RefreshKV over the recomputed cache)\n"
        "  --rkv-k N            RefreshKV: partial-cache slots K (default: prompt tokens / 8)\n"
        "  --rkv-stride N       RefreshKV: query-check (or refresh) stride S (default 10)\n"
        "  --rkv-threshold X    RefreshKV: cosine threshold s, -10..10 (default 0: the model's calibrated value;\n"
        "                       < -1: never refresh, >= 1: refresh at every check)\n"
        "  --rkv-fixed          RefreshKV: fixed schedule (every layer refreshes every S steps)\n"
        "  --rkv-max-run N      RefreshKV: also refresh a layer after N steps without one (default: never)\n"
        "  -n, --n-predict N    answer tokens, >= 0 (default 64)\n"
        "  -c, --ctx N          decode context (default n_ctx_train; FULL: whole input)\n"
        "  -t, --threads N      threads, >= 1 (default: all cores)\n"
        "  --json               print one JSON object (answer, spans, timings, tok/s, peak RSS)\n"
        "  --profile-ops        time every backend op of the session (LCTX_PROFILE_OPS=1): a table on stderr, or\n"
        "                       'op_times' in --json (device backends synchronize after each op: a little slower)\n"
        "  --progress           progress on stderr even when it is not a terminal: one line per stage (encoding,\n"
        "                       indexing, selecting, recompute, decoding; decoding only when the answer does not\n"
        "                       stream to the same terminal), with tok/s and ETA once measured\n"
        "  --no-chat            no chat template: feed the document, then the question as is\n"
        "  --answer-prefix TEXT with --no-chat: the prompt ends with the question, a newline and TEXT, the\n"
        "                       start of the answer (as lctx eval's plain prompts: a base model answers\n"
        "                       instead of going on with the document)\n"
        "  --set K=V[:K=V...]   any field of the method's parameter struct in lctx.h, after the options above,\n"
        "                       e.g. --set recompute=4096:evictor=tova (reform), --set sink=64:obs=32 (h2o),\n"
        "                       --set refreshkv.stride=5 (with --decode refreshkv); as lctx eval's method variants\n"
        "  --probe TEXT         REFORM, ILRe (repeatable): after select, where TEXT lies in the input tokens,\n"
        "                       whether the selection gathered it, its best score and rank among all scored\n"
        "                       tokens, the lowest selected score ('probes' in --json, else on stderr); with\n"
        "                       --index, --file must name the indexed document (to find TEXT in it)\n"
        "  --probes FILE        with --questions: one probe per question, line i for question i (blank lines\n"
        "                       are skipped in both files, so the counts must match)\n" +
        std::string(kBackendUsage) + kPrecisionUsage +
        "sampling of the answer (default greedy):\n" + kSamplingUsage;
    const char *usage = usage_text.c_str();
    Args a = parse_args(argc, argv,
                        concat({"--model", "--file", "--question", "--question-file", "--questions", "--method",
                                "--budget", "--chunk", "--working", "--heads", "--repeat-window", "--save-index", "--index", "--n-predict",
                                "--ctx", "--threads", "--layer", "--window", "--ilre-profile", "--query-tokens", "--score-distance",
                                "--global", "--local", "--span", "--vote-k", "--spans", "--reuse", "--store-ram",
                                "--store-dir", "--kv-type", "--decode", "--rkv-k", "--rkv-stride", "--rkv-threshold",
                                "--rkv-max-run", "--backend", "--probe", "--probes", "--set", "--answer-prefix"},
                               concat(kSamplingFlags, kPrecisionFlags)),
                        {"--json", "--progress", "--no-chat", "--no-dca", "--tile-max", "--rkv-fixed", "--lossy", "--profile-ops"},
                        {{"-m", "--model"}, {"-n", "--n-predict"}, {"-c", "--ctx"}, {"-t", "--threads"}}, usage);
    lctx_method method_id = LCTX_METHOD_REFORM;
    if (!parse_method(a.get("--method", "reform"), method_id))
        die("--method must be one of: %s", method_cli_names().c_str());
    const std::string method = method_cli_name(method_id);
    // --set: checked here, applied over the other options when the session is made.
    MethodVariant settings;
    if (a.has("--set")) {
        const bool rkv_decode = a.get("--decode", "dense") == "refreshkv";
        std::string err;
        if (!parse_method_variant(method + ":" + a.get("--set"), method, method_id, rkv_decode, settings, err))
            die("--set %s: %s", a.get("--set").c_str(), err.c_str());
    }
    if (!a.has("--question") && !a.has("--question-file") && !a.has("--questions"))
        die("run needs --question TEXT\n\n%s", usage);
    if (!a.has("--file") && !a.has("--index")) die("run needs --file DOC or --index FILE\n\n%s", usage);
    if (!a.positional.empty()) die("unexpected argument '%s'\n\n%s", a.positional[0].c_str(), usage);
    const bool lossy = a.on("--lossy");
    if (a.on("--profile-ops")) enable_op_profile();
    // Every number is read (and range-checked) here, before the model loads.
    const int64_t n_predict = a.get_int("--n-predict", 64, 0, INT32_MAX);
    const int32_t budget = a.get_i32("--budget", 0, 1);
    const int32_t ctx_arg = a.get_i32("--ctx", 0, 1);
    const int32_t chunk_arg = a.get_i32("--chunk", 0, 1);
    const int32_t working = a.get_i32("--working", 0, 1);
    const int32_t repeat_window = a.get_i32("--repeat-window", 0, -1, INT32_MAX, "-1: off");
    if (a.has("--repeat-window") && (repeat_window == 0 || repeat_window == 1)) die("--repeat-window must be -1 (off) or at least 2");
    const int32_t ilre_layer = a.get_i32("--layer", -1, -1, INT32_MAX, "-1: the model's profile");
    const int32_t ilre_window = a.get_i32("--window", 0, 1);
    const int32_t query_tokens = a.get_i32("--query-tokens", 0, 1);
    const int32_t score_distance = a.get_i32("--score-distance", -1, LCTX_ILRE_SCORE_AUTO, 1 << 20,
                                                  "-2: auto, -1: each key at its own position");
    // ReAttention: -1 (derived from the model) or a value in [lo, 2^20].
    auto ra_knob = [&](const char *name, int32_t lo, int32_t hi, const char *note) -> int32_t {
        const int32_t v = a.get_i32(name, -1, -1, hi, note);
        if (v != -1 && v < lo) {
            char range[160];
            std::snprintf(range, sizeof range, "-1 (derived from the model) or an integer from %d to %d", lo, hi);
            die("%s %s is out of range: expected %s", name, a.get(name).c_str(), range);
        }
        return v;
    };
    const int32_t ra_global = ra_knob("--global", 0, 1 << 20, "-1: derived from the model");
    const int32_t ra_local = ra_knob("--local", 1, 1 << 20, "-1: derived from the model");
    const int32_t ra_span = ra_knob("--span", 2, 1 << 20, "-1: derived from the model");
    if (ra_span > 0 && ra_span % 2) die("--span %d must be even (tokens on both sides of each winner)", ra_span);
    const int32_t ra_vote_k = ra_knob("--vote-k", 1, 64, "-1: derived from the model");
    const int32_t ra_spans = ra_knob("--spans", 0, 1 << 20, "-1: derived from the model, 0: global + local only");
    const int32_t ra_reuse = a.get_i32("--reuse", 1, 1, 1 << 20);
    const uint64_t store_ram_mib = a.get_u64("--store-ram", 0, (uint64_t(1) << 44) - 1);
    const int32_t rkv_k = a.get_i32("--rkv-k", 0, 1);
    const int32_t rkv_stride = a.get_i32("--rkv-stride", 0, 1);
    const double rkv_threshold = a.get_float("--rkv-threshold", 0.0, -10.0, 10.0, false,
                                             "0: the model's calibrated value, < -1: never refresh, >= 1: always");
    const int32_t rkv_max_run = a.get_i32("--rkv-max-run", 0, 1);
    const lctx_sampling_params samp = sampling_params(a);
    if (method_id == LCTX_METHOD_REATTENTION && a.has("--top-k") && samp.temperature <= 0)
        die("--top-k is the sampling top-k (no effect with greedy decoding, --temp 0); ReAttention's k is --vote-k");
    if (a.has("--index") && method_id != LCTX_METHOD_REFORM && method_id != LCTX_METHOD_ILRE)
        die("--index works with --method reform or ilre (the file's method is used)");
    if (a.has("--save-index")) {
        if (method_id != LCTX_METHOD_REFORM && method_id != LCTX_METHOD_ILRE)
            die("--save-index works with --method reform or ilre");
        // Checked now, not after an encoding that may take an hour.
        // The directory the library writes its temporary file in (index_file.cpp: the parent path).
        const std::string path = a.get("--save-index");
        const std::string parent = std::filesystem::path(path).parent_path().string();
        const std::string dir = parent.empty() ? "." : parent;
        std::error_code ec;
        if (!std::filesystem::is_directory(dir, ec))
            die("--save-index %s: the directory %s does not exist", path.c_str(), dir.c_str());
        if (access(dir.c_str(), W_OK | X_OK) != 0)
            die("--save-index %s: the directory %s is not writable", path.c_str(), dir.c_str());
    }
    // --questions FILE: one question per line, all about the same document,
    // which is read once; one answer (one JSON line with --json) each.
    std::vector<std::string> questions;
    if (a.has("--questions")) {
        questions = split_lines(check_text(read_file(a.get("--questions")), "--questions " + a.get("--questions"),
                                           lossy, true));
        if (questions.empty()) die("--questions %s holds no question", a.get("--questions").c_str());
    } else {
        questions.push_back(a.has("--question-file")
                                ? check_text(read_file(a.get("--question-file")), "--question-file " +
                                             a.get("--question-file"), lossy)
                                : check_text(a.get("--question"), "--question", lossy));
    }
    const std::string question = questions[0];
    if (a.has("--answer-prefix") && !a.on("--no-chat"))
        die("--answer-prefix goes with --no-chat (a chat prompt ends with the assistant's header)");
    const std::string answer_prefix = check_text(a.get("--answer-prefix"), "--answer-prefix", lossy, true);
    // A plain prompt's part after the document.
    auto plain_after = [&](const std::string &q) { return "\n\n" + q + "\n" + answer_prefix; };
    // Probes: every --probe for each question, plus line i of --probes for question i.
    std::vector<std::vector<std::string>> probes(questions.size());
    for (const std::string &p : a.get_all("--probe"))
        for (auto &list : probes) list.push_back(check_text(p, "--probe", lossy));
    if (a.has("--probes")) {
        if (!a.has("--questions")) die("--probes FILE goes with --questions FILE (one probe per question)");
        const std::vector<std::string> lines =
            split_lines(check_text(read_file(a.get("--probes")), "--probes " + a.get("--probes"), lossy, true));
        if (lines.size() != questions.size())
            die("--probes %s has %zu probes for %zu questions (one line each, blank lines skipped)",
                a.get("--probes").c_str(), lines.size(), questions.size());
        for (size_t i = 0; i < lines.size(); ++i) probes[i].push_back(lines[i]);
    }
    const bool probing = a.has("--probe") || a.has("--probes");
    if (probing && method_id != LCTX_METHOD_REFORM && method_id != LCTX_METHOD_ILRE)
        die("--probe works with --method reform or ilre (the methods that score every input token)");
    if (probing && a.has("--index") && !a.has("--file"))
        die("--probe with --index needs --file DOC: the document the index was built from, to find the text in");
    // The document, checked before the model loads.
    std::string doc_text;
    if (!a.has("--index") || probing)
        doc_text = check_text(read_file(a.get("--file")), "--file " + a.get("--file"), lossy);
    const bool json = a.on("--json");

    double t = now_s();
    lctx_model *m = load_model(a);
    const double t_load = now_s() - t;
    const int32_t n_train = lctx_model_n_ctx_train(m);

    // Tokens: [before doc] [doc] | [after doc] = query.
    t = now_s();
    std::string before, after;
    if (a.on("--no-chat")) after = plain_after(question);
    else chat_parts(m, question, before, after);
    std::vector<lctx_token> doc;
    if (!doc_text.empty()) {
        doc = tokenize(m, before, a.on("--no-chat"), true);
        std::vector<lctx_token> body = tokenize(m, doc_text, false, false);
        std::string().swap(doc_text);
        doc.insert(doc.end(), body.begin(), body.end());
    }
    // Where each probe text lies in the input, found once before encoding
    // (the pieces of a long input are freed before the encoder's memory peaks).
    std::map<std::string, std::vector<TokenSpan>> probe_spans;
    if (probing) {
        std::vector<std::string> pieces(doc.size());
        for (size_t i = 0; i < doc.size(); ++i) pieces[i] = piece(m, doc[i]);
        for (const auto &list : probes)
            for (const std::string &p : list)
                if (!probe_spans.count(p)) probe_spans[p] = find_text_spans(pieces, p);
    }
    std::vector<lctx_token> query = tokenize(m, after, false, true);
    size_t max_query = query.size();   // FULL's cache holds the longest question
    for (size_t qi = 1; qi < questions.size(); ++qi) {
        std::string b2, a2;
        if (a.on("--no-chat")) a2 = plain_after(questions[qi]);
        else chat_parts(m, questions[qi], b2, a2);
        max_query = std::max(max_query, tokenize(m, a2, false, true).size());
    }
    const double t_tok = now_s() - t;

    if (ilre_layer >= lctx_model_n_layer(m))
        die("--layer %d is out of range: the model has %d layers (0..%d)", ilre_layer, lctx_model_n_layer(m),
            lctx_model_n_layer(m) - 1);
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = method_id;
    sp.n_threads = threads_arg(a);
    const int64_t full_ctx = int64_t(doc.size() + max_query) + n_predict + 1;
    const bool whole = method_id == LCTX_METHOD_FULL || method_id == LCTX_METHOD_REFRESHKV;
    if (!a.has("--ctx") && whole && full_ctx > INT32_MAX)
        die("the input needs a context of %lld tokens, more than the largest one (2^31 - 1)", (long long)full_ctx);
    sp.n_ctx = a.has("--ctx") ? ctx_arg : whole ? static_cast<int32_t>(full_ctx) : 0;
    lctx_reform_params rp;
    lctx_reform_default_params(&rp);
    lctx_kv_params kv;
    lctx_kv_default_params(&kv);
    rp.recompute = static_cast<int32_t>(method_id == LCTX_METHOD_REFORM ? budget : 0);
    kv.budget = static_cast<int32_t>(method_id == LCTX_METHOD_REFORM ? 0 : budget);
    rp.chunk = chunk_arg;
    kv.chunk = rp.chunk;
    rp.budget = working;
    rp.repeat_window = a.has("--repeat-window") ? repeat_window : 0;
    const std::string heads = a.get("--heads");
    rp.heads_path = heads.empty() ? nullptr : heads.c_str();
    lctx_ilre_params ip;
    lctx_ilre_default_params(&ip);
    ip.repeat_window = a.has("--repeat-window") ? repeat_window : 0;
    if (method_id == LCTX_METHOD_ILRE) {
        ip.budget = budget;
        ip.chunk = rp.chunk;
        ip.retrieval_layer = ilre_layer;
        ip.window = ilre_window;
        ip.dca = !a.on("--no-dca");
        ip.query_tokens = query_tokens;
        ip.score_distance = score_distance;
    }
    const std::string ilre_profile = a.get("--ilre-profile");
    ip.profile_path = ilre_profile.empty() ? nullptr : ilre_profile.c_str();
    lctx_reattention_params ap;
    lctx_reattention_default_params(&ap);
    ap.n_global = ra_global;
    ap.n_local = ra_local;
    ap.span = ra_span;
    ap.top_k = ra_vote_k;
    ap.n_spans = ra_spans;
    ap.chunk = a.has("--chunk") ? rp.chunk : -1;
    ap.reuse_steps = ra_reuse;
    ap.tile_max = a.on("--tile-max");
    ap.store_max_ram = store_ram_mib << 20;
    const std::string store_dir = a.get("--store-dir");
    ap.store_dir = store_dir.empty() ? nullptr : store_dir.c_str();
    const std::string kv_type = a.get("--kv-type", "f32");
    if (kv_type == "f16") sp.kv_type = LCTX_KV_F16;
    else if (kv_type == "q8") sp.kv_type = LCTX_KV_Q8;
    else if (kv_type != "f32") die("--kv-type must be f32, f16 or q8");
    sp.attn_precision = precision_arg(a, "--attn");
    sp.matmul_precision = precision_arg(a, "--matmul");
    sp.reform = &rp;
    sp.kv = &kv;
    sp.ilre = &ip;
    sp.reattention = &ap;
    lctx_refreshkv_params rkp;
    lctx_refreshkv_default_params(&rkp);
    const std::string decode_mode = a.get("--decode", "dense");
    if (decode_mode != "dense" && decode_mode != "refreshkv") die("--decode must be dense or refreshkv");
    if (decode_mode == "refreshkv" && method_id != LCTX_METHOD_REFORM && method_id != LCTX_METHOD_ILRE)
        die("--decode refreshkv works with --method reform or ilre (--method refreshkv decodes with it already)");
    rkp.gathered = decode_mode == "refreshkv";
    rkp.partial = rkv_k;
    rkp.stride = rkv_stride;
    rkp.threshold = static_cast<float>(rkv_threshold);
    rkp.schedule = a.on("--rkv-fixed") ? LCTX_REFRESHKV_FIXED : LCTX_REFRESHKV_DYNAMIC;
    rkp.max_partial_run = rkv_max_run;
    sp.refreshkv = &rkp;
    MethodKnobs knobs;   // the structs above with --set applied over them
    knobs.reform = rp;
    knobs.kv = kv;
    knobs.ilre = ip;
    knobs.reattention = ap;
    knobs.refreshkv = rkp;
    apply_settings(settings.settings, knobs);
    knobs.attach(sp);

    Progress bar;
    bar.show = a.on("--progress") || (!json && isatty(2));
    // The answer streams to stdout: no decoding line when that is the terminal the progress goes to.
    const bool show_decode = bar.show && (json || !isatty(1));
    if (bar.show) {
        sp.progress = on_progress;
        sp.progress_user_data = &bar;
    }

    lctx_session *s = nullptr;
    double t_encode = 0, t_index = 0;
    bool save_failed = false;   // --save-index could not write the file (reported, answered anyway)
    int64_t n_input = 0;
    if (a.has("--index")) {
        t = now_s();
        check(lctx_session_load_index(m, a.get("--index").c_str(), &sp, &s), "loading the index");
        t_index = now_s() - t;
        n_input = lctx_session_n_fed(s);
        if (probing && n_input != static_cast<int64_t>(doc.size()))
            die("--file %s gives %zu input tokens, the index %s holds %lld: --probe needs the indexed document",
                a.get("--file").c_str(), doc.size(), a.get("--index").c_str(), (long long)n_input);
    } else {
        check(lctx_session_create(m, &sp, &s), "creating the session");
        n_input = static_cast<int64_t>(doc.size());
        t = now_s();
        bar.begin("encoding", n_input);
        const size_t step = knobs.reform.chunk > 0 ? size_t(knobs.reform.chunk) : size_t(std::max(512, n_train / 4));
        for (size_t at = 0; at < doc.size(); at += step) {
            const size_t n = std::min(step, doc.size() - at);
            bar.call(double(at), double(n));
            check(lctx_feed_chunk(s, doc.data() + at, n), "encoding the document");
        }
        bar.end(double(n_input));
        bar.begin("indexing", 0);
        check(lctx_build_index(s), "build_index");
        bar.end(1);
        t_encode = now_s() - t;
        if (a.has("--save-index")) {
            t = now_s();
            // A failed save (disk full, say) keeps the encoding: the questions
            // are still answered, and the exit status says the file is missing.
            const lctx_status st = lctx_index_save(s, a.get("--save-index").c_str());
            if (st != LCTX_OK) {
                const char *msg = lctx_last_error();
                std::fprintf(stderr, "lctx: saving the index failed (%s): %s; answering anyway, exit status 1\n",
                             lctx_status_string(st), msg && *msg ? msg : "no details");
                save_failed = true;
            }
            t_index = now_s() - t;
        }
    }

    for (size_t qi = 0; qi < questions.size(); ++qi) {
    if (qi > 0) {   // the next question's tokens (the document part of the template is the same)
        std::string b2;
        after.clear();
        if (a.on("--no-chat")) after = plain_after(questions[qi]);
        else chat_parts(m, questions[qi], b2, after);
        query = tokenize(m, after, false, true);
    }
    t = now_s();
    lctx_selection *sel = nullptr;
    bar.begin("selecting", 0);
    check(lctx_select(s, query.data(), query.size(), &sel), "select");
    bar.end(1);
    const double t_select = now_s() - t;
    std::vector<int64_t> pos(static_cast<size_t>(lctx_selection_size(sel)));
    lctx_selection_positions(sel, pos.data(), static_cast<int64_t>(pos.size()));
    std::vector<std::pair<std::string, ProbeReport>> probe_reports;
    if (!probes[qi].empty()) {
        SelectScores sc;
        int64_t n_scores = 0;
        check(lctx_session_select_scores(s, nullptr, nullptr, 0, &n_scores, &sc.forced_first, &sc.forced_last),
              "select scores");
        sc.raw.resize(static_cast<size_t>(n_scores));
        sc.ranked.resize(static_cast<size_t>(n_scores));
        check(lctx_session_select_scores(s, sc.raw.data(), sc.ranked.data(), n_scores, &n_scores, nullptr, nullptr),
              "select scores");
        sc.selected = pos;
        for (const std::string &p : probes[qi]) probe_reports.emplace_back(p, probe_selection(sc, probe_spans[p]));
    }
    t = now_s();
    const int64_t n_recompute = static_cast<int64_t>(pos.size() + query.size());
    bar.begin("recompute", n_recompute);
    check(lctx_recompute(s, sel), "recompute");
    bar.end(double(n_recompute));
    const double t_recompute = now_s() - t;
    lctx_selection_free(sel);

    t = now_s();
    if (show_decode) bar.begin("decoding", n_predict);
    std::string answer;
    int64_t n_gen = 0;
    for (; n_gen < n_predict; ++n_gen) {
        lctx_token tok = -1;
        lctx_status st = lctx_decode(s, &samp, &tok);
        if (st == LCTX_ERR_CONTEXT_FULL) break;
        check(st, "decode");
        if (lctx_token_is_eog(m, tok)) break;
        if (show_decode) bar.update(double(n_gen + 1));
        std::string p = piece(m, tok);
        answer += p;
        if (!json) {
            std::fwrite(p.data(), 1, p.size(), stdout);
            std::fflush(stdout);
        }
    }
    if (show_decode) bar.end(double(n_gen));
    const double t_decode = now_s() - t;
    if (!json) {
        std::fputc('\n', stdout);
        std::fflush(stdout);  // the answer line ends before the stats on stderr
    }

    // Selected spans [start, end) in document tokens.
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int64_t p : pos) {
        if (!spans.empty() && spans.back().second == p) spans.back().second = p + 1;
        else spans.emplace_back(p, p + 1);
    }
    const double tok_s = t_encode > 0 ? n_input / t_encode : 0.0;
    // RefreshKV statistics of the answer (when the session decodes with it).
    lctx_refreshkv_stats rst{};
    rst.struct_size = sizeof rst;
    const bool has_rkv = lctx_session_refreshkv_stats(s, &rst, nullptr, nullptr, 0) == LCTX_OK;
    const std::string rkv_json = has_rkv ? refreshkv_json(m, s) : "null";
    if (json) {
        const std::string op_json = op_times_json(s);
        std::string sp_json = "[";
        for (size_t i = 0; i < spans.size(); ++i)
            sp_json += (i ? ",[" : "[") + std::to_string(spans[i].first) + "," + std::to_string(spans[i].second) + "]";
        sp_json += "]";
        std::string probes_json;
        if (!probe_reports.empty()) {
            probes_json = ", \"probes\": [";
            for (size_t i = 0; i < probe_reports.size(); ++i)
                probes_json += (i ? ", " : "") + probe_json(probe_reports[i].first, probe_reports[i].second);
            probes_json += "]";
        }
        std::printf("{\"answer\": %s, \"method\": %s, \"n_input_tokens\": %lld, \"n_query_tokens\": %zu, "
                    "\"n_selected\": %zu, \"selected_spans\": %s, \"timings_s\": {\"load\": %.3f, \"tokenize\": %.3f, "
                    "\"encode\": %.3f, \"index_io\": %.3f, \"select\": %.3f, \"recompute\": %.3f, \"decode\": %.3f}, "
                    "\"encode_tokens_per_s\": %.1f, \"n_generated\": %lld, \"decode_tokens_per_s\": %.2f, "
                    "\"peak_rss_mib\": %.1f, \"refreshkv\": %s, \"question_index\": %zu, \"backend\": %s%s%s}\n",
                    json::quote(answer).c_str(), json::quote(method).c_str(), (long long)n_input, query.size(), pos.size(),
                    sp_json.c_str(), t_load, t_tok, t_encode, t_index, t_select, t_recompute, t_decode, tok_s,
                    (long long)n_gen, t_decode > 0 ? n_gen / t_decode : 0.0, peak_rss_mib(), rkv_json.c_str(), qi,
                    json::quote(session_backend(s)).c_str(), probes_json.c_str(),
                    op_json.empty() ? "" : (", \"op_times\": " + op_json).c_str());
        std::fflush(stdout);
    } else {
        // Rates only where the time measured is long enough to give one (no "0 tok/s" on short inputs).
        char read[96];
        if (a.has("--index")) std::snprintf(read, sizeof read, "index loaded in %.2f s", t_index);
        else std::snprintf(read, sizeof read, "encode %.2f s%s", t_encode, rate_text(n_input, t_encode).c_str());
        std::fprintf(stderr, "%s on %s: %lld input tokens, %s, select %.3f s, recompute %zu+%zu tokens %.2f s, decode "
                     "%lld tokens %.2f s%s, peak RSS %.0f MiB\n", method.c_str(), session_backend(s), (long long)n_input, read, t_select,
                     pos.size(), query.size(), t_recompute, (long long)n_gen, t_decode,
                     rate_text(n_gen, t_decode).c_str(), peak_rss_mib());
        if (has_rkv)
            std::fprintf(stderr, "refreshkv: K %lld, %lld steps, effective stride %.2f, full/partial layer steps "
                         "%lld/%lld, attention full %.3f s (refresh %.3f s), partial %.3f s\n", (long long)rst.partial,
                         (long long)rst.n_steps, rst.effective_stride, (long long)rst.n_full, (long long)rst.n_partial,
                         rst.full_attention_s, rst.refresh_s, rst.partial_attention_s);
        for (const auto &[text, r] : probe_reports) print_probe(text, r);
        print_op_times(s);
    }
    }   // questions
    lctx_session_free(s);
    lctx_model_free(m);
    return save_failed ? 1 : 0;
}

} // namespace lctx::cli
