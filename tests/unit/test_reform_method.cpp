// REFORM end to end on a tiny random model (and stories260K when present):
// budgets >= input length give FULL's logits and greedy tokens; embeddings
// do not depend on chunking without eviction, match a plain full forward, and
// are bit-identical for any feed split; the working cache stays position-
// dense; select has no side effects; index save/load round trip; corrupted,
// truncated and foreign index files are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"
#include "scratch_path.h"
#include "session/method_reform.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::feed_split;
using session_test::random_tokens;

namespace {

// Unique per process (ctest runs the tests of this file in parallel) and
// removed when the process exits.
std::string tmp_path(const std::string &name) {
    return scratch::path("reform", name, ::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir());
}

std::string write_profile(const std::string &json) {
    std::string p = tmp_path(std::to_string(std::hash<std::string>{}(json)) + ".json");
    std::ofstream(p) << json;
    return p;
}

const char *kTinyProfile = R"({"format": "lctx-head-profile", "version": 1, "name": "tiny test",
  "heads": [{"layer": 1, "kind": "V", "head": 0}, {"layer": 2, "kind": "Q", "head": 3},
            {"layer": 2, "kind": "K", "head": 1}, {"layer": 0, "kind": "V", "head": 1}]})";

struct Tiny {
    std::unique_ptr<Model> model;
    explicit Tiny(uint32_t seed = 1) {
        engine_test::TinyOptions o;
        o.n_layer = 4;
        o.seed = seed;
        auto bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 2);
    }
};

session_test::SessionParams reform_params(int chunk, int budget, int recompute, const std::string &profile) {
    static std::string keep;
    keep = profile;
    session_test::SessionParams p;
    p.method = LCTX_METHOD_REFORM;
    p.n_ctx = 2048;
    p.n_threads = 2;
    p.reform_p.chunk = chunk;
    p.reform_p.budget = budget;
    p.reform_p.recompute = recompute;
    p.reform_p.sink = 8;
    p.reform_p.recent = 8;
    p.reform_p.obs = std::min(16, chunk);
    p.reform_p.keep_first = 8;
    p.reform_p.keep_last = 8;
    p.reform_p.pool_half = 4;
    p.reform_p.heads_path = keep.empty() ? nullptr : keep.c_str();
    return p;
}


ReformMethod &reform(Session &s) { return dynamic_cast<ReformMethod &>(s.method()); }


std::vector<float> store_f32(const ReformMethod &m) {
    const EmbeddingStore &st = m.store();
    std::vector<float> out;
    for (int64_t t = 0; t < st.size(); ++t)
        for (int32_t i = 0; i < st.dim(); ++i) out.push_back(fp16_to_fp32(st.row(t)[i]));
    return out;
}

} // namespace

// I1: with R >= N everything is selected and recompute + decode equals FULL.
void expect_equals_full(const Model &model, const std::vector<int32_t> &doc, const std::vector<int32_t> &query,
                        const lctx_session_params &rp) {
    lctx_session_params fp = rp;
    fp.method = LCTX_METHOD_FULL;
    Session full(model, fp), ref(model, rp);
    feed_split(full, doc, {100});
    feed_split(ref, doc, {37, 200, 5});
    auto sf = full.select(query.data(), query.size());
    auto sr = ref.select(query.data(), query.size());
    ASSERT_EQ(sr->positions.size(), doc.size());
    full.recompute(*sf);
    ref.recompute(*sr);
    const int32_t V = model.hparams().n_vocab;
    double max_diff = 0, max_abs = 0;
    for (int32_t i = 0; i < V; ++i) {
        max_diff = std::max(max_diff, double(std::fabs(full.logits()[i] - ref.logits()[i])));
        max_abs = std::max(max_abs, double(std::fabs(full.logits()[i])));
    }
    EXPECT_LT(max_diff, 1e-4 * std::max(1.0, max_abs)) << "max |logit diff| " << max_diff;
    lctx_sampling_params g{};
    g.struct_size = sizeof g;
    g.top_p = 1.0f;
    g.repeat_penalty = 1.0f;
    for (int k = 0; k < 8; ++k) {
        int32_t a = full.decode(g), b = ref.decode(g);
        ASSERT_EQ(a, b) << "greedy token " << k;
    }
}

