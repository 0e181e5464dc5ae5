#include "bench_reform.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "api/handles.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "session/embedding_store.h"
#include "session/head_profile.h"
#include "session/method_reform.h"
#include "session/reform_params.h"
#include "session/reform_profile.h"
#include "session/selector.h"

namespace lctx::cli {

// A JSON array of numbers with 3 decimals (tokens/s of the repeats).
std::string json_list(const std::vector<double> &v) {
    std::string s = "[";
    char buf[64];
    for (size_t i = 0; i < v.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.3f", i ? ", " : "", v[i]);
        s += buf;
    }
    return s + "]";
}

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The encode profile of one document as JSON: non-overlapping named parts
// (seconds and shares of the wall time), the remainder no part names, per
// layer totals and the rates of the matmuls and the attention.
std::string profile_json(const ReformProfile &p, const Hparams &hp, double wall, double build_index, double peak) {
    using F = ForwardProfile;
    using R = ReformProfile;
    std::vector<std::pair<std::string, double>> parts;
    for (int op = 0; op < F::N_OPS; ++op)
        if (op != F::HOOKS) parts.emplace_back(F::name(op), p.forward.seconds[op]);
    double in_hooks = 0.0;
    for (int part : {R::HEAD_CAPTURE, R::EXIT_NORM, R::EXIT_PROJ, R::EXIT_CAPTURE}) {
        parts.emplace_back(R::name(part), p.seconds[part]);
        in_hooks += p.seconds[part];
    }
    parts.emplace_back("hooks_other", p.forward.seconds[F::HOOKS] - in_hooks);
    for (int part : {R::SCORE_ACCUM, R::EVICT_KEEP, R::KV_COMPACT, R::STORE})
        parts.emplace_back(R::name(part), p.seconds[part]);
    double named = 0.0;
    for (const auto &[name, s] : parts) named += s;
    const double in_steps = p.step_seconds - named, outside = wall - p.step_seconds;

    std::string out = "{\"wall_seconds\": ";
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%.4f, \"build_index_seconds\": %.4f, \"steps\": %lld, \"tokens\": %lld, \"parts\": {", wall,
                  build_index, static_cast<long long>(p.steps), static_cast<long long>(p.tokens));
    out += buf;
    for (size_t i = 0; i < parts.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.5f", i ? ", " : "", parts[i].first.c_str(), parts[i].second);
        out += buf;
    }
    out += "}, \"shares\": {";
    for (size_t i = 0; i < parts.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", i ? ", " : "", parts[i].first.c_str(),
                      wall > 0 ? parts[i].second / wall : 0.0);
        out += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "}, \"named_seconds\": %.4f, \"unaccounted_seconds\": %.4f, \"unaccounted_share\": %.4f, "
                  "\"unaccounted_in_steps_seconds\": %.4f, \"outside_steps_seconds\": %.4f",
                  named, wall - named, wall > 0 ? (wall - named) / wall : 0.0, in_steps, outside);
    out += buf;

    // Per layer: layer E-1's total holds the hook that computes layer E's
    // projections; they are listed as layer E.
    const double exit_part = p.seconds[R::EXIT_NORM] + p.seconds[R::EXIT_PROJ] + p.seconds[R::EXIT_CAPTURE];
    std::vector<double> layers = p.forward.layer_seconds;
    if (!layers.empty()) layers.back() -= exit_part;
    layers.push_back(exit_part);
    out += ", \"layer_seconds\": [";
    for (size_t i = 0; i < layers.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", layers[i]);
        out += buf;
    }
    out += "]";

    const double mm_s = p.forward.seconds[F::QKV] + p.forward.seconds[F::ATTN_OUT] + p.forward.seconds[F::FFN_GATE_UP] +
                        p.forward.seconds[F::FFN_DOWN];
    const double mm_gf = mm_s > 0 ? p.forward.matmul_flops(hp) / mm_s / 1e9 : 0.0;
    const double at_s = p.forward.seconds[F::ATTENTION];
    const double at_gf = at_s > 0 ? p.forward.attention_flops(hp) / at_s / 1e9 : 0.0;
    const double ex_s = p.seconds[R::EXIT_PROJ];
    const double ex_gf = ex_s > 0 ? 2.0 * hp.n_embd * double(p.exit_rows) / ex_s / 1e9 : 0.0;
    std::snprintf(buf, sizeof buf,
                  ", \"matmul_gflops\": %.1f, \"matmul_peak_fraction\": %.3f, \"attention_gflops\": %.1f, "
                  "\"attention_peak_fraction\": %.3f, \"exit_proj_gflops\": %.1f, \"layer_tokens\": %lld, "
                  "\"attn_pairs\": %.0f}",
                  mm_gf, peak > 0 ? mm_gf / peak : 0.0, at_gf, peak > 0 ? at_gf / peak : 0.0, ex_gf,
                  static_cast<long long>(p.forward.layer_tokens), p.forward.attn_pairs);
    return out + buf;
}

