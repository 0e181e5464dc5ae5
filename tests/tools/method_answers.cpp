// method_answers: runs every method of lctx through the public C API on one
// fixed input and prints, per method, the selected document positions, the
// greedy answer tokens and the logits of the first decode steps, as JSON.
//
// It is the before/after check of refactors: run the same input through two
// builds (bench/compare_methods.py) and the answers must be identical and the
// logits agree within a tolerance. It uses only include/lctx.h, so it builds
// against any version of the library that has the five stages.
//
//   method_answers (--model GGUF | --tiny) --methods full,reform,... [--steps N]
//                  [--logit-steps K] [--threads T] [--kv f32|f16|q8]
//                  (--doc-file F --question TEXT | --doc-tokens N --seed S)
//
// --tiny uses the 2-layer random test model of tests/unit/engine_tiny_model.h.
// --doc-tokens N makes a document of N pseudo-random token ids (seeded) and a
// 12-token question of the same kind; --doc-file wraps the file and the
// question in the model's chat template as `lctx run` does.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lctx.h"

#include "engine_tiny_model.h"

namespace {

[[noreturn]] void die(const char *what, lctx_status st) {
    std::fprintf(stderr, "method_answers: %s: %s (%s)\n", what, lctx_status_string(st), lctx_last_error());
    std::exit(1);
}

void check(lctx_status st, const char *what) {
    if (st != LCTX_OK) die(what, st);
}

std::vector<lctx_token> tokenize(const lctx_model *m, const std::string &text, bool add_special) {
    size_t n = 0;
    lctx_status st = lctx_tokenize(m, text.data(), text.size(), add_special, true, nullptr, 0, &n);
    if (st != LCTX_OK && st != LCTX_ERR_BUFFER_TOO_SMALL) die("tokenize", st);
    std::vector<lctx_token> t(n);
    check(lctx_tokenize(m, text.data(), text.size(), add_special, true, t.data(), t.size(), &n), "tokenize");
    t.resize(n);
    return t;
}

// The chat template split around the document, as `lctx run` does.
void chat_parts(const lctx_model *m, const std::string &question, std::string &before, std::string &after) {
    const std::string mark = "\x01\x02LCTXDOC\x02\x01";
    const std::string content = mark + "\n\n" + question;
    lctx_chat_message msg{"user", content.c_str()};
    size_t n = 0;
    lctx_status st = lctx_chat_apply(m, &msg, 1, true, nullptr, 0, &n);
    if (st != LCTX_ERR_BUFFER_TOO_SMALL && st != LCTX_OK) die("chat template", st);
    std::vector<char> out(n + 1);
    check(lctx_chat_apply(m, &msg, 1, true, out.data(), out.size(), &n), "chat template");
    const std::string text(out.data(), n);
    const size_t at = text.find(mark);
    if (at == std::string::npos) {
        std::fprintf(stderr, "method_answers: the chat template dropped the document\n");
        std::exit(1);
    }
    before = text.substr(0, at);
    after = text.substr(at + mark.size());
}

// Method names by enum value (the values are part of the ABI).
const char *const kMethodNames[] = {"full",      "reform", "ilre", "reattention", "refreshkv", "truncate",
                                    "streaming", "h2o",    "tova", "snapkv",      "infinipot", "infllm"};

int method_value(const std::string &name) {
    for (int i = 0; i < int(sizeof kMethodNames / sizeof *kMethodNames); ++i)
        if (name == kMethodNames[i]) return i;
    std::fprintf(stderr, "method_answers: unknown method '%s'\n", name.c_str());
    std::exit(2);
}

std::string arg(int argc, char **argv, const char *name, const char *def) {
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
    return def;
}

bool flag(int argc, char **argv, const char *name) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], name) == 0) return true;
    return false;
}

} // namespace

