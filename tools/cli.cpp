#include "cli.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>

#include "api/handles.h"
#include "backend/registry.h"

namespace lctx::cli {

std::string Args::get(const std::string &k, const std::string &def) const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
}

std::vector<std::string> Args::get_all(const std::string &k) const {
    auto it = all_values.find(k);
    return it == all_values.end() ? std::vector<std::string>{} : it->second;
}

namespace {

std::string range_text(const char *kind, const std::string &lo, const std::string &hi, const char *note) {
    std::string r = std::string("expected ") + kind + " from " + lo + " to " + hi;
    if (note && *note) r += std::string(" (") + note + ")";
    return r;
}

} // namespace

int64_t Args::get_int(const std::string &k, int64_t def, int64_t lo, int64_t hi, const char *note) const {
    if (!has(k)) return def;
    const std::string &s = values.at(k);
    const std::string range = range_text("an integer", std::to_string(lo), std::to_string(hi), note);
    char *end = nullptr;
    errno = 0;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || end == s.c_str() || *end) die("%s expects an integer, got '%s': %s", k.c_str(), s.c_str(), range.c_str());
    if (errno == ERANGE || v < lo || v > hi) die("%s %s is out of range: %s", k.c_str(), s.c_str(), range.c_str());
    return v;
}

int32_t Args::get_i32(const std::string &k, int32_t def, int32_t lo, int32_t hi, const char *note) const {
    return static_cast<int32_t>(get_int(k, def, lo, hi, note));
}

uint64_t Args::get_u64(const std::string &k, uint64_t def, uint64_t hi) const {
    if (!has(k)) return def;
    const std::string &s = values.at(k);
    const std::string range = range_text("an integer", "0", std::to_string(hi), nullptr);
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i < s.size() && s[i] == '-') {   // strtoull would wrap "-1" to 2^64 - 1
        char *end = nullptr;
        std::strtoll(s.c_str(), &end, 10);
        if (end != s.c_str() && !*end) die("%s %s is out of range: %s", k.c_str(), s.c_str(), range.c_str());
        die("%s expects an integer, got '%s': %s", k.c_str(), s.c_str(), range.c_str());
    }
    char *end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || end == s.c_str() || *end) die("%s expects an integer, got '%s': %s", k.c_str(), s.c_str(), range.c_str());
    if (errno == ERANGE || v > hi) die("%s %s is out of range: %s", k.c_str(), s.c_str(), range.c_str());
    return v;
}

double Args::get_float(const std::string &k, double def, double lo, double hi, bool lo_open, const char *note) const {
    if (!has(k)) return def;
    const std::string &s = values.at(k);
    char los[64], his[64];
    std::snprintf(los, sizeof los, lo_open ? "%g (excluded)" : "%g", lo);
    std::snprintf(his, sizeof his, "%g", hi);
    const std::string range = range_text("a number", los, his, note);
    char *end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || end == s.c_str() || *end || std::isnan(v))
        die("%s expects a number, got '%s': %s", k.c_str(), s.c_str(), range.c_str());
    if (!std::isfinite(v) || (errno == ERANGE && v != 0) || v < lo || v > hi || (lo_open && v == lo))
        die("%s %s is out of range: %s", k.c_str(), s.c_str(), range.c_str());
    return v;
}

Args parse_args(int argc, char **argv, const std::vector<std::string> &value_flags,
                const std::vector<std::string> &switch_flags, const std::map<std::string, std::string> &aliases,
                const char *usage) {
    Args a;
    auto is_in = [](const std::vector<std::string> &v, const std::string &s) {
        for (const auto &x : v)
            if (x == s) return true;
        return false;
    };
    for (int i = 0; i < argc; ++i) {
        std::string w = argv[i];
        if (w == "-h" || w == "--help") {
            std::fputs(usage, stdout);
            std::exit(0);
        }
        auto al = aliases.find(w);
        if (al != aliases.end()) w = al->second;
        if (is_in(value_flags, w)) {
            if (i + 1 >= argc) die("%s needs a value\n\n%s", w.c_str(), usage);
            a.values[w] = argv[++i];
            a.all_values[w].push_back(argv[i]);
        } else if (is_in(switch_flags, w)) {
            a.switches[w] = true;
        } else if (w.size() > 1 && w[0] == '-' && !(w[1] >= '0' && w[1] <= '9')) {
            die("unknown option '%s'\n\n%s", w.c_str(), usage);
        } else {
            a.positional.push_back(w);
        }
    }
    return a;
}

