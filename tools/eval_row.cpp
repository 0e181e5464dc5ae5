// lctx eval, the child side (eval_row.h): a combination's prompt, session,
// answer, score, gather recall and timings as one JSON row.
#include "eval_row.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <stdexcept>

#include <sys/resource.h>

#include "cli.h"
#include "common/json.h"
#include "eval/results.h"
#include "eval/score.h"
#include "eval/task.h"
#include "op_times.h"
#include "probe.h"

namespace lctx::cli {

namespace {

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

// The oracle's window: --oracle-tokens, else half the trained context (room
// for the question and answer inside it), at most 4K tokens (FULL's cost).
int64_t oracle_window(const EvalOptions &o, const lctx_model *m) {
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

// What the rows of one sample share: the model, the prompt and the session
// that read the document.
struct Prepared {
    lctx_model *m = nullptr;
    lctx_session *s = nullptr;
    eval::Sample sample;
    bool have_sample = false, ppl = false;
    std::string prompt = "chat";
    std::string backend;   // the one the session ran on ("cpu" after a fallback)
    std::vector<lctx_token> doc, query, cont;   // cont: a perplexity task's held-out continuation
    int64_t n_doc = 0, n_query = 0, oracle_len = 0;
    double t_load = 0, t_gen = 0, t_tok = 0, t_feed = 0, t_index = 0;
    double cpu_s = 0;    // CPU seconds of preparing (all threads)
    std::string error;   // preparing failed
    ~Prepared() {
        lctx_session_free(s);
        lctx_model_free(m);
    }
    double shared_s() const { return t_load + t_gen + t_tok + t_feed + t_index; }
};

// One question asked of a prepared session.
struct Asked {
    double t_select = 0, t_recompute = 0, t_decode = 0;
    double cpu_s = 0;    // CPU seconds of asking (all threads)
    int64_t n_gen = 0;
    double nll_mean = 0, score = 0;
    bool context_full = false, measured_recall = false;
    Recall rec;
    std::string answer, rkv_json, op_json, error;
};

// A sample seed as rows write it: 16 hex digits.
std::string seed_hex(uint64_t seed) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)seed);
    return hex;
}

// ["a", "b"] of JSON strings.
std::string json_strings(const std::vector<std::string> &items) {
    std::string j = "[";
    for (size_t i = 0; i < items.size(); ++i) j += (i ? ", " : "") + json::quote(items[i]);
    return j + "]";
}

void load_model(const EvalOptions &o, Prepared &p) {
    const double t = now_s();
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = o.threads;
    mp.backend = o.backend.c_str();
    ok(lctx_model_load(o.model.c_str(), &mp, &p.m), "loading the model");
    p.t_load = now_s() - t;
}

