// RefreshKV (docs/methods/refreshkv.md): the spec's equivalences on a tiny
// random model -- fixed stride 1 is dense decoding, K >= everything is dense
// decoding, never refreshing is SnapKV (window 1, kernel 7, group max, FIFO)
// checked against a brute-force selection and a brute-force masked decode,
// always refreshing at the checks is the fixed schedule -- plus statistics,
// teacher forcing, REFORM/ILRe decoding with RefreshKV, parameter errors and
// odd inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include "api/handles.h"
#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"
#include "session/method_registry.h"
#include "session/refreshkv.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::feed_split;
using session_test::random_tokens;

namespace {

struct Tiny {
    std::unique_ptr<Model> model;
    std::vector<uint8_t> bytes;
    explicit Tiny(int n_layer = 3, const char *arch = "llama") {
        engine_test::TinyOptions o;
        o.arch = arch;
        o.n_layer = n_layer;
        bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 2);
    }
};

float max_abs_diff(const std::vector<float> &a, const std::vector<float> &b) {
    EXPECT_EQ(a.size(), b.size());
    float d = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

struct SessionParamsRkv : session_test::SessionParams {
    lctx_refreshkv_params rkv_p;
    SessionParamsRkv() {
        lctx_refreshkv_default_params(&rkv_p);
        refreshkv = &rkv_p;
    }
};

} // namespace

// ---------------------------------------------------------------------------
// Driving the policy directly on Forward: every step's logits.

