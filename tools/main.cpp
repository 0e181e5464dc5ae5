// `lctx` command line: one subcommand per file (cmd_*.cpp).
#include <cstdio>
#include <cstring>

#include "cli.h"

static const char *kUsage =
    "usage: lctx COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  inspect MODEL                  print GGUF metadata and the tensor table\n"
    "  tokenize -m MODEL TEXT         print token ids on one line\n"
    "  generate -m MODEL -p TEXT      continue a prompt (answer on stdout, timings on stderr)\n"
    "  bench -m MODEL                 prefill/decode throughput as JSON (--profile: per-op times)\n"
    "  bench-refreshkv -m MODEL       RefreshKV vs dense decode speed over one prompt cache (JSON)\n"
    "  run -m MODEL --file DOC --question TEXT   answer a question about a long document (REFORM)\n"
    "  heads -m MODEL                 measure a REFORM head profile (JSON)\n"
    "  eval -m MODEL --methods M,...  RULER-style tasks over methods and lengths (docs/eval.md)\n"
    "  serve -m MODEL                 OpenAI-compatible HTTP server (chat completions, long documents)\n"
    "  version                        print the library version and build\n"
    "\n"
    "Run 'lctx COMMAND --help' for the options of a command.\n";

// The library logs through a callback only; the command line shows its
// warnings and errors (a backend that fell back to the CPU, and why).
static void log_to_stderr(lctx_log_level level, const char *message, void *) {
    std::fprintf(stderr, "lctx: %s%s\n", level >= LCTX_LOG_ERROR ? "error: " : "", message);
}

int main(int argc, char **argv) {
    lctx_log_set(log_to_stderr, LCTX_LOG_WARN, nullptr);
    if (argc < 2) {
        std::fputs(kUsage, stderr);
        return 1;
    }
    lctx::cli::add_backend_module_dirs();
    const char *cmd = argv[1];
    if (!std::strcmp(cmd, "inspect")) return lctx::cli::cmd_inspect(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "tokenize")) return lctx::cli::cmd_tokenize(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "generate")) return lctx::cli::cmd_generate(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "bench")) return lctx::cli::cmd_bench(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "bench-refreshkv")) return lctx::cli::cmd_bench_refreshkv(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "eval")) return lctx::cli::cmd_eval(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "run")) return lctx::cli::cmd_run(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "heads")) return lctx::cli::cmd_heads(argc - 2, argv + 2);
    if (!std::strcmp(cmd, "serve")) {
#ifdef LCTX_HAVE_SERVE
        return lctx::cli::cmd_serve(argc - 2, argv + 2);
#else
        std::fputs("lctx: this build has no 'serve': cpp-httplib and nlohmann-json were not found when it was "
                   "configured (apt-get install libcpp-httplib-dev nlohmann-json3-dev, then configure again)\n",
                   stderr);
        return 1;
#endif
    }
    if (!std::strcmp(cmd, "version") || !std::strcmp(cmd, "--version")) {
        std::printf("%s\n", lctx_build_info());
        return 0;
    }
    if (!std::strcmp(cmd, "-h") || !std::strcmp(cmd, "--help") || !std::strcmp(cmd, "help")) {
        std::fputs(kUsage, stdout);
        return 0;
    }
    std::fprintf(stderr, "lctx: unknown command '%s'\n\n%s", cmd, kUsage);
    return 1;
}