TEST(ReformMethod, InfiniteBudgetsEqualFullTiny) {
    Tiny t;
    auto doc = random_tokens(300, 1), query = random_tokens(12, 2);
    // Eviction on (B < N) and off (B >= N): recompute does not depend on it.
    expect_equals_full(*t.model, doc, query, reform_params(64, 48, 1000, write_profile(kTinyProfile)));
    expect_equals_full(*t.model, doc, query, reform_params(64, 400, 1000, write_profile(kTinyProfile)));
}

TEST(ReformMethod, InfiniteBudgetsEqualFullStories260K) {
    const std::string path = engine_test::stories260k_path();
    auto model = Model::load_file(path, true, 2);
    const int n_ctx = model->hparams().n_ctx_train;
    auto doc = random_tokens(std::min(400, n_ctx - 64), 3, 3, model->hparams().n_vocab - 1);
    auto query = random_tokens(10, 4, 3, model->hparams().n_vocab - 1);
    auto p = reform_params(64, 64, n_ctx - 32, "");
    p.n_ctx = n_ctx;
    p.reform_p.sink = 4;
    p.reform_p.recent = 4;
    p.reform_p.keep_first = 4;
    p.reform_p.keep_last = 4;
    expect_equals_full(*model, doc, query, p);
}

// The library default (issue 16): default params are REFORM, and an input
// that fits its default budgets (recompute = n_ctx_train / 2) gets FULL's
// logits and greedy tokens, with nothing set but the thread count.
TEST(ReformMethod, DefaultIsReformAndShortInputsGetFullsAnswer) {
    auto model = Model::load_file(engine_test::stories260k_path(), true, 2);
    session_test::SessionParams p;
    ASSERT_EQ(p.method, LCTX_METHOD_REFORM);
    p.n_threads = 2;
    const int32_t V = model->hparams().n_vocab;
    auto doc = random_tokens(model->hparams().n_ctx_train / 2 - 24, 7, 3, V - 1);
    auto query = random_tokens(10, 8, 3, V - 1);
    expect_equals_full(*model, doc, query, p);
}

// I3 + I1b: without eviction, the embeddings are the same for any chunk size
// and equal those of one plain forward over the whole document.
TEST(ReformMethod, EmbeddingsIndependentOfChunkingAndMatchFullForward) {
    Tiny t;
    const auto doc = random_tokens(300, 5);
    const std::string prof = write_profile(kTinyProfile);
    std::vector<std::vector<float>> stores;
    for (int chunk : {1, 7, 64, 300}) {
        Session s(*t.model, reform_params(chunk, 320, 1000, prof));
        feed_split(s, doc, {300});
        stores.push_back(store_f32(reform(s)));
    }
    for (size_t k = 1; k < stores.size(); ++k) {
        ASSERT_EQ(stores[k].size(), stores[0].size());
        float md = 0;
        for (size_t i = 0; i < stores[0].size(); ++i) md = std::max(md, std::fabs(stores[k][i] - stores[0][i]));
        EXPECT_LT(md, 2e-3f) << "chunking " << k;
    }
    // Reference: one forward over the whole document through all 4 layers,
    // pre-RoPE projections from the on_qkv hook, normalised here.
    const Hparams &hp = t.model->hparams();
    auto be = make_cpu_backend(2);
    Forward fw(*t.model, *be);
    KvStore cache(*be, hp, 400);
    const int64_t n = static_cast<int64_t>(doc.size()), d = hp.head_dim;
    HeadProfile prof_h = parse_head_profile(kTinyProfile, "t");
    std::vector<float> ref(static_cast<size_t>(n) * prof_h.heads.size() * d);
    std::vector<int64_t> done(hp.n_layer, 0);
    ForwardHooks hooks;
    hooks.on_qkv = [&](int32_t l, const float *q, const float *k, const float *v, int64_t nt) {
        for (size_t i = 0; i < prof_h.heads.size(); ++i) {
            const HeadSpec &h = prof_h.heads[i];
            if (h.layer != l) continue;
            const float *src = h.kind == HeadKind::Q ? q : h.kind == HeadKind::K ? k : v;
            const int64_t ld = (h.kind == HeadKind::Q ? hp.n_head : hp.n_head_kv) * d;
            for (int64_t r = 0; r < nt; ++r) {
                double ss = 0;
                for (int j = 0; j < d; ++j) ss += double(src[r * ld + h.head * d + j]) * src[r * ld + h.head * d + j];
                for (int j = 0; j < d; ++j)
                    ref[((done[l] + r) * prof_h.heads.size() + i) * d + j] =
                        float(src[r * ld + h.head * d + j] / std::sqrt(ss));
            }
        }
        done[l] += nt;
    };
    ForwardOptions opt;
    opt.hooks = &hooks;
    opt.logits = LogitsMode::NONE;
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = int32_t(i);
    std::vector<float> logits;
    fw.run(doc.data(), pos.data(), n, cache, opt, logits);
    const size_t H = prof_h.heads.size();
    double worst = 1;
    for (int64_t r = 0; r < n; ++r)
        for (size_t i = 0; i < H; ++i) {
            double dot = 0, na = 0, nb = 0;
            for (int j = 0; j < d; ++j) {
                double a = stores[2][(r * H + i) * d + j], b = ref[(r * H + i) * d + j];
                dot += a * b; na += a * a; nb += b * b;
            }
            worst = std::min(worst, dot / std::sqrt(na * nb));
        }
    EXPECT_GT(worst, 0.9999) << "worst cosine to the full forward";
}

