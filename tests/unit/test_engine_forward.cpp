// Forward::run: batch / incremental consistency, sub-batching, hooks, early
// exit, position handling, and the cache left unchanged by every failure.
// (Agreement with an independent reference is in tests/reference/.)
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <stdexcept>

#include "common/error.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"
#include "backend/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace lctx;

namespace {

std::vector<int32_t> random_tokens(int64_t n, int32_t n_vocab, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    t[0] = 1;
    for (int64_t i = 1; i < n; ++i) t[i] = d(rng);
    return t;
}

std::vector<int32_t> iota_pos(int64_t n, int32_t first = 0) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) p[i] = first + static_cast<int32_t>(i);
    return p;
}

// max |a - b| / max |a|
double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; ++i) {
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        m = std::max(m, double(std::fabs(a[i])));
    }
    return m > 0 ? d / m : d;
}

class EngineForward : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (GetParam() == "tiny" || GetParam() == "tiny_gemma3") {
            engine_test::TinyOptions o;
            if (GetParam() == "tiny_gemma3") {   // 7 layers: 0-4 and 6 slide (window 8), 5 is global
                o.arch = "gemma3";
                o.n_layer = 7;
                o.rope_base = 1e6f;
            }
            const std::vector<uint8_t> bytes = engine_test::make_tiny_llama(o);
            model_ = Model::load_memory(bytes.data(), bytes.size(), 2);
        } else {
            const std::string p = engine_test::stories260k_path();
            model_ = Model::load_file(p, true, 2);
        }
        be_ = make_cpu_backend(2);
        fwd_ = std::make_unique<Forward>(*model_, *be_);
    }
    const Hparams &hp() const { return model_->hparams(); }
    int32_t V() const { return hp().n_vocab; }

    // (query, key) pairs of a sub-batch of nb rows after `before` filled
    // slots in layer l, counted one query at a time: causal, and at most the
    // window of a sliding-window layer (ForwardProfile::attn_pairs).
    double pairs_seen(int32_t l, int64_t before, int64_t nb) const {
        double s = 0.0;
        for (int64_t i = 0; i < nb; ++i) {
            const int64_t seen = before + i + 1, w = hp().window_of(l);
            s += double(w > 0 ? std::min(seen, w) : seen);
        }
        return s;
    }

    // Runs tokens [0, n) in calls of the given sizes (cycled), returns all logits.
    std::vector<float> run_in_calls(const std::vector<int32_t> &tok, const std::vector<int32_t> &pos,
                                    const std::vector<int64_t> &sizes, KvStore &cache) {
        std::vector<float> all, logits;
        ForwardOptions opt;
        opt.logits = LogitsMode::ALL;
        size_t k = 0;
        for (int64_t i = 0; i < static_cast<int64_t>(tok.size());) {
            const int64_t nb = std::min<int64_t>(sizes[k++ % sizes.size()], static_cast<int64_t>(tok.size()) - i);
            fwd_->run(tok.data() + i, pos.data() + i, nb, cache, opt, logits);
            EXPECT_EQ(logits.size(), static_cast<size_t>(nb * V()));
            all.insert(all.end(), logits.begin(), logits.end());
            i += nb;
        }
        return all;
    }

    std::unique_ptr<Model> model_;
    std::unique_ptr<Backend> be_;
    std::unique_ptr<Forward> fwd_;
};

} // namespace

TEST_P(EngineForward, BatchSeveralCallsAndOneByOneAgree) {
    const int64_t n = 40;
    const auto tok = random_tokens(n, V(), 11);
    const auto pos = iota_pos(n);
    KvStore c1(*be_, hp(), n), c2(*be_, hp(), n), c3(*be_, hp(), n);
    const auto batch = run_in_calls(tok, pos, {n}, c1);
    const auto several = run_in_calls(tok, pos, {13, 1, 26}, c2);
    EXPECT_EQ(c1.size(), n);
    EXPECT_EQ(c2.size(), n);
    // one token at a time, LAST logits
    std::vector<float> one, logits;
    ForwardOptions opt;
    opt.logits = LogitsMode::LAST;
    for (int64_t i = 0; i < n; ++i) {
        fwd_->run(tok.data() + i, pos.data() + i, 1, c3, opt, logits);
        ASSERT_EQ(logits.size(), static_cast<size_t>(V()));
        one.insert(one.end(), logits.begin(), logits.end());
    }
    ASSERT_EQ(batch.size(), several.size());
    ASSERT_EQ(batch.size(), one.size());
    for (int64_t i = 0; i < n; ++i) {
        const size_t o = static_cast<size_t>(i * V());
        EXPECT_LE(rel_diff(batch.data() + o, several.data() + o, V()), 1e-4) << "row " << i;
        EXPECT_LE(rel_diff(batch.data() + o, one.data() + o, V()), 1e-4) << "row " << i;
    }
    // LAST of a batch equals the last row of ALL
    KvStore c4(*be_, hp(), n);
    fwd_->run(tok.data(), pos.data(), n, c4, opt, logits);
    EXPECT_LE(rel_diff(batch.data() + (n - 1) * V(), logits.data(), V()), 1e-6);
}

