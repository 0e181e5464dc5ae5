// lctx bench -m MODEL: prefill and decode throughput of the forward pass
// (the engine's Forward + KvStore, as the FULL method runs them) on random
// token ids, printed as one JSON object on stdout. bench/run.py runs it side
// by side with llama.cpp. --backend picks the backend (the registry's; the
// JSON's "backend" names the one that ran, "cpu" after a fallback). --profile adds the per-op time breakdown and the
// GEMM rate against the machine's measured FMA peak.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench_reform.h"
#include "cli.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "engine/forward.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "engine/kv_store.h"
#include "model/model.h"

namespace lctx::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<int64_t> parse_list(const std::string &s) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        char *end = nullptr;
        const long long v = std::strtoll(item.c_str(), &end, 10);
        if (item.empty() || *end || v <= 0 || v > INT32_MAX)
            die("'%s' is not a comma-separated list of integers from 1 to %d", s.c_str(), INT32_MAX);
        out.push_back(v);
    }
    return out;
}

// Multiply-adds of the layer matmuls per token (q, k, v, o, gate, up, down).
std::string json_profile(const ForwardProfile &p) {
    std::string s = "{";
    char buf[96];
    for (int op = 0; op < ForwardProfile::N_OPS; ++op) {
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.6f", op ? ", " : "", ForwardProfile::name(op), p.seconds[op]);
        s += buf;
    }
    std::snprintf(buf, sizeof buf, ", \"total\": %.6f, \"tokens\": %lld}", p.total(), static_cast<long long>(p.tokens));
    return s + buf;
}

double matmul_seconds(const ForwardProfile &p) {
    return p.seconds[ForwardProfile::QKV] + p.seconds[ForwardProfile::ATTN_OUT] +
           p.seconds[ForwardProfile::FFN_GATE_UP] + p.seconds[ForwardProfile::FFN_DOWN];
}

struct Bench {
    const Model &model;
    Backend &backend;
    Forward fwd;
    std::mt19937 rng{1234};
    std::vector<float> logits;

    Bench(const Model &m, Backend &be) : model(m), backend(be), fwd(m, be) {}

    std::vector<int32_t> random_tokens(int64_t n) {
        std::uniform_int_distribution<int32_t> u(0, model.hparams().n_vocab - 1);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto &x : t) x = u(rng);
        return t;
    }

    // Prefill of n tokens into an empty cache; seconds.
    double prefill(KvStore &cache, int64_t n, ForwardProfile *prof) {
        const auto tok = random_tokens(n);
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
        ForwardOptions opt;
        opt.logits = LogitsMode::LAST;
        opt.profile = prof;
        const auto t0 = std::chrono::steady_clock::now();
        fwd.run(tok.data(), pos.data(), n, cache, opt, logits);
        return seconds_since(t0);
    }

    // n single-token steps after what the cache holds; seconds.
    double decode(KvStore &cache, int64_t n, ForwardProfile *prof) {
        const auto tok = random_tokens(n);
        ForwardOptions opt;
        opt.logits = LogitsMode::LAST;
        opt.profile = prof;
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < n; ++i) {
            const int32_t p = static_cast<int32_t>(cache.size());
            fwd.run(&tok[i], &p, 1, cache, opt, logits);
        }
        return seconds_since(t0);
    }
};