void die(const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::fputs("lctx: ", stderr);
    std::vfprintf(stderr, fmt, args);
    std::fputc('\n', stderr);
    va_end(args);
    std::exit(1);
}

void check(lctx_status st, const char *what) {
    if (st == LCTX_OK) return;
    const char *msg = lctx_last_error();
    die("%s failed (%s): %s", what, lctx_status_string(st), msg && *msg ? msg : "no details");
}

lctx_model *load_model(const Args &a) {
    if (!a.has("--model")) die("a model is needed: -m MODEL.gguf");
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = threads_arg(a);
    const std::string backend = a.get("--backend");
    mp.backend = backend.c_str();   // copied by lctx_model_load
    lctx_model *m = nullptr;
    check(lctx_model_load(a.get("--model").c_str(), &mp, &m), "loading the model");
    return m;
}

const char *const kBackendUsage =
    "  --backend NAME       backend of the sessions: cpu, or a backend module's name (cuda); default:\n"
    "                       $LCTX_BACKEND, else the best one available. One that cannot run here falls back\n"
    "                       to the CPU with a line on stderr saying why; the output names the backend that ran\n";

const char *session_backend(const lctx_session *s) { return s->session->backend_name(); }

void add_backend_module_dirs() {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = 0;
    std::string dir(exe);
    dir.resize(dir.rfind('/'));
    // LCTX_CLI_MODULE_DIRS: ':'-separated, relative to the binary's directory
    // (tools/CMakeLists.txt: the build tree's top, the install's libdir).
    const std::string rel = LCTX_CLI_MODULE_DIRS;
    for (size_t at = 0; at <= rel.size();) {
        const size_t end = std::min(rel.find(':', at), rel.size());
        char real[PATH_MAX];   // a plain path in the log lines: no "tools/.."
        if (end > at && realpath((dir + "/" + rel.substr(at, end - at)).c_str(), real)) backends_add_module_dir(real);
        at = end + 1;
    }
}

int32_t threads_arg(const Args &a) { return a.get_i32("--threads", 0, 1, 4096); }

const std::vector<std::string> kPrecisionFlags = {"--attn", "--matmul"};
const char *const kPrecisionUsage =
    "  --attn P             attention's products: f32 (default, exact) or bf16 (opt-in, lossy; CPUs with\n"
    "                       AVX512_BF16, elsewhere f32; docs/bf16.md)\n"
    "  --matmul P           the weight matrix products: f32 (default), bf16 (opt-in, lossy; AVX512_BF16\n"
    "                       CPUs, prefill and encoding) or int8 (opt-in, lossy; CPUs with AVX2: int8 activations\n"
    "                       with the 4-bit weight codes, as llama.cpp, in prefill, encoding and decode;\n"
    "                       docs/int8.md)\n";

lctx_precision precision_arg(const Args &a, const char *flag) {
    const std::string v = a.get(flag, "f32");
    const bool matmul = std::string(flag) == "--matmul";
    if (v == "f32") return LCTX_PRECISION_F32;
    if (v == "bf16") return LCTX_PRECISION_BF16;
    if (v == "int8" && matmul) return LCTX_PRECISION_INT8;
    die("%s must be %s, not '%s'", flag, matmul ? "f32, bf16 or int8" : "f32 or bf16", v.c_str());
}

const char *precision_name(lctx_precision p) {
    return p == LCTX_PRECISION_BF16 ? "bf16" : p == LCTX_PRECISION_INT8 ? "int8" : "f32";
}

const std::vector<std::string> kSamplingFlags = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                                 "--repeat-last-n", "--seed"};
const char *const kSamplingUsage =
    "  --temp T             sampling temperature, >= 0 (default 0: greedy, the other sampling options unused)\n"
    "  --top-k K            keep the K most likely tokens, >= 0 (default 0: off)\n"
    "  --top-p P            keep the smallest set of tokens with probability >= P, in (0, 1] (default 1: off)\n"
    "  --min-p P            drop tokens below P x the best one's probability, in [0, 1] (default 0: off)\n"
    "  --repeat-penalty R   penalty of the last --repeat-last-n tokens, > 0 (default 1: off)\n"
    "  --repeat-last-n N    window of --repeat-penalty (default 64; 0: off, -1: the whole context)\n"
    "  --seed S             sampling seed, 0 to 2^64-1 (default 0; same seed and inputs: same answer)\n";

