// lctx serve -m MODEL: an OpenAI-compatible HTTP server over the public C API
// (chat completions, streamed or not, and long documents encoded once and
// questioned by id). The endpoints are in serve/http_api.h, README.md has
// their documentation.
#include <dirent.h>
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "cli.h"
#include "serve/document_store.h"
#include "serve/engine.h"
#include "serve/http_api.h"

namespace lctx::cli {

namespace {

// The model's id in /v1/models and requests: the file name without its
// directory and ".gguf" (unless --alias names it).
std::string model_id_of(const std::string &path) {
    std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    if (base.size() > 5 && base.compare(base.size() - 5, 5, ".gguf") == 0) base.resize(base.size() - 5);
    return base;
}

void remove_tree(const std::string &dir) {
    // Only the files this server writes (<id>.index, <id>.json, their .tmp) are in a directory it made.
    if (DIR *d = opendir(dir.c_str())) {
        while (dirent *e = readdir(d)) {
            const std::string n = e->d_name;
            if (n != "." && n != "..") std::remove((dir + "/" + n).c_str());
        }
        closedir(d);
    }
    rmdir(dir.c_str());
}

} // namespace

int cmd_serve(int argc, char **argv) {
    const std::string usage_text =
        "usage: lctx serve -m MODEL [options]\n"
        "An OpenAI-compatible HTTP server (README.md, section \"lctx serve\"):\n"
        "  GET  /v1/models                 the model served\n"
        "  POST /v1/chat/completions       chat completions (\"stream\": true: server-sent events); a request with\n"
        "                                  \"document_id\" asks about an uploaded document\n"
        "  POST /v1/documents              upload a long document (text body, or JSON {\"text\", \"method\", \"name\"});\n"
        "                                  it is encoded once in the background (REFORM by default)\n"
        "  GET  /v1/documents/ID           its progress and state;  DELETE /v1/documents/ID removes it\n"
        "  GET  /health\n"
        "options:\n"
        "  -m, --model FILE     the GGUF model (required)\n"
        "  --alias NAME         the model's id in requests (default: the file name without .gguf)\n"
        "  --host HOST          address to listen on (default 127.0.0.1; 0.0.0.0: every interface)\n"
        "  --port N             port, 0..65535 (default 8080; 0: any free port, printed at start)\n"
        "  --parallel N         worker slots: requests that run the model at once, >= 1 (default 1)\n"
        "  --queue N            requests that may wait for a slot; past it: 503 (default 16)\n"
        "  --timeout S          seconds a request may take, the wait for a slot included; past it: 504\n"
        "                       (default 300)\n"
        "  -t, --threads N      threads of each session (default: the cores / --parallel)\n"
        "  --max-memory MIB     memory bound of each session (a request, a document's encoding or a question);\n"
        "                       past it the request fails with 400 memory_limit_exceeded (default 4096; 0: none)\n"
        "  --max-body BYTES     largest request body; past it: 413 (default 33554432, 32 MiB)\n"
        "  --max-tokens N       answer tokens when a request sets no max_tokens (default 512)\n"
        "  --data-dir DIR       where encoded documents are kept (REFORM and ILRe: saved, found again at the\n"
        "                       next start); created if missing. Default: a temporary directory removed at exit\n"
        "  --max-documents N    documents held at once; past it: 429 (default 64)\n"
        "SIGINT or SIGTERM stops the server: running requests are cancelled, the encoder stops, and it exits 0.\n";
    const char *usage = usage_text.c_str();
    Args a = parse_args(argc, argv,
                        {"--model", "--alias", "--host", "--port", "--parallel", "--queue", "--timeout", "--threads",
                         "--max-memory", "--max-body", "--max-tokens", "--data-dir", "--max-documents"},
                        {}, {{"-m", "--model"}, {"-t", "--threads"}}, usage);
    if (!a.positional.empty()) die("unexpected argument '%s'\n\n%s", a.positional[0].c_str(), usage);
    if (!a.has("--model")) die("serve needs -m MODEL\n\n%s", usage);
    serve::ApiOptions api;
    const std::string host = a.get("--host", "127.0.0.1");
    const int port = a.get_i32("--port", 8080, 0, 65535, "0: any free port");
    api.parallel = a.get_i32("--parallel", 1, 1, 1024);
    api.queue = a.get_i32("--queue", 16, 0, 100000);
    api.timeout_s = a.get_float("--timeout", 300, 0, 1e7, true);
    const uint64_t max_memory_mib = a.get_u64("--max-memory", 4096, uint64_t(1) << 40);
    api.max_body = a.get_u64("--max-body", 32u << 20, uint64_t(1) << 40);
    api.max_tokens = a.get_int("--max-tokens", 512, 1, INT32_MAX);
    const int max_documents = a.get_i32("--max-documents", 64, 1, 1 << 20);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    serve::EngineOptions eo;
    eo.n_threads = a.has("--threads") ? threads_arg(a) : int32_t(std::max(1u, cores / unsigned(api.parallel)));
    eo.max_memory = max_memory_mib << 20;

    // --data-dir before the model loads (a bad one fails fast).
    std::string data_dir = a.get("--data-dir");
    const bool temp_dir = data_dir.empty();
    if (!temp_dir) {
        if (mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST) die("cannot create --data-dir %s", data_dir.c_str());
        if (access(data_dir.c_str(), W_OK | X_OK) != 0)
            die("--data-dir %s is not a writable directory", data_dir.c_str());
    }

    // SIGINT/SIGTERM go to one thread that waits for them (below); every
    // thread started from here on inherits the mask. A closed client socket
    // must not kill the server.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);

    lctx_model *m = load_model(a);
    int status = 0;
    if (temp_dir) {   // made once nothing else can fail before the end removes it
        const char *tmp = std::getenv("TMPDIR");
        std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/lctx-serve-XXXXXX";
        if (!mkdtemp(tmpl.data())) die("cannot make a temporary data directory in %s", tmp ? tmp : "/tmp");
        data_dir = tmpl;
    }
    {
        serve::Engine engine(m, a.has("--alias") ? a.get("--alias") : model_id_of(a.get("--model")), eo);
        serve::DocumentStore docs(engine, data_dir, max_documents);
        if (!temp_dir) docs.load_saved();
        serve::HttpApi http(engine, docs, api);
        httplib::Server svr;
        // Threads for the slots, the wait line and the cheap requests (status,
        // models) beside them; idle keep-alive connections hold one each a while.
        const size_t n_threads = size_t(api.parallel) + size_t(api.queue) + 8;
        svr.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
        svr.set_keep_alive_timeout(2);
        // httplib's default also sets SO_REUSEPORT, with which a second server
        // binds a port already served and takes part of its requests: only
        // SO_REUSEADDR (a restart may bind a port in TIME_WAIT).
        svr.set_socket_options([](socket_t sock) {
            int yes = 1;
            setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        });
        svr.set_logger([](const httplib::Request &req, const httplib::Response &res) {
            std::fprintf(stderr, "lctx serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
        });
        http.install(svr);

        int bound = port;
        if (port == 0) bound = svr.bind_to_any_port(host);
        else if (!svr.bind_to_port(host, port)) bound = -1;
        if (bound < 0) {
            std::fprintf(stderr, "lctx: cannot listen on %s:%d (in use, or not an address of this machine)\n",
                         host.c_str(), port);
            status = 1;
        } else {
            std::atomic<bool> done{false};
            std::thread waiter([&] {
                const timespec tick{0, 200 * 1000 * 1000};
                while (!done) {
                    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
                    if (sig == SIGINT || sig == SIGTERM) {
                        std::fprintf(stderr, "lctx serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
                        http.begin_shutdown();
                        docs.shutdown();
                        // stop() does nothing before listen has started: repeat it until listen returns.
                        while (!done) {
                            svr.stop();
                            std::this_thread::sleep_for(std::chrono::milliseconds(100));
                        }
                        return;
                    }
                }
            });
            std::fprintf(stderr, "lctx serve: %s (%s) on http://%s:%d, %d slot(s) x %d thread(s), data in %s\n",
                         engine.model_id().c_str(), lctx_build_info(), host.c_str(), bound, api.parallel,
                         eo.n_threads, data_dir.c_str());
            std::fflush(stderr);
            const bool ok = svr.listen_after_bind();
            done = true;
            waiter.join();
            if (!ok) {
                std::fprintf(stderr, "lctx serve: the server stopped with an error\n");
                status = 1;
            }
        }
        http.begin_shutdown();
        docs.shutdown();
    }   // sessions, documents and the model are freed here, after every request thread has ended
    if (temp_dir) remove_tree(data_dir);
    std::fprintf(stderr, "lctx serve: stopped\n");
    return status;
}

} // namespace lctx::cli
