// lctx generate -m MODEL -p TEXT: continues a prompt with the FULL method.
// The continuation goes to stdout as it is generated; timings to stderr.
#include <cstdio>
#include <cerrno>
#include <cstdint>
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
        errno = 0;
        long long v = std::strtoll(p, &end, 10);
        if (end == p) {
            if (*p == ' ' || *p == ',') { ++p; continue; }
            die("--prompt-ids: '%s' is not a list of integers", text.c_str());
        }
        if (errno == ERANGE || v < 0 || v > INT32_MAX) {
            while (*p == ' ') ++p;   // strtoll skipped the blanks before the number; the message shows it alone
            die("--prompt-ids: %.*s is out of range: expected token ids from 0 to %d", int(end - p), p, INT32_MAX);
        }
        ids.push_back(static_cast<lctx_token>(v));
        p = end;
    }
    return ids;
}

} // namespace

int cmd_generate(int argc, char **argv) {
    static const std::string usage_text = std::string(
        "usage: lctx generate -m MODEL -p TEXT [options]\n"
        "  -p, --prompt TEXT      prompt text (or -f FILE); UTF-8, not empty\n"
        "  -f, --file FILE        read the prompt from a file (invalid UTF-8 is refused with its byte offset)\n"
        "  --lossy                accept invalid UTF-8 in the prompt: each invalid sequence becomes U+FFFD\n"
        "  -n, --n-predict N      tokens to generate, >= 0 (default 128)\n"
        "  --chat                 wrap the prompt as a user message in the model's chat template\n") +
        kSamplingUsage +
        "  -t, --threads N        threads, >= 1 (default: all cores)\n"
        "  -c, --ctx N            KV cache size, >= 1 (default: prompt + n-predict)\n"
        "  --ignore-eos           keep generating after an end-of-generation token\n"
        "  --prompt-ids \"1 2 3\"   give the prompt as token ids (no BOS added)\n"
        "  --print-ids            print generated token ids (one line) instead of text\n";
    const char *usage = usage_text.c_str();
    Args a = parse_args(argc, argv,
                        concat({"--model", "--prompt", "--prompt-ids", "--file", "--n-predict", "--threads", "--ctx"},
                               kSamplingFlags),
                        {"--chat", "--ignore-eos", "--print-ids", "--lossy"},
                        {{"-m", "--model"}, {"-p", "--prompt"}, {"-f", "--file"}, {"-n", "--n-predict"},
                         {"-t", "--threads"}, {"-c", "--ctx"}},
                        usage);
    if (!a.has("--prompt") && !a.has("--file") && !a.has("--prompt-ids"))
        die("generate needs -p TEXT, -f FILE or --prompt-ids IDS\n\n%s", usage);
    if (!a.positional.empty()) die("unexpected argument '%s'\n\n%s", a.positional[0].c_str(), usage);
    std::string prompt;
    if (!a.has("--prompt-ids"))
        prompt = a.has("--file") ? check_text(read_file(a.get("--file")), "--file " + a.get("--file"), a.on("--lossy"))
                                 : check_text(a.get("--prompt"), "--prompt", a.on("--lossy"));
    const int64_t n_predict = a.get_int("--n-predict", 128, 0, INT32_MAX);
    const int32_t ctx_arg = a.get_i32("--ctx", 0, 1);
    const lctx_sampling_params samp = sampling_params(a);

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
    sp.n_threads = threads_arg(a);
    const int64_t want_ctx = static_cast<int64_t>(ids.size()) + n_predict + 1;
    if (!a.has("--ctx") && want_ctx > INT32_MAX) die("-n %lld: the context would pass 2^31 - 1 tokens", (long long)n_predict);
    sp.n_ctx = a.has("--ctx") ? ctx_arg : static_cast<int32_t>(want_ctx);
    lctx_session *s = nullptr;
    check(lctx_session_create(m, &sp, &s), "creating the session");


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
