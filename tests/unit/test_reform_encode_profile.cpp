// The REFORM encode profile (ReformProfile, lctx bench --reform N --profile)
// on a tiny random model: profiling does not change what is encoded (same
// state digest: store bytes, working cache, eviction scores; same selection);
// every part is non-negative, the ops that run are timed, those that do not
// are zero, and the parts sum to no more than the wall time of the encode.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>

#include "engine_tiny_model.h"
#include "scratch_path.h"
#include "session/method_reform.h"
#include "session/reform_profile.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;

namespace {

// Heads at layers 0, 1 and 2: the forward runs layers 0..1, layer 2's
// projections are the exit-layer capture.
const char *kTinyProfile = R"({"format": "lctx-head-profile", "version": 1, "name": "tiny test",
  "heads": [{"layer": 1, "kind": "V", "head": 0}, {"layer": 2, "kind": "Q", "head": 3},
            {"layer": 2, "kind": "K", "head": 1}, {"layer": 0, "kind": "V", "head": 1}]})";

std::string write_profile() {
    const std::string p = scratch::path("reform_encode_profile", "heads.json",
                                        ::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir());
    std::ofstream(p) << kTinyProfile;
    return p;
}

session_test::SessionParams params(const std::string &heads) {
    static std::string keep;
    keep = heads;
    session_test::SessionParams p;
    p.method = LCTX_METHOD_REFORM;
    p.n_ctx = 2048;
    p.n_threads = 2;
    p.reform_p.chunk = 64;
    p.reform_p.budget = 48;   // evicts after every chunk
    p.reform_p.recompute = 120;
    p.reform_p.sink = 8;
    p.reform_p.recent = 8;
    p.reform_p.obs = 16;
    p.reform_p.keep_first = 8;
    p.reform_p.keep_last = 8;
    p.reform_p.pool_half = 4;
    p.reform_p.heads_path = keep.c_str();
    return p;
}

ReformMethod &reform(Session &s) { return dynamic_cast<ReformMethod &>(s.method()); }

} // namespace

TEST(ReformEncodeProfile, SameIndexAndPartsWithinWallTime) {
    engine_test::TinyOptions o;
    o.n_layer = 4;
    auto bytes = engine_test::make_tiny_llama(o);
    auto model = Model::load_memory(bytes.data(), bytes.size(), 2);
    const auto p = params(write_profile());
    const auto doc = session_test::random_tokens(700, 11), query = session_test::random_tokens(9, 12);

    Session plain(*model, p), profiled(*model, p);
    ReformProfile prof;
    reform(profiled).set_encode_profile(&prof);
    session_test::feed_split(plain, doc, {100, 300});
    const auto t0 = std::chrono::steady_clock::now();
    session_test::feed_split(profiled, doc, {100, 300});   // feeds and builds the index
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    // Profiling changes nothing that is encoded.
    EXPECT_EQ(plain.method().state_digest(), profiled.method().state_digest());
    const EmbeddingStore &a = reform(plain).store(), &b = reform(profiled).store();
    ASSERT_EQ(a.size(), b.size());
    for (int64_t t = 0; t < a.size(); ++t)
        ASSERT_EQ(0, std::memcmp(a.row(t), b.row(t), sizeof(uint16_t) * a.dim())) << "row " << t;
    auto sa = plain.select(query.data(), query.size());
    auto sb = profiled.select(query.data(), query.size());
    EXPECT_EQ(sa->positions, sb->positions);

    // Counts: every chunk once, every token once.
    EXPECT_EQ(prof.tokens, 700);
    EXPECT_EQ(prof.steps, (700 + 63) / 64);
    EXPECT_EQ(prof.forward.tokens, 700);
    EXPECT_EQ(prof.forward.layer_tokens, 700 * 2);
    EXPECT_EQ(prof.exit_rows, 700 * 2 * model->hparams().head_dim);   // two heads at layer 2
    EXPECT_GT(prof.forward.attn_pairs, 0.0);
    ASSERT_EQ(prof.forward.layer_seconds.size(), 2u);

    // Every part non-negative; what runs is timed; what does not is zero.
    using F = ForwardProfile;
    using R = ReformProfile;
    for (int op = 0; op < F::N_OPS; ++op) EXPECT_GE(prof.forward.seconds[op], 0.0) << F::name(op);
    for (int part = 0; part < R::N_PARTS; ++part) EXPECT_GE(prof.seconds[part], 0.0) << R::name(part);
    for (int op : {F::EMBED, F::NORM, F::QKV, F::ROPE, F::KV_STORE, F::ATTENTION, F::ATTN_OUT, F::FFN_GATE_UP,
                   F::SWIGLU, F::FFN_DOWN, F::RESIDUAL, F::HOOKS, F::COL_SCORES})
        EXPECT_GT(prof.forward.seconds[op], 0.0) << F::name(op);
    EXPECT_EQ(prof.forward.seconds[F::OUTPUT], 0.0);   // no logits while encoding
    for (int part = 0; part < R::N_PARTS; ++part) EXPECT_GT(prof.seconds[part], 0.0) << R::name(part);
    for (double s : prof.forward.layer_seconds) EXPECT_GT(s, 0.0);

    // Nested parts fit their enclosing measurements, and all of it the wall time.
    const double in_hooks = prof.seconds[R::HEAD_CAPTURE] + prof.seconds[R::EXIT_NORM] + prof.seconds[R::EXIT_PROJ] +
                            prof.seconds[R::EXIT_CAPTURE];
    EXPECT_LE(in_hooks, prof.forward.seconds[F::HOOKS] * (1 + 1e-9) + 1e-7);
    double layers = 0.0;
    for (double s : prof.forward.layer_seconds) layers += s;
    EXPECT_LE(layers, prof.forward.total() * (1 + 1e-9) + 1e-7);
    const double named = prof.forward.total() + prof.seconds[R::SCORE_ACCUM] + prof.seconds[R::EVICT_KEEP] +
                         prof.seconds[R::KV_COMPACT] + prof.seconds[R::STORE];
    EXPECT_LE(named, prof.step_seconds * (1 + 1e-9) + 1e-7);
    EXPECT_LE(prof.step_seconds, wall);

    // select is not profiled; a later select leaves the profile as it was.
    const double before = prof.step_seconds;
    auto sc = profiled.select(query.data(), query.size());
    EXPECT_EQ(prof.step_seconds, before);
    EXPECT_EQ(prof.forward.tokens, 700);
}