// Builds c's sample into p and tokenizes its prompt with m's prompt format.
void make_prompt(const EvalOptions &o, const Combo &c, const lctx_model *m, Prepared &p) {
    const uint64_t sseed = eval::sample_seed(o.seed, c.task, c.length, c.sample);

    // The prompt: [before][document] | [after = "\n\n" question tail].
    // Perplexity tasks are plain text (language modelling), and the
    // held-out continuation is part of the length: the prompt is fitted
    // to length - answer_tokens.
    double t = now_s();
    p.ppl = eval::is_perplexity_task(c.task);
    const bool plain = p.ppl || o.no_chat || !chat_supported(m);
    if (plain) p.prompt = "plain";
    std::string before, after0;
    if (p.ppl) after0 = "\n\n";   // the continuation starts with its own "\n\n"
    else if (plain) after0 = "\n\n\n";
    else chat_parts(m, "", before, after0);
    const std::string tail = after0.substr(std::min<size_t>(2, after0.size()));
    const int64_t n_fixed =
        int64_t(tokenize(m, before, plain, true).size() + tokenize(m, tail, false, true).size());
    auto count = [&](const std::string &text) { return n_fixed + int64_t(tokenize(m, text, false, false).size()); };
    // The oracle: the same sample (seed of c.length) fitted to its window.
    if (c.oracle) p.oracle_len = std::min(c.length, oracle_window(o, m));
    const int64_t fit_len = c.oracle ? p.oracle_len : c.length;
    const int64_t target = p.ppl ? fit_len - eval::answer_tokens(c.task) : fit_len;
    if (target <= 0)
        throw RunError("length " + std::to_string(c.length) + " leaves no room for the prompt of task " + c.task);
    // A plain prompt ends with the sample's answer prefix: fitted with it.
    p.sample = eval::generate({c.task, sseed, target, c.sample, o.samples, plain && !p.ppl}, count);
    p.have_sample = true;
    const eval::Sample &sample = p.sample;
    p.t_gen = now_s() - t;

    t = now_s();
    std::string after;
    if (p.ppl) after = "\n\n" + sample.question;
    else if (plain) after = "\n\n" + sample.question + "\n" + sample.answer_prefix;
    else chat_parts(m, sample.question, before, after);
    p.doc = tokenize(m, before, plain, true);
    const std::vector<lctx_token> body = tokenize(m, sample.document, false, false);
    p.doc.insert(p.doc.end(), body.begin(), body.end());
    p.query = tokenize(m, after, false, true);
    p.n_doc = int64_t(p.doc.size());
    p.n_query = int64_t(p.query.size());
    p.t_tok = now_s() - t;

    // Perplexity: the first answer_tokens tokens of the continuation.
    if (p.ppl) {
        p.cont = tokenize(m, sample.answers.at(0), false, false);
        if (int64_t(p.cont.size()) > sample.answer_tokens) p.cont.resize(size_t(sample.answer_tokens));
        if (p.cont.empty()) throw RunError("the held-out continuation is empty");
    }
}

// Loads the model, builds the sample and the prompt, creates c's session
// and feeds it the document (build_index included).
void prepare(const EvalOptions &o, const Combo &c, Prepared &p) {
    load_model(o, p);
    make_prompt(o, c, p.m, p);
    lctx_model *m = p.m;
    const eval::Sample &sample = p.sample;

    lctx_session_params sp;
    MethodKnobs knobs;
    combo_session_params(o, c, knobs, sp);
    // FULL and RefreshKV keep the whole input: room for it and the answer.
    if (c.method == LCTX_METHOD_FULL || c.method == LCTX_METHOD_REFRESHKV)
        sp.n_ctx = int32_t(std::min<int64_t>(INT32_MAX, p.n_doc + p.n_query + sample.answer_tokens + 16));
    ok(lctx_session_create(m, &sp, &p.s), "creating the session");
    p.backend = session_backend(p.s);

    double t = now_s();
    const size_t step = size_t(std::max(512, lctx_model_n_ctx_train(m) / 4));
    for (size_t at = 0; at < p.doc.size(); at += step)
        ok(lctx_feed_chunk(p.s, p.doc.data() + at, std::min(step, p.doc.size() - at)), "feed_chunk");
    p.t_feed = now_s() - t;
    t = now_s();
    ok(lctx_build_index(p.s), "build_index");
    p.t_index = now_s() - t;
}

