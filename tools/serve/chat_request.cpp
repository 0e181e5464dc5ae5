#include "serve/chat_request.h"

#include <cmath>

#include "cli.h"

namespace lctx::serve {

using nlohmann::json;

namespace {

constexpr int kMaxDepth = 64;

// Deepest nesting of [ and { outside strings; the JSON parser and the values
// it builds recurse per level, so a body of a million '[' is refused first.
int nesting_depth(const std::string &s) {
    int depth = 0, worst = 0;
    bool in_str = false, esc = false;
    for (char c : s) {
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            worst = std::max(worst, ++depth);
            if (worst > kMaxDepth) return worst;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return worst;
}

const char *type_name(const json &v) { return v.type_name(); }

ApiError wrong_type(const std::string &field, const char *want, const json &v) {
    return bad_request("'" + field + "' must be " + want + ", got " + type_name(v), field);
}

double number(const json &body, const char *field, double lo, double hi) {
    const json &v = body.at(field);
    if (!v.is_number()) throw wrong_type(field, "a number", v);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) {
        char b[160];
        std::snprintf(b, sizeof b, "'%s' is %g: expected a number from %g to %g", field, x, lo, hi);
        throw bad_request(b, field);
    }
    return x;
}

int64_t integer(const json &body, const char *field, int64_t lo, int64_t hi) {
    const json &v = body.at(field);
    if (!v.is_number_integer()) throw wrong_type(field, "an integer", v);
    // Non-negative numbers parse as unsigned: compare them as such (2^64 - 1 must not wrap to -1).
    const bool out = v.is_number_unsigned()
                         ? (v.get<uint64_t>() > uint64_t(hi) || (lo > 0 && v.get<uint64_t>() < uint64_t(lo)))
                         : (v.get<int64_t>() < lo || v.get<int64_t>() > hi);
    if (out)
        throw bad_request("'" + std::string(field) + "' is " + v.dump() + ": expected an integer from " +
                              std::to_string(lo) + " to " + std::to_string(hi),
                          field);
    return v.get<int64_t>();
}

bool boolean(const json &body, const char *field) {
    const json &v = body.at(field);
    if (!v.is_boolean()) throw wrong_type(field, "a boolean", v);
    return v.get<bool>();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json &c, const std::string &field) {
    if (c.is_string()) return c.get<std::string>();
    if (c.is_null()) return "";
    if (!c.is_array()) throw wrong_type(field, "a string or an array of text parts", c);
    std::string out;
    for (size_t i = 0; i < c.size(); ++i) {
        const json &p = c[i];
        const std::string pf = field + "[" + std::to_string(i) + "]";
        if (!p.is_object()) throw wrong_type(pf, "an object", p);
        auto t = p.find("type");
        if (t == p.end() || !t->is_string()) throw bad_request("'" + pf + ".type' must be a string", pf + ".type");
        if (*t != "text") throw bad_request("'" + pf + ".type' is '" + t->get<std::string>() +
                                                "': only text parts are supported",
                                            pf + ".type");
        auto x = p.find("text");
        if (x == p.end() || !x->is_string()) throw bad_request("'" + pf + ".text' must be a string", pf + ".text");
        out += x->get<std::string>();
    }
    return out;
}

} // namespace

void check_utf8(const std::string &text, const std::string &field) {
    const size_t bad = cli::utf8_invalid_at(text);
    if (bad != std::string::npos)
        throw bad_request("'" + field + "' is not valid UTF-8 (invalid byte sequence at byte offset " +
                              std::to_string(bad) + ")",
                          field);
}

json parse_json_body(const std::string &body) {
    if (nesting_depth(body) > kMaxDepth)
        throw bad_request("the body nests arrays or objects more than " + std::to_string(kMaxDepth) + " deep");
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded()) {
        // Say where: parse again for the message (the exception carries the byte).
        std::string msg = "the body is not valid JSON";
        try {
            const json again = json::parse(body);
            (void)again;
        } catch (const json::parse_error &e) {
            msg += ": byte " + std::to_string(e.byte);
        }
        throw bad_request(msg);
    }
    return j;
}

