// A small JSON reader/writer (head profiles, eval results, the CLI's --json
// output): objects, arrays, strings (with \uXXXX escapes), numbers, booleans
// and null. Malformed text throws LCTX_ERR_FORMAT with the byte offset
// (try_parse returns false instead).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lctx::json {

struct Value {
    enum class Type { NUL, BOOL, NUMBER, STRING, ARRAY, OBJECT } type = Type::NUL;
    bool b = false;
    double num = 0.0;
    std::string str;
    std::vector<Value> arr;
    std::vector<std::pair<std::string, Value>> obj;   // insertion order kept

    // Out of line (json.cpp): defined where Value is complete, so that
    // clang's C++20 constexpr std::vector does not need pair<string, Value>
    // complete inside this definition.
    Value();
    Value(const Value &);
    Value(Value &&) noexcept;
    Value &operator=(const Value &);
    Value &operator=(Value &&) noexcept;
    ~Value();

    const Value *find(const std::string &key) const;   // nullptr if absent or not an object
    // Member `key` as a string / number, or def when absent or of another type.
    std::string get_str(const std::string &key, const std::string &def = "") const;
    double get_num(const std::string &key, double def = 0.0) const;
    bool is_number() const { return type == Type::NUMBER; }
    bool is_string() const { return type == Type::STRING; }
    bool is_array() const { return type == Type::ARRAY; }
    bool is_object() const { return type == Type::OBJECT; }
};

Value parse(const std::string &text);
// As parse, without throwing: false (and the message in *error) on bad text.
bool try_parse(const std::string &text, Value &out, std::string *error = nullptr);

// Helpers for writers.
// "..." with escapes. Invalid UTF-8 (a model may stop mid-character)
// becomes U+FFFD, so the output is always valid JSON.
std::string quote(const std::string &s);
std::string number(double v);                 // shortest round-trip form

} // namespace lctx::json