TEST_P(EngineForward, LongBatchIsSplitIntoSubBatches) {
    // 1100 tokens in one call go through the 512-token sub-batches; compare
    // with calls of 300 tokens, logits and every layer's hidden states.
    const int64_t n = 1100;
    const auto tok = random_tokens(n, V(), 3);
    const auto pos = iota_pos(n);
    std::vector<std::vector<float>> hid_a(hp().n_layer), hid_b(hp().n_layer);
    ForwardHooks ha, hb;
    ha.on_hidden = [&](int32_t l, const float *h, int64_t nt) { hid_a[l].insert(hid_a[l].end(), h, h + nt * hp().n_embd); };
    hb.on_hidden = [&](int32_t l, const float *h, int64_t nt) { hid_b[l].insert(hid_b[l].end(), h, h + nt * hp().n_embd); };
    ForwardOptions opt;
    opt.logits = LogitsMode::ALL;
    KvStore ca(*be_, hp(), n), cb(*be_, hp(), n);
    std::vector<float> la, lb, part;
    opt.hooks = &ha;
    fwd_->run(tok.data(), pos.data(), n, ca, opt, la);
    opt.hooks = &hb;
    for (int64_t i = 0; i < n; i += 300) {
        const int64_t nb = std::min<int64_t>(300, n - i);
        fwd_->run(tok.data() + i, pos.data() + i, nb, cb, opt, part);
        lb.insert(lb.end(), part.begin(), part.end());
    }
    ASSERT_EQ(la.size(), static_cast<size_t>(n * V()));
    ASSERT_EQ(la.size(), lb.size());
    for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(rel_diff(la.data() + i * V(), lb.data() + i * V(), V()), 1e-4) << "row " << i;
    for (int32_t l = 0; l < hp().n_layer; ++l) {
        ASSERT_EQ(hid_a[l].size(), static_cast<size_t>(n * hp().n_embd));
        EXPECT_LE(rel_diff(hid_a[l].data(), hid_b[l].data(), hid_a[l].size()), 1e-4) << "layer " << l;
    }
}

TEST_P(EngineForward, BadTokenIdLeavesCacheUnchanged) {
    const auto tok = random_tokens(12, V(), 5);
    const auto pos = iota_pos(12);
    KvStore cache(*be_, hp(), 32);
    std::vector<float> logits;
    ForwardOptions opt;
    fwd_->run(tok.data(), pos.data(), 5, cache, opt, logits);
    ASSERT_EQ(cache.size(), 5);
    for (int32_t bad : {V(), -1, 1 << 30}) {
        std::vector<int32_t> t = {tok[5], bad, tok[6]};
        try {
            fwd_->run(t.data(), pos.data() + 5, 3, cache, opt, logits);
            FAIL() << "accepted token id " << bad;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG);
            const std::string msg = e.what();
            EXPECT_NE(msg.find(std::to_string(bad)), std::string::npos) << msg;
            EXPECT_NE(msg.find("index 1"), std::string::npos) << msg;
        }
        EXPECT_EQ(cache.size(), 5);
    }
    // Continuing gives what one clean run gives.
    fwd_->run(tok.data() + 5, pos.data() + 5, 7, cache, opt, logits);
    KvStore clean(*be_, hp(), 32);
    std::vector<float> want;
    fwd_->run(tok.data(), pos.data(), 12, clean, opt, want);
    EXPECT_LE(rel_diff(want.data(), logits.data(), V()), 1e-4);
}