namespace {

struct PolicyRun {
    std::vector<std::vector<float>> logits;   // after the prompt, then after each forced token
    RefreshKvStats stats;
    std::vector<std::vector<std::vector<int32_t>>> init_pos;   // [layer][head] C_p positions after the prompt
};

// RefreshKV decoding of prompt ++ answer (answer forced), or dense when cfg
// is null. release: the sliding layers' out-of-window slots are released as
// the session caches do (the floor raised to each call's first position).
PolicyRun run_policy(const Model &m, const RefreshKvConfig *cfg, const std::vector<int32_t> &prompt,
               const std::vector<int32_t> &answer, int32_t n_batch = 64, bool release = false) {
    auto be = make_cpu_backend(2);
    Forward fw(m, *be);
    KvStore cache(*be, m.hparams(), int64_t(prompt.size() + answer.size()) + 4, -1, KvType::F32,
                  release ? n_batch : -1);
    std::unique_ptr<RefreshKvPolicy> pol;
    if (cfg) pol = std::make_unique<RefreshKvPolicy>(*be, m.hparams(), KvType::F32, *cfg);
    PolicyRun r;
    std::vector<float> logits;
    if (pol) pol->begin_prompt(int64_t(prompt.size()));
    for (size_t at = 0; at < prompt.size(); at += size_t(n_batch)) {
        const size_t n = std::min(prompt.size() - at, size_t(n_batch));
        std::vector<int32_t> pos(n);
        std::iota(pos.begin(), pos.end(), int32_t(at));
        cache.raise_floor(pos[0]);
        ForwardOptions o;
        o.policy = pol.get();
        fw.run(prompt.data() + at, pos.data(), int64_t(n), cache, o, logits);
    }
    r.logits.push_back(logits);
    if (pol) {
        r.init_pos.resize(size_t(m.hparams().n_layer));
        for (int32_t l = 0; l < m.hparams().n_layer; ++l)
            for (int32_t g = 0; g < m.hparams().n_head_kv; ++g) r.init_pos[size_t(l)].push_back(pol->partial_positions(l, g));
    }
    for (size_t t = 0; t < answer.size(); ++t) {
        const int32_t pos = int32_t(prompt.size() + t);
        cache.raise_floor(pos);
        if (pol) pol->begin_step();
        ForwardOptions o;
        o.policy = pol.get();
        fw.run(&answer[t], &pos, 1, cache, o, logits);
        r.logits.push_back(logits);
    }
    if (pol) r.stats = pol->stats();
    return r;
}

// ---- The brute-force SnapKV reference (window 1, group max, kernel k, FIFO).

// Pre-RoPE queries of the last prompt token per layer, [layer][n_head*head_dim].
struct Capture {
    std::vector<std::vector<float>> q_last;
};

// Per (layer, KV head) the attended slots, and a policy that attends over
// exactly those (copied row by row through the host row calls).
class MaskPolicy final : public AttentionPolicy {
public:
    MaskPolicy(Backend &be, const Hparams &hp) : be_(be), hp_(hp), scratch_(be, hp, 4096) { scratch_.append(4096); }
    std::vector<std::vector<std::vector<int64_t>>> slots;   // [layer][head] -> slots of the store
    AttentionPlan plan(int32_t l, KvStore &store, int64_t, int64_t) override {
        if (slots.empty() || slots[size_t(l)].empty()) return {};   // dense
        const auto &per_head = slots[size_t(l)];
        const int64_t n = int64_t(per_head[0].size());
        std::vector<float> k(size_t(hp_.head_dim)), v(size_t(hp_.head_dim));
        for (int32_t g = 0; g < hp_.n_head_kv; ++g) {
            EXPECT_EQ(int64_t(per_head[size_t(g)].size()), n);
            for (int64_t i = 0; i < n; ++i) {
                const int64_t s = per_head[size_t(g)][size_t(i)];
                store.read_keys(l, g, s, 1, k.data());
                store.read_values(l, g, s, 1, v.data());
                scratch_.write_rows(l, g, i, 1, k.data(), v.data());
                const int32_t p = store.position(l, g, s);
                scratch_.set_head_positions(l, g, i, &p, 1);
            }
        }
        AttentionPlan p;
        p.store = &scratch_;
        p.n_kv = n;
        return p;
    }

private:
    Backend &be_;
    Hparams hp_;
    KvStore scratch_;
};

// The spec's selection, as plainly as possible: probabilities by a direct
// double softmax per query head over slots [0, c], max over the group, the
// max over the 7-window clipped to [0, c), a full sort (score desc, slot
// desc), the top K-1 in ascending score order, then c. A sliding layer's
// keys out of its window (slots = positions here) get probability 0.
std::vector<int64_t> brute_select(const std::vector<double> &q_rot_head_major, const KvStore &store, int32_t l,
                                  int32_t g, int64_t c, int64_t K, int kernel, const Hparams &hp) {
    const int64_t window = hp.window_of(l);
    const int D = hp.head_dim, G = hp.n_head / hp.n_head_kv;
    std::vector<double> A(size_t(c + 1), 0.0);
    std::vector<float> k(static_cast<size_t>(D));
    for (int u = 0; u < G; ++u) {
        const int h = g * G + u;
        std::vector<double> z(size_t(c + 1));
        double mx = -1e300;
        for (int64_t j = 0; j <= c; ++j) {
            store.read_keys(l, g, j, 1, k.data());
            double s = 0;
            for (int d = 0; d < D; ++d) s += q_rot_head_major[size_t(h * D + d)] * k[size_t(d)];
            z[size_t(j)] = s / std::sqrt(double(D));
            mx = std::max(mx, z[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= c; ++j) {
            double &x = z[size_t(j)];
            sum += (x = window > 0 && c - j >= window ? 0.0 : std::exp(x - mx));
        }
        for (int64_t j = 0; j <= c; ++j) A[size_t(j)] = std::max(A[size_t(j)], z[size_t(j)] / sum);
    }
    std::vector<std::pair<double, int64_t>> rank;
    for (int64_t j = 0; j < c; ++j) {
        double b = 0;
        for (int64_t d = j - kernel / 2; d <= j + kernel / 2; ++d)
            if (d >= 0 && d < c) b = std::max(b, A[size_t(d)]);
        rank.push_back({b, j});
    }
    std::sort(rank.begin(), rank.end(), [](auto a, auto b) { return a.first != b.first ? a.first > b.first : a.second > b.second; });
    rank.resize(size_t(std::min<int64_t>(c, K - 1)));
    std::sort(rank.begin(), rank.end(), [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second < b.second; });
    std::vector<int64_t> out;
    for (auto [s, j] : rank) out.push_back(j);
    out.push_back(c);
    return out;
}

struct SnapRef {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<std::vector<int64_t>>> init;   // [layer][head] slots, FIFO order
};

// dense_sliding: sliding-window layers attend densely (RefreshKV); false:
// they keep a partial cache like the others (what RefreshKV did before
// 2026-11-29, kept to show that the difference is tested).
SnapRef snapkv_reference(const Model &m, const std::vector<int32_t> &prompt, const std::vector<int32_t> &answer,
                         int64_t K, int kernel, bool dense_sliding = true) {
    const Hparams &hp = m.hparams();
    auto be = make_cpu_backend(1);
    Forward fw(m, *be);
    KvStore cache(*be, hp, int64_t(prompt.size() + answer.size()) + 4);
    // Dense prefill, keeping every layer's pre-RoPE query of the last token.
    std::vector<std::vector<float>> qlast(size_t(hp.n_layer));
    ForwardHooks hooks;
    hooks.on_qkv = [&](int32_t l, const float *q, const float *, const float *, int64_t n) {
        const int64_t w = int64_t(hp.n_head) * hp.head_dim;
        qlast[size_t(l)].assign(q + (n - 1) * w, q + n * w);
    };
    ForwardOptions o;
    o.hooks = &hooks;
    std::vector<float> logits;
    std::vector<int32_t> pos(prompt.size());
    std::iota(pos.begin(), pos.end(), 0);
    fw.run(prompt.data(), pos.data(), int64_t(prompt.size()), cache, o, logits);
    SnapRef ref;
    ref.logits.push_back(logits);
    const int64_t c = int64_t(prompt.size()) - 1;
    ref.init.resize(size_t(hp.n_layer));
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        if (dense_sliding && hp.window_of(l) > 0) continue;   // no partial cache
        std::vector<float> qr = qlast[size_t(l)];
        const int32_t p = int32_t(c);
        be->rope(hp, qr.data(), int64_t(qr.size()), 1, hp.n_head, &p);
        std::vector<double> qd(qr.begin(), qr.end());
        for (int32_t g = 0; g < hp.n_head_kv; ++g)
            ref.init[size_t(l)].push_back(brute_select(qd, cache, l, g, c, K, kernel, hp));
    }
    // Decode: each step attends over the last K + 1 of (initial order ++ the
    // generated slots so far, the new one included).
    MaskPolicy mask(*be, hp);
    for (size_t t = 0; t < answer.size(); ++t) {
        mask.slots.assign(size_t(hp.n_layer), {});
        for (int32_t l = 0; l < hp.n_layer; ++l)
            for (int32_t g = 0; g < int32_t(ref.init[size_t(l)].size()); ++g) {
                std::vector<int64_t> seq = ref.init[size_t(l)][size_t(g)];
                for (size_t u = 0; u <= t; ++u) seq.push_back(c + 1 + int64_t(u));
                const size_t keep = std::min(seq.size(), size_t(K + 1));
                mask.slots[size_t(l)].emplace_back(seq.end() - keep, seq.end());
            }
        const int32_t p = int32_t(prompt.size() + t);
        ForwardOptions od;
        od.policy = &mask;
        fw.run(&answer[t], &p, 1, cache, od, logits);
        ref.logits.push_back(logits);
    }
    return ref;
}

RefreshKvConfig config(int64_t K, int32_t S, float s, bool fixed) {
    RefreshKvConfig c;
    c.partial = K;
    c.stride = S;
    c.threshold = s;
    c.fixed = fixed;
    c.pool_kernel = 7;
    return c;
}

} // namespace

TEST(RefreshKv, FixedStrideOneIsDenseDecoding) {
    Tiny t;
    const auto prompt = random_tokens(300, 1), answer = random_tokens(25, 2);
    const PolicyRun dense = run_policy(*t.model, nullptr, prompt, answer);
    const RefreshKvConfig cfg = config(16, 1, 0.85f, true);
    const PolicyRun r = run_policy(*t.model, &cfg, prompt, answer);
    ASSERT_EQ(r.logits.size(), dense.logits.size());
    for (size_t i = 0; i < r.logits.size(); ++i) EXPECT_LE(max_abs_diff(r.logits[i], dense.logits[i]), 1e-5f) << i;
    EXPECT_EQ(r.stats.n_steps, 25);
    for (int64_t f : r.stats.layer_full) EXPECT_EQ(f, 25);
    EXPECT_DOUBLE_EQ(r.stats.effective_stride(), 1.0);
}

TEST(RefreshKv, PartialCacheHoldingEverythingIsDenseDecoding) {
    Tiny t;
    const auto prompt = random_tokens(200, 3), answer = random_tokens(30, 4);
    const PolicyRun dense = run_policy(*t.model, nullptr, prompt, answer);
    for (float s : {-2.0f, 0.5f, 2.0f}) {
        const RefreshKvConfig cfg = config(400, 4, s, false);
        const PolicyRun r = run_policy(*t.model, &cfg, prompt, answer);
        for (size_t i = 0; i < r.logits.size(); ++i)
            EXPECT_LE(max_abs_diff(r.logits[i], dense.logits[i]), 2e-4f) << "s " << s << " step " << i;
    }
}

TEST(RefreshKv, NeverRefreshingIsSnapKvWithFifoEviction) {
    Tiny t;
    const int64_t K = 24;
    // 40 steps: more than K, so generated tokens and then selected ones are evicted.
    const auto prompt = random_tokens(180, 5), answer = random_tokens(40, 6);
    const RefreshKvConfig cfg = config(K, 5, -2.0f, false);
    const PolicyRun r = run_policy(*t.model, &cfg, prompt, answer);
    const SnapRef ref = snapkv_reference(*t.model, prompt, answer, K, 7);
    // The initial partial caches: the brute-force selection, in eviction order.
    for (int32_t l = 0; l < t.model->hparams().n_layer; ++l)
        for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g) {
            std::vector<int32_t> want(ref.init[size_t(l)][size_t(g)].begin(), ref.init[size_t(l)][size_t(g)].end());
            EXPECT_EQ(r.init_pos[size_t(l)][size_t(g)], want) << "layer " << l << " head " << g;
        }
    ASSERT_EQ(r.logits.size(), ref.logits.size());
    for (size_t i = 0; i < r.logits.size(); ++i) EXPECT_LE(max_abs_diff(r.logits[i], ref.logits[i]), 2e-4f) << i;
    int64_t full = 0;
    for (int64_t f : r.stats.layer_full) full += f;
    EXPECT_EQ(full, 0);
    // And it differs from dense decoding (the test is not vacuous).
    const PolicyRun dense = run_policy(*t.model, nullptr, prompt, answer);
    EXPECT_GT(max_abs_diff(r.logits.back(), dense.logits.back()), 1e-3f);
}

