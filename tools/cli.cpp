#include "cli.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/resource.h>

namespace lctx::cli {

std::string Args::get(const std::string &k, const std::string &def) const {
    auto it = values.find(k);
    return it == values.end() ? def : it->second;
}

int64_t Args::get_int(const std::string &k, int64_t def) const {
    if (!has(k)) return def;
    const std::string &s = values.at(k);
    char *end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end) die("%s expects an integer, got '%s'", k.c_str(), s.c_str());
    return v;
}

double Args::get_float(const std::string &k, double def) const {
    if (!has(k)) return def;
    const std::string &s = values.at(k);
    char *end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end) die("%s expects a number, got '%s'", k.c_str(), s.c_str());
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
    mp.n_threads = static_cast<int32_t>(a.get_int("--threads", 0));
    lctx_model *m = nullptr;
    check(lctx_model_load(a.get("--model").c_str(), &mp, &m), "loading the model");
    return m;
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

} // namespace lctx::cli