// I5 + I4: bit-identical store for any feed split, with eviction; the
// working cache is position-dense and keeps sinks and recent tokens.
TEST(ReformMethod, FeedSplitInvarianceAndDenseWorkingCache) {
    Tiny t;
    const auto doc = random_tokens(333, 9);
    const std::string prof = write_profile(kTinyProfile);
    Session a(*t.model, reform_params(64, 48, 100, prof)), b(*t.model, reform_params(64, 48, 100, prof));
    feed_split(a, doc, {333});
    feed_split(b, doc, {1, 13, 64, 2, 100});
    const ReformMethod &ra = reform(a), &rb = reform(b);
    ASSERT_EQ(ra.store().size(), 333);
    for (int64_t r = 0; r < 333; ++r)
        ASSERT_EQ(0, std::memcmp(ra.store().row(r), rb.store().row(r), ra.store().dim() * 2)) << r;
    const ReformEncoder &e = ra.encoder();
    EXPECT_EQ(e.exit_layer(), 2);
    EXPECT_EQ(e.n_slots(), 48);
    for (int32_t l = 0; l < e.exit_layer(); ++l)
        for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g) {
            const auto &o = e.orig(l, g);
            ASSERT_EQ(o.size(), 48u);
            for (size_t s = 1; s < o.size(); ++s) ASSERT_LT(o[s - 1], o[s]);
            for (int64_t s = 0; s < 8; ++s) EXPECT_EQ(o[s], s);           // sinks
            for (int64_t s = 0; s < 8; ++s) EXPECT_EQ(o[40 + s], 325 + s); // recent
            EXPECT_EQ(o, rb.encoder().orig(l, g));
        }
    for (int32_t l = 0; l < e.cache().n_layers(); ++l)
        for (int32_t g = 0; g < e.cache().n_head_kv(); ++g)
            for (int64_t s = 0; s < 48; ++s) EXPECT_EQ(e.cache().position(l, g, s), s);
    // Selections are identical too.
    auto q = random_tokens(9, 10);
    auto sa = a.select(q.data(), q.size()), sb = b.select(q.data(), q.size());
    EXPECT_EQ(sa->positions, sb->positions);
    EXPECT_EQ(sa->positions.size(), 100u);
}