// Gemma 3's sliding-window layers keep no partial cache: they attend densely
// over their window at every step, the global layers decode over theirs. A
// tiny gemma3 whose layers 0-4 and 6 slide over 8 tokens, K = 6 below the
// window (so a partial cache there would change the answer), never
// refreshing: the brute-force SnapKV reference with dense sliding layers,
// over a cache that keeps every slot and over one that releases the sliding
// layers' out-of-window slots as the sessions' caches do.
TEST(RefreshKv, SlidingLayersDecodeDenselyOverTheirWindow) {
    Tiny t(7, "gemma3");
    const Hparams &hp = t.model->hparams();
    ASSERT_EQ(hp.window_of(0), 8);
    ASSERT_EQ(hp.window_of(5), 0);
    const int64_t K = 6;
    const auto prompt = random_tokens(180, 21), answer = random_tokens(30, 22);
    const RefreshKvConfig cfg = config(K, 5, -2.0f, false);
    const PolicyRun kept = run_policy(*t.model, &cfg, prompt, answer, 64, false);
    const PolicyRun released = run_policy(*t.model, &cfg, prompt, answer, 64, true);
    const SnapRef ref = snapkv_reference(*t.model, prompt, answer, K, 7);
    for (int32_t l = 0; l < hp.n_layer; ++l)
        for (int32_t g = 0; g < hp.n_head_kv; ++g) {
            if (hp.window_of(l) > 0) {
                EXPECT_TRUE(kept.init_pos[size_t(l)][size_t(g)].empty()) << "sliding layer " << l;
                continue;
            }
            std::vector<int32_t> want(ref.init[size_t(l)][size_t(g)].begin(), ref.init[size_t(l)][size_t(g)].end());
            EXPECT_EQ(kept.init_pos[size_t(l)][size_t(g)], want) << "layer " << l << " head " << g;
            EXPECT_EQ(released.init_pos[size_t(l)][size_t(g)], want) << "layer " << l << " head " << g;
        }
    ASSERT_EQ(kept.logits.size(), ref.logits.size());
    ASSERT_EQ(released.logits.size(), ref.logits.size());
    for (size_t i = 0; i < ref.logits.size(); ++i) {
        EXPECT_LE(max_abs_diff(kept.logits[i], ref.logits[i]), 2e-4f) << i;
        EXPECT_LE(max_abs_diff(released.logits[i], ref.logits[i]), 2e-4f) << i;
    }
    // Statistics: the sliding layers count no steps; the global one only
    // partial ones, and it alone makes the effective stride.
    for (int32_t l = 0; l < hp.n_layer; ++l) {
        const bool sliding = hp.window_of(l) > 0;
        EXPECT_EQ(kept.stats.layer_full[size_t(l)], 0) << l;
        EXPECT_EQ(kept.stats.layer_partial[size_t(l)], sliding ? 0 : 30) << l;
    }
    EXPECT_DOUBLE_EQ(kept.stats.effective_stride(), 30.0);
    // Not vacuous: the global layer's partial cache differs from dense
    // decoding, and partial caches in the sliding layers would differ again.
    const PolicyRun dense = run_policy(*t.model, nullptr, prompt, answer);
    EXPECT_GT(max_abs_diff(kept.logits.back(), dense.logits.back()), 1e-3f);
    const SnapRef all_partial = snapkv_reference(*t.model, prompt, answer, K, 7, false);
    EXPECT_GT(max_abs_diff(kept.logits.back(), all_partial.logits.back()), 1e-3f);
}

