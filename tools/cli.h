// Shared helpers of the `lctx` command line: argument parsing, errors,
// timing. Each subcommand lives in its own cmd_*.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lctx.h"

namespace lctx::cli {

// Parsed arguments: flags with values ("-m X", "--temp 0.5"), boolean
// switches ("--chat") and positional words. Which flags take a value is
// declared by the subcommand.
struct Args {
    std::map<std::string, std::string> values;
    std::map<std::string, bool> switches;
    std::vector<std::string> positional;

    bool has(const std::string &k) const { return values.count(k) > 0; }
    std::string get(const std::string &k, const std::string &def = "") const;
    int64_t get_int(const std::string &k, int64_t def) const;      // exits with a message on bad numbers
    double get_float(const std::string &k, double def) const;
    bool on(const std::string &k) const { return switches.count(k) > 0; }
};

// value_flags: flags that take a value (e.g. {"-m", "--model"}); aliases map
// short names to long ones. Unknown flags exit with usage.
Args parse_args(int argc, char **argv, const std::vector<std::string> &value_flags,
                const std::vector<std::string> &switch_flags, const std::map<std::string, std::string> &aliases,
                const char *usage);

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Exits with the status and lctx_last_error() when st != LCTX_OK.
void check(lctx_status st, const char *what);

lctx_model *load_model(const Args &a);   // "-m/--model", "-t/--threads"
std::vector<lctx_token> tokenize(const lctx_model *m, const std::string &text, bool add_special, bool parse_special);
std::string piece(const lctx_model *m, lctx_token t);
std::string read_file(const std::string &path);

// Peak resident set size of this process so far, MiB.
double peak_rss_mib();
// The chat prompt around the document: before = template text up to the
// user's content, after = "\n\n" + question, end of turn and the assistant
// header. The document goes between them.
void chat_parts(const lctx_model *m, const std::string &question, std::string &before, std::string &after);

// Methods as the library's registry lists them (lctx_method_count ...), in
// value order; implemented_only: those lctx_session_create accepts.
std::vector<lctx_method> all_methods(bool implemented_only);
// The method of a --method name (ASCII case-insensitive). False for an unknown name.
bool parse_method(const std::string &name, lctx_method &out);
// The registry's name ("reform"); "unknown" for a value it does not know.
const char *method_cli_name(lctx_method m);
// "full, reform, ..." for usage and error messages.
std::string method_cli_names(bool implemented_only = false);
// One line per implemented method, "<indent>name  description", then the
// unimplemented ones on one line: the method list of usage texts.
std::string method_usage(const std::string &indent);

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_heads(int argc, char **argv);
int cmd_heads_ilre(int argc, char **argv);   // lctx heads --ilre
int cmd_bench(int argc, char **argv);
int cmd_bench_refreshkv(int argc, char **argv);   // lctx bench-refreshkv
int cmd_eval(int argc, char **argv);

} // namespace lctx::cli
