#include "eval/json.h"

#include <cstdio>
#include <cstdlib>

namespace lctx::eval {

const Json *Json::get(const std::string &key) const {
    if (type != Type::kObject) return nullptr;
    for (const auto &[k, v] : object)
        if (k == key) return &v;
    return nullptr;
}

std::string Json::str(const std::string &key, const std::string &def) const {
    const Json *v = get(key);
    return v && v->type == Type::kString ? v->string : def;
}

double Json::num(const std::string &key, double def) const {
    const Json *v = get(key);
    return v && v->type == Type::kNumber ? v->number : def;
}

namespace {

struct Parser {
    const std::string &s;
    size_t i = 0;
    std::string err;

    void ws() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
    }
    bool fail(const char *what) {
        if (err.empty()) err = std::string(what) + " at offset " + std::to_string(i);
        return false;
    }
    static void put_utf8(std::string &o, unsigned cp) {
        if (cp < 0x80) o += char(cp);
        else if (cp < 0x800) o += char(0xc0 | (cp >> 6)), o += char(0x80 | (cp & 0x3f));
        else if (cp < 0x10000)
            o += char(0xe0 | (cp >> 12)), o += char(0x80 | ((cp >> 6) & 0x3f)), o += char(0x80 | (cp & 0x3f));
        else
            o += char(0xf0 | (cp >> 18)), o += char(0x80 | ((cp >> 12) & 0x3f)),
                o += char(0x80 | ((cp >> 6) & 0x3f)), o += char(0x80 | (cp & 0x3f));
    }
    bool hex4(unsigned &cp) {
        if (i + 4 > s.size()) return fail("short \\u escape");
        cp = 0;
        for (int k = 0; k < 4; ++k) {
            const char c = s[i++];
            cp <<= 4;
            if (c >= '0' && c <= '9') cp |= unsigned(c - '0');
            else if (c >= 'a' && c <= 'f') cp |= unsigned(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') cp |= unsigned(c - 'A' + 10);
            else return fail("bad \\u escape");
        }
        return true;
    }
    bool string(std::string &o) {
        if (i >= s.size() || s[i] != '"') return fail("expected a string");
        ++i;
        while (i < s.size() && s[i] != '"') {
            char c = s[i++];
            if (c != '\\') {
                o += c;
                continue;
            }
            if (i >= s.size()) return fail("unfinished escape");
            c = s[i++];
            switch (c) {
            case 'n': o += '\n'; break;
            case 't': o += '\t'; break;
            case 'r': o += '\r'; break;
            case 'b': o += '\b'; break;
            case 'f': o += '\f'; break;
            case 'u': {
                unsigned cp = 0;
                if (!hex4(cp)) return false;
                if (cp >= 0xd800 && cp < 0xdc00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
                    i += 2;
                    unsigned lo = 0;
                    if (!hex4(lo)) return false;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                put_utf8(o, cp);
                break;
            }
            default: o += c;
            }
        }
        if (i >= s.size()) return fail("unterminated string");
        ++i;
        return true;
    }
    bool value(Json &v, int depth) {
        if (depth > 64) return fail("nesting too deep");
        ws();
        if (i >= s.size()) return fail("unexpected end");
        const char c = s[i];
        if (c == '{') {
            v.type = Json::Type::kObject;
            ++i;
            ws();
            if (i < s.size() && s[i] == '}') return ++i, true;
            for (;;) {
                ws();
                std::string k;
                if (!string(k)) return false;
                ws();
                if (i >= s.size() || s[i] != ':') return fail("expected ':'");
                ++i;
                Json x;
                if (!value(x, depth + 1)) return false;
                v.object.emplace_back(std::move(k), std::move(x));
                ws();
                if (i < s.size() && s[i] == ',') { ++i; continue; }
                if (i < s.size() && s[i] == '}') return ++i, true;
                return fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.type = Json::Type::kArray;
            ++i;
            ws();
            if (i < s.size() && s[i] == ']') return ++i, true;
            for (;;) {
                Json x;
                if (!value(x, depth + 1)) return false;
                v.array.push_back(std::move(x));
                ws();
                if (i < s.size() && s[i] == ',') { ++i; continue; }
                if (i < s.size() && s[i] == ']') return ++i, true;
                return fail("expected ',' or ']'");
            }
        }
        if (c == '"') return v.type = Json::Type::kString, string(v.string);
        if (s.compare(i, 4, "true") == 0) return i += 4, v.type = Json::Type::kBool, v.boolean = true, true;
        if (s.compare(i, 5, "false") == 0) return i += 5, v.type = Json::Type::kBool, true;
        if (s.compare(i, 4, "null") == 0) return i += 4, true;
        const char *b = s.c_str() + i;
        char *e = nullptr;
        v.number = std::strtod(b, &e);
        if (e == b) return fail("unexpected character");
        v.type = Json::Type::kNumber;
        i += size_t(e - b);
        return true;
    }
};

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_len(const std::string &s, size_t i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
    return n;
}

} // namespace

bool parse_json(const std::string &text, Json &out, std::string *error) {
    Parser p{text, 0, {}};
    out = Json{};
    bool ok = p.value(out, 0);
    if (ok) {
        p.ws();
        if (p.i != text.size()) ok = p.fail("trailing characters");
    }
    if (!ok && error) *error = p.err;
    return ok;
}

std::string json_quote(const std::string &s) {
    std::string o = "\"";
    for (size_t i = 0; i < s.size();) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        const size_t n = utf8_len(s, i);
        if (n == 0) {
            o += "\\ufffd";
            ++i;
            continue;
        }
        if (n > 1) {
            o.append(s, i, n);
        } else if (c == '"' || c == '\\') {
            o += '\\';
            o += char(c);
        } else if (c == '\n') {
            o += "\\n";
        } else if (c == '\t') {
            o += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += char(c);
        }
        i += n;
    }
    return o + "\"";
}

} // namespace lctx::eval