// A model whose every layer slides (a 5-layer gemma3: the first global layer
// would be the sixth): no partial cache anywhere, so RefreshKV is dense
// decoding, with an effective stride of 1.
TEST(RefreshKv, EveryLayerSlidingIsDenseDecoding) {
    Tiny t(5, "gemma3");
    for (int32_t l = 0; l < 5; ++l) ASSERT_GT(t.model->hparams().window_of(l), 0) << l;
    const auto prompt = random_tokens(100, 23), answer = random_tokens(12, 24);
    const RefreshKvConfig cfg = config(4, 3, 0.5f, false);
    const PolicyRun dense = run_policy(*t.model, nullptr, prompt, answer, 64, true);
    const PolicyRun r = run_policy(*t.model, &cfg, prompt, answer, 64, true);
    ASSERT_EQ(r.logits.size(), dense.logits.size());
    for (size_t i = 0; i < r.logits.size(); ++i) EXPECT_EQ(r.logits[i], dense.logits[i]) << i;
    EXPECT_EQ(r.stats.n_steps, 12);
    for (size_t l = 0; l < 5; ++l) EXPECT_EQ(r.stats.layer_full[l] + r.stats.layer_partial[l], 0) << l;
    EXPECT_DOUBLE_EQ(r.stats.effective_stride(), 1.0);
}