// Keys before or after RoPE? Per KV length n, for one layer of this model:
// the decode attention of one query over n slots (f32, f16 and q8 storage; q8
// -1 where the backend has none), and
// rotating those n keys to their positions, which keeping un-rotated keys
// would add to every decode step. Best of `repeats`, in milliseconds.
std::string kv_study_json(Backend &be, const Hparams &hp, const std::vector<int64_t> &lengths, int64_t repeats) {
    std::string out = "  \"kv_study\": [";
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    const int64_t D = hp.head_dim, Q = int64_t(hp.n_head) * D;
    for (size_t li = 0; li < lengths.size(); ++li) {
        const int64_t n = lengths[li];
        double t_attn[3] = {1e30, 1e30, 1e30}, t_rope = 1e30;
        std::vector<float> k(static_cast<size_t>(n * D)), v(k.size());
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
        for (int type = 0; type < 3; ++type) {
            if (type == 2 && !be.supports_kv_type(KvType::Q8)) continue;
            KvStore s(be, hp, n, 1, type == 2 ? KvType::Q8 : type ? KvType::F16 : KvType::F32);
            s.append(n);
            for (int32_t h = 0; h < hp.n_head_kv; ++h) {
                for (float &x : k) x = nd(rng);
                for (float &x : v) x = nd(rng);
                s.write_unrotated(0, h, 0, n, k.data(), v.data(), pos.data());
            }
            std::vector<float> q(static_cast<size_t>(Q)), o(q.size());
            for (float &x : q) x = nd(rng);
            const int32_t qpos = static_cast<int32_t>(n);
            for (int64_t r = 0; r < repeats + 1; ++r) {
                AttentionArgs a = s.attention_args(0, n);
                a.q = q.data();
                a.ldq = Q;
                a.out = o.data();
                a.ldo = Q;
                a.n_q = 1;
                a.n_head = hp.n_head;
                a.q_pos = &qpos;
                const auto t0 = std::chrono::steady_clock::now();
                be.attention(a);
                if (r > 0) t_attn[type] = std::min(t_attn[type], seconds_since(t0));
            }
        }
        for (int64_t r = 0; r < repeats + 1; ++r) {
            std::vector<float> keys(static_cast<size_t>(n * hp.n_head_kv * D));
            for (float &x : keys) x = nd(rng);
            const auto t0 = std::chrono::steady_clock::now();
            be.rope(hp, keys.data(), int64_t(hp.n_head_kv) * D, n, hp.n_head_kv, pos.data());
            if (r > 0) t_rope = std::min(t_rope, seconds_since(t0));
        }
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "%s\n    {\"n_kv\": %lld, \"attention_f32_ms\": %.4f, \"attention_f16_ms\": %.4f, "
                      "\"attention_q8_ms\": %.4f, \"rotate_keys_ms\": %.4f}",
                      li ? "," : "", static_cast<long long>(n), t_attn[0] * 1e3, t_attn[1] * 1e3,
                      t_attn[2] < 1e30 ? t_attn[2] * 1e3 : -1.0, t_rope * 1e3);
        out += buf;
    }
    return out + "\n  ],\n";
}

// ReAttention's selection scoring (Backend::topk_dot) per middle length M,
// for one KV head of one layer: a prefill step (512 queries x the group's
// heads, top-4 each) and a decode step (one query), keys in f32 and f16.
// Best of `repeats`; GFLOP/s counts 2 * rows * M * head_dim.
std::string topk_study_json(Backend &be, const Hparams &hp, const std::vector<int64_t> &lengths, int64_t repeats) {
    std::string out = "  \"topk_study\": [";
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    const int64_t D = hp.head_dim, gs = hp.n_head / std::max(1, hp.n_head_kv);
    for (size_t li = 0; li < lengths.size(); ++li) {
        const int64_t M = lengths[li];
        std::vector<float> k32(static_cast<size_t>(M * D));
        for (float &x : k32) x = nd(rng);
        std::vector<uint16_t> k16(k32.size());
        for (size_t i = 0; i < k32.size(); ++i) k16[i] = fp32_to_fp16(k32[i]);
        double best[2][2] = {{1e30, 1e30}, {1e30, 1e30}};   // [f16][decode]
        for (int f16 = 0; f16 < 2; ++f16)
            for (int decode = 0; decode < 2; ++decode) {
                const int64_t rows = (decode ? 1 : 512) * gs;
                std::vector<float> q(static_cast<size_t>(rows * D)), bs(static_cast<size_t>(rows * 4));
                std::vector<int64_t> bi(bs.size());
                for (float &x : q) x = nd(rng);
                TopkKeySegment seg{f16 ? static_cast<const void *>(k16.data()) : k32.data(), M, 32};
                for (int64_t r = 0; r < repeats + 1; ++r) {
                    std::fill(bs.begin(), bs.end(), -INFINITY);
                    std::fill(bi.begin(), bi.end(), int64_t{-1});
                    TopkDotArgs a;
                    a.q = q.data();
                    a.ldq = D;
                    a.n_rows = rows;
                    a.segments = &seg;
                    a.n_segments = 1;
                    a.key_type = f16 ? KvType::F16 : KvType::F32;
                    a.ld_keys = D;
                    a.dim = static_cast<int32_t>(D);
                    a.k = 4;
                    a.best_score = bs.data();
                    a.best_index = bi.data();
                    const auto t0 = std::chrono::steady_clock::now();
                    be.topk_dot(a);
                    if (r > 0) best[f16][decode] = std::min(best[f16][decode], seconds_since(t0));
                }
            }
        auto gflops = [&](int64_t rows, double s) { return 2.0 * double(rows) * double(M) * double(D) / s / 1e9; };
        char buf[384];
        std::snprintf(buf, sizeof buf,
                      "%s\n    {\"n_middle\": %lld, \"prefill_rows\": %lld, \"prefill_f32_ms\": %.3f, "
                      "\"prefill_f32_gflops\": %.1f, \"prefill_f16_ms\": %.3f, \"prefill_f16_gflops\": %.1f, "
                      "\"decode_f32_ms\": %.4f, \"decode_f16_ms\": %.4f}",
                      li ? "," : "", static_cast<long long>(M), static_cast<long long>(512 * gs), best[0][0] * 1e3,
                      gflops(512 * gs, best[0][0]), best[1][0] * 1e3, gflops(512 * gs, best[1][0]), best[0][1] * 1e3,
                      best[1][1] * 1e3);
        out += buf;
    }
    return out + "\n  ],\n";
}

} // namespace