lctx_sampling_params sampling_params(const Args &a) {
    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    samp.temperature = static_cast<float>(a.get_float("--temp", 0.0, 0.0, 1e6, false, "0: greedy"));
    samp.top_k = a.get_i32("--top-k", 0, 0, INT32_MAX, "0: off");
    samp.top_p = static_cast<float>(a.get_float("--top-p", 1.0, 0.0, 1.0, true, "1: off"));
    samp.min_p = static_cast<float>(a.get_float("--min-p", 0.0, 0.0, 1.0, false, "0: off"));
    samp.repeat_penalty = static_cast<float>(a.get_float("--repeat-penalty", 1.0, 0.0, 1e6, true, "1: off"));
    samp.repeat_last_n = a.get_i32("--repeat-last-n", 64, -1, INT32_MAX, "0: off, -1: the whole context");
    samp.seed = a.get_u64("--seed", 0);
    return samp;
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string> &b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0 when it is invalid;
// `maximal` gets the length of its maximal invalid subpart (at least 1) then
// (Unicode 15, section 3.9, "U+FFFD substitution of maximal subparts").
size_t utf8_seq(const std::string &s, size_t i, size_t &maximal) {
    const auto b = [&](size_t j) { return static_cast<unsigned char>(s[j]); };
    const unsigned char c = b(i);
    maximal = 1;
    if (c < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;   // range of the second byte
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c == 0xE0) n = 3, lo = 0xA0;
    else if (c == 0xED) n = 3, hi = 0x9F;   // no surrogates
    else if (c >= 0xE1 && c <= 0xEF) n = 3;
    else if (c == 0xF0) n = 4, lo = 0x90;
    else if (c == 0xF4) n = 4, hi = 0x8F;   // <= U+10FFFF
    else if (c >= 0xF1 && c <= 0xF3) n = 4;
    else return 0;   // 0x80..0xC1 (continuation, overlong), 0xF5..0xFF
    for (size_t k = 1; k < n; ++k) {
        if (i + k >= s.size()) return 0;
        const unsigned char x = b(i + k);
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return 0;
        maximal = k + 1;
    }
    return n;
}

} // namespace

size_t utf8_invalid_at(const std::string &s) {
    size_t maximal = 0;
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_seq(s, i, maximal);
        if (!n) return i;
        i += n;
    }
    return std::string::npos;
}

std::string utf8_lossy(const std::string &s) {
    std::string out;
    out.reserve(s.size());
    size_t maximal = 0;
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_seq(s, i, maximal);
        if (n) {
            out.append(s, i, n);
            i += n;
        } else {
            out += "\xEF\xBF\xBD";   // U+FFFD
            i += maximal;
        }
    }
    return out;
}

std::string check_text(std::string text, const std::string &what, bool lossy, bool allow_empty) {
    if (!allow_empty) {
        if (text.empty()) die("%s is empty", what.c_str());
        if (std::all_of(text.begin(), text.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
            die("%s holds only whitespace", what.c_str());
    }
    const size_t bad = utf8_invalid_at(text);
    if (bad == std::string::npos) return text;
    if (lossy) return utf8_lossy(text);
    char bytes[32] = "";
    for (size_t k = 0; k < 4 && bad + k < text.size(); ++k)
        std::snprintf(bytes + std::strlen(bytes), sizeof bytes - std::strlen(bytes), "%s0x%02X", k ? " " : "",
                      static_cast<unsigned char>(text[bad + k]));
    die("%s is not valid UTF-8: invalid byte sequence at byte offset %zu (bytes %s); --lossy replaces invalid "
        "bytes with U+FFFD", what.c_str(), bad, bytes);
}

std::vector<lctx_token> tokenize(const lctx_model *m, const std::string &text, bool add_special, bool parse_special) {
    size_t n = 0;
    std::vector<lctx_token> ids(text.size() + 8);
    lctx_status st = lctx_tokenize(m, text.data(), text.size(), add_special, parse_special, ids.data(), ids.size(), &n);
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        ids.resize(n);
        st = lctx_tokenize(m, text.data(), text.size(), add_special, parse_special, ids.data(), ids.size(), &n);
    }
    check(st, "tokenizing");
    ids.resize(n);
    return ids;
}

std::string piece(const lctx_model *m, lctx_token t) {
    char buf[256];
    size_t n = 0;
    lctx_status st = lctx_token_to_piece(m, t, false, buf, sizeof buf, &n);
    if (st == LCTX_ERR_BUFFER_TOO_SMALL) {
        std::string s(n, '\0');
        check(lctx_token_to_piece(m, t, false, s.data(), s.size(), &n), "token_to_piece");
        return s;
    }
    check(st, "token_to_piece");
    return std::string(buf, n);
}

std::string read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) die("cannot open '%s'", path.c_str());
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

} // namespace lctx::cli