// On a model with sliding-window layers, a RefreshKV session holds what a
// FULL session holds (the sliding layers' slots out of the window released)
// plus the global layers' partial caches: the peak charged to its memory
// budget, measured on a tiny gemma3 with a context 8x the input, where a
// cache keeping every sliding slot would need several times FULL's.
TEST(RefreshKv, OnSlidingLayersItHoldsFullsCachePlusTheGlobalPartialCaches) {
    Tiny t(7, "gemma3");
    const Hparams &hp = t.model->hparams();
    const auto doc = random_tokens(600, 25), q = random_tokens(10, 26), ans = random_tokens(8, 27);
    auto peak_of = [&](lctx_method method) {
        SessionParamsRkv p;
        p.method = method;
        p.n_ctx = 5120;
        p.n_threads = 1;
        Session s(*t.model, p, "cpu");
        feed_split(s, doc, {100});
        auto sel = s.select(q.data(), q.size());
        s.recompute(*sel);
        for (int32_t tok : ans) s.decode_token(tok);
        return s.memory().peak();
    };
    const uint64_t full = peak_of(LCTX_METHOD_FULL), rkv = peak_of(LCTX_METHOD_REFRESHKV);
    auto be = make_cpu_backend(1);
    const int64_t K = std::llround(double(doc.size() + q.size()) / 8.0);
    const KvStore one_layer_cp(*be, hp, K + 1, 1);   // gemma3's tiny model has one global layer
    const KvStore every_slot(*be, hp, 5120);          // what a cache keeping every slot allocates
    EXPECT_GE(rkv, full);
    EXPECT_LE(rkv, full + one_layer_cp.bytes()) << "full " << full << ", partial caches " << one_layer_cp.bytes();
    EXPECT_LT(rkv, every_slot.bytes() / 2);
}

TEST(RefreshKv, AlwaysRefreshingEqualsTheFixedSchedule) {
    Tiny t;
    const auto prompt = random_tokens(250, 7), answer = random_tokens(31, 8);
    const RefreshKvConfig dyn = config(20, 3, 2.0f, false), fix = config(20, 3, 0.0f, true);
    const PolicyRun a = run_policy(*t.model, &dyn, prompt, answer), b = run_policy(*t.model, &fix, prompt, answer);
    for (size_t i = 0; i < a.logits.size(); ++i) EXPECT_EQ(a.logits[i], b.logits[i]) << i;
    for (size_t l = 0; l < a.stats.layer_full.size(); ++l) {
        EXPECT_EQ(a.stats.layer_full[l], 10);   // steps 3, 6, ..., 30
        EXPECT_EQ(a.stats.layer_partial[l], 21);
    }
    EXPECT_NEAR(a.stats.effective_stride(), 3.1, 1e-9);
    // A threshold between gives a schedule between never and always.
    const RefreshKvConfig mid = config(20, 3, 0.9f, false);
    const PolicyRun c = run_policy(*t.model, &mid, prompt, answer);
    for (size_t l = 0; l < c.stats.layer_full.size(); ++l) EXPECT_LE(c.stats.layer_full[l], 10);
}