int main(int argc, char **argv) {
    const std::string methods = arg(argc, argv, "--methods", "full,reform,ilre,truncate,streaming,h2o,tova,snapkv,"
                                                             "infinipot,infllm");
    const int steps = std::atoi(arg(argc, argv, "--steps", "16").c_str());
    const int logit_steps = std::atoi(arg(argc, argv, "--logit-steps", "4").c_str());
    const int threads = std::atoi(arg(argc, argv, "--threads", "0").c_str());

    lctx_model *m = nullptr;
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = threads;
    if (flag(argc, argv, "--tiny")) {
        const std::vector<uint8_t> bytes = engine_test::make_tiny_llama();
        check(lctx_model_load_from_memory(bytes.data(), bytes.size(), &mp, &m), "loading the tiny model");
    } else {
        check(lctx_model_load(arg(argc, argv, "--model", "").c_str(), &mp, &m), "loading the model");
    }
    const int32_t n_vocab = lctx_model_n_vocab(m);

    std::vector<lctx_token> doc, query;
    if (flag(argc, argv, "--doc-file")) {
        std::ifstream f(arg(argc, argv, "--doc-file", ""), std::ios::binary);
        if (!f) {
            std::fprintf(stderr, "method_answers: cannot read --doc-file\n");
            return 1;
        }
        std::stringstream ss;
        ss << f.rdbuf();
        std::string before, after;
        chat_parts(m, arg(argc, argv, "--question", ""), before, after);
        doc = tokenize(m, before, true);
        const std::vector<lctx_token> body = tokenize(m, ss.str(), false);
        doc.insert(doc.end(), body.begin(), body.end());
        query = tokenize(m, after, false);
    } else {
        const int n = std::atoi(arg(argc, argv, "--doc-tokens", "3000").c_str());
        std::mt19937 rng(static_cast<uint32_t>(std::atoi(arg(argc, argv, "--seed", "1").c_str())));
        // Ids above the byte/control range of a SentencePiece vocab.
        const int lo = std::min(259, n_vocab / 2);
        for (int i = 0; i < n; ++i) doc.push_back(lo + int32_t(rng() % uint32_t(n_vocab - lo)));
        for (int i = 0; i < 12; ++i) query.push_back(lo + int32_t(rng() % uint32_t(n_vocab - lo)));
    }

    std::printf("{\"n_doc\": %zu, \"n_query\": %zu, \"n_vocab\": %d, \"methods\": {", doc.size(), query.size(),
                n_vocab);
    std::stringstream list(methods);
    std::string name;
    bool first_method = true;
    while (std::getline(list, name, ',')) {
        lctx_session_params sp;
        lctx_session_default_params(&sp);
        const int mv = method_value(name);
        std::memcpy(&sp.method, &mv, sizeof mv);
        sp.n_threads = threads;
        if (mv == 0) sp.n_ctx = static_cast<int32_t>(doc.size() + query.size() + steps + 1);
#if LCTX_ABI_VERSION >= 1   // the KV element type (older libraries: f32 only)
        if (arg(argc, argv, "--kv", "f32") == "f16") sp.kv_type = LCTX_KV_F16;
#endif
        if (arg(argc, argv, "--kv", "f32") == "q8") {   // by value: older headers lack LCTX_KV_Q8 (their library refuses it)
            const int32_t q8 = 2;
            std::memcpy(&sp.kv_type, &q8, sizeof q8);
        }
        lctx_session *s = nullptr;
        check(lctx_session_create(m, &sp, &s), name.c_str());
        const size_t step = 1000;   // feed calls of an odd size: boundaries must not matter
        for (size_t at = 0; at < doc.size(); at += step)
            check(lctx_feed_chunk(s, doc.data() + at, std::min(step, doc.size() - at)), "feed");
        check(lctx_build_index(s), "build_index");
        lctx_selection *sel = nullptr;
        check(lctx_select(s, query.data(), query.size(), &sel), "select");
        std::vector<int64_t> pos(static_cast<size_t>(lctx_selection_size(sel)));
        lctx_selection_positions(sel, pos.data(), static_cast<int64_t>(pos.size()));
        check(lctx_recompute(s, sel), "recompute");
        lctx_sampling_params samp;
        lctx_sampling_default_params(&samp);
        std::vector<lctx_token> answer;
        std::vector<std::vector<float>> logits;
        for (int i = 0; i < steps; ++i) {
            if (i < logit_steps) {
                const float *l = lctx_session_logits(s);
                logits.emplace_back(l, l + n_vocab);
            }
            lctx_token t = 0;
            check(lctx_decode(s, &samp, &t), "decode");
            answer.push_back(t);
        }
        // Positions hashed (FNV-1a) plus their count: the list itself can be long.
        uint64_t h = 1469598103934665603ull;
        for (int64_t p : pos) {
            for (int b = 0; b < 8; ++b) {
                h ^= static_cast<uint64_t>(p >> (8 * b)) & 0xff;
                h *= 1099511628211ull;
            }
        }
        std::printf("%s\n\"%s\": {\"n_selected\": %zu, \"selected_hash\": \"%016" PRIx64 "\", \"tokens\": [",
                    first_method ? "" : ",", name.c_str(), pos.size(), h);
        for (size_t i = 0; i < answer.size(); ++i) std::printf("%s%d", i ? ", " : "", answer[i]);
        std::printf("], \"logits\": [");
        for (size_t i = 0; i < logits.size(); ++i) {
            std::printf("%s[", i ? ", " : "");
            for (size_t j = 0; j < logits[i].size(); ++j) std::printf("%s%.9g", j ? "," : "", logits[i][j]);
            std::printf("]");
        }
        std::printf("]}");
        std::fflush(stdout);
        first_method = false;
        lctx_selection_free(sel);
        lctx_session_free(s);
    }
    std::printf("}}\n");
    lctx_model_free(m);
    return 0;
}