TEST_P(EngineForward, FullCacheLeavesCacheUnchanged) {
    const auto tok = random_tokens(9, V(), 6);
    const auto pos = iota_pos(9);
    KvStore cache(*be_, hp(), 8);
    std::vector<float> logits;
    ForwardOptions opt;
    fwd_->run(tok.data(), pos.data(), 6, cache, opt, logits);
    try {
        fwd_->run(tok.data() + 6, pos.data() + 6, 3, cache, opt, logits);
        FAIL() << "ran past the capacity";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CONTEXT_FULL);
    }
    EXPECT_EQ(cache.size(), 6);
    fwd_->run(tok.data() + 6, pos.data() + 6, 2, cache, opt, logits);
    EXPECT_EQ(cache.size(), 8);
    KvStore clean(*be_, hp(), 8);
    std::vector<float> want;
    fwd_->run(tok.data(), pos.data(), 8, clean, opt, want);
    EXPECT_LE(rel_diff(want.data(), logits.data(), V()), 1e-4);
}

TEST_P(EngineForward, CancelAndHookErrorsLeaveCacheUnchanged) {
    const auto tok = random_tokens(10, V(), 8);
    const auto pos = iota_pos(10);
    KvStore cache(*be_, hp(), 10);
    std::vector<float> logits;
    ForwardOptions opt;
    fwd_->run(tok.data(), pos.data(), 4, cache, opt, logits);

    int calls = 0;
    ForwardOptions cancel = opt;
    cancel.keep_going = [&] { return ++calls < 2; };   // stop before the second layer
    try {
        fwd_->run(tok.data() + 4, pos.data() + 4, 6, cache, cancel, logits);
        FAIL() << "not cancelled";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CANCELLED);
    }
    EXPECT_EQ(calls, 2);
    EXPECT_EQ(cache.size(), 4);

    ForwardHooks hooks;
    hooks.on_hidden = [](int32_t l, const float *, int64_t) {
        if (l == 1) throw std::runtime_error("hook failed");
    };
    ForwardOptions failing = opt;
    failing.hooks = &hooks;
    EXPECT_THROW(fwd_->run(tok.data() + 4, pos.data() + 4, 6, cache, failing, logits), std::runtime_error);
    EXPECT_EQ(cache.size(), 4);

    fwd_->run(tok.data() + 4, pos.data() + 4, 6, cache, opt, logits);
    KvStore clean(*be_, hp(), 10);
    std::vector<float> want;
    fwd_->run(tok.data(), pos.data(), 10, clean, opt, want);
    EXPECT_LE(rel_diff(want.data(), logits.data(), V()), 1e-4);
}

TEST_P(EngineForward, EarlyExitMatchesTheFirstLayers) {
    const int64_t n = 9;
    const auto tok = random_tokens(n, V(), 9);
    const auto pos = iota_pos(n);
    std::vector<std::vector<float>> full(hp().n_layer), early(1);
    ForwardHooks hf, he;
    hf.on_hidden = [&](int32_t l, const float *h, int64_t nt) { full[l].assign(h, h + nt * hp().n_embd); };
    he.on_hidden = [&](int32_t l, const float *h, int64_t nt) {
        ASSERT_EQ(l, 0);
        early[l].assign(h, h + nt * hp().n_embd);
    };
    std::vector<float> logits;
    ForwardOptions opt;
    opt.hooks = &hf;
    KvStore cf(*be_, hp(), n);
    fwd_->run(tok.data(), pos.data(), n, cf, opt, logits);

    KvStore ce(*be_, hp(), n, 1);   // a cache for layer 0 only
    ForwardOptions eo;
    eo.n_layers = 1;
    eo.logits = LogitsMode::NONE;
    eo.hooks = &he;
    fwd_->run(tok.data(), pos.data(), n, ce, eo, logits);
    EXPECT_TRUE(logits.empty());
    ASSERT_EQ(early[0].size(), full[0].size());
    EXPECT_LE(rel_diff(full[0].data(), early[0].data(), full[0].size()), 1e-6);
    std::vector<float> ke(static_cast<size_t>(n * hp().head_dim)), kf(ke.size());
    for (int32_t h = 0; h < hp().n_head_kv; ++h) {
        ce.read_keys(0, h, 0, n, ke.data());
        cf.read_keys(0, h, 0, n, kf.data());
        ASSERT_EQ(ke, kf);
    }

    eo.n_layers = 2;   // more layers than the cache holds
    EXPECT_THROW(fwd_->run(tok.data(), pos.data(), 1, ce, eo, logits), Error);
    EXPECT_EQ(ce.size(), n);
}