TEST(RefreshKv, RefreshRebuildsFromTheFullStepAndKeepsTheCurrentToken) {
    Tiny t;
    const auto prompt = random_tokens(150, 9), answer = random_tokens(6, 10);
    const RefreshKvConfig cfg = config(12, 3, 0.0f, true);
    auto be = make_cpu_backend(2);
    Forward fw(*t.model, *be);
    KvStore cache(*be, t.model->hparams(), 200);
    RefreshKvPolicy pol(*be, t.model->hparams(), KvType::F32, cfg);
    pol.begin_prompt(150);
    std::vector<int32_t> pos(150);
    std::iota(pos.begin(), pos.end(), 0);
    std::vector<float> logits;
    ForwardOptions o;
    o.policy = &pol;
    fw.run(prompt.data(), pos.data(), 150, cache, o, logits);
    for (int i = 0; i < 3; ++i) {
        const int32_t p = 150 + i;
        pol.begin_step();
        fw.run(&answer[size_t(i)], &p, 1, cache, o, logits);
    }
    // Step 3 refreshed: 11 chosen + the token at 152 last; candidates include
    // the generated tokens 150 and 151.
    for (int32_t l = 0; l < t.model->hparams().n_layer; ++l)
        for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g) {
            const auto cp = pol.partial_positions(l, g);
            ASSERT_EQ(cp.size(), 12u);
            EXPECT_EQ(cp.back(), 152);
            EXPECT_EQ(std::set<int32_t>(cp.begin(), cp.end()).size(), 12u);
        }
}

TEST(RefreshKv, SessionStatsTeacherForcingAndCApi) {
    Tiny t;
    SessionParamsRkv p;
    p.method = LCTX_METHOD_REFRESHKV;
    p.n_ctx = 512;
    p.n_threads = 2;
    p.rkv_p.partial = 16;
    p.rkv_p.stride = 4;
    p.rkv_p.schedule = LCTX_REFRESHKV_FIXED;
    Session s(*t.model, p, "cpu");
    const auto doc = random_tokens(200, 11), q = random_tokens(9, 12), ans = random_tokens(12, 13);
    feed_split(s, doc, {64});
    auto sel = s.select(q.data(), q.size());
    s.recompute(*sel);
    const int32_t V = t.model->hparams().n_vocab;
    for (int32_t tok : ans) {
        const float lp = s.decode_token(tok);
        // lctx_session_logits: the logits the token was scored with.
        std::vector<float> lg(s.logits(), s.logits() + V);
        double mx = *std::max_element(lg.begin(), lg.end()), sum = 0;
        for (float x : lg) sum += std::exp(double(x) - mx);
        EXPECT_NEAR(lp, double(lg[size_t(tok)]) - mx - std::log(sum), 1e-4);
    }
    lctx_sampling_params sp;
    lctx_sampling_default_params(&sp);
    s.decode(sp);   // appends the last forced token
    const RefreshKvStats &st = s.method().refreshkv()->stats();
    EXPECT_EQ(st.n_steps, 12);
    EXPECT_EQ(st.partial, 16);
    for (size_t l = 0; l < st.layer_full.size(); ++l) {
        EXPECT_EQ(st.layer_full[l], 3);
        EXPECT_EQ(st.layer_full[l] + st.layer_partial[l], 12);
    }
    EXPECT_GT(st.partial_s, 0.0);
    EXPECT_GT(st.full_s, 0.0);
}

