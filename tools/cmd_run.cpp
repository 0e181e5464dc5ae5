// lctx run -m MODEL --file DOC --question TEXT: answers a question about a
// long document. REFORM by default (encode once, gather, recompute); FULL and
// a head+tail truncation baseline for comparison. Answer on stdout; with
// --json one JSON object with the answer, spans, timings and memory.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "common/json.h"

namespace lctx::cli {

namespace {

struct Progress {
    bool show;
    double t0;
    int64_t total;
    void update(int64_t done) {
        if (!show) return;
        // No rate before a quarter second: a few tokens over microseconds is noise.
        double dt = now_s() - t0, rate = dt > 0.25 ? done / dt : 0;
        double eta = rate > 0 ? (total - done) / rate : 0;
        int w = 30, fill = total > 0 ? int(w * double(done) / double(total)) : w;
        std::fprintf(stderr, "\rencoding [%.*s%*s] %lld/%lld tokens  %.0f tok/s  ETA %.0f s ", fill,
                     "##############################", w - fill, "", (long long)done, (long long)total, rate, eta);
        std::fflush(stderr);
    }
    void end() { if (show) std::fputc('\n', stderr); }
};

} // namespace

int cmd_run(int argc, char **argv) {
    const std::string usage_text = std::string(
        "usage: lctx run -m MODEL --file DOC --question TEXT [options]\n"
        "  --file FILE          the document (UTF-8 text)\n"
        "  --question TEXT      the question (or --question-file FILE)\n"
        "  --questions FILE     several questions about the document, one per line: the document is read\n"
        "                       once, each question answered from it (one JSON line each with --json)\n"
        "  --method M           the method (default reform):\n") + method_usage("                         ") +
        "  --budget N           REFORM: recompute budget (default n_ctx_train/2); ILRe: gathered tokens\n"
        "                       (min(4096, n_ctx_train/2)); baselines: kv_budget\n"
        "                       (truncate: tokens kept, n_ctx_train/2; others: KV slots, n_ctx_train/4)\n"
        "  --chunk N            tokens per encoding step (default n_ctx_train/4)\n"
        "  --working N          REFORM working-cache budget (default = chunk)\n"
        "  --heads FILE         REFORM head profile (JSON from 'lctx heads')\n"
        "  --layer N            ILRe retrieval layer (default: the model's profile)\n"
        "  --window N           ILRe window of the shallow layers (default chunk/2)\n"
        "  --no-dca             ILRe: no bounded distances past the trained context (DCA is on by default)\n"
        "  --query-tokens N     ILRe: score with the last N tokens of the question only (default: all)\n"
        "  --ilre-profile FILE  ILRe profile with the retrieval layer (JSON from 'lctx heads --ilre')\n"
        "  --global N, --local N, --span N, --top-k N, --spans N\n"
        "                       ReAttention: G, L, m, k, k' (defaults from the trained context: 32, n_ctx_train/2,\n"
        "                       32, 4, (n_ctx_train - G - L)/m; --spans 0: global + local only)\n"
        "  --tile-max           ReAttention: the reference kernel's approximate top-k (one key per 128)\n"
        "  --reuse N            ReAttention: decode steps a layer's selection is reused (default 1)\n"
        "  --store-ram MIB      ReAttention: K/V store in RAM up to MIB, then in a file (default: RAM only)\n"
        "  --store-dir DIR      ReAttention: directory of that file (default $TMPDIR or /tmp)\n"
        "  --kv-type T          element type of KV caches and stores: f32 (default) or f16\n"
        "  --save-index FILE    save the REFORM or ILRe index after encoding\n"
        "  --index FILE         load a saved REFORM or ILRe index instead of reading --file\n"
        "  --decode D           REFORM, ILRe: dense (default) or refreshkv (RefreshKV over the recomputed cache)\n"
        "  --rkv-k N            RefreshKV: partial-cache slots K (default: prompt tokens / 8)\n"
        "  --rkv-stride N       RefreshKV: query-check (or refresh) stride S (default 10)\n"
        "  --rkv-threshold X    RefreshKV: cosine threshold s (default: the model's calibrated value)\n"
        "  --rkv-fixed          RefreshKV: fixed schedule (every layer refreshes every S steps)\n"
        "  --rkv-max-run N      RefreshKV: also refresh a layer after N steps without one (default: never)\n"
        "  -n, --n-predict N    answer tokens (default 64)\n"
        "  -c, --ctx N          decode context (default n_ctx_train; FULL: whole input)\n"
        "  -t, --threads N      threads (default: all cores)\n"
        "  --json               print one JSON object (answer, spans, timings, tok/s, peak RSS)\n"
        "  --progress           progress bar on stderr even when it is not a terminal\n"
        "  --no-chat            no chat template: feed the document, then the question as is\n";
    const char *usage = usage_text.c_str();
    Args a = parse_args(argc, argv,
                        {"--model", "--file", "--question", "--question-file", "--questions", "--method", "--budget",
                         "--chunk",
                         "--working", "--heads", "--save-index", "--index", "--n-predict", "--ctx", "--threads", "--layer",
                         "--window", "--ilre-profile", "--query-tokens", "--global", "--local", "--span", "--top-k",
                         "--spans", "--reuse", "--store-ram", "--store-dir", "--kv-type", "--decode", "--rkv-k",
                         "--rkv-stride", "--rkv-threshold", "--rkv-max-run"},
                        {"--json", "--progress", "--no-chat", "--no-dca", "--tile-max", "--rkv-fixed"},
                        {{"-m", "--model"}, {"-n", "--n-predict"}, {"-c", "--ctx"}, {"-t", "--threads"}}, usage);
    lctx_method method_id = LCTX_METHOD_REFORM;
    if (!parse_method(a.get("--method", "reform"), method_id))
        die("--method must be one of: %s", method_cli_names().c_str());
    const std::string method = method_cli_name(method_id);
    if (!a.has("--question") && !a.has("--question-file") && !a.has("--questions"))
        die("run needs --question TEXT\n\n%s", usage);
    if (!a.has("--file") && !a.has("--index")) die("run needs --file DOC or --index FILE\n\n%s", usage);
    if (a.has("--index") && method_id != LCTX_METHOD_REFORM && method_id != LCTX_METHOD_ILRE)
        die("--index works with --method reform or ilre (the file's method is used)");
    // --questions FILE: one question per line, all about the same document,
    // which is read once; one answer (one JSON line with --json) each.
    std::vector<std::string> questions;
    if (a.has("--questions")) {
        std::string text = read_file(a.get("--questions"));
        for (size_t at = 0; at < text.size();) {
            size_t end = text.find('\n', at);
            if (end == std::string::npos) end = text.size();
            std::string line = text.substr(at, end - at);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (!line.empty()) questions.push_back(line);
            at = end + 1;
        }
        if (questions.empty()) die("--questions %s holds no question", a.get("--questions").c_str());
    } else {
        questions.push_back(a.has("--question-file") ? read_file(a.get("--question-file")) : a.get("--question"));
    }
    const std::string question = questions[0];
    const int64_t n_predict = a.get_int("--n-predict", 64);
    const bool json = a.on("--json");

    double t = now_s();
    lctx_model *m = load_model(a);
    const double t_load = now_s() - t;
    const int32_t n_train = lctx_model_n_ctx_train(m);

    // Tokens: [before doc] [doc] | [after doc] = query.
    t = now_s();
    std::string before, after;
    if (a.on("--no-chat")) after = "\n\n" + question + "\n";
    else chat_parts(m, question, before, after);
    std::vector<lctx_token> doc;
    if (!a.has("--index")) {
        doc = tokenize(m, before, a.on("--no-chat"), true);
        std::vector<lctx_token> body = tokenize(m, read_file(a.get("--file")), false, false);
        doc.insert(doc.end(), body.begin(), body.end());
    }
    std::vector<lctx_token> query = tokenize(m, after, false, true);
    size_t max_query = query.size();   // FULL's cache holds the longest question
    for (size_t qi = 1; qi < questions.size(); ++qi) {
        std::string b2, a2;
        if (a.on("--no-chat")) a2 = "\n\n" + questions[qi] + "\n";
        else chat_parts(m, questions[qi], b2, a2);
        max_query = std::max(max_query, tokenize(m, a2, false, true).size());
    }
    const double t_tok = now_s() - t;

    const int64_t budget = a.get_int("--budget", 0);
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = method_id;
    sp.n_threads = static_cast<int32_t>(a.get_int("--threads", 0));
    const int64_t full_ctx = int64_t(doc.size() + max_query) + n_predict + 1;
    const bool whole = method_id == LCTX_METHOD_FULL || method_id == LCTX_METHOD_REFRESHKV;
    sp.n_ctx = static_cast<int32_t>(a.get_int("--ctx", whole ? full_ctx : 0));
    lctx_reform_params rp;
    lctx_reform_default_params(&rp);
    lctx_kv_params kv;
    lctx_kv_default_params(&kv);
    rp.recompute = static_cast<int32_t>(method_id == LCTX_METHOD_REFORM ? budget : 0);
    kv.budget = static_cast<int32_t>(method_id == LCTX_METHOD_REFORM ? 0 : budget);
    rp.chunk = static_cast<int32_t>(a.get_int("--chunk", 0));
    kv.chunk = rp.chunk;
    rp.budget = static_cast<int32_t>(a.get_int("--working", 0));
    const std::string heads = a.get("--heads");
    rp.heads_path = heads.empty() ? nullptr : heads.c_str();
    lctx_ilre_params ip;
    lctx_ilre_default_params(&ip);
    if (method_id == LCTX_METHOD_ILRE) {
        ip.budget = static_cast<int32_t>(budget);
        ip.chunk = rp.chunk;
        ip.retrieval_layer = static_cast<int32_t>(a.get_int("--layer", -1));
        ip.window = static_cast<int32_t>(a.get_int("--window", 0));
        ip.dca = !a.on("--no-dca");
        ip.query_tokens = static_cast<int32_t>(a.get_int("--query-tokens", 0));
    }
    const std::string ilre_profile = a.get("--ilre-profile");
    ip.profile_path = ilre_profile.empty() ? nullptr : ilre_profile.c_str();
    auto int32_opt = [&](const char *name, int64_t def) -> int32_t {
        const int64_t v = a.get_int(name, def);
        if (v < INT32_MIN || v > INT32_MAX) die("%s %lld is out of range", name, (long long)v);
        return static_cast<int32_t>(v);
    };
    lctx_reattention_params ap;
    lctx_reattention_default_params(&ap);
    ap.n_global = int32_opt("--global", -1);
    ap.n_local = int32_opt("--local", -1);
    ap.span = int32_opt("--span", -1);
    ap.top_k = int32_opt("--top-k", -1);
    ap.n_spans = int32_opt("--spans", -1);
    ap.chunk = a.has("--chunk") ? rp.chunk : -1;
    ap.reuse_steps = int32_opt("--reuse", 1);
    ap.tile_max = a.on("--tile-max");
    ap.store_max_ram = static_cast<uint64_t>(std::max<int64_t>(0, a.get_int("--store-ram", 0))) << 20;
    const std::string store_dir = a.get("--store-dir");
    ap.store_dir = store_dir.empty() ? nullptr : store_dir.c_str();
    const std::string kv_type = a.get("--kv-type", "f32");
    if (kv_type == "f16") sp.kv_type = LCTX_KV_F16;
    else if (kv_type != "f32") die("--kv-type must be f32 or f16");
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
    rkp.partial = static_cast<int32_t>(a.get_int("--rkv-k", 0));
    rkp.stride = static_cast<int32_t>(a.get_int("--rkv-stride", 0));
    rkp.threshold = static_cast<float>(a.get_float("--rkv-threshold", 0.0));
    rkp.schedule = a.on("--rkv-fixed") ? LCTX_REFRESHKV_FIXED : LCTX_REFRESHKV_DYNAMIC;
    rkp.max_partial_run = static_cast<int32_t>(a.get_int("--rkv-max-run", 0));
    sp.refreshkv = &rkp;

    lctx_session *s = nullptr;
    double t_encode = 0, t_index = 0;
    int64_t n_input = 0;
    if (a.has("--index")) {
        t = now_s();
        check(lctx_session_load_index(m, a.get("--index").c_str(), &sp, &s), "loading the index");
        t_index = now_s() - t;
        n_input = lctx_session_n_fed(s);
    } else {
        check(lctx_session_create(m, &sp, &s), "creating the session");
        n_input = static_cast<int64_t>(doc.size());
        Progress bar{a.on("--progress") || (!json && isatty(2)), now_s(), n_input};
        t = now_s();
        const size_t step = rp.chunk > 0 ? size_t(rp.chunk) : size_t(std::max(512, n_train / 4));
        for (size_t at = 0; at < doc.size(); at += step) {
            const size_t n = std::min(step, doc.size() - at);
            check(lctx_feed_chunk(s, doc.data() + at, n), "encoding the document");
            bar.update(static_cast<int64_t>(at + n));
        }
        check(lctx_build_index(s), "build_index");
        bar.end();
        t_encode = now_s() - t;
        if (a.has("--save-index")) {
            t = now_s();
            check(lctx_index_save(s, a.get("--save-index").c_str()), "saving the index");
            t_index = now_s() - t;
        }
    }

    for (size_t qi = 0; qi < questions.size(); ++qi) {
    if (qi > 0) {   // the next question's tokens (the document part of the template is the same)
        std::string b2;
        after.clear();
        if (a.on("--no-chat")) after = "\n\n" + questions[qi] + "\n";
        else chat_parts(m, questions[qi], b2, after);
        query = tokenize(m, after, false, true);
    }
    t = now_s();
    lctx_selection *sel = nullptr;
    check(lctx_select(s, query.data(), query.size(), &sel), "select");
    const double t_select = now_s() - t;
    std::vector<int64_t> pos(static_cast<size_t>(lctx_selection_size(sel)));
    lctx_selection_positions(sel, pos.data(), static_cast<int64_t>(pos.size()));
    t = now_s();
    check(lctx_recompute(s, sel), "recompute");
    const double t_recompute = now_s() - t;
    lctx_selection_free(sel);

    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    t = now_s();
    std::string answer;
    int64_t n_gen = 0;
    for (; n_gen < n_predict; ++n_gen) {
        lctx_token tok = -1;
        lctx_status st = lctx_decode(s, &samp, &tok);
        if (st == LCTX_ERR_CONTEXT_FULL) break;
        check(st, "decode");
        if (lctx_token_is_eog(m, tok)) break;
        std::string p = piece(m, tok);
        answer += p;
        if (!json) {
            std::fwrite(p.data(), 1, p.size(), stdout);
            std::fflush(stdout);
        }
    }
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
    std::string rkv_json = "null";
    lctx_refreshkv_stats rst{};
    rst.struct_size = sizeof rst;
    std::vector<int64_t> layer_full(static_cast<size_t>(lctx_model_n_layer(m))), layer_partial(layer_full.size());
    const bool has_rkv = lctx_session_refreshkv_stats(s, &rst, layer_full.data(), layer_partial.data(),
                                                      layer_full.size()) == LCTX_OK;
    if (has_rkv) {
        auto list = [](const std::vector<int64_t> &v) {
            std::string o = "[";
            for (size_t i = 0; i < v.size(); ++i) o += (i ? "," : "") + std::to_string(v[i]);
            return o + "]";
        };
        char buf[512];
        std::snprintf(buf, sizeof buf, "{\"partial\": %lld, \"n_steps\": %lld, \"n_full\": %lld, \"n_partial\": %lld, "
                      "\"effective_stride\": %.3f, \"full_attention_s\": %.4f, \"partial_attention_s\": %.4f, "
                      "\"refresh_s\": %.4f, ", (long long)rst.partial, (long long)rst.n_steps, (long long)rst.n_full,
                      (long long)rst.n_partial, rst.effective_stride, rst.full_attention_s, rst.partial_attention_s,
                      rst.refresh_s);
        rkv_json = buf + ("\"layer_full\": " + list(layer_full) + ", \"layer_partial\": " + list(layer_partial) + "}");
    }
    if (json) {
        std::string sp_json = "[";
        for (size_t i = 0; i < spans.size(); ++i)
            sp_json += (i ? ",[" : "[") + std::to_string(spans[i].first) + "," + std::to_string(spans[i].second) + "]";
        sp_json += "]";
        std::printf("{\"answer\": %s, \"method\": %s, \"n_input_tokens\": %lld, \"n_query_tokens\": %zu, "
                    "\"n_selected\": %zu, \"selected_spans\": %s, \"timings_s\": {\"load\": %.3f, \"tokenize\": %.3f, "
                    "\"encode\": %.3f, \"index_io\": %.3f, \"select\": %.3f, \"recompute\": %.3f, \"decode\": %.3f}, "
                    "\"encode_tokens_per_s\": %.1f, \"n_generated\": %lld, \"decode_tokens_per_s\": %.2f, "
                    "\"peak_rss_mib\": %.1f, \"refreshkv\": %s, \"question_index\": %zu}\n",
                    json::quote(answer).c_str(), json::quote(method).c_str(), (long long)n_input, query.size(), pos.size(),
                    sp_json.c_str(), t_load, t_tok, t_encode, t_index, t_select, t_recompute, t_decode, tok_s,
                    (long long)n_gen, t_decode > 0 ? n_gen / t_decode : 0.0, peak_rss_mib(), rkv_json.c_str(), qi);
        std::fflush(stdout);
    } else {
        std::fprintf(stderr, "%s: %lld input tokens, encode %.2f s (%.0f tok/s), select %.3f s, recompute %zu+%zu "
                     "tokens %.2f s, decode %lld tokens %.2f s, peak RSS %.0f MiB\n", method.c_str(),
                     (long long)n_input, t_encode, tok_s, t_select, pos.size(), query.size(), t_recompute,
                     (long long)n_gen, t_decode, peak_rss_mib());
        if (has_rkv)
            std::fprintf(stderr, "refreshkv: K %lld, %lld steps, effective stride %.2f, full/partial layer steps "
                         "%lld/%lld, attention full %.3f s (refresh %.3f s), partial %.3f s\n", (long long)rst.partial,
                         (long long)rst.n_steps, rst.effective_stride, (long long)rst.n_full, (long long)rst.n_partial,
                         rst.full_attention_s, rst.refresh_s, rst.partial_attention_s);
    }
    }   // questions
    lctx_session_free(s);
    lctx_model_free(m);
    return 0;
}

} // namespace lctx::cli