// I9: select leaves the working cache and the store unchanged.
TEST(ReformMethod, SelectHasNoSideEffects) {
    Tiny t;
    const auto doc = random_tokens(250, 12);
    const std::string prof = write_profile(kTinyProfile);
    Session s(*t.model, reform_params(64, 48, 80, prof)), fresh(*t.model, reform_params(64, 48, 80, prof));
    feed_split(s, doc, {250});
    feed_split(fresh, doc, {250});
    const ReformEncoder &e = reform(s).encoder();
    const KvStore &c = e.cache();
    auto snapshot = [&] {
        std::vector<float> v, rows(static_cast<size_t>(c.size() * c.head_dim()));
        for (int32_t l = 0; l < c.n_layers(); ++l)
            for (int32_t g = 0; g < c.n_head_kv(); ++g) {
                c.read_keys(l, g, 0, c.size(), rows.data());
                v.insert(v.end(), rows.begin(), rows.end());
                c.read_values(l, g, 0, c.size(), rows.data());
                v.insert(v.end(), rows.begin(), rows.end());
                v.insert(v.end(), c.positions(l, g), c.positions(l, g) + c.size());
            }
        return v;
    };
    const auto before = snapshot();
    const int64_t n_before = c.size();
    auto q1 = random_tokens(11, 13), q2 = random_tokens(7, 14);
    auto s1 = s.select(q1.data(), q1.size());
    auto s2 = s.select(q2.data(), q2.size());
    EXPECT_EQ(c.size(), n_before);
    EXPECT_EQ(snapshot(), before);
    auto f2 = fresh.select(q2.data(), q2.size());
    EXPECT_EQ(s2->positions, f2->positions);
    EXPECT_EQ(s2->scores, f2->scores);
    auto s1b = s.select(q1.data(), q1.size());
    EXPECT_EQ(s1->positions, s1b->positions);
    // Several questions: recompute and decode, then select again.
    s.recompute(*s1);
    lctx_sampling_params g{};
    g.struct_size = sizeof g;
    g.top_p = 1.0f;
    g.repeat_penalty = 1.0f;
    s.decode(g);
    auto s2b = s.select(q2.data(), q2.size());
    EXPECT_EQ(s2b->positions, f2->positions);
}

// I10: save -> load -> identical selections; corruptions refused.
TEST(ReformMethod, IndexRoundTripAndCorruptionsRefused) {
    Tiny t;
    const auto doc = random_tokens(260, 15);
    const std::string prof = write_profile(kTinyProfile);
    auto p = reform_params(64, 48, 90, prof);
    Session s(*t.model, p);
    feed_split(s, doc, {260});
    const std::string path = tmp_path("index.lctx");
    s.save_index(path);
    auto q = random_tokens(10, 16);
    auto sel = s.select(q.data(), q.size());
    Session l(*t.model, p);
    l.load_index(path);
    EXPECT_EQ(l.stage(), LCTX_STAGE_INDEXED);
    EXPECT_EQ(l.n_fed(), 260);
    auto sel2 = l.select(q.data(), q.size());
    EXPECT_EQ(sel->positions, sel2->positions);
    EXPECT_EQ(sel->scores, sel2->scores);
    s.recompute(*sel);
    l.recompute(*sel2);
    for (int32_t i = 0; i < t.model->hparams().n_vocab; ++i) ASSERT_EQ(s.logits()[i], l.logits()[i]);

    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto refused = [&](const std::string &content, lctx_status want, const Model &m) {
        const std::string bad = tmp_path("bad.lctx");
        std::ofstream(bad, std::ios::binary) << content;
        Session x(m, p);
        try {
            x.load_index(bad);
            return false;
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), want) << e.what();
            return true;
        }
    };
    // Truncations at several points, and appended bytes.
    for (size_t cut : {size_t(0), size_t(5), size_t(40), bytes.size() / 2, bytes.size() - 1})
        EXPECT_TRUE(refused(bytes.substr(0, cut), LCTX_ERR_FORMAT, *t.model)) << "cut " << cut;
    EXPECT_TRUE(refused(bytes + "x", LCTX_ERR_FORMAT, *t.model));
    // Every single-byte change after the fingerprint is caught (stride keeps it quick).
    for (size_t at = 32; at < bytes.size(); at += 97) {
        std::string b = bytes;
        b[at] = char(b[at] ^ 0x10);
        EXPECT_TRUE(refused(b, LCTX_ERR_FORMAT, *t.model)) << "byte " << at;
    }
    std::string b = bytes;
    b[0] = 'X';
    EXPECT_TRUE(refused(b, LCTX_ERR_FORMAT, *t.model));
    // Another model (other weights, same shape).
    Tiny other(2);
    EXPECT_TRUE(refused(bytes, LCTX_ERR_INVALID_ARG, *other.model));
    // Another head profile requested explicitly.
    auto p2 = reform_params(64, 48, 90, write_profile(
        R"({"format": "lctx-head-profile", "version": 1, "heads": [{"layer": 1, "kind": "V", "head": 1}]})"));
    Session y(*t.model, p2);
    EXPECT_THROW(y.load_index(path), Error);
    std::remove(path.c_str());
}