TEST(RefreshKv, CApiParamsStatsAndErrors) {
    Tiny t;
    lctx_model_params mp;
    lctx_model_default_params(&mp);
    mp.n_threads = 2;
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(t.bytes.data(), t.bytes.size(), &mp, &m), LCTX_OK);
    ASSERT_TRUE(lctx_method_is_implemented(LCTX_METHOD_REFRESHKV));
    lctx_refreshkv_params rp;
    lctx_refreshkv_default_params(&rp);
    EXPECT_EQ(rp.struct_size, sizeof rp);
    EXPECT_EQ(rp.partial, 0);
    EXPECT_EQ(rp.stride, 0);
    EXPECT_EQ(rp.schedule, LCTX_REFRESHKV_DYNAMIC);
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_REFRESHKV;
    sp.n_ctx = 400;
    sp.refreshkv = &rp;
    auto expect_refused = [&](auto &&set, const char *what) {
        lctx_refreshkv_params bad = rp;
        set(bad);
        sp.refreshkv = &bad;
        lctx_session *s = nullptr;
        EXPECT_EQ(lctx_session_create(m, &sp, &s), LCTX_ERR_INVALID_ARG) << what;
        EXPECT_EQ(s, nullptr);
        EXPECT_NE(std::string(lctx_last_error()).find(what), std::string::npos) << lctx_last_error();
        sp.refreshkv = &rp;
    };
    expect_refused([](lctx_refreshkv_params &b) { b.partial = -1; }, "partial");
    expect_refused([](lctx_refreshkv_params &b) { b.stride = -3; }, "stride");
    expect_refused([](lctx_refreshkv_params &b) { b.threshold = std::numeric_limits<float>::quiet_NaN(); }, "threshold");
    expect_refused([](lctx_refreshkv_params &b) { b.threshold = std::numeric_limits<float>::infinity(); }, "threshold");
    expect_refused([](lctx_refreshkv_params &b) { b.pool_kernel = 4; }, "pool_kernel");
    expect_refused([](lctx_refreshkv_params &b) { b.pool_kernel = -7; }, "pool_kernel");
    expect_refused([](lctx_refreshkv_params &b) { b.max_partial_run = -1; }, "max_partial_run");
    expect_refused([](lctx_refreshkv_params &b) { int32_t v = 7; std::memcpy(&b.schedule, &v, sizeof v); }, "schedule");
    expect_refused([](lctx_refreshkv_params &b) { b.struct_size = sizeof(lctx_refreshkv_params) + 4; }, "struct_size");
    // REFORM with gathered checks the same knobs.
    sp.method = LCTX_METHOD_REFORM;
    sp.n_ctx = 3000;
    rp.gathered = true;
    expect_refused([](lctx_refreshkv_params &b) { b.stride = -1; }, "stride");
    rp.gathered = false;
    sp.method = LCTX_METHOD_REFRESHKV;
    sp.n_ctx = 400;

    lctx_session *s = nullptr;
    rp.partial = 8;
    rp.max_partial_run = 5;
    ASSERT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK);
    lctx_refreshkv_stats st{};
    st.struct_size = sizeof st;
    // Before any decoding: zero steps.
    const auto doc = random_tokens(100, 14);
    ASSERT_EQ(lctx_feed_chunk(s, doc.data(), doc.size()), LCTX_OK);
    ASSERT_EQ(lctx_build_index(s), LCTX_OK);
    lctx_selection *sel = nullptr;
    ASSERT_EQ(lctx_select(s, doc.data(), 3, &sel), LCTX_OK);
    ASSERT_EQ(lctx_recompute(s, sel), LCTX_OK);
    lctx_selection_free(sel);
    lctx_sampling_params samp;
    lctx_sampling_default_params(&samp);
    for (int i = 0; i < 11; ++i) {
        lctx_token tok;
        ASSERT_EQ(lctx_decode(s, &samp, &tok), LCTX_OK);
    }
    float lp = 1;
    EXPECT_EQ(lctx_decode_token(s, 5, &lp), LCTX_OK);
    EXPECT_LE(lp, 0.0f);
    EXPECT_EQ(lctx_decode_token(s, 100000, &lp), LCTX_ERR_INVALID_ARG);
    EXPECT_EQ(lctx_decode_token(nullptr, 5, &lp), LCTX_ERR_INVALID_ARG);
    std::vector<int64_t> full(8, -1), part(8, -1);
    ASSERT_EQ(lctx_session_refreshkv_stats(s, &st, full.data(), part.data(), full.size()), LCTX_OK);
    EXPECT_EQ(st.n_layer, 3);
    EXPECT_EQ(st.partial, 8);
    EXPECT_EQ(st.n_steps, 11);   // 11 tokens appended (the 12th is pending)
    EXPECT_EQ(st.n_full + st.n_partial, 33);
    EXPECT_EQ(full[0] + part[0], 11);
    EXPECT_GE(full[0], 2);       // max_partial_run 5: at least at steps 5 and 10
    EXPECT_EQ(full[3], -1);      // only n_layer entries written
    // A struct_size smaller than ours: only that many bytes are written.
    lctx_refreshkv_stats small{};
    small.struct_size = offsetof(lctx_refreshkv_stats, n_steps);
    small.n_steps = -77;
    ASSERT_EQ(lctx_session_refreshkv_stats(s, &small, nullptr, nullptr, 0), LCTX_OK);
    EXPECT_EQ(small.n_steps, -77);
    EXPECT_EQ(small.partial, 8);
    small.struct_size = 0;
    EXPECT_EQ(lctx_session_refreshkv_stats(s, &small, nullptr, nullptr, 0), LCTX_ERR_INVALID_ARG);
    lctx_session_free(s);

    // Stats of a session that does not decode with RefreshKV.
    sp.method = LCTX_METHOD_FULL;
    ASSERT_EQ(lctx_session_create(m, &sp, &s), LCTX_OK);
    EXPECT_EQ(lctx_session_refreshkv_stats(s, &st, nullptr, nullptr, 0), LCTX_ERR_UNSUPPORTED);
    lctx_session_free(s);
    lctx_model_free(m);
}

