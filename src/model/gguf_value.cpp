// GGUF metadata values: type names, printing, and GgufFile's typed getters.
#include <charconv>
#include <cstdio>
#include <limits>

#include "common/error.h"
#include "model/gguf.h"
#include "model/gguf_types.h"

namespace lctx {

bool gguf_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

size_t gguf_scalar_size(GgufValueType t) {
    switch (t) {
    case GgufValueType::UINT8: case GgufValueType::INT8: case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16: case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32: case GgufValueType::INT32: case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64: case GgufValueType::INT64: case GgufValueType::FLOAT64: return 8;
    case GgufValueType::STRING: case GgufValueType::ARRAY: return 0;
    }
    return 0;
}

const char *gguf_value_type_name(GgufValueType t) {
    switch (t) {
    case GgufValueType::UINT8: return "uint8";
    case GgufValueType::INT8: return "int8";
    case GgufValueType::UINT16: return "uint16";
    case GgufValueType::INT16: return "int16";
    case GgufValueType::UINT32: return "uint32";
    case GgufValueType::INT32: return "int32";
    case GgufValueType::FLOAT32: return "float32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "uint64";
    case GgufValueType::INT64: return "int64";
    case GgufValueType::FLOAT64: return "float64";
    }
    return "invalid";
}

std::string gguf_type_name(const GgufValue &v) {
    if (v.type != GgufValueType::ARRAY) return gguf_value_type_name(v.type);
    // Nested arrays: describe the first element (arrays need not be uniform below the top).
    if (v.elem_type == GgufValueType::ARRAY && !v.arr.empty()) return "array[" + gguf_type_name(v.arr[0]) + "]";
    return std::string("array[") + gguf_value_type_name(v.elem_type) + "]";
}

bool GgufValue::is_integer() const {
    switch (type) {
    case GgufValueType::FLOAT32: case GgufValueType::FLOAT64:
    case GgufValueType::STRING: case GgufValueType::ARRAY:
        return false;
    default:
        return true;
    }
}

namespace {

constexpr size_t kMaxPrintedString = 120;

void append_quoted(std::string &out, const std::string &s) {
    out += '"';
    const size_t n = s.size() < kMaxPrintedString ? s.size() : kMaxPrintedString;
    for (size_t k = 0; k < n; ++k) {
        const unsigned char c = static_cast<unsigned char>(s[k]);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
    if (n < s.size()) out += "... (" + std::to_string(s.size()) + " bytes)";
}

template <typename F> std::string shortest(F x) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, res.ptr);
}

} // namespace

std::string GgufValue::to_string(size_t max_array_items) const {
    switch (type) {
    case GgufValueType::BOOL: return i ? "true" : "false";
    case GgufValueType::UINT64: return std::to_string(u);
    case GgufValueType::FLOAT32: return shortest(static_cast<float>(f));
    case GgufValueType::FLOAT64: return shortest(f);
    case GgufValueType::STRING: {
        std::string out;
        append_quoted(out, str);
        return out;
    }
    case GgufValueType::ARRAY: {
        std::string out = "[";
        const size_t shown = arr.size() < max_array_items ? arr.size() : max_array_items;
        for (size_t k = 0; k < shown; ++k) {
            if (k) out += ", ";
            out += arr[k].to_string(max_array_items);
        }
        if (shown < arr.size()) out += std::string(shown ? ", " : "") + "... (" + std::to_string(arr.size()) + " items)";
        return out + "]";
    }
    default: return std::to_string(i);
    }
}

// --- typed getters -------------------------------------------------------

namespace {

[[noreturn]] void wrong_type(std::string_view key, const GgufValue &v, const char *expected) {
    fail(LCTX_ERR_FORMAT, "key '%.*s' has type %s, expected %s", static_cast<int>(key.size()), key.data(),
         gguf_type_name(v).c_str(), expected);
}

[[noreturn]] void missing(std::string_view key) {
    fail(LCTX_ERR_FORMAT, "missing required key '%.*s'", static_cast<int>(key.size()), key.data());
}

bool is_integer_type(GgufValueType t) {
    GgufValue v;
    v.type = t;
    return v.is_integer();
}

bool is_numeric_type(GgufValueType t) {
    return is_integer_type(t) || t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64;
}

int64_t as_int(std::string_view key, const GgufValue &v) {
    if (!v.is_integer()) wrong_type(key, v, "an integer");
    if (v.type == GgufValueType::UINT64 && v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(LCTX_ERR_FORMAT, "key '%.*s' value %llu does not fit in int64", static_cast<int>(key.size()), key.data(),
             static_cast<unsigned long long>(v.u));
    return v.i;
}

double as_float(std::string_view key, const GgufValue &v) {
    if (v.type == GgufValueType::FLOAT32 || v.type == GgufValueType::FLOAT64) return v.f;
    if (v.type == GgufValueType::UINT64) return static_cast<double>(v.u);
    if (v.is_integer()) return static_cast<double>(v.i);
    wrong_type(key, v, "a number");
}

} // namespace

std::string GgufFile::get_string(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) missing(key);
    if (v->type != GgufValueType::STRING) wrong_type(key, *v, "string");
    return v->str;
}

std::string GgufFile::get_string_or(std::string_view key, const std::string &def) const {
    return find(key) ? get_string(key) : def;
}

int64_t GgufFile::get_int(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) missing(key);
    return as_int(key, *v);
}

int64_t GgufFile::get_int_or(std::string_view key, int64_t def) const {
    const GgufValue *v = find(key);
    return v ? as_int(key, *v) : def;
}

double GgufFile::get_float(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) missing(key);
    return as_float(key, *v);
}

double GgufFile::get_float_or(std::string_view key, double def) const {
    const GgufValue *v = find(key);
    return v ? as_float(key, *v) : def;
}

bool GgufFile::get_bool_or(std::string_view key, bool def) const {
    const GgufValue *v = find(key);
    if (!v) return def;
    if (!v->is_integer()) wrong_type(key, *v, "bool");
    return v->u != 0;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) missing(key);
    if (v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING) wrong_type(key, *v, "array[string]");
    std::vector<std::string> out;
    out.reserve(v->arr.size());
    for (const GgufValue &e : v->arr) out.push_back(e.str);
    return out;
}

std::vector<float> GgufFile::get_float_array_or_empty(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return {};
    if (v->type != GgufValueType::ARRAY || !is_numeric_type(v->elem_type)) wrong_type(key, *v, "a numeric array");
    std::vector<float> out;
    out.reserve(v->arr.size());
    for (const GgufValue &e : v->arr) out.push_back(static_cast<float>(as_float(key, e)));
    return out;
}

std::vector<int32_t> GgufFile::get_int_array_or_empty(std::string_view key) const {
    const GgufValue *v = find(key);
    if (!v) return {};
    if (v->type != GgufValueType::ARRAY || !is_integer_type(v->elem_type)) wrong_type(key, *v, "an integer array");
    std::vector<int32_t> out;
    out.reserve(v->arr.size());
    for (const GgufValue &e : v->arr) {
        const int64_t x = as_int(key, e);
        if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max())
            fail(LCTX_ERR_FORMAT, "key '%.*s' element %lld does not fit in int32", static_cast<int>(key.size()), key.data(),
                 static_cast<long long>(x));
        out.push_back(static_cast<int32_t>(x));
    }
    return out;
}

} // namespace lctx