TEST(ReformMethod, ErrorsAreReported) {
    Tiny t;
    const std::string prof = write_profile(kTinyProfile);
    Session s(*t.model, reform_params(64, 48, 90, prof));
    auto doc = random_tokens(100, 1);
    feed_split(s, doc, {100});
    auto longq = random_tokens(200, 2);   // more than the chunk on top of the cache
    try {
        s.select(longq.data(), longq.size());
        ADD_FAILURE();
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG);
    }
    Session f(*t.model, reform_params(64, 48, 90, prof));
    EXPECT_THROW(f.save_index(tmp_path("x")), Error);   // not indexed
    auto bad = reform_params(64, 48, 90, "/nonexistent/profile.json");
    try {
        Session x(*t.model, bad);
        ADD_FAILURE();
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_IO);
    }
}

// The working cache's evictor is selectable: StreamingLLM keeps exactly the
// sinks and the most recent tokens in every (layer, KV head); TOVA and SnapKV
// run with their own observation windows and scores fresh per chunk; all
// give a valid selection; an out-of-range value is refused.
TEST(ReformMethod, EvictorSelectable) {
    Tiny t;
    const auto doc = random_tokens(300, 21);
    const std::string prof = write_profile(kTinyProfile);
    for (lctx_evictor e : {LCTX_EVICTOR_H2O, LCTX_EVICTOR_TOVA, LCTX_EVICTOR_STREAMING, LCTX_EVICTOR_SNAPKV}) {
        auto p = reform_params(64, 48, 100, prof);
        p.reform_p.evictor = e;
        p.reform_p.obs = 0;   // the evictor's own window
        Session s(*t.model, p);
        feed_split(s, doc, {300});
        const ReformMethod &m = reform(s);
        const ReformEncoder &enc = m.encoder();
        const int64_t obs = m.params().obs;
        EXPECT_EQ(obs, e == LCTX_EVICTOR_H2O ? 64 : e == LCTX_EVICTOR_SNAPKV ? 32 : 1) << e;
        EXPECT_EQ(m.params().h2o_accumulate, e == LCTX_EVICTOR_H2O) << e;
        for (int32_t l = 0; l < enc.exit_layer(); ++l)
            for (int32_t g = 0; g < enc.cache().n_head_kv(); ++g) {
                const std::vector<int64_t> &o = enc.orig(l, g);
                ASSERT_LE(o.size(), 48u);
                if (e != LCTX_EVICTOR_STREAMING) continue;
                // After the last eviction (48 slots + the final 44 tokens) the
                // cache holds the sinks 0..7 and the last 40 tokens, consecutive.
                for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(o[i], i);
                for (size_t i = 8; i + 1 < o.size(); ++i) EXPECT_EQ(o[i + 1], o[i] + 1) << "not a window";
                EXPECT_EQ(o.back(), 299);
            }
        const auto q = random_tokens(9, 22);
        auto sel = s.select(q.data(), q.size());
        EXPECT_EQ(sel->positions.size(), 100u);
    }
    auto bad = reform_params(64, 48, 100, prof);
    bad.reform_p.evictor = static_cast<lctx_evictor>(7);
    try {
        Session s(*t.model, bad);
        FAIL() << "evictor 7 accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG);
    }
}
