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
    std::map<std::string, std::string> values;                 // the last value of each flag
    std::map<std::string, std::vector<std::string>> all_values;  // every value, in order (repeatable flags)
    std::map<std::string, bool> switches;
    std::vector<std::string> positional;

    bool has(const std::string &k) const { return values.count(k) > 0; }
    std::string get(const std::string &k, const std::string &def = "") const;
    std::vector<std::string> get_all(const std::string &k) const;
    // Numbers, each with its range: a value that is not a number, or lies
    // outside [lo, hi], exits with a message naming the option and the range
    // (no silent wrap, no negative taken as a default). `note` explains the
    // special values inside the range ("-1: derived from the model"). The
    // default `def` (option absent) is returned as is.
    int64_t get_int(const std::string &k, int64_t def, int64_t lo, int64_t hi, const char *note = nullptr) const;
    int32_t get_i32(const std::string &k, int32_t def, int32_t lo, int32_t hi = INT32_MAX,
                    const char *note = nullptr) const;
    uint64_t get_u64(const std::string &k, uint64_t def, uint64_t hi = UINT64_MAX) const;   // from 0
    // Finite numbers in [lo, hi]; lo_open: lo itself is refused ((lo, hi]).
    double get_float(const std::string &k, double def, double lo, double hi, bool lo_open = false,
                     const char *note = nullptr) const;
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

lctx_model *load_model(const Args &a);   // "-m/--model", "-t/--threads", "--backend"
// --backend NAME of the commands that run sessions (bench, run, eval):
// lctx_model_params.backend. Add "--backend" to the value flags and
// kBackendUsage to the usage text.
extern const char *const kBackendUsage;
// The backend a session actually runs on: "cpu" when the one asked for
// could not run here (the registry then logged why on stderr).
const char *session_backend(const lctx_session *s);
// The `lctx` binary links the library statically, so the registry cannot
// find backend modules beside a liblctx.so: main() adds the directories
// where they are, relative to the binary (the build tree, the install).
void add_backend_module_dirs();
// -t/--threads: >= 1 when given; 0 (all cores) when absent.
int32_t threads_arg(const Args &a);
// --attn and --matmul (lctx_session_params.attn_precision, matmul_precision):
// add kPrecisionFlags to the value flags and kPrecisionUsage to the usage
// text; precision_arg() reads one ("f32", the default, "bf16", and for
// --matmul "int8"; anything else exits with a message). precision_name() is
// the word back.
extern const std::vector<std::string> kPrecisionFlags;
extern const char *const kPrecisionUsage;
lctx_precision precision_arg(const Args &a, const char *flag);
const char *precision_name(lctx_precision p);

// Sampling options, the same in every command that decodes (run, generate):
// add kSamplingFlags to its value flags and kSamplingUsage to its usage text;
// sampling_params() reads them (each range-checked) into lctx_sampling_params.
extern const std::vector<std::string> kSamplingFlags;
extern const char *const kSamplingUsage;
lctx_sampling_params sampling_params(const Args &a);
// a + b (value flag lists of parse_args).
std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string> &b);

// A text input (document, prompt, question): refused when empty or only
// whitespace (`allow_empty`: accepted then), and when it is not valid UTF-8,
// with the byte offset of the first bad sequence; with `lossy` every maximal
// invalid sequence becomes U+FFFD instead (the message of --lossy). `what`
// names the input in messages ("--file doc.txt").
std::string check_text(std::string text, const std::string &what, bool lossy, bool allow_empty = false);
// The offset of the first invalid UTF-8 sequence of s, or npos when s is valid
// (no overlongs, surrogates or code points past U+10FFFF).
size_t utf8_invalid_at(const std::string &s);
// s with every maximal invalid UTF-8 subpart replaced by U+FFFD.
std::string utf8_lossy(const std::string &s);
std::vector<lctx_token> tokenize(const lctx_model *m, const std::string &text, bool add_special, bool parse_special);
std::string piece(const lctx_model *m, lctx_token t);
std::string read_file(const std::string &path);

// The RefreshKV statistics of the last answer (lctx_session_refreshkv_stats)
// as a JSON object; "" when the session does not decode with RefreshKV.
std::string refreshkv_json(const lctx_model *m, const lctx_session *s);

// Peak resident set size of this process so far, MiB.
double peak_rss_mib();
// One number printed with a printf format of one double ("%.3f"): JSON fields.
std::string fmt_num(const char *format, double v);

// s as one word of a POSIX shell command: as it is when it holds only safe
// characters, else in single quotes.
std::string shell_quote(const std::string &s);

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
int cmd_serve(int argc, char **argv);   // lctx serve (built when cpp-httplib and nlohmann-json are found)

} // namespace lctx::cli