// Asks the sample's question of the prepared session: select, recompute,
// gather recall, then the answer (or the continuation's perplexity).
void ask(const Combo &c, Prepared &p, Asked &a) {
    lctx_model *m = p.m;
    lctx_session *s = p.s;
    const eval::Sample &sample = p.sample;
    lctx_selection *sel = nullptr;
    struct FreeSelection {
        lctx_selection *&sel;
        ~FreeSelection() { lctx_selection_free(sel); }
    } free_sel{sel};
    double t = now_s();
    ok(lctx_select(s, p.query.data(), p.query.size(), &sel), "select");
    a.t_select = now_s() - t;
    t = now_s();
    ok(lctx_recompute(s, sel), "recompute");
    a.t_recompute = now_s() - t;

    // Gather recall, before the answer: what the method kept of the
    // needles for it. A method that attends to a different window at
    // each step (ReAttention) reports the window of the question's last
    // token, the one the first answer token comes from; the others keep
    // their selection. Recurrent baselines score each position with the
    // share of (layer, KV head) caches that keep it.
    if (has_needles(c.task)) {
        const std::vector<int64_t> needle =
            needle_tokens(m, p.doc, sample.needle_texts());
        std::vector<float> keep(p.doc.size(), 0.0f);
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
        a.rec = recall_of(needle, keep, share);
        a.measured_recall = true;
    }

    t = now_s();
    if (p.ppl) {
        // Teacher forcing through the method's decode path: each token's
        // log-probability under the logits the next lctx_decode would
        // sample from, then the token enters the cache as a sampled one.
        double nll = 0;
        for (const lctx_token tok : p.cont) {
            float lp = 0;
            ok(lctx_decode_token(s, tok, &lp), "decode_token");
            nll -= double(lp);
            ++a.n_gen;
        }
        a.t_decode = now_s() - t;
        a.nll_mean = nll / double(a.n_gen);
        a.score = std::exp(a.nll_mean);
        a.answer = detokenize(m, p.cont);
    } else {
        lctx_sampling_params greedy;
        lctx_sampling_default_params(&greedy);
        std::vector<lctx_token> out;
        for (; a.n_gen < sample.answer_tokens; ++a.n_gen) {
            lctx_token tok = -1;
            const lctx_status st = lctx_decode(s, &greedy, &tok);
            if (st == LCTX_ERR_CONTEXT_FULL) {
                a.context_full = true;
                break;
            }
            ok(st, "decode");
            if (lctx_token_is_eog(m, tok)) break;
            out.push_back(tok);
        }
        a.t_decode = now_s() - t;
        a.answer = detokenize(m, out);
        a.score = eval::score(sample.mode, a.answer, sample.answers);
    }
    a.rkv_json = refreshkv_json(m, s);
    a.op_json = op_times_json(s);
}

