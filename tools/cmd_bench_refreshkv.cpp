// lctx bench-refreshkv -m MODEL: decode speed of RefreshKV against dense
// decoding over the same prompt cache, as ratios in one run (issue 19;
// docs/methods/refreshkv.md). The prompt (a text file, or random ids) is
// prefilled once; dense greedy decoding of n tokens is timed; then, for each
// RefreshKV configuration, the cache is cut back to the prompt, the partial
// caches rebuilt from the prompt's last token, and the same n tokens are
// teacher-forced through RefreshKV decoding. Reported per configuration:
// tokens/s and the speed ratio to dense, the effective stride, the time in
// partial/full attention, the perplexity of the continuation under each
// decoding and the share of steps whose argmax equals the continuation's
// token. The continuation is dense's own greedy output, or with
// --continuation text the file's next n tokens after the prompt (held-out
// natural text, the paper's perplexity setting; dense is then teacher-forced
// through it too).
// One JSON object on stdout; a table on stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cli.h"
#include "common/error.h"
#include "engine/forward.h"
#include "engine/kv_store.h"
#include "model/model.h"
#include "session/refreshkv.h"

namespace lctx::cli {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    return out;
}

double logprob(const std::vector<float> &lg, int32_t tok) {
    double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
    for (float x : lg) sum += std::exp(double(x) - mx);
    return double(lg[size_t(tok)]) - mx - std::log(sum);
}

int32_t argmax(const std::vector<float> &lg) {
    return int32_t(std::max_element(lg.begin(), lg.end()) - lg.begin());
}

} // namespace