// splitmix64: fast enough to fill a million rows.
struct Mix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f; }   // [-1, 1)
};

// Random rows of n_heads unit-norm blocks of d.
void unit_rows(Mix &rng, float *v, int64_t rows, int32_t n_heads, int32_t d) {
    for (int64_t r = 0; r < rows; ++r)
        for (int32_t h = 0; h < n_heads; ++h) {
            float *b = v + (r * n_heads + h) * d;
            double ss = 0.0;
            for (int32_t i = 0; i < d; ++i) {
                b[i] = rng.uniform();
                ss += double(b[i]) * b[i];
            }
            const float inv = static_cast<float>(1.0 / std::sqrt(ss));
            for (int32_t i = 0; i < d; ++i) b[i] *= inv;
        }
}

} // namespace

std::string reform_json(const Args &a, const Hparams &hp, const std::vector<int64_t> &lengths, int64_t repeats,
                        int64_t threads, bool profile, double fma_peak_gflops, bool attn_bf16,
                        lctx_precision matmul) {
    lctx_model *m = load_model(a);
    std::mt19937 rng(99);
    std::uniform_int_distribution<int32_t> u(0, hp.n_vocab - 1);
    std::string out = "  \"reform\": [";
    std::string backend;   // the sessions' (the same for all: one registry)
    for (size_t i = 0; i < lengths.size(); ++i) {
        std::vector<lctx_token> doc(static_cast<size_t>(lengths[i]));
        for (auto &t : doc) t = u(rng);
        std::vector<double> tps;
        std::string prof_json;
        for (int64_t r = 0; r < repeats; ++r) {
            lctx_session_params sp;
            lctx_session_default_params(&sp);
            sp.method = LCTX_METHOD_REFORM;
            sp.n_threads = static_cast<int32_t>(threads);
            sp.attn_precision = attn_bf16 ? LCTX_PRECISION_BF16 : LCTX_PRECISION_F32;
            sp.matmul_precision = matmul;
            lctx_session *s = nullptr;
            check(lctx_session_create(m, &sp, &s), "creating a REFORM session");
            backend = session_backend(s);
            ReformProfile prof;
            const bool profiled = profile && r == 0;
            if (profiled) dynamic_cast<ReformMethod &>(s->session->method()).set_encode_profile(&prof);
            const auto t0 = std::chrono::steady_clock::now();
            for (size_t off = 0; off < doc.size(); off += 4096)
                check(lctx_feed_chunk(s, doc.data() + off, std::min<size_t>(4096, doc.size() - off)), "feed_chunk");
            const auto t1 = std::chrono::steady_clock::now();
            check(lctx_build_index(s), "build_index");
            const double wall = seconds_since(t0), build = seconds_since(t1);
            tps.push_back(lengths[i] / wall);
            if (profiled) prof_json = profile_json(prof, hp, wall, build, fma_peak_gflops);
            lctx_session_free(s);
        }
        char buf[192];
        std::snprintf(buf, sizeof buf, "%s\n    {\"n_doc\": %lld, \"backend\": \"%s\", \"tok_s\": ", i ? "," : "",
                      static_cast<long long>(lengths[i]), backend.c_str());
        out += buf + json_list(tps);
        if (!prof_json.empty()) out += ",\n     \"profile\": " + prof_json;
        out += "}";
    }
    lctx_model_free(m);
    return out + "\n  ],\n";
}