// The row of one question; `extra`: fields added before the timings.
std::string row_json(const EvalOptions &o, const Combo &c, const Prepared &p, const Asked &a,
                     const std::string &extra) {
    const uint64_t sseed = eval::sample_seed(o.seed, c.task, c.length, c.sample);
    const std::string &error = p.error.empty() ? a.error : p.error;
    std::string j = "{\"method\": " + json::quote(c.method_name) + ", \"task\": " + json::quote(c.task) +
                    params_json(c) + ", \"length\": " + std::to_string(c.length) +
                    ", \"sample\": " + std::to_string(c.sample) + ", \"seed\": " + std::to_string(o.seed);
    j += ", \"sample_seed\": \"" + seed_hex(sseed) + "\", \"n_samples\": " + std::to_string(o.samples);
    j += ", \"prompt\": \"" + p.prompt + "\"";
    if (!p.backend.empty()) j += ", \"backend\": " + json::quote(p.backend);
    if (o.attn == LCTX_PRECISION_BF16) j += ", \"attn\": \"bf16\"";
    if (o.matmul != LCTX_PRECISION_F32) j += std::string(", \"matmul\": \"") + precision_name(o.matmul) + "\"";
    if (o.kv != "f32") j += ", \"kv\": " + json::quote(o.kv);
    if (p.have_sample) {
        const eval::Sample &sample = p.sample;
        j += ", \"depth\": " + fmt_num("%.4f", sample.depth) + ", \"scoring\": \"" +
             eval::score_mode_name(sample.mode) + "\", \"answer_tokens\": " + std::to_string(sample.answer_tokens);
        j += ", \"expected\": " + json_strings(sample.answers);
        if (sample.mode == eval::ScoreMode::kPerplexity && error.empty())
            j += ", \"nll\": " + fmt_num("%.5f", a.nll_mean) + ", \"n_scored\": " + std::to_string(a.n_gen);
    }
    if (a.context_full) j += ", \"context_full\": true";
    if (c.oracle && p.oracle_len > 0) j += ", \"oracle_tokens\": " + std::to_string(p.oracle_len);
    if (a.measured_recall) {
        j += ", \"needle_tokens\": " + std::to_string(a.rec.n_tokens) + ", \"recall\": " +
             (a.rec.n_tokens ? fmt_num("%.4f", double(a.rec.n_kept) / double(a.rec.n_tokens)) : std::string("null"));
        if (a.rec.share >= 0) j += ", \"recall_share\": " + fmt_num("%.4f", a.rec.share);
        // Recall of the sample's needle texts, not its answers (qa's gold fact).
        if (!p.sample.needles.empty()) j += ", \"recall_of\": \"needles\"";
    }
    if (!a.rkv_json.empty()) j += ", \"refreshkv\": " + a.rkv_json;
    if (!a.op_json.empty()) j += ", \"op_times\": " + a.op_json;
    j += ", \"n_input_tokens\": " + std::to_string(p.n_doc + p.n_query) +
         ", \"n_doc_tokens\": " + std::to_string(p.n_doc) + ", \"n_query_tokens\": " + std::to_string(p.n_query);
    j += ", \"score\": " + (error.empty() ? fmt_num("%.4f", a.score) : std::string("null"));
    j += ", \"answer\": " + json::quote(a.answer) + ", \"n_generated\": " + std::to_string(a.n_gen);
    if (a.t_decode > 0 && a.n_gen > 0)
        j += ", \"decode_tokens_per_s\": " + fmt_num("%.2f", double(a.n_gen) / a.t_decode);
    j += extra;
    j += ", \"timings_s\": {\"load\": " + fmt_num("%.3f", p.t_load) + ", \"generate\": " + fmt_num("%.3f", p.t_gen) +
         ", \"tokenize\": " + fmt_num("%.3f", p.t_tok) + ", \"feed\": " + fmt_num("%.3f", p.t_feed) +
         ", \"build_index\": " + fmt_num("%.3f", p.t_index) + ", \"select\": " + fmt_num("%.3f", a.t_select) +
         ", \"recompute\": " + fmt_num("%.3f", a.t_recompute) + ", \"decode\": " + fmt_num("%.3f", a.t_decode) + "}";
    const double enc = p.t_feed + p.t_index;
    j += ", \"encode_tokens_per_s\": " + fmt_num("%.1f", enc > 0 ? double(p.n_doc) / enc : 0.0);
    // CPU time, unlike wall time, does not grow when other work shares the
    // machine; a row on a shared prefill counts that prefill's, as its wall_s does.
    j += ", \"cpu_s\": " + fmt_num("%.3f", p.cpu_s + a.cpu_s);
    j += ", \"peak_rss_mib\": " + fmt_num("%.1f", peak_rss_mib());   // the child's peak so far
    if (!error.empty()) j += ", \"error\": " + json::quote(error);
    return j + "}";
}

// Runs f, turning RunError and lctx::Error from the generator into `error`;
// adds the CPU seconds it took (user + system, every thread of the process)
// to cpu_s.
template <class F> void catching(std::string &error, double &cpu_s, F &&f) {
    auto cpu_now = [] {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    const double c0 = cpu_now();
    try {
        f();
    } catch (const std::exception &e) {
        error = e.what();
    }
    cpu_s += cpu_now() - c0;
}

} // namespace

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

void combo_session_params(const EvalOptions &o, const Combo &c, MethodKnobs &knobs, lctx_session_params &sp) {
    lctx_session_default_params(&sp);
    sp.method = c.method;
    sp.n_threads = o.threads;
    sp.attn_precision = o.attn;
    sp.matmul_precision = o.matmul;
    sp.kv_type = o.kv == "q8" ? LCTX_KV_Q8 : o.kv == "f16" ? LCTX_KV_F16 : LCTX_KV_F32;
    apply_settings(c.settings, knobs);
    knobs.refreshkv.gathered = c.refreshkv_decode;
    knobs.attach(sp);
}

