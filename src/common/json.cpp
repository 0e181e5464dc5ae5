#include "common/json.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"

namespace lctx::json {

Value::Value() = default;
Value::Value(const Value &) = default;
Value::Value(Value &&) noexcept = default;
Value &Value::operator=(const Value &) = default;
Value &Value::operator=(Value &&) noexcept = default;
Value::~Value() = default;


const Value *Value::find(const std::string &key) const {
    if (type != Type::OBJECT) return nullptr;
    for (const auto &kv : obj)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

std::string Value::get_str(const std::string &key, const std::string &def) const {
    const Value *v = find(key);
    return v && v->is_string() ? v->str : def;
}

double Value::get_num(const std::string &key, double def) const {
    const Value *v = find(key);
    return v && v->is_number() ? v->num : def;
}

namespace {

struct Parser {
    const std::string &t;
    size_t i = 0;
    int depth = 0;

    [[noreturn]] void error(const char *what) {
        fail(LCTX_ERR_FORMAT, "JSON: %s at byte %zu", what, i);
    }
    void ws() {
        while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
    }
    bool eat(char c) {
        ws();
        if (i < t.size() && t[i] == c) { ++i; return true; }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) error(c == ':' ? "expected ':'" : c == ',' ? "expected ','" : "unexpected character");
    }
    bool lit(const char *w) {
        size_t n = std::char_traits<char>::length(w);
        if (t.compare(i, n, w) == 0) { i += n; return true; }
        return false;
    }
    static void utf8(std::string &out, uint32_t cp) {
        if (cp < 0x80) out += char(cp);
        else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 63)); }
        else if (cp < 0x10000) {
            out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 63)); out += char(0x80 | (cp & 63));
        } else {
            out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 63));
            out += char(0x80 | ((cp >> 6) & 63)); out += char(0x80 | (cp & 63));
        }
    }
    uint32_t hex4() {
        if (i + 4 > t.size()) error("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            char c = t[i++];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
            else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
            else error("bad \\u escape");
        }
        return v;
    }
    std::string string() {
        ws();
        if (i >= t.size() || t[i] != '"') error("expected a string");
        ++i;
        std::string out;
        for (;;) {
            if (i >= t.size()) error("unterminated string");
            char c = t[i++];
            if (c == '"') return out;
            if (static_cast<unsigned char>(c) < 0x20) error("control character in string");
            if (c != '\\') { out += c; continue; }
            if (i >= t.size()) error("unterminated escape");
            char e = t[i++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
                uint32_t cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= t.size() && t[i] == '\\' && t[i + 1] == 'u') {
                    i += 2;
                    uint32_t lo = hex4();
                    if (lo < 0xDC00 || lo > 0xDFFF) error("bad surrogate pair");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                utf8(out, cp);
                break;
            }
            default: error("bad escape");
            }
        }
    }
    Value value() {
        if (++depth > 64) error("nesting too deep");
        ws();
        if (i >= t.size()) error("unexpected end");
        Value v;
        char c = t[i];
        if (c == '{') {
            ++i;
            v.type = Value::Type::OBJECT;
            if (!eat('}')) {
                do {
                    std::string k = string();
                    expect(':');
                    v.obj.emplace_back(std::move(k), value());
                } while (eat(','));
                expect('}');
            }
        } else if (c == '[') {
            ++i;
            v.type = Value::Type::ARRAY;
            if (!eat(']')) {
                do v.arr.push_back(value());
                while (eat(','));
                expect(']');
            }
        } else if (c == '"') {
            v.type = Value::Type::STRING;
            v.str = string();
        } else if (lit("true")) {
            v.type = Value::Type::BOOL;
            v.b = true;
        } else if (lit("false")) {
            v.type = Value::Type::BOOL;
        } else if (lit("null")) {
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            if (t[j] == '-') ++j;
            while (j < t.size() && (std::isdigit(static_cast<unsigned char>(t[j])) || t[j] == '.' || t[j] == 'e' ||
                                    t[j] == 'E' || t[j] == '+' || t[j] == '-'))
                ++j;
            std::string s = t.substr(i, j - i);
            char *end = nullptr;
            v.num = std::strtod(s.c_str(), &end);
            if (!end || *end != '\0' || !std::isfinite(v.num)) error("bad number");
            v.type = Value::Type::NUMBER;
            i = j;
        } else {
            error("unexpected character");
        }
        --depth;
        return v;
    }
};

} // namespace

Value parse(const std::string &text) {
    Parser p{text};
    Value v = p.value();
    p.ws();
    if (p.i != text.size()) p.error("trailing characters");
    return v;
}

bool try_parse(const std::string &text, Value &out, std::string *error) {
    try {
        out = parse(text);
        return true;
    } catch (const Error &e) {
        if (error) *error = e.what();
        out = Value{};
        return false;
    }
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 (Unicode's table
// of well-formed byte sequences: no overlong forms such as C0 80, no
// surrogates ED A0..BF, nothing above U+10FFFF), so that what quote() lets
// through is valid for every strict JSON reader.
size_t utf8_len(const std::string &s, size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return 1;
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;   // the range of the second byte
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    if (n == 0 || i + n > s.size()) return 0;
    const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
    return n;
}

} // namespace

std::string quote(const std::string &s) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_len(s, i);
        if (n == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (n > 1) out.append(s, i, n);
        else if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
        i += n;
    }
    return out + "\"";
}

std::string number(double v) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    for (int prec = 6; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (std::strtod(buf, nullptr) == v) break;
    }
    return buf;
}

} // namespace lctx::json