namespace lctx::cli {

// The methods come from the library's registry (lctx_method_*), never from
// a list of our own.
std::vector<lctx_method> all_methods(bool implemented_only) {
    std::vector<lctx_method> out;
    for (int32_t i = 0; i < lctx_method_count(); ++i) {
        const auto m = static_cast<lctx_method>(i);
        if (!implemented_only || lctx_method_is_implemented(m)) out.push_back(m);
    }
    return out;
}

bool parse_method(const std::string &name, lctx_method &out) {
    return lctx_method_from_name(name.c_str(), &out) == LCTX_OK;
}

const char *method_cli_name(lctx_method m) {
    const char *n = lctx_method_name(m);
    return n ? n : "unknown";
}

std::string method_cli_names(bool implemented_only) {
    std::string s;
    for (lctx_method m : all_methods(implemented_only)) s += (s.empty() ? "" : ", ") + std::string(method_cli_name(m));
    return s;
}

std::string method_usage(const std::string &indent) {
    size_t w = 0;
    for (lctx_method m : all_methods(false)) w = std::max(w, std::strlen(method_cli_name(m)));
    std::string s, later;
    for (lctx_method m : all_methods(false)) {
        if (!lctx_method_is_implemented(m)) {
            later += (later.empty() ? "" : ", ") + std::string(method_cli_name(m));
            continue;
        }
        std::string name = method_cli_name(m);
        s += indent + name + std::string(w + 2 - name.size(), ' ') + lctx_method_description(m) + "\n";
    }
    if (!later.empty()) s += indent + "(not implemented yet: " + later + ")\n";
    return s;
}

} // namespace lctx::cli

namespace lctx::cli {

std::string refreshkv_json(const lctx_model *m, const lctx_session *s) {
    lctx_refreshkv_stats st{};
    st.struct_size = sizeof st;
    std::vector<int64_t> full(size_t(std::max(0, lctx_model_n_layer(m)))), part(full.size());
    if (lctx_session_refreshkv_stats(s, &st, full.data(), part.data(), full.size()) != LCTX_OK) return "";
    auto list = [](const std::vector<int64_t> &v) {
        std::string o = "[";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i) o += ',';
            o += std::to_string(v[i]);
        }
        return o + "]";
    };
    return "{\"partial\": " + std::to_string(st.partial) + ", \"n_steps\": " + std::to_string(st.n_steps) +
           ", \"n_full\": " + std::to_string(st.n_full) + ", \"n_partial\": " + std::to_string(st.n_partial) +
           ", \"effective_stride\": " + fmt_num("%.3f", st.effective_stride) + ", \"full_attention_s\": " +
           fmt_num("%.4f", st.full_attention_s) + ", \"partial_attention_s\": " +
           fmt_num("%.4f", st.partial_attention_s) + ", \"refresh_s\": " + fmt_num("%.4f", st.refresh_s) +
           ", \"layer_full\": " + list(full) + ", \"layer_partial\": " + list(part) + "}";
}

std::string fmt_num(const char *format, double v) {
    char b[64];
    std::snprintf(b, sizeof b, format, v);
    return b;
}

double peak_rss_mib() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;   // KiB on Linux
}

// The chat prompt around a placeholder, split into the part before the
// document and the part after it (question, end of turn, assistant header).
void chat_parts(const lctx_model *m, const std::string &question, std::string &before, std::string &after) {
    const std::string mark = "\x01\x02LCTXDOC\x02\x01";
    const std::string content = mark + "\n\n" + question;
    lctx_chat_message msg{"user", content.c_str()};
    size_t n = 0;
    lctx_status st = lctx_chat_apply(m, &msg, 1, true, nullptr, 0, &n);
    if (st != LCTX_ERR_BUFFER_TOO_SMALL && st != LCTX_OK) check(st, "applying the chat template");
    std::vector<char> out(n + 1);
    check(lctx_chat_apply(m, &msg, 1, true, out.data(), out.size(), &n), "applying the chat template");
    std::string text(out.data(), n);
    size_t at = text.find(mark);
    if (at == std::string::npos) die("the chat template dropped the document");
    before = text.substr(0, at);
    after = text.substr(at + mark.size());
}

std::string shell_quote(const std::string &s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,=:+") ==
                          std::string::npos)
        return s;
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return o + "'";
}

} // namespace lctx::cli
