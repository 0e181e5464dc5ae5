// lctx heads --ilre -m MODEL: ILRe's offline choice of the retrieval layer
// (docs/methods/ilre.md, "Choosing the retrieval layer"). Builds passkey
// needle samples as the paper does ("The <KEY-ID> magic passkey is
// <digits>." in filler prose at 20 depths, several key lengths), encodes each
// once with the streaming shallow prefill indexing the keys of every layer
// (a layer's input does not depend on which layer is the retrieval layer),
// selects `budget` tokens at every layer with the question's scores and the
// multi-kernel allocator, and counts a layer as a hit when every token of the
// key id and of the value is gathered. The retrieval layer is the smallest
// layer with the highest recall. Writes the model's profile (its REFORM
// heads from --heads or the built-in profile, and the "ilre" member).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "cli.h"
#include "common/error.h"
#include "common/json.h"
#include "eval/haystack.h"
#include "model/model.h"
#include "session/head_profile.h"
#include "session/ilre_allocator.h"
#include "session/ilre_encoder.h"
#include "session/ilre_scorer.h"

namespace lctx::cli {

namespace {

const char *kKeyWords[] = {"dog", "cat", "yellow", "red", "blue", "cup", "green", "lamp", "stone", "river", "apple",
                           "chair", "cloud", "horse", "silver", "window", "garden", "paper", "orange", "bird",
                           "table", "forest", "purple", "coin", "bread", "sun", "moon", "boat", "candle", "hat"};

struct PasskeySample {
    std::vector<int32_t> doc, query;
    std::vector<int64_t> gold;   // document positions of the key id and value tokens
};

PasskeySample make_sample(const Tokenizer &tok, std::mt19937 &rng, int64_t length, double depth, int digits,
                          uint64_t seed) {
    std::string key;
    for (int i = 0; i < 3; ++i) key += std::string(kKeyWords[rng() % 30]) + "-";
    key += std::to_string(10 + rng() % 90);
    std::string value;
    for (int i = 0; i < digits; ++i) value += char('0' + rng() % 10);
    PasskeySample s;
    s.query = tok.tokenize("\n\n# What's the " + key + " magic passkey?\n\nThe " + key + " magic passkey is ", false,
                           true);
    const std::vector<std::vector<int32_t>> needle = {tok.tokenize("\n\nThe ", false, false),
                                                      tok.tokenize(key, false, false),
                                                      tok.tokenize(" magic passkey is ", false, false),
                                                      tok.tokenize(value, false, false), tok.tokenize(".\n", false, false)};
    int64_t needle_len = 0;
    for (const auto &p : needle) needle_len += static_cast<int64_t>(p.size());
    // Filler sentences up to the length (the document starts with BOS if the model has one).
    std::vector<int32_t> bos = tok.tokenize("", true, false);
    const int64_t room = length - needle_len - static_cast<int64_t>(s.query.size() + bos.size());
    std::vector<std::vector<int32_t>> sents;
    int64_t have = 0;
    for (int64_t n = 64; have < room; n *= 2) {
        sents.clear();
        have = 0;
        for (const std::string &t : eval::haystack_sentences(eval::Haystack::kProse, seed, n)) {
            sents.push_back(tok.tokenize(" " + t, false, false));
            have += static_cast<int64_t>(sents.back().size());
            if (have >= room) break;
        }
    }
    const size_t at = static_cast<size_t>(depth * double(sents.size()));
    s.doc = bos;
    for (size_t i = 0; i <= sents.size(); ++i) {
        if (i == at) {
            for (size_t p = 0; p < needle.size(); ++p) {
                for (int32_t id : needle[p]) {
                    if (p == 1 || p == 3) s.gold.push_back(static_cast<int64_t>(s.doc.size()));
                    s.doc.push_back(id);
                }
            }
        }
        if (i < sents.size()) s.doc.insert(s.doc.end(), sents[i].begin(), sents[i].end());
    }
    return s;
}

} // namespace

int cmd_heads_ilre(int argc, char **argv) {
    static const char *usage =
        "usage: lctx heads --ilre -m MODEL [-o PROFILE.json] [options]\n"
        "Chooses ILRe's retrieval layer with a passkey task (docs/methods/ilre.md).\n"
        "  -o, --output FILE    where to write the profile (default: stdout; --out is the same)\n"
        "  --heads FILE         REFORM heads to keep in the profile (default: the built-in profile)\n"
        "  --length N           tokens per sample (default: min(8192, n_ctx_train))\n"
        "  --depths N           needle depths, spread over the document (default 20)\n"
        "  --digits LIST        passkey lengths in digits (default 8,16,32)\n"
        "  --budget N           tokens gathered per sample (default 1024, as the paper)\n"
        "  --chunk N            encoding chunk (default: ILRe's, min(1024, n_ctx_train/8))\n"
        "  --seed S             (default 1)\n"
        "  -t, --threads N\n";
    Args a = parse_args(argc, argv,
                        {"--model", "--output", "--heads", "--length", "--depths", "--digits", "--budget", "--chunk",
                         "--seed", "--threads"},
                        {"--ilre"}, {{"-m", "--model"}, {"-o", "--output"}, {"--out", "--output"}, {"-t", "--threads"}}, usage);
    if (!a.has("--model")) die("heads --ilre needs -m MODEL\n\n%s", usage);
    try {
        const int threads = threads_arg(a);
        const uint32_t seed = static_cast<uint32_t>(a.get_u64("--seed", 1, UINT32_MAX));
        const int64_t n_depths = a.get_int("--depths", 20, 1, 1000000), budget = a.get_int("--budget", 1024, 1, INT32_MAX);
        a.get_int("--length", 0, 256, INT32_MAX);   // the ranges, before the model loads
        a.get_int("--chunk", 0, 16, INT32_MAX);
        auto model = Model::load_file(a.get("--model"), true, threads);
        const Hparams &hp = model->hparams();
        const int64_t n_train = hp.n_ctx_train > 0 ? hp.n_ctx_train : 4096;
        const int64_t length = a.get_int("--length", std::min<int64_t>(8192, n_train), 256, INT32_MAX);
        int64_t chunk = 1024;
        while (chunk > 16 && chunk > n_train / 8) chunk /= 2;
        chunk = a.get_int("--chunk", chunk, 16, INT32_MAX);
        if (length < 256 || n_depths < 1 || budget < 1 || chunk < 16)
            die("heads --ilre: --length >= 256, --depths >= 1, --budget >= 1 and --chunk >= 16 are needed");
        std::vector<int> digits;
        {
            std::stringstream ss(a.get("--digits", "8,16,32"));
            for (std::string d; std::getline(ss, d, ',');) {
                char *end = nullptr;
                const long v = std::strtol(d.c_str(), &end, 10);
                if (d.empty() || *end || v < 1 || v > 512) die("--digits: '%s' is not a length in 1..512", d.c_str());
                digits.push_back(v);
            }
        }
        HeadProfile profile = choose_head_profile(hp, a.get("--heads"));
        std::unique_ptr<Backend> backend = make_cpu_backend(threads > 0 ? threads : model->n_threads());
        std::vector<int32_t> layers(static_cast<size_t>(hp.n_layer));
        for (int32_t l = 0; l < hp.n_layer; ++l) layers[static_cast<size_t>(l)] = l;
        IlreEncoderConfig cfg;
        cfg.sink = 4;
        cfg.chunk = chunk;
        cfg.window = chunk / 2;
        const std::vector<int32_t> max_k{2, 4, 8};
        const std::vector<int32_t> avg_k{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
        std::vector<int64_t> hits(static_cast<size_t>(hp.n_layer), 0);
        std::vector<std::vector<int64_t>> hits_by_digits(digits.size(), std::vector<int64_t>(hits.size(), 0));
        std::mt19937 rng(seed);
        const double t0 = now_s();
        int64_t n_samples = 0;
        for (size_t di = 0; di < digits.size(); ++di) {
            for (int64_t k = 0; k < n_depths; ++k) {
                const double depth = n_depths == 1 ? 0.5 : double(k) / double(n_depths);
                PasskeySample s = make_sample(model->tokenizer(), rng, length, depth, digits[di], rng());
                IlreEncoder enc(*model, *backend, cfg, layers);
                const int64_t n = static_cast<int64_t>(s.doc.size());
                for (int64_t at = 0; at < n;) {
                    const int64_t m = std::min(enc.step_size(), n - at);
                    enc.step(s.doc.data() + at, m, nullptr);
                    at += m;
                }
                std::vector<std::vector<float>> Q;
                enc.queries(s.query.data(), static_cast<int64_t>(s.query.size()), Q, nullptr);
                std::vector<float> scores(static_cast<size_t>(n));
                for (int32_t l = 0; l < hp.n_layer; ++l) {
                    IlreScoreArgs sa;
                    for (int32_t g = 0; g < hp.n_head_kv; ++g) sa.keys.push_back(&enc.keys(static_cast<size_t>(l), g));
                    sa.n_keys = n;
                    sa.queries = Q[static_cast<size_t>(l)].data();
                    sa.n_q = static_cast<int64_t>(s.query.size());
                    ilre_scores(*backend, hp, sa, scores.data());
                    const auto I = ilre_allocate(scores.data(), n, cfg.sink, budget, max_k, avg_k);
                    const bool hit = std::all_of(s.gold.begin(), s.gold.end(),
                                                 [&](int64_t t) { return std::binary_search(I.begin(), I.end(), t); });
                    hits[static_cast<size_t>(l)] += hit;
                    hits_by_digits[di][static_cast<size_t>(l)] += hit;
                }
                ++n_samples;
                std::fprintf(stderr, "\rsample %lld/%lld (%lld tokens, %d digits), %.0f s   ", (long long)n_samples,
                             (long long)(n_depths * int64_t(digits.size())), (long long)n, digits[di], now_s() - t0);
            }
        }
        std::fputc('\n', stderr);
        int32_t best = 0;
        for (int32_t l = 1; l < hp.n_layer; ++l)
            if (hits[static_cast<size_t>(l)] > hits[static_cast<size_t>(best)]) best = l;
        std::ostringstream extra;
        extra << "  \"ilre\": {\"retrieval_layer\": " << best << ",\n    \"recipe\": {\"tool\": \"lctx heads --ilre\", "
              << "\"task\": \"passkey: 'The <3 words>-<2 digits> magic passkey is <digits>.' in filler prose\", "
              << "\"length\": " << length << ", \"depths\": " << n_depths << ", \"digits\": [";
        for (size_t i = 0; i < digits.size(); ++i) extra << (i ? ", " : "") << digits[i];
        extra << "], \"budget\": " << budget << ", \"sink\": 4, \"chunk\": " << chunk << ", \"window\": " << chunk / 2
              << ", \"seed\": " << seed << ", \"rule\": \"smallest layer with the highest recall; "
              << "a hit gathers every token of the key id and the value\"},\n    \"recall\": {\"columns\": "
              << "[\"layer\", \"all\"";
        for (int d : digits) extra << ", \"" << d << " digits\"";
        extra << "], \"rows\": [";
        for (int32_t l = 0; l < hp.n_layer; ++l) {
            extra << (l ? ",\n      " : "\n      ") << "[" << l << ", "
                  << json::number(double(hits[static_cast<size_t>(l)]) / double(n_samples));
            for (size_t di = 0; di < digits.size(); ++di)
                extra << ", " << json::number(double(hits_by_digits[di][static_cast<size_t>(l)]) / double(n_depths));
            extra << "]";
        }
        extra << "\n    ]}}";
        if (profile.origin == "fallback") profile.name = "fallback REFORM heads; ILRe layer measured";
        profile.model_shape = model_shape_key(hp);
        const std::string out = head_profile_json(profile, extra.str());
        if (a.has("--output")) {
            std::ofstream f(a.get("--output"));
            if (!(f << out)) die("cannot write %s", a.get("--output").c_str());
        } else {
            std::fputs(out.c_str(), stdout);
        }
        std::fprintf(stderr, "ILRe retrieval layer: %d (recall %.2f; %lld samples, %.0f s)\n", best,
                     double(hits[static_cast<size_t>(best)]) / double(n_samples), (long long)n_samples, now_s() - t0);
    } catch (const Error &e) {
        die("%s", e.what());
    }
    return 0;
}

} // namespace lctx::cli