std::string select_study_json(const Args &a, const Model &model, Backend &backend, const std::vector<int64_t> &sizes,
                              int64_t repeats, int64_t n_query, int64_t threads) {
    const Hparams &hp = model.hparams();
    const HeadProfile heads = choose_head_profile(hp, "");
    const int32_t n_heads = static_cast<int32_t>(heads.heads.size()), d = hp.head_dim, dim = n_heads * d;
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_REFORM;
    const ReformParams rp = reform_params_from(hp, sp);

    // The part that does not grow with the index: a real select (query
    // embedding on top of the working cache, scoring one chunk, the gather
    // plan) on a session that encoded one chunk of random ids.
    double select_small = 1e30;
    {
        lctx_model *m = load_model(a);
        std::mt19937 rng(7);
        std::uniform_int_distribution<int32_t> u(0, hp.n_vocab - 1);
        std::vector<lctx_token> doc(static_cast<size_t>(rp.chunk)), q(static_cast<size_t>(n_query));
        for (auto &t : doc) t = u(rng);
        for (auto &t : q) t = u(rng);
        sp.n_threads = static_cast<int32_t>(threads);
        lctx_session *s = nullptr;
        check(lctx_session_create(m, &sp, &s), "creating a REFORM session");
        check(lctx_feed_chunk(s, doc.data(), doc.size()), "feed_chunk");
        check(lctx_build_index(s), "build_index");
        for (int64_t r = 0; r < repeats + 1; ++r) {
            lctx_selection *sel = nullptr;
            const auto t0 = std::chrono::steady_clock::now();
            check(lctx_select(s, q.data(), q.size(), &sel), "select");
            if (r > 0) select_small = std::min(select_small, seconds_since(t0));
            lctx_selection_free(sel);
        }
        lctx_session_free(s);
        lctx_model_free(m);
    }

    std::string out = "  \"select_study\": {";
    char buf[768];
    std::snprintf(buf, sizeof buf,
                  "\"dim\": %d, \"n_heads\": %d, \"n_query\": %lld, \"recompute\": %lld, \"pool_half\": %lld, "
                  "\"select_one_chunk_ms\": %.2f, \"sizes\": [",
                  dim, n_heads, static_cast<long long>(n_query), static_cast<long long>(rp.recompute),
                  static_cast<long long>(rp.pool_half), select_small * 1e3);
    out += buf;
    Mix rng{12345};
    std::vector<float> q(static_cast<size_t>(n_query * dim));
    unit_rows(rng, q.data(), n_query, n_heads, d);
    for (size_t si = 0; si < sizes.size(); ++si) {
        const int64_t N = sizes[si];
        EmbeddingStore store(dim);
        store.reserve(N);
        std::vector<float> row(static_cast<size_t>(dim));
        for (int64_t t = 0; t < N; ++t) {
            unit_rows(rng, row.data(), 1, n_heads, d);
            store.write(t, 0, row.data(), dim);
        }
        store.commit(N);
        // Scoring as ReformMethod::select does it, block by block of the store.
        auto score = [&](bool fast, std::vector<float> &s) {
            s.assign(static_cast<size_t>(N), 0.0f);
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t t = 0; t < N;) {
                const int64_t len = std::min(N - t, store.contiguous_from(t));
                if (fast) {
                    score_tokens(store.row(t), len, dim, q.data(), n_query, n_heads, s.data() + t, &backend);
                } else {   // the previous scoring: the portable loop on the backend's threads
                    MaxDotArgs m;
                    m.keys = store.row(t);
                    m.n = len;
                    m.ld = m.dim = dim;
                    m.q = q.data();
                    m.n_q = n_query;
                    m.ldq = dim;
                    m.out = s.data() + t;
                    max_dot_f16_portable(m, &backend);
                    for (int64_t i = 0; i < len; ++i) s[t + i] *= 1.0f / static_cast<float>(n_heads);
                }
                t += len;
            }
            return seconds_since(t0);
        };
        double t_port = 1e30, t_fast = 1e30, t_pool = 1e30, t_top = 1e30;
        std::vector<float> s_port, s_fast, p(static_cast<size_t>(N));
        std::vector<int64_t> sel_port, sel_fast;
        for (int64_t r = 0; r < repeats; ++r) {
            t_port = std::min(t_port, score(false, s_port));
            t_fast = std::min(t_fast, score(true, s_fast));
            auto t0 = std::chrono::steady_clock::now();
            max_pool(s_port.data(), N, rp.pool_half, p.data());
            t_pool = std::min(t_pool, seconds_since(t0));
            t0 = std::chrono::steady_clock::now();
            sel_port = select_top(s_port.data(), p.data(), N, rp.recompute, rp.keep_first, rp.keep_last);
            t_top = std::min(t_top, seconds_since(t0));
        }
        max_pool(s_fast.data(), N, rp.pool_half, p.data());
        sel_fast = select_top(s_fast.data(), p.data(), N, rp.recompute, rp.keep_first, rp.keep_last);
        double max_diff = 0.0;
        for (int64_t t = 0; t < N; ++t) max_diff = std::max(max_diff, double(std::fabs(s_port[t] - s_fast[t])));
        const double flops = 2.0 * double(N) * double(n_query) * dim;
        std::snprintf(buf, sizeof buf,
                      "%s\n    {\"n_index\": %lld, \"score_portable_ms\": %.1f, \"score_portable_gflops\": %.2f, "
                      "\"score_fast_ms\": %.1f, \"score_fast_gflops\": %.2f, \"max_pool_ms\": %.1f, "
                      "\"select_top_ms\": %.1f, \"select_total_fast_ms\": %.1f, \"select_total_portable_ms\": %.1f, "
                      "\"same_selection\": %s, \"max_score_diff\": %.3g}",
                      si ? "," : "", static_cast<long long>(N), t_port * 1e3, flops / t_port / 1e9, t_fast * 1e3,
                      flops / t_fast / 1e9, t_pool * 1e3, t_top * 1e3,
                      (select_small + t_fast + t_pool + t_top) * 1e3, (select_small + t_port + t_pool + t_top) * 1e3,
                      sel_port == sel_fast ? "true" : "false", max_diff);
        out += buf;
    }
    return out + "\n  ]},\n";
}

} // namespace lctx::cli
