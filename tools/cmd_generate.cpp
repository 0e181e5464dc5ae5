// lctx generate -m MODEL -p TEXT: continues a prompt with the FULL method.
// The continuation goes to stdout as it is generated; timings to stderr.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cli.h"

namespace lctx::cli {

namespace {

std::string chat_prompt(const lctx_model *m, const std::string &user) {
    lctx_chat_message msg{"user", user.c_str()};
    size_t n = 0;
    lctx_status st = lctx_chat_apply(m, &msg, 1, true, nullptr, 0, &n);
    if (st != LCTX_ERR_BUFFER_TOO_SMALL && st != LCTX_OK) check(st, "applying the chat template");
    std::vector<char> out(n + 1);
    check(lctx_chat_apply(m, &msg, 1, true, out.data(), out.size(), &n), "applying the chat template");
    return std::string(out.data(), n);
}

std::vector<lctx_token> parse_ids(const std::string &text) {
    std::vector<lctx_token> ids;
    const char *p = text.c_str();
    while (*p) {
        char *end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p) {
            if (*p == ' ' || *p == ',') { ++p; continue; }
            die("--prompt-ids: '%s' is not a list of integers", text.c_str());
        }
        ids.push_back(static_cast<lctx_token>(v));
        p = end;
    }
    return ids;
}

} // namespace

int cmd_generate(int argc, char **argv) {
    static const char *usage =
        "usage: lctx generate -m MODEL -p TEXT [options]\n"
        "  -p, --prompt TEXT      prompt text (or -f FILE)\n"
        "  -f, --file FILE        read the prompt from a file\n"
        "  -n, --n-predict N      tokens to generate (default 128)\n"
        "  --chat                 wrap the prompt as a user message in the model's chat template\n"
        "  --temp T               temperature (default 0: greedy)\n"
        "  --top-k K  --top-p P  --min-p P  --repeat-penalty R  --repeat-last-n N\n"
        "  --seed S               sampling seed (default 0)\n"
        "  -t, --threads N        threads (default: all cores)\n"
        "  -c, --ctx N            KV cache size (default: prompt + n-predict)\n"
        "  --ignore-eos           keep generating after an end-of-generation token\n"
        "  --prompt-ids \"1 2 3\"   give the prompt as token ids (no BOS added)\n"
        "  --print-ids            print generated token ids (one line) instead of text\n";
    Args a = parse_args(argc, argv,
                        {"--model", "--prompt", "--prompt-ids", "--file", "--n-predict", "--temp", "--top-k", "--top-p", "--min-p",
                         "--repeat-penalty", "--repeat-last-n", "--seed", "--threads", "--ctx"},
                        {"--chat", "--ignore-eos", "--print-ids"},
                        {{"-m", "--model"}, {"-p", "--prompt"}, {"-f", "--file"}, {"-n", "--n-predict"},
                         {"-t", "--threads"}, {"-c", "--ctx"}},
                        usage);
    if (!a.has("--prompt") && !a.has("--file") && !a.has("--prompt-ids"))
        die("generate needs -p TEXT, -f FILE or --prompt-ids IDS\n\n%s", usage);
    std::string prompt = a.has("--file") ? read_file(a.get("--file")) : a.get("--prompt");
    int64_t n_predict = a.get_int("--n-predict", 128);
    if (n_predict < 0) die("--n-predict must be >= 0");

    double t0 = now_s();
    lctx_model *m = load_model(a);
    double t_load = now_s() - t0;

    bool chat = a.on("--chat");
    std::vector<lctx_token> ids;
    if (a.has("--prompt-ids"))
        ids = parse_ids(a.get("--prompt-ids"));
    else
        // Chat text already holds the BOS its template wants (Gemma's <bos>).
        ids = chat ? tokenize(m, chat_prompt(m, prompt), false, true) : tokenize(m, prompt, true, false);
    if (ids.empty()) die("the prompt is empty after tokenization");

    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_FULL;
    sp.n_threads = static_cast<int32_t>(a.get_int("--threads", 0));
    sp.n_ctx = static_cast<int32_t>(a.get_int("--ctx", static_cast<int64_t>(ids.size()) + n_predict + 1));
    lctx_session *s = nullptr;
    check(lctx_session_create(m, &sp, &s), "creating the session");

    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    samp.temperature = static_cast<float>(a.get_float("--temp", 0.0));
    samp.top_k = static_cast<int32_t>(a.get_int("--top-k", 0));
    samp.top_p = static_cast<float>(a.get_float("--top-p", 1.0));
    samp.min_p = static_cast<float>(a.get_float("--min-p", 0.0));
    samp.repeat_penalty = static_cast<float>(a.get_float("--repeat-penalty", 1.0));
    samp.repeat_last_n = static_cast<int32_t>(a.get_int("--repeat-last-n", 64));
    samp.seed = static_cast<uint64_t>(a.get_int("--seed", 0));

    // The prompt is the "question" of an empty document.
    double t1 = now_s();
    check(lctx_build_index(s), "build_index");
    lctx_selection *sel = nullptr;
    check(lctx_select(s, ids.data(), ids.size(), &sel), "select");
    check(lctx_recompute(s, sel), "prompt processing");
    lctx_selection_free(sel);
    double t_prompt = now_s() - t1;

    double t2 = now_s();
    int64_t n_gen = 0;
    for (; n_gen < n_predict; ++n_gen) {
        lctx_token t = -1;
        lctx_status st = lctx_decode(s, &samp, &t);
        if (st == LCTX_ERR_CONTEXT_FULL) break;
        check(st, "decode");
        if (lctx_token_is_eog(m, t) && !a.on("--ignore-eos")) break;
        if (a.on("--print-ids")) {
            std::printf(n_gen ? " %d" : "%d", t);
        } else {
            std::string p = piece(m, t);
            std::fwrite(p.data(), 1, p.size(), stdout);
        }
        std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    double t_gen = now_s() - t2;

    std::fprintf(stderr, "load: %.2f s | prompt: %zu tokens in %.3f s (%.1f tok/s) | generation: %lld tokens in %.3f s "
                 "(%.1f tok/s) | %s\n",
                 t_load, ids.size(), t_prompt, ids.size() / (t_prompt > 0 ? t_prompt : 1e-9),
                 static_cast<long long>(n_gen), t_gen, n_gen / (t_gen > 0 ? t_gen : 1e-9), lctx_build_info());
    lctx_session_free(s);
    lctx_model_free(m);
    return 0;
}

} // namespace lctx::cli
