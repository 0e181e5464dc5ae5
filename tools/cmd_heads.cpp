// lctx heads -m MODEL: offline identification of REFORM's embedding heads
// (spec §4). Builds synthetic samples of two tasks in filler text:
//   pattern:  "The value corresponding to the id {key} is {value}." x16, one
//             queried ("What is the value corresponding to the id {key}?");
//             gold = the queried sentence;
//   semantic: bridge facts "{Person} was born in {Town}." and "{Town} lies in
//             the province of {Region}." among distractor facts about other
//             entities; question "In which province was {Person} born?" (the
//             bridge town is not in it); gold = the two supporting facts;
// encodes each sample (context + question) with the REFORM encoder (C = 1024,
// B = 512) capturing every Q/K/V head of the layers under 70% depth, scores
// every head by Mean Normalised Rank, and writes a JSON profile with the two
// best heads of each task and the MNR table.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "cli.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "model/model.h"
#include "session/embedding_store.h"
#include "session/head_mnr.h"
#include "session/head_profile.h"
#include "common/json.h"
#include "session/reform_encoder.h"

namespace lctx::cli {

namespace {

struct Sample {
    std::vector<int32_t> ids;      // context ++ question
    int64_t n_ctx = 0;             // context tokens
    std::vector<bool> gold;        // over the context
    std::vector<bool> qmask;       // over ids: question tokens that are scored
};

const char *kWords[] = {"river", "market", "history", "winter", "method", "garden", "engine", "letter", "village",
    "science", "harbor", "language", "theory", "window", "forest", "painter", "council", "railway", "season",
    "mountain", "record", "museum", "bridge", "student", "machine", "festival", "castle", "journal", "island",
    "library", "teacher", "factory", "village", "orchard", "station", "chapter", "valley", "signal", "summer"};
const char *kVerbs[] = {"describes", "follows", "changes", "supports", "reveals", "connects", "measures", "shapes",
                        "explains", "remembers", "improves", "crosses"};
const char *kFirst[] = {"Alaric", "Brenna", "Corvin", "Delphine", "Eamon", "Fiora", "Garrick", "Helena", "Isolde",
                        "Jorah", "Kestrel", "Lysander", "Marisol", "Niamh", "Oswin", "Perrin", "Quilla", "Rowan"};
const char *kLast[] = {"Ashdown", "Blackwood", "Carrow", "Dunmore", "Ellery", "Fenwick", "Galloway", "Harrow",
                       "Ivers", "Kincaid", "Lockhart", "Merriden", "Northcott", "Pembry", "Quarrel", "Redfern"};
const char *kTowns[] = {"Velmora", "Tarnwick", "Oskaby", "Brindlemoor", "Caldreth", "Fennhollow", "Grisport",
                        "Hollinsby", "Irvesk", "Jarrowgate", "Kelvashire", "Lunmarsh", "Mordale", "Nettlecombe"};
const char *kRegions[] = {"Astoria", "Belravia", "Corundel", "Drevania", "Elsmark", "Farovia", "Gelderin",
                          "Hesperia", "Ithrane", "Jovalis"};

template <size_t N> const char *pick(std::mt19937 &r, const char *(&a)[N]) { return a[r() % N]; }

// Filler: sentences from a text file (split at ". "), or template prose.
struct Filler {
    std::vector<std::string> sentences;
    std::string next(std::mt19937 &r) {
        if (!sentences.empty()) return sentences[r() % sentences.size()] + " ";
        std::string s = "The ";
        s += pick(r, kWords);
        s += " ";
        s += pick(r, kVerbs);
        s += " the ";
        s += pick(r, kWords);
        s += r() % 2 ? " near the " : " of the ";
        s += pick(r, kWords);
        return s + ". ";
    }
};

std::string rand_key(std::mt19937 &r) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::string s;
    for (int i = 0; i < 10; ++i) s += al[r() % 62];
    return s;
}

// Assembles a sample from (text, gold) segments placed in filler at random
// sentence boundaries, then the question.
Sample build(const Tokenizer &tok, Filler &filler, std::mt19937 &r, int64_t length,
             std::vector<std::pair<std::string, bool>> inserts, const std::string &question) {
    Sample s;
    std::vector<int32_t> filler_ids;
    std::vector<std::vector<int32_t>> ins;
    int64_t ins_len = 0;
    for (auto &p : inserts) {
        ins.push_back(tok.tokenize(p.first + " ", false, false));
        ins_len += static_cast<int64_t>(ins.back().size());
    }
    std::vector<int32_t> q = tok.tokenize("\n\nQuestion: " + question, false, false);
    std::vector<int32_t> qtail = tok.tokenize("\nAnswer:", false, false);
    const int64_t budget = length - ins_len - static_cast<int64_t>(q.size() + qtail.size());
    std::vector<std::vector<int32_t>> sents;
    // The sample starts as the engine's documents do: with BOS when the model
    // adds one (Gemma does, SmolLM2 does not); it is never gold.
    for (int32_t id : tok.tokenize("", true, false)) {
        s.ids.push_back(id);
        s.gold.push_back(false);
    }
    int64_t have = static_cast<int64_t>(s.ids.size());
    while (have < budget) {
        sents.push_back(tok.tokenize(filler.next(r), false, false));
        have += static_cast<int64_t>(sents.back().size());
    }
    // Random insertion points (sentence indices), in order.
    std::vector<size_t> at;
    for (size_t i = 0; i < ins.size(); ++i) at.push_back(r() % (sents.size() + 1));
    std::vector<size_t> order(ins.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), r);
    std::sort(at.begin(), at.end());
    size_t k = 0;
    for (size_t si = 0; si <= sents.size(); ++si) {
        while (k < at.size() && at[k] == si) {
            const size_t which = order[k++];
            for (int32_t id : ins[which]) {
                s.ids.push_back(id);
                s.gold.push_back(inserts[which].second);
            }
        }
        if (si < sents.size())
            for (int32_t id : sents[si]) {
                s.ids.push_back(id);
                s.gold.push_back(false);
            }
    }
    s.n_ctx = static_cast<int64_t>(s.ids.size());
    s.qmask.assign(s.ids.size(), false);
    // "Question:" label is not scored, the question text is.
    const size_t label = tok.tokenize("\n\nQuestion:", false, false).size();
    for (size_t i = 0; i < q.size(); ++i) {
        s.ids.push_back(q[i]);
        s.qmask.push_back(i >= label);
    }
    for (int32_t id : qtail) {
        s.ids.push_back(id);
        s.qmask.push_back(false);
    }
    return s;
}

