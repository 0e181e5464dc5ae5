// A small JSON reader/writer for the eval results (one object per line).
// Numbers are doubles; objects keep their key order.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lctx::eval {

struct Json {
    enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
    Type type = Type::kNull;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Json> array;
    std::vector<std::pair<std::string, Json>> object;

    const Json *get(const std::string &key) const;   // nullptr when absent or not an object
    std::string str(const std::string &key, const std::string &def = "") const;
    double num(const std::string &key, double def = 0) const;
};

// Parses one JSON value (the whole text). False with *error set on bad input.
bool parse_json(const std::string &text, Json &out, std::string *error = nullptr);

// s as a JSON string literal. Invalid UTF-8 (a model may stop mid-character)
// becomes U+FFFD so that every line stays valid JSON.
std::string json_quote(const std::string &s);

} // namespace lctx::eval