std::string run_combo(const EvalOptions &o, const Combo &c) {
    Prepared p;
    Asked a;
    catching(p.error, p.cpu_s, [&] { prepare(o, c, p); });
    if (p.error.empty()) catching(a.error, a.cpu_s, [&] { ask(c, p, a); });
    return row_json(o, c, p, a, "");
}

bool decodes_over_full_prefill(const Combo &c) { return c.method == LCTX_METHOD_REFRESHKV && !c.oracle; }

void run_shared_prefill(const EvalOptions &o, const std::vector<Combo> &group,
                        const std::function<void(const std::string &)> &emit) {
    Prepared p;
    catching(p.error, p.cpu_s, [&] { prepare(o, group.at(0), p); });
    const std::string shared = ", \"prefill_shared_with\": " + json::quote(group[0].method_name) +
                               ", \"shared_s\": " + fmt_num("%.3f", p.shared_s());
    for (size_t k = 0; k < group.size(); ++k) {
        Asked a;
        if (p.error.empty())
            catching(a.error, a.cpu_s, [&] {
                if (k > 0) {
                    MethodKnobs knobs;
                    apply_settings(group[k].settings, knobs);   // its refreshkv.* settings over the defaults
                    ok(lctx_session_set_refreshkv(p.s, &knobs.refreshkv), "set_refreshkv");
                }
                ask(group[k], p, a);
            });
        emit(row_json(o, group[k], p, a, k > 0 ? shared : ""));
    }
}

std::string dump_prompt(const EvalOptions &o, const Combo &c, const lctx_model *m, const std::string &dir) {
    Prepared p;   // the prompt only: no model of its own, no session
    make_prompt(o, c, m, p);
    const eval::Sample &s = p.sample;
    const std::string name = c.task + "-" + eval::length_label(c.length) + "-" + std::to_string(c.sample);
    const std::string base = dir + "/" + name;
    auto write = [](const std::string &path, const std::string &text) {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        if (!(f << text) || !(f.flush())) throw std::runtime_error("cannot write '" + path + "'");
    };
    write(base + ".document.txt", s.document);
    write(base + ".question.txt", s.question);
    // The command that reads it as this row's runs do, probing every
    // needle (lctx run --probe, docs/methods/reform.md).
    const bool plain = p.prompt == "plain";
    std::string cmd = "lctx run -m " + shell_quote(o.model) + " --method reform --file " +
                      shell_quote(base + ".document.txt") + " --question-file " + shell_quote(base + ".question.txt");
    if (plain) cmd += " --no-chat";
    if (plain && !p.ppl) cmd += " --answer-prefix " + shell_quote(s.answer_prefix);
    for (const auto &t : s.needle_texts())
        if (!p.ppl) cmd += " --probe " + shell_quote(t);
    write(base + ".json",
          "{\"task\": " + json::quote(c.task) + ", \"length\": " + std::to_string(c.length) +
              ", \"sample\": " + std::to_string(c.sample) + ", \"samples\": " + std::to_string(o.samples) +
              ", \"seed\": " + std::to_string(o.seed) + ", \"sample_seed\": \"" + seed_hex(s.seed) + "\"" +
              ", \"depth\": " + json::number(s.depth) +
              ", \"prompt\": " + json::quote(p.prompt) + ", \"n_doc\": " + std::to_string(p.n_doc) +
              ", \"n_query\": " + std::to_string(p.n_query) + ", \"question\": " + json::quote(s.question) +
              ", \"answer_prefix\": " + json::quote(s.answer_prefix) + ", \"answers\": " +
              json_strings(s.answers) + ", \"needles\": " + json_strings(s.needle_texts()) +
              ", \"run\": " + json::quote(cmd) + "}\n");
    return name;
}

} // namespace lctx::cli