Sample pattern_sample(const Tokenizer &tok, Filler &f, std::mt19937 &r, int64_t length) {
    std::vector<std::pair<std::string, bool>> ins;
    const int n = 16, target = static_cast<int>(r() % n);
    std::string key;
    for (int i = 0; i < n; ++i) {
        std::string k = rand_key(r), v = rand_key(r);
        if (i == target) key = k;
        ins.emplace_back("The value corresponding to the id " + k + " is " + v + ".", i == target);
    }
    return build(tok, f, r, length, ins, "What is the value corresponding to the id " + key + "?");
}

Sample semantic_sample(const Tokenizer &tok, Filler &f, std::mt19937 &r, int64_t length) {
    std::vector<std::pair<std::string, bool>> ins;
    auto person = [&] { return std::string(pick(r, kFirst)) + " " + pick(r, kLast); };
    const std::string who = person(), town = pick(r, kTowns), region = pick(r, kRegions);
    ins.emplace_back(who + " was born in " + town + " and spent a childhood by its old harbour.", true);
    ins.emplace_back(town + " lies in the province of " + region + ", known for its salt marshes.", true);
    for (int i = 0; i < 6; ++i) {   // hard negatives from the same templates
        std::string p = person(), t = pick(r, kTowns), g = pick(r, kRegions);
        if (p == who || t == town) continue;
        ins.emplace_back(i % 2 ? p + " was born in " + t + " and later moved abroad."
                               : t + " lies in the province of " + g + ", far from the coast.", false);
    }
    return build(tok, f, r, length, ins, "In which province was " + who + " born?");
}

} // namespace