ChatRequest parse_chat_request(const json &body) {
    if (!body.is_object()) throw bad_request("the body must be a JSON object, got " + std::string(type_name(body)));
    ChatRequest r;
    lctx_sampling_default_params(&r.sampling);
    r.sampling.temperature = 1.0f;   // OpenAI's default; 0 is greedy
    r.sampling.repeat_last_n = 64;

    auto has = [&](const char *k) { return body.contains(k) && !body.at(k).is_null(); };
    if (!body.contains("model")) throw bad_request("'model' is required", "model");
    if (!body.at("model").is_string()) throw wrong_type("model", "a string", body.at("model"));
    r.model = body.at("model").get<std::string>();

    if (!body.contains("messages")) throw bad_request("'messages' is required", "messages");
    const json &msgs = body.at("messages");
    if (!msgs.is_array()) throw wrong_type("messages", "an array", msgs);
    if (msgs.empty()) throw bad_request("'messages' is empty", "messages");
    for (size_t i = 0; i < msgs.size(); ++i) {
        const json &m = msgs[i];
        const std::string f = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw wrong_type(f, "an object", m);
        auto role = m.find("role");
        if (role == m.end() || !role->is_string()) throw bad_request("'" + f + ".role' must be a string", f + ".role");
        std::string rs = role->get<std::string>();
        if (rs == "developer") rs = "system";   // OpenAI's newer name of the system role
        if (rs != "system" && rs != "user" && rs != "assistant")
            throw bad_request("'" + f + ".role' is '" + rs + "': expected system, user or assistant", f + ".role");
        auto c = m.find("content");
        if (c == m.end()) throw bad_request("'" + f + ".content' is required", f + ".content");
        ChatMessage cm{rs, content_text(*c, f + ".content")};
        check_utf8(cm.content, f + ".content");
        r.messages.push_back(std::move(cm));
    }

    if (has("stream")) r.stream = boolean(body, "stream");
    if (has("stream_options")) {
        const json &so = body.at("stream_options");
        if (!so.is_object()) throw wrong_type("stream_options", "an object", so);
        if (so.contains("include_usage") && !so.at("include_usage").is_null())
            r.include_usage = boolean(so, "include_usage");
    }
    if (has("max_completion_tokens")) r.max_tokens = integer(body, "max_completion_tokens", 1, INT32_MAX);
    if (has("max_tokens")) r.max_tokens = integer(body, "max_tokens", 1, INT32_MAX);
    if (has("temperature")) r.sampling.temperature = float(number(body, "temperature", 0.0, 2.0));
    if (has("top_p")) {
        r.sampling.top_p = float(number(body, "top_p", 0.0, 1.0));
        if (r.sampling.top_p <= 0) throw bad_request("'top_p' must be above 0", "top_p");
    }
    if (has("top_k")) r.sampling.top_k = int32_t(integer(body, "top_k", 0, INT32_MAX));
    if (has("min_p")) r.sampling.min_p = float(number(body, "min_p", 0.0, 1.0));
    if (has("repeat_penalty")) {
        r.sampling.repeat_penalty = float(number(body, "repeat_penalty", 0.0, 100.0));
        if (r.sampling.repeat_penalty <= 0) throw bad_request("'repeat_penalty' must be above 0", "repeat_penalty");
    }
    if (has("seed")) {
        const json &v = body.at("seed");
        if (!v.is_number_integer()) throw wrong_type("seed", "an integer", v);
        r.sampling.seed = v.is_number_unsigned() ? v.get<uint64_t>() : uint64_t(v.get<int64_t>());
    }
    if (has("stop")) {
        const json &v = body.at("stop");
        if (v.is_string()) {
            r.stop.push_back(v.get<std::string>());
        } else if (v.is_array()) {
            if (v.size() > 4) throw bad_request("'stop' holds at most 4 sequences", "stop");
            for (const json &s : v) {
                if (!s.is_string()) throw wrong_type("stop[]", "a string", s);
                r.stop.push_back(s.get<std::string>());
            }
        } else {
            throw wrong_type("stop", "a string or an array of strings", v);
        }
        for (const auto &s : r.stop) check_utf8(s, "stop");
    }
    for (const char *f : {"presence_penalty", "frequency_penalty"})
        if (has(f) && number(body, f, -2.0, 2.0) != 0.0)
            throw bad_request(std::string("'") + f + "' is not supported (use repeat_penalty)", f);
    if (has("n") && integer(body, "n", 1, 128) != 1) throw bad_request("'n' must be 1: one choice per request", "n");
    if (has("logprobs") && boolean(body, "logprobs")) throw bad_request("'logprobs' is not supported", "logprobs");
    for (const char *f : {"tools", "functions"})
        if (has(f) && !(body.at(f).is_array() && body.at(f).empty()))
            throw bad_request(std::string("'") + f + "' is not supported", f);
    if (has("response_format")) {
        const json &v = body.at("response_format");
        if (!v.is_object()) throw wrong_type("response_format", "an object", v);
        if (!v.contains("type") || v.at("type") != "text")
            throw bad_request("'response_format' must be {\"type\": \"text\"}", "response_format");
    }
    if (has("document_id")) {
        const json &v = body.at("document_id");
        if (!v.is_string()) throw wrong_type("document_id", "a string", v);
        r.document_id = v.get<std::string>();
    }
    return r;
}

} // namespace lctx::serve