int cmd_bench(int argc, char **argv) {
    static const char *usage =
        "usage: lctx bench -m MODEL [options]\n"
        "  -t, --threads N        threads (default: all cores)\n"
        "  -p, --prompts LIST     prefill lengths, comma-separated (default 512,2048,8192)\n"
        "  --decode-ctx N         prompt length before the decode run (default 8192; 0: no decode run)\n"
        "  -n, --n-decode N       decoded tokens per decode run (default 32)\n"
        "  -r, --repeats N        repeats of every measurement (default 3)\n"
        "  --profile              per-op time breakdown, GEMM GFLOP/s and the FMA peak\n"
        "  --no-mmap              read the model into memory instead of mapping the file\n"
        "  --reform LIST          also REFORM encode (feed + build_index) of these document lengths; with\n"
        "                         --profile, where the encode time goes (per op, per layer, GFLOP/s)\n"
        "  --select-study LIST    per index size: REFORM's select on a synthetic index of that many tokens\n"
        "                         (scoring, pooling, top-k; the previous portable scoring beside the fast one)\n"
        "  --select-query N       query rows scored by --select-study (default 32)\n"
        "  --kv f32|f16|q8        element type of the KV store (default f32; q8: CPU only, lossy)\n"
        "  --attn f32|bf16        attention's products (default f32; bf16: opt-in, lossy, CPUs with AVX512_BF16;\n"
        "                         \"attn\" in the JSON names what ran)\n"
        "  --matmul f32|bf16|int8 the weight matrix products of prefill and encoding, the same (\"matmul\");\n"
        "                         int8: opt-in, lossy, CPUs with AVX2, also decode's (docs/int8.md)\n"
        "  --backend NAME         cpu, or a backend module's name (cuda); default: $LCTX_BACKEND, else the best\n"
        "                         available. One that cannot run here falls back to the CPU with a line on\n"
        "                         stderr; \"backend\" in the JSON names the one that ran\n"
        "  --kv-study LIST        per KV length: one layer's decode attention vs re-rotating its keys\n"
        "  --topk-study LIST      per middle length: ReAttention's top-k scoring of one KV head (prefill step of\n"
        "                         512 queries, decode step), f32 and f16 keys, GFLOP/s\n"
        "                         (the cost of keeping keys before RoPE), f32 and f16\n"
        "Prints one JSON object: tokens/s per repeat, peak RSS, profile.\n";
    Args a = parse_args(argc, argv,
                        concat({"--model", "--threads", "--prompts", "--decode-ctx", "--n-decode", "--repeats", "--reform",
                                "--kv", "--kv-study", "--topk-study", "--backend", "--select-study", "--select-query"},
                               kPrecisionFlags),
                        {"--profile", "--no-mmap"},
                        {{"-m", "--model"}, {"-t", "--threads"}, {"-p", "--prompts"}, {"-n", "--n-decode"},
                         {"-r", "--repeats"}},
                        usage);
    if (!a.has("--model")) die("a model is needed: -m MODEL.gguf\n\n%s", usage);
    const std::vector<int64_t> prompts = parse_list(a.get("--prompts", "512,2048,8192"));
    const int64_t decode_ctx = a.get_int("--decode-ctx", 8192, 0, INT32_MAX, "0: no decode run");
    const int64_t n_decode = a.get_int("--n-decode", 32, 1, INT32_MAX);
    const int64_t repeats = a.get_int("--repeats", 3, 1, 1000000);
    const bool profile = a.on("--profile");
    const std::vector<int64_t> reform = a.has("--reform") ? parse_list(a.get("--reform")) : std::vector<int64_t>{};
    const std::vector<int64_t> kv_study = a.has("--kv-study") ? parse_list(a.get("--kv-study")) : std::vector<int64_t>{};
    const std::vector<int64_t> topk_study =
        a.has("--topk-study") ? parse_list(a.get("--topk-study")) : std::vector<int64_t>{};
    const std::vector<int64_t> select_study =
        a.has("--select-study") ? parse_list(a.get("--select-study")) : std::vector<int64_t>{};
    const int64_t select_query = a.get_int("--select-query", 32, 1, 65536);
    const std::string kv_name = a.get("--kv", "f32");
    if (kv_name != "f32" && kv_name != "f16" && kv_name != "q8") die("--kv must be f32, f16 or q8\n");
    const KvType kv = kv_name == "f16" ? KvType::F16 : kv_name == "q8" ? KvType::Q8 : KvType::F32;
    const lctx_precision attn_asked = precision_arg(a, "--attn"), matmul_asked = precision_arg(a, "--matmul");

    try {
        int64_t threads = threads_arg(a);
        if (threads <= 0) threads = std::max(1u, std::thread::hardware_concurrency());
        auto model = Model::load_file(a.get("--model"), !a.on("--no-mmap"), static_cast<int32_t>(threads));
        const Hparams &hp = model->hparams();
        const std::string requested = a.has("--backend")   ? a.get("--backend")
                                      : std::getenv("LCTX_BACKEND") ? std::getenv("LCTX_BACKEND")
                                                                    : "auto";
        std::unique_ptr<Backend> backend = make_backend(a.get("--backend"), static_cast<int>(threads));
        // What runs: bf16 and int8 only where the backend has them (then sessions too).
        const bool attn_bf16 = attn_asked == LCTX_PRECISION_BF16 && backend->set_attention_bf16(true);
        const lctx_precision matmul =
            backend->set_matmul_precision(matmul_asked) ? matmul_asked : LCTX_PRECISION_F32;
        if ((attn_asked == LCTX_PRECISION_BF16 && !attn_bf16) || matmul != matmul_asked)
            std::fprintf(stderr, "lctx bench: no %s arithmetic on this backend and CPU; measuring f32\n",
                         matmul != matmul_asked ? precision_name(matmul_asked) : "bf16");
        Bench b(*model, *backend);

        std::string out = "{\n";
        char buf[4096];
        std::snprintf(buf, sizeof buf,
                      "  \"model\": \"%s\",\n  \"backend\": \"%s\",\n  \"backend_requested\": \"%s\",\n"
                      "  \"threads\": %lld,\n  \"simd\": \"%s\",\n  \"build\": \"%s\",\n  \"kv\": \"%s\",\n"
                      "  \"attn\": \"%s\",\n  \"matmul\": \"%s\",\n",
                      a.get("--model").c_str(), backend->name(), requested.c_str(), static_cast<long long>(threads),
                      cpu_backend_variant(),
                      lctx_build_info(), kv_type_name(kv), attn_bf16 ? "bf16" : "f32", precision_name(matmul));
        out += buf;

        // Warm-up: page the weights in and start the workers.
        {
            KvStore cache(*backend, hp, 64);
            b.prefill(cache, 32, nullptr);
        }

        // Repeats outermost, so a burst of load from elsewhere hits one
        // repeat of everything rather than every repeat of one case. The
        // decode run continues the prefill of decode_ctx tokens when that is
        // one of the prompts.
        std::vector<ForwardProfile> prefill_prof(prompts.size());
        ForwardProfile decode_prof;
        std::vector<std::vector<double>> prefill_tps(prompts.size());
        std::vector<double> decode_tps;
        const bool decode_separate = decode_ctx > 0 && std::find(prompts.begin(), prompts.end(), decode_ctx) == prompts.end();
        for (int64_t r = 0; r < repeats; ++r) {
            for (size_t i = 0; i < prompts.size(); ++i) {
                const bool then_decode = prompts[i] == decode_ctx;
                KvStore cache(*backend, hp, prompts[i] + (then_decode ? n_decode : 0), -1, kv);
                const double t = b.prefill(cache, prompts[i], profile && r == 0 ? &prefill_prof[i] : nullptr);
                prefill_tps[i].push_back(prompts[i] / t);
                if (then_decode)
                    decode_tps.push_back(n_decode / b.decode(cache, n_decode, profile && r == 0 ? &decode_prof : nullptr));
            }
            if (decode_separate) {
                KvStore cache(*backend, hp, decode_ctx + n_decode, -1, kv);
                b.prefill(cache, decode_ctx, nullptr);
                decode_tps.push_back(n_decode / b.decode(cache, n_decode, profile && r == 0 ? &decode_prof : nullptr));
            }
        }
        out += "  \"prefill\": [";
        for (size_t i = 0; i < prompts.size(); ++i) {
            std::snprintf(buf, sizeof buf, "%s\n    {\"n_prompt\": %lld, \"tok_s\": ", i ? "," : "",
                          static_cast<long long>(prompts[i]));
            out += buf + json_list(prefill_tps[i]) + "}";
        }
        out += "\n  ],\n";
        if (decode_ctx > 0) {
            std::snprintf(buf, sizeof buf, "  \"decode\": {\"n_ctx\": %lld, \"n_decode\": %lld, \"tok_s\": ",
                          static_cast<long long>(decode_ctx), static_cast<long long>(n_decode));
            out += buf + json_list(decode_tps) + "},\n";
        }

        const double fma_peak = profile ? cpu_backend_fma_peak_gflops(*backend) : 0.0;
        if (profile) {
            const double peak = fma_peak;
            const double read_bw = cpu_backend_read_bandwidth_gb_s(*backend);
            std::snprintf(buf, sizeof buf, "  \"fma_peak_gflops\": %.1f,\n  \"read_bandwidth_gb_s\": %.2f,\n  \"profile\": {",
                          peak, read_bw);
            out += buf;
            for (size_t i = 0; i < prompts.size(); ++i) {
                const ForwardProfile &p = prefill_prof[i];
                // The work done: the last layer's unread rows skip their MLP and
                // attention, a sliding-window layer's queries see at most its window.
                const double gflops = p.matmul_flops(hp) / matmul_seconds(p) / 1e9;
                const double attn_gflops = p.attention_flops(hp) / p.seconds[ForwardProfile::ATTENTION] / 1e9;
                std::snprintf(buf, sizeof buf,
                              "%s\n    \"prefill_%lld\": {\"matmul_gflops\": %.1f, \"matmul_peak_fraction\": %.3f, "
                              "\"attention_gflops\": %.1f, \"attention_peak_fraction\": %.3f, \"seconds\": ",
                              i ? "," : "", static_cast<long long>(prompts[i]), gflops, peak > 0 ? gflops / peak : 0.0,
                              attn_gflops, peak > 0 ? attn_gflops / peak : 0.0);
                out += buf + json_profile(p) + "}";
            }
            if (decode_ctx > 0) {
                // Decode is bandwidth-bound: report the weight bytes streamed per second.
                double weight_bytes = static_cast<double>(model->output().row_bytes) * model->output().n_rows;
                for (const LayerWeights &L : model->layers())
                    for (const WeightView *w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down})
                        weight_bytes += static_cast<double>(w->row_bytes) * w->n_rows;
                const double mm = matmul_seconds(decode_prof) + decode_prof.seconds[ForwardProfile::OUTPUT];
                // K and V of every earlier position, every layer, read once per token.
                const double kv_bytes = 2.0 * hp.n_layer * hp.n_head_kv * static_cast<double>(kv_row_bytes(kv, hp.head_dim)) *
                                        (static_cast<double>(decode_ctx) + 0.5 * static_cast<double>(n_decode));
                std::snprintf(buf, sizeof buf,
                              "%s\n    \"decode\": {\"weight_gb_s\": %.2f, \"kv_gb_s\": %.2f, \"seconds\": ",
                              prompts.empty() ? "" : ",", weight_bytes * decode_prof.tokens / mm / 1e9,
                              kv_bytes * decode_prof.tokens / decode_prof.seconds[ForwardProfile::ATTENTION] / 1e9);
                out += buf + json_profile(decode_prof) + "}";
            }
            out += "\n  },\n";
        }
        if (!reform.empty())
            out += reform_json(a, hp, reform, repeats, threads, profile, fma_peak, attn_bf16, matmul);
        if (!select_study.empty()) out += select_study_json(a, *model, *backend, select_study, repeats, select_query, threads);
        if (!kv_study.empty()) out += kv_study_json(*backend, hp, kv_study, repeats);
        if (!topk_study.empty()) out += topk_study_json(*backend, hp, topk_study, repeats);
        std::snprintf(buf, sizeof buf, "  \"peak_rss_mib\": %.1f\n}\n", peak_rss_mib());
        out += buf;
        std::fputs(out.c_str(), stdout);
    } catch (const Error &e) {
        die("bench: %s", e.what());
    }
    return 0;
}

} // namespace lctx::cli
