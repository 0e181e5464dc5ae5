// A small JSON reader/writer for head profiles: objects, arrays, strings
// (with \uXXXX escapes), numbers, booleans and null. Malformed text throws
// LCTX_ERR_FORMAT with the byte offset.
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

    const Value *find(const std::string &key) const;   // nullptr if absent or not an object
    bool is_number() const { return type == Type::NUMBER; }
    bool is_string() const { return type == Type::STRING; }
    bool is_array() const { return type == Type::ARRAY; }
    bool is_object() const { return type == Type::OBJECT; }
};

Value parse(const std::string &text);

// Helpers for writers.
std::string quote(const std::string &s);      // "..." with escapes
std::string number(double v);                 // shortest round-trip form

} // namespace lctx::json