namespace {

// Logits after recompute and after each of `answer` forced through Session.
std::vector<std::vector<float>> session_logits(const Model &m, SessionParamsRkv p, const std::vector<int32_t> &doc,
                                               const std::vector<int32_t> &q, const std::vector<int32_t> &answer) {
    p.link();
    p.refreshkv = &p.rkv_p;
    Session s(m, p, "cpu");
    feed_split(s, doc, {64});
    auto sel = s.select(q.data(), q.size());
    s.recompute(*sel);
    const int32_t V = m.hparams().n_vocab;
    std::vector<std::vector<float>> out;
    for (int32_t tok : answer) {
        s.decode_token(tok);
        out.emplace_back(s.logits(), s.logits() + V);   // the logits the forced token was scored with
    }
    return out;
}

} // namespace

TEST(RefreshKv, GatheredDecodingOfReformAndIlre) {
    Tiny t(4);
    const auto doc = random_tokens(600, 15), q = random_tokens(8, 16), ans = random_tokens(20, 17);
    for (lctx_method method : {LCTX_METHOD_REFORM, LCTX_METHOD_ILRE}) {
        SessionParamsRkv p;
        p.method = method;
        p.n_ctx = 1024;
        p.n_threads = 2;
        p.reform_p.chunk = 128;
        p.reform_p.recompute = 256;
        p.ilre_p.retrieval_layer = 2;
        p.ilre_p.chunk = 128;
        p.ilre_p.window = 64;
        p.ilre_p.budget = 256;
        const auto dense = session_logits(*t.model, p, doc, q, ans);
        // K >= the recomputed cache + answer: the same as dense decoding.
        p.rkv_p.gathered = true;
        p.rkv_p.partial = 2000;
        p.rkv_p.stride = 5;
        const auto big = session_logits(*t.model, p, doc, q, ans);
        for (size_t i = 0; i < dense.size(); ++i) EXPECT_LE(max_abs_diff(big[i], dense[i]), 2e-4f) << method << " " << i;
        // A small K: RefreshKV really decodes (differs), and reports stats.
        p.rkv_p.partial = 16;
        SessionParamsRkv pp = p;
        pp.link();
        pp.refreshkv = &pp.rkv_p;
        Session s(*t.model, pp, "cpu");
        feed_split(s, doc, {64});
        auto sel = s.select(q.data(), q.size());
        s.recompute(*sel);
        for (int32_t tok : ans) s.decode_token(tok);
        ASSERT_NE(s.method().refreshkv(), nullptr);
        EXPECT_EQ(s.method().refreshkv()->stats().n_steps, int64_t(ans.size()) - 1);
        EXPECT_EQ(s.method().refreshkv()->stats().partial, 16);
    }
}

TEST(RefreshKv, OddInputsDoNotCrash) {
    Tiny t;
    struct Case {
        int doc, q, K, S, run;
        float s;
        int32_t sched;
    };
    for (const Case c : {Case{1, 1, 0, 0, 0, 0.0f, 0}, Case{1, 1, 1, 1, 0, 2.0f, 0}, Case{2, 1, 1, 1, 1, -2.0f, 0},
                         Case{50, 1, 1, 2, 0, 0.0f, 1}, Case{50, 7, 100000, 1000000, 0, 0.3f, 0},
                         Case{30, 2, 3, 1, 1, -0.5f, 0}, Case{0, 5, 0, 0, 0, 0.0f, 0}}) {
        SessionParamsRkv p;
        p.method = LCTX_METHOD_REFRESHKV;
        p.n_ctx = c.doc + c.q + 12;
        p.n_threads = 2;
        p.rkv_p.partial = c.K;
        p.rkv_p.stride = c.S;
        p.rkv_p.threshold = c.s;
        p.rkv_p.max_partial_run = c.run;
        std::memcpy(&p.rkv_p.schedule, &c.sched, sizeof c.sched);
        p.link();
        p.refreshkv = &p.rkv_p;
        Session s(*t.model, p, "cpu");
        const auto doc = random_tokens(c.doc, 18), q = random_tokens(c.q, 19);
        if (c.doc > 0) feed_split(s, doc, {7});
        else s.build_index();
        auto sel = s.select(q.data(), q.size());
        s.recompute(*sel);
        lctx_sampling_params sp;
        lctx_sampling_default_params(&sp);
        int n = 0;
        try {
            for (; n < 40; ++n) s.decode(sp);
            ADD_FAILURE() << "the cache should have filled up";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_CONTEXT_FULL);
        }
        EXPECT_GE(n, 11);
        // The session stays usable: a new question.
        auto sel2 = s.select(q.data(), q.size());
        s.recompute(*sel2);
        s.decode(sp);
    }
}