int cmd_heads(int argc, char **argv) {
    for (int i = 0; i < argc; ++i)
        if (std::string(argv[i]) == "--ilre") return cmd_heads_ilre(argc, argv);
    static const char *usage =
        "usage: lctx heads -m MODEL [-o PROFILE.json] [options]\n"
        "       lctx heads --ilre -m MODEL ...: ILRe's retrieval layer instead ('lctx heads --ilre --help')\n"
        "  -o, --output FILE    where to write the profile (default: stdout; --out is the same)\n"
        "  --samples N          samples per task (default 20; the paper uses 500)\n"
        "  --length N           tokens per sample (default: min(8192, n_ctx_train))\n"
        "  --filler FILE        text whose sentences fill the haystack (default: template prose)\n"
        "  --depth F            deepest layer fraction allowed (default 0.7: layers < 0.7 n_layer)\n"
        "  --seed S             (default 1)\n"
        "  -t, --threads N\n";
    Args a = parse_args(argc, argv, {"--model", "--output", "--samples", "--length", "--filler", "--depth", "--seed",
                                     "--threads"},
                        {}, {{"-m", "--model"}, {"-o", "--output"}, {"--out", "--output"}, {"-t", "--threads"}}, usage);
    if (!a.has("--model")) die("heads needs -m MODEL\n\n%s", usage);
    try {
        const int threads = threads_arg(a);
        const int64_t n_samples = a.get_int("--samples", 20, 1, 1000000);
        const double depth = a.get_float("--depth", 0.7, 0.0, 1.0, true);
        const uint32_t seed = static_cast<uint32_t>(a.get_u64("--seed", 1, UINT32_MAX));
        a.get_int("--length", 0, 1, INT32_MAX);   // its range, before the model loads
        auto model = Model::load_file(a.get("--model"), true, threads);
        const Hparams &hp = model->hparams();
        const int64_t length = a.get_int("--length", std::min<int64_t>(8192, hp.n_ctx_train > 0 ? hp.n_ctx_train : 8192),
                                         1, INT32_MAX);
        int32_t cap = static_cast<int32_t>(std::ceil(depth * hp.n_layer)) - 1;   // l < depth * n_layer
        cap = std::clamp(cap, 0, hp.n_layer - 1);
        Filler filler;
        if (a.has("--filler")) {
            std::string text = read_file(a.get("--filler"));
            std::string cur;
            for (char c : text) {
                cur += c == '\n' ? ' ' : c;
                if (c == '.' && cur.size() > 20) {
                    size_t b = cur.find_first_not_of(' ');
                    if (b != std::string::npos) filler.sentences.push_back(cur.substr(b));
                    cur.clear();
                }
            }
            if (filler.sentences.size() < 100) die("--filler: fewer than 100 sentences in %s", a.get("--filler").c_str());
        }
        std::vector<HeadSpec> cands;
        for (int32_t l = 0; l <= cap; ++l) {
            for (int32_t h = 0; h < hp.n_head; ++h) cands.push_back({l, HeadKind::Q, h});
            for (int32_t h = 0; h < hp.n_head_kv; ++h) cands.push_back({l, HeadKind::K, h});
            for (int32_t h = 0; h < hp.n_head_kv; ++h) cands.push_back({l, HeadKind::V, h});
        }
        const size_t NC = cands.size();
        const int32_t d = hp.head_dim;
        if (d > 256) die("heads: head_dim %d > 256 is not supported by this tool", d);
        std::unique_ptr<Backend> backend = make_cpu_backend(threads > 0 ? threads : model->n_threads());
        EncoderConfig cfg;
        cfg.chunk = 1024;
        cfg.budget = 512;
        cfg.sink = 128;
        cfg.recent = 128;
        cfg.obs = 128;
        std::mt19937 rng(seed);
        std::vector<double> mnr[2] = {std::vector<double>(NC, 0.0), std::vector<double>(NC, 0.0)};
        const double t0 = now_s();
        for (int task = 0; task < 2; ++task) {
            for (int64_t si = 0; si < n_samples; ++si) {
                Sample s = task == 0 ? pattern_sample(model->tokenizer(), filler, rng, length)
                                     : semantic_sample(model->tokenizer(), filler, rng, length);
                ReformEncoder enc(*model, *backend, cfg, cands);
                EmbeddingStore store(enc.dim());
                const int64_t n = static_cast<int64_t>(s.ids.size());
                for (int64_t at = 0; at < n; at += cfg.chunk)
                    enc.step(s.ids.data() + at, std::min(cfg.chunk, n - at), store, nullptr);
                std::vector<int64_t> qs;
                for (int64_t u = 0; u < n; ++u)
                    if (s.qmask[u]) qs.push_back(u);
                std::vector<double> sample_mnr(NC);
                backend->parallel_for(static_cast<int64_t>(NC), [&](int64_t b, int64_t e, int) {
                    std::vector<float> sc(static_cast<size_t>(s.n_ctx)), qv(qs.size() * d), x(static_cast<size_t>(d));
                    for (int64_t c = b; c < e; ++c) {
                        for (size_t u = 0; u < qs.size(); ++u)
                            for (int32_t i = 0; i < d; ++i) qv[u * d + i] = fp16_to_fp32(store.row(qs[u])[c * d + i]);
                        for (int64_t t = 0; t < s.n_ctx; ++t) {
                            const uint16_t *row = store.row(t) + c * d;
                            for (int32_t i = 0; i < d; ++i) x[i] = fp16_to_fp32(row[i]);
                            float best = -2.0f;
                            for (size_t u = 0; u < qs.size(); ++u) {
                                float acc = 0;
                                for (int32_t i = 0; i < d; ++i) acc += x[i] * qv[u * d + i];
                                best = std::max(best, acc);
                            }
                            sc[t] = best;
                        }
                        sample_mnr[c] = head_mnr(sc, s.gold, 10);
                    }
                });
                for (size_t c = 0; c < NC; ++c) mnr[task][c] += sample_mnr[c] / double(n_samples);
                std::fprintf(stderr, "\r%s sample %lld/%lld (%lld tokens), %.0f s   ", task ? "semantic" : "pattern",
                             (long long)si + 1, (long long)n_samples, (long long)n, now_s() - t0);
            }
        }
        std::fputc('\n', stderr);
        // Two best of each task; duplicates skipped in the second list.
        HeadProfile p;
        p.name = hp.name.empty() ? "lctx heads" : hp.name;
        p.model_shape = model_shape_key(hp);
        for (int task = 0; task < 2; ++task) {
            std::vector<size_t> order(NC);
            for (size_t c = 0; c < NC; ++c) order[c] = c;
            std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return mnr[task][x] < mnr[task][y]; });
            int taken = 0;
            for (size_t c : order) {
                if (taken == 2) break;
                if (std::find(p.heads.begin(), p.heads.end(), cands[c]) != p.heads.end()) continue;
                p.heads.push_back(cands[c]);
                ++taken;
            }
        }
        std::ostringstream extra;
        extra << "  \"recipe\": {\"tool\": \"lctx heads\", \"samples_per_task\": " << n_samples
              << ", \"length\": " << length << ", \"chunk\": 1024, \"budget\": 512, \"sink\": 128, \"recent\": 128,"
              << " \"smoothing\": 21, \"depth_cap\": " << json::number(depth) << ", \"seed\": "
              << seed << ", \"filler\": "
              << json::quote(a.has("--filler") ? "file sentences" : "template prose")
              << ", \"tasks\": [\"pattern: 16 key-value sentences, queried one is gold\", "
              << "\"semantic: two-hop birthplace -> province bridge facts with 6 distractors\"]},\n";
        extra << "  \"mnr_x100\": {\"columns\": [\"layer\", \"kind\", \"head\", \"pattern\", \"semantic\"], \"rows\": [";
        for (size_t c = 0; c < NC; ++c) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "%s[%d, \"%s\", %d, %.3f, %.3f]", c ? ",\n    " : "\n    ",
                          cands[c].layer, head_kind_name(cands[c].kind), cands[c].head, 100 * mnr[0][c],
                          100 * mnr[1][c]);
            extra << buf;
        }
        extra << "\n  ]}";
        const std::string out = head_profile_json(p, extra.str());
        if (a.has("--output")) {
            std::ofstream f(a.get("--output"));
            if (!(f << out)) die("cannot write %s", a.get("--output").c_str());
        } else {
            std::fputs(out.c_str(), stdout);
        }
        std::fprintf(stderr, "heads: %s (%.0f s)\n", p.heads_string().c_str(), now_s() - t0);
    } catch (const Error &e) {
        die("%s", e.what());
    }
    return 0;
}

} // namespace lctx::cli