TEST_P(EngineForward, QkvHookSeesKeysBeforeRope) {
    const int64_t n = 6;
    const auto tok = random_tokens(n, V(), 10);
    const auto pos = iota_pos(n, 3);
    const int64_t KV = int64_t(hp().n_head_kv) * hp().head_dim;
    std::vector<std::vector<float>> ks(hp().n_layer);
    ForwardHooks hooks;
    hooks.on_qkv = [&](int32_t l, const float *q, const float *k, const float *v, int64_t nt) {
        ASSERT_EQ(nt, n);
        ks[l].assign(k, k + nt * KV);
    };
    ForwardOptions opt;
    opt.hooks = &hooks;
    KvStore cache(*be_, hp(), n);
    std::vector<float> logits;
    fwd_->run(tok.data(), pos.data(), n, cache, opt, logits);
    std::vector<float> stored(static_cast<size_t>(n * hp().head_dim)), unrot(stored.size());
    for (int32_t l = 0; l < hp().n_layer; ++l) {
        std::vector<float> k = ks[l];
        cpu::rope_ref(hp().rope_of(l), k.data(), KV, n, hp().n_head_kv, pos.data());
        for (int32_t h = 0; h < hp().n_head_kv; ++h) {
            cache.read_keys(l, h, 0, n, stored.data());
            cache.unrotated_keys(l, h, 0, n, unrot.data());
            for (int64_t t = 0; t < n; ++t)
                for (int32_t d = 0; d < hp().head_dim; ++d) {
                    ASSERT_NEAR(stored[t * hp().head_dim + d], k[t * KV + h * hp().head_dim + d], 1e-5);
                    // Rotated back: the pre-RoPE key of the hook (ReAttention reads these).
                    ASSERT_NEAR(unrot[t * hp().head_dim + d], ks[l][t * KV + h * hp().head_dim + d], 1e-4);
                }
            for (int64_t t = 0; t < n; ++t) EXPECT_EQ(cache.position(l, h, t), pos[t]);
        }
    }
}

TEST_P(EngineForward, ColumnSumsAreAttentionMass) {
    // A prefix in the cache, then a batch of 600 (two sub-batches) observed
    // from batch index 550: every observed query spreads mass 1 per query
    // head, so each KV head's column sums add up to group * 50.
    const int64_t n0 = 20, n = 600, obs = 550;
    const auto tok = random_tokens(n0 + n, V(), 12);
    const auto pos = iota_pos(n0 + n);
    KvStore cache(*be_, hp(), n0 + n);
    std::vector<float> logits;
    ForwardOptions opt;
    fwd_->run(tok.data(), pos.data(), n0, cache, opt, logits);
    std::vector<std::vector<float>> cols;
    ForwardHooks hooks;
    hooks.col_sums = &cols;
    hooks.obs_begin = obs;
    opt.hooks = &hooks;
    fwd_->run(tok.data() + n0, pos.data() + n0, n, cache, opt, logits);
    ASSERT_EQ(cols.size(), static_cast<size_t>(hp().n_layer));
    const double group = hp().n_head / hp().n_head_kv;
    for (const auto &c : cols) {
        ASSERT_EQ(c.size(), static_cast<size_t>(hp().n_head_kv * (n0 + n)));
        for (int32_t h = 0; h < hp().n_head_kv; ++h) {
            double total = 0;
            for (int64_t s = 0; s < n0 + n; ++s) {
                const float v = c[h * (n0 + n) + s];
                ASSERT_GE(v, 0.0f);
                total += v;
            }
            EXPECT_NEAR(total, group * (n - obs), 1e-2);
        }
    }
}