int cmd_bench_refreshkv(int argc, char **argv) {
    const char *usage =
        "usage: lctx bench-refreshkv -m MODEL [options]\n"
        "  --file FILE        prompt text (default: random token ids)\n"
        "  --ctx N            prompt tokens (default 8192; the text is cut or repeated to N)\n"
        "  -n, --n-decode N   decoded tokens (default 128)\n"
        "  --k N              partial-cache slots K (default round(N/8))\n"
        "  --stride LIST      QC strides, e.g. 5,10 (default 10)\n"
        "  --threshold LIST   cosine thresholds s, e.g. 0.8,0.9 (default: the model's); 'fixed' = fixed schedule\n"
        "  -t, --threads N    threads (default: all cores)\n"
        "  --batch N          prefill batch (default 512)\n"
        "  --continuation C   greedy (default: dense's greedy tokens) or text (the file's next n tokens)\n";
    Args a = parse_args(argc, argv, {"--model", "--file", "--ctx", "--n-decode", "--k", "--stride", "--threshold",
                                     "--threads", "--batch", "--continuation"},
                        {}, {{"-m", "--model"}, {"-n", "--n-decode"}, {"-t", "--threads"}}, usage);
    if (!a.has("--model")) die("%s", usage);
    const int64_t N = a.get_int("--ctx", 8192, 2, INT32_MAX), T = a.get_int("--n-decode", 128, 1, INT32_MAX);
    const int64_t B = a.get_int("--batch", 512, 1, INT32_MAX);
    const int64_t K = a.get_int("--k", 0, 1, INT32_MAX);
    int n_threads = threads_arg(a);
    if (n_threads <= 0) n_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    if (N < 2 || T < 1) die("--ctx must be >= 2 and --n-decode >= 1");
    const std::string continuation = a.get("--continuation", "greedy");
    if (continuation != "greedy" && continuation != "text")
        die("--continuation must be 'greedy' or 'text', not '%s'", continuation.c_str());
    const bool text_continuation = continuation == "text";
    if (text_continuation && !a.has("--file")) die("--continuation text needs --file");
    try {
        auto model = Model::load_file(a.get("--model"), true, n_threads);
        const Hparams &hp = model->hparams();
        std::vector<int32_t> prompt, held_out;
        if (a.has("--file")) {
            lctx_model_params mp;
            lctx_model_default_params(&mp);
            mp.n_threads = n_threads;
            lctx_model *m = nullptr;
            check(lctx_model_load(a.get("--model").c_str(), &mp, &m), "loading the model");
            const std::vector<lctx_token> ids = tokenize(m, read_file(a.get("--file")), true, false);
            lctx_model_free(m);
            if (ids.empty()) die("--file has no tokens");
            if (text_continuation) {
                if (int64_t(ids.size()) < N + T)
                    die("--continuation text: --file has %lld tokens, fewer than --ctx + --n-decode = %lld "
                        "(the text is not repeated in this mode)", (long long)ids.size(), (long long)(N + T));
                held_out.assign(ids.begin() + N, ids.begin() + N + T);
            }
            while (int64_t(prompt.size()) < N) prompt.insert(prompt.end(), ids.begin(), ids.end());
            prompt.resize(size_t(N));
        } else {
            std::mt19937 rng(7);
            for (int64_t i = 0; i < N; ++i) prompt.push_back(int32_t(3 + rng() % uint32_t(hp.n_vocab - 3)));
        }
        auto be = make_cpu_backend(n_threads);
        Forward fw(*model, *be);
        KvStore cache(*be, hp, N + T + 1);
        std::vector<float> logits;
        auto run_prompt = [&](int64_t from, AttentionPolicy *pol) {
            std::vector<int32_t> pos;
            for (int64_t at = from; at < N; at += B) {
                const int64_t n = std::min(B, N - at);
                pos.resize(size_t(n));
                std::iota(pos.begin(), pos.end(), int32_t(at));
                ForwardOptions o;
                o.policy = pol;
                fw.run(prompt.data() + at, pos.data(), n, cache, o, logits);
            }
        };
        auto t0 = std::chrono::steady_clock::now();
        run_prompt(0, nullptr);
        const double t_prefill = since(t0);
        const std::vector<float> prompt_logits = logits;

        // Dense greedy decoding.
        std::vector<int32_t> gen;
        double dense_nll = 0;
        t0 = std::chrono::steady_clock::now();
        int64_t dense_agree = 0;
        for (int64_t t = 0; t < T; ++t) {
            const int32_t tok = text_continuation ? held_out[size_t(t)] : argmax(logits);
            dense_agree += argmax(logits) == tok;
            dense_nll -= logprob(logits, tok);
            gen.push_back(tok);
            const int32_t p = int32_t(N + t);
            ForwardOptions o;
            fw.run(&tok, &p, 1, cache, o, logits);
        }
        const double t_dense = since(t0);
        const double dense_tps = double(T) / t_dense;
        std::fprintf(stderr, "prompt %lld tokens, prefill %.1f s; dense decode %lld tokens %.2f s (%.2f tok/s), "
                     "ppl %.3f of the %s continuation (argmax agreement %.3f)\n", (long long)N, t_prefill,
                     (long long)T, t_dense, dense_tps, std::exp(dense_nll / double(T)), continuation.c_str(),
                     double(dense_agree) / double(T));
        std::fprintf(stderr, "%-8s %-8s %6s %8s %8s %7s %8s %8s %8s %8s %7s\n", "sched", "s", "S", "K", "tok/s",
                     "speedup", "eff_str", "full_s", "part_s", "ppl", "agree");

        std::string rows;
        const std::vector<std::string> strides = split(a.get("--stride", "10"));
        const std::vector<std::string> thresholds =
            split(a.get("--threshold", std::to_string(refreshkv_default_threshold(hp))));
        for (const std::string &ss : strides)
            for (const std::string &th : thresholds) {
                RefreshKvConfig cfg;
                cfg.partial = K;
                cfg.stride = int32_t(std::stol(ss));
                cfg.fixed = th == "fixed";
                cfg.threshold = cfg.fixed ? 0.0f : std::stof(th);
                RefreshKvPolicy pol(*be, hp, cache.type(), cfg);
                // Back to the prompt; its last token again, now initialising C_p.
                cache.truncate(N - 1);
                pol.begin_prompt(N);
                run_prompt(N - 1, &pol);
                double nll = 0;
                int64_t agree = 0;
                t0 = std::chrono::steady_clock::now();
                for (int64_t t = 0; t < T; ++t) {
                    nll -= logprob(logits, gen[size_t(t)]);
                    agree += argmax(logits) == gen[size_t(t)];
                    const int32_t p = int32_t(N + t);
                    pol.begin_step();
                    ForwardOptions o;
                    o.policy = &pol;
                    fw.run(&gen[size_t(t)], &p, 1, cache, o, logits);
                }
                const double dt = since(t0), tps = double(T) / dt;
                const RefreshKvStats &st = pol.stats();
                std::fprintf(stderr, "%-8s %-8s %6s %8lld %8.2f %7.2f %8.2f %8.2f %8.2f %8.3f %7.3f\n",
                             cfg.fixed ? "fixed" : "dynamic", cfg.fixed ? "-" : th.c_str(), ss.c_str(),
                             (long long)st.partial, tps, tps / dense_tps, st.effective_stride(), st.full_s,
                             st.partial_s, std::exp(nll / double(T)), double(agree) / double(T));
                std::string lf, lp;
                for (size_t l = 0; l < st.layer_full.size(); ++l) {
                    if (l) {
                        lf += ',';
                        lp += ',';
                    }
                    lf += std::to_string(st.layer_full[l]);
                    lp += std::to_string(st.layer_partial[l]);
                }
                char buf[1024];
                std::snprintf(buf, sizeof buf,
                              "%s{\"schedule\": \"%s\", \"threshold\": %s, \"stride\": %s, \"partial\": %lld, "
                              "\"tokens_per_s\": %.3f, \"speedup\": %.3f, \"effective_stride\": %.3f, "
                              "\"full_attention_s\": %.3f, \"partial_attention_s\": %.3f, \"refresh_s\": %.3f, "
                              "\"ppl_of_continuation\": %.4f, \"argmax_agreement\": %.4f, ",
                              rows.empty() ? "" : ", ", cfg.fixed ? "fixed" : "dynamic",
                              cfg.fixed ? "null" : th.c_str(), ss.c_str(), (long long)st.partial, tps,
                              tps / dense_tps, st.effective_stride(), st.full_s, st.partial_s, st.refresh_s,
                              std::exp(nll / double(T)), double(agree) / double(T));
                rows += buf + ("\"layer_full\": [" + lf + "], \"layer_partial\": [" + lp + "]}");
            }
        std::printf("{\"model\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"prompt_tokens\": %lld, "
                    "\"decode_tokens\": %lld, \"continuation\": \"%s\", \"prefill_s\": %.3f, "
                    "\"dense_tokens_per_s\": %.3f, \"dense_ppl\": %.4f, \"dense_argmax_agreement\": %.4f, "
                    "\"runs\": [%s]}\n",
                    a.get("--model").c_str(), be->description().c_str(), n_threads, (long long)N, (long long)T,
                    continuation.c_str(), t_prefill, dense_tps, std::exp(dense_nll / double(T)),
                    double(dense_agree) / double(T), rows.c_str());
    } catch (const Error &e) {
        die("%s", e.what());
    }
    return 0;
}

} // namespace lctx::cli