// The last layer computes only the rows something reads. Against the same
// runs with every row computed (every_row_last_layer): the K/V of every layer
// are the same bits (they come before the skipped part), so is every later
// step; the logits read agree to rounding (one row goes through the
// single-row kernels). A prefix, then 700 tokens (sub-batches of 512 and 188)
// without logits, then 5 with the last one's.
TEST_P(EngineForward, LastLayerComputesOnlyTheRowsRead) {
    const int64_t n0 = 30, n1 = 700, n2 = 5, n = n0 + n1 + n2 + 1;
    const auto tok = random_tokens(n, V(), 21);
    const auto pos = iota_pos(n);
    KvStore skip(*be_, hp(), n), every(*be_, hp(), n);
    std::vector<float> ls, le;
    for (bool all_rows : {false, true}) {
        KvStore &c = all_rows ? every : skip;
        std::vector<float> &logits = all_rows ? le : ls;
        ForwardOptions opt;
        opt.every_row_last_layer = all_rows;
        ForwardProfile prof;
        opt.profile = &prof;
        opt.logits = LogitsMode::NONE;
        fwd_->run(tok.data(), pos.data(), n0, c, opt, logits);
        fwd_->run(tok.data() + n0, pos.data() + n0, n1, c, opt, logits);
        EXPECT_TRUE(logits.empty());
        // Pairs counted: every layer's queries, but the last layer's of the NONE runs.
        // Per layer: the prefix causally, then sub-batches of 512 and 188 over what came before them.
        const int32_t L = hp().n_layer;
        double want = 0.0;
        for (int32_t l = 0; l < (all_rows ? L : L - 1); ++l)
            want += pairs_seen(l, 0, n0) + pairs_seen(l, n0, 512) + pairs_seen(l, n0 + 512, n1 - 512);
        EXPECT_NEAR(prof.attn_pairs, want, 1e-9 * want);
        EXPECT_EQ(prof.mlp_rows, (all_rows ? L : L - 1) * (n0 + n1));
        EXPECT_EQ(prof.layer_tokens, L * (n0 + n1));
        opt.logits = LogitsMode::LAST;
        fwd_->run(tok.data() + n0 + n1, pos.data() + n0 + n1, n2, c, opt, logits);
        ASSERT_EQ(logits.size(), static_cast<size_t>(V()));
    }
    EXPECT_LE(rel_diff(le.data(), ls.data(), V()), 1e-5);
    std::vector<float> a(static_cast<size_t>((n - 1) * hp().head_dim)), b(a.size());
    for (int32_t l = 0; l < hp().n_layer; ++l)
        for (int32_t h = 0; h < hp().n_head_kv; ++h) {
            skip.read_keys(l, h, 0, n - 1, a.data());
            every.read_keys(l, h, 0, n - 1, b.data());
            ASSERT_EQ(a, b) << "keys of layer " << l << " head " << h;
            skip.read_values(l, h, 0, n - 1, a.data());
            every.read_values(l, h, 0, n - 1, b.data());
            ASSERT_EQ(a, b) << "values of layer " << l << " head " << h;
        }
    // A decoding step on each cache: one row either way, the same bits.
    ForwardOptions opt;
    opt.logits = LogitsMode::LAST;
    fwd_->run(tok.data() + n - 1, pos.data() + n - 1, 1, skip, opt, ls);
    fwd_->run(tok.data() + n - 1, pos.data() + n - 1, 1, every, opt, le);
    EXPECT_EQ(ls, le);
}

// Column scores read the probabilities of their rows in every layer, so the
// last layer attends with every row of a sub-batch that holds observed rows
// (the scores are those of a run with every row computed, bit for bit), but
// runs its output projection and MLP only for the rows read.
TEST_P(EngineForward, ColumnScoresKeepTheLastLayersAttentionNotItsMlp) {
    const int64_t n1 = 700, n2 = 3, n = n1 + n2, obs = 64;
    const auto tok = random_tokens(n, V(), 23);
    const auto pos = iota_pos(n);
    const int32_t L = hp().n_layer;
    KvStore skip(*be_, hp(), n), every(*be_, hp(), n);
    std::vector<std::vector<float>> cols[2][2];   // [all_rows][run]
    std::vector<float> logits[2];
    for (int all_rows = 0; all_rows < 2; ++all_rows) {
        KvStore &c = all_rows ? every : skip;
        ForwardProfile prof;
        ForwardOptions opt;
        opt.profile = &prof;
        opt.every_row_last_layer = all_rows;
        ForwardHooks hooks;
        opt.hooks = &hooks;
        // Sub-batches of 512 and 188: only the second holds observed rows.
        hooks.col_sums = &cols[all_rows][0];
        hooks.obs_begin = n1 - obs;
        opt.logits = LogitsMode::NONE;
        fwd_->run(tok.data(), pos.data(), n1, c, opt, logits[all_rows]);
        double want = 0.0;
        for (int32_t l = 0; l < L; ++l) {
            want += pairs_seen(l, 512, n1 - 512);   // the observed sub-batch attends in every layer
            if (all_rows || l < L - 1) want += pairs_seen(l, 0, 512);
        }
        EXPECT_NEAR(prof.attn_pairs, want, 1e-9 * want);
        EXPECT_EQ(prof.mlp_rows, (all_rows ? L : L - 1) * n1);
        // The question: every row observed, the last one read.
        hooks.col_sums = &cols[all_rows][1];
        hooks.obs_begin = 0;
        opt.logits = LogitsMode::LAST;
        fwd_->run(tok.data() + n1, pos.data() + n1, n2, c, opt, logits[all_rows]);
        EXPECT_EQ(prof.mlp_rows, (all_rows ? L : L - 1) * n1 + (all_rows ? L * n2 : (L - 1) * n2 + 1));
    }
    for (int run = 0; run < 2; ++run) {
        ASSERT_EQ(cols[0][run].size(), static_cast<size_t>(L));
        for (int32_t l = 0; l < L; ++l) EXPECT_EQ(cols[0][run][l], cols[1][run][l]) << "run " << run << " layer " << l;
    }
    ASSERT_EQ(logits[0].size(), static_cast<size_t>(V()));
    EXPECT_LE(rel_diff(logits[1].data(), logits[0].data(), V()), 1e-5);
    std::vector<float> a(static_cast<size_t>(n * hp().head_dim)), b(a.size());
    for (int32_t h = 0; h < hp().n_head_kv; ++h) {
        skip.read_keys(L - 1, h, 0, n, a.data());
        every.read_keys(L - 1, h, 0, n, b.data());
        ASSERT_EQ(a, b) << "keys of the last layer, head " << h;
    }
}

// An on_hidden hook reads every row of every layer, so nothing is skipped
// for it: the last layer's rows are those of a run with every row computed.
TEST_P(EngineForward, HiddenHookSeesEveryRowOfTheLastLayer) {
    const int64_t n = 40;
    const auto tok = random_tokens(n, V(), 22);
    const auto pos = iota_pos(n);
    std::vector<float> last[2], logits;
    for (int all_rows = 0; all_rows < 2; ++all_rows) {
        ForwardHooks hooks;
        hooks.on_hidden = [&](int32_t l, const float *h, int64_t nt) {
            if (l == hp().n_layer - 1) last[all_rows].assign(h, h + nt * hp().n_embd);
        };
        ForwardOptions opt;
        opt.hooks = &hooks;
        opt.logits = LogitsMode::NONE;
        opt.every_row_last_layer = all_rows;
        KvStore c(*be_, hp(), n);
        fwd_->run(tok.data(), pos.data(), n, c, opt, logits);
    }
    ASSERT_EQ(last[0].size(), static_cast<size_t>(n * hp().n_embd));
    EXPECT_EQ(last[0], last[1]);
}

TEST_P(EngineForward, ShiftedPositionsAndRepositionGiveSameLogits) {
    // RoPE attention depends on position differences only.
    const int64_t n = 21;
    const auto tok = random_tokens(n, V(), 13);
    const auto pos = iota_pos(n), shifted = iota_pos(n, 500);
    ForwardOptions opt;
    opt.logits = LogitsMode::ALL;
    KvStore ca(*be_, hp(), n), cb(*be_, hp(), n);
    std::vector<float> la, lb;
    fwd_->run(tok.data(), pos.data(), n, ca, opt, la);
    fwd_->run(tok.data(), shifted.data(), n, cb, opt, lb);
    for (int64_t i = 0; i < n; ++i) EXPECT_LE(rel_diff(la.data() + i * V(), lb.data() + i * V(), V()), 1e-4);

    // 20 tokens at 0..19, moved to 100..119, then token 20 at position 120.
    KvStore cc(*be_, hp(), n);
    std::vector<float> lc;
    opt.logits = LogitsMode::NONE;
    fwd_->run(tok.data(), pos.data(), n - 1, cc, opt, lc);
    cc.reposition(iota_pos(n - 1, 100));
    const int32_t p = 120;
    opt.logits = LogitsMode::LAST;
    fwd_->run(tok.data() + n - 1, &p, 1, cc, opt, lc);
    EXPECT_LE(rel_diff(la.data() + (n - 1) * V(), lc.data(), V()), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Models, EngineForward, ::testing::Values("tiny", "stories260K", "tiny_gemma3"));
