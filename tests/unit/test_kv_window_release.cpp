// The sliding layers of a KV store that releases slots out of the window
// (KvStore window_slack >= 0, docs/models.md "KV memory of the sliding
// layers"), on a tiny gemma3 (engine_tiny_model.h: 7 layers, window 8;
// layers 0-4 and 6 slide, layer 5 is global). The reference is the same
// computation over a store that keeps every slot: prefill in chunks and
// greedy decode far past the window give the same logits (to float rounding:
// fewer slots change the attention kernel's key blocks and so the order of
// its sums) and the same tokens, while a sliding layer never holds more than
// window - 1 + one chunk slots. FULL (two questions: the second restarts at
// the document's end) and the REFORM / ILRe decoder (two recomputes) are
// checked the same way; memory reported and charged to max_memory shrinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "backend/budget_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"
#include "session/gathered_decoder.h"
#include "session/method_full.h"

using namespace lctx;

namespace {

constexpr int kLayers = 7, kWindow = 8;

std::unique_ptr<Model> tiny_gemma3() {
    engine_test::TinyOptions o;
    o.arch = "gemma3";
    o.n_layer = kLayers;
    o.window = kWindow;
    o.rope_base = 1e6f;
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama(o);
    return Model::load_memory(bytes.data(), bytes.size(), 2);
}

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> d(3, engine_test::kVocab - 1);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t &x : t) x = d(rng);
    return t;
}

// Largest |a - b| over the largest |a| (at least 1).
double rel_diff(const std::vector<float> &a, const std::vector<float> &b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0, scale = 1.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        d = std::max(d, double(std::fabs(a[i] - b[i])));
        scale = std::max(scale, double(std::fabs(a[i])));
    }
    return d / scale;
}

int32_t argmax(const std::vector<float> &v, size_t row = 0) {
    const auto b = v.begin() + static_cast<std::ptrdiff_t>(row * engine_test::kVocab);
    return static_cast<int32_t>(std::max_element(b, b + engine_test::kVocab) - b);
}

// Float rounding only: the tiny model's logits are O(1). f16 storage rounds
// each key and value to 11 bits, so a rounding-level difference in an
// activation can move a stored element by one f16 step (5e-4 relative),
// which later tokens carry: a looser bound there.
constexpr double kTol = 2e-5, kTolF16 = 2e-4;

// Runs tokens at the next positions of `cache` (one forward call).
void step(Forward &fwd, KvStore &cache, const int32_t *tok, int64_t n, LogitsMode mode, std::vector<float> &logits,
          bool raise_floor = true) {
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), static_cast<int32_t>(cache.size()));
    if (raise_floor) cache.raise_floor(pos[0]);
    ForwardOptions opt;
    opt.logits = mode;
    fwd.run(tok, pos.data(), n, cache, opt, logits);
}

// Each sliding layer holds at most window - 1 slots before the last chunk
// plus the chunk, in the buffer it started with; global layers hold all.
void expect_bounded(const KvStore &kv, const Hparams &hp, int64_t chunk, int64_t slack) {
    for (int32_t l = 0; l < kv.n_layers(); ++l) {
        if (hp.window_of(l) > 0) {
            EXPECT_LE(kv.size() - kv.first_held(l), kWindow - 1 + chunk) << "layer " << l;
            EXPECT_EQ(kv.layer_slots(l), std::min<int64_t>(kv.capacity(), kWindow + slack)) << "layer " << l;
        } else {
            EXPECT_EQ(kv.first_held(l), 0) << "layer " << l;
            EXPECT_EQ(kv.layer_slots(l), kv.capacity()) << "layer " << l;
        }
    }
}

class WindowRelease : public ::testing::TestWithParam<KvType> {};

TEST_P(WindowRelease, ChunkedPrefillAndDecodeMatchAStoreKeepingEverySlot) {
    auto m = tiny_gemma3();
    const Hparams &hp = m->hparams();
    ASSERT_EQ(hp.window_of(0), kWindow);
    ASSERT_EQ(hp.window_of(5), 0);
    auto be = make_cpu_backend(2);
    Forward fwd_ref(*m, *be), fwd(*m, *be);
    const int64_t cap = 400, slack = 40;
    KvStore ref(*be, hp, cap, -1, GetParam()), rel(*be, hp, cap, -1, GetParam(), slack);
    EXPECT_FALSE(ref.releases_window());
    EXPECT_TRUE(rel.releases_window());

    const double tol = GetParam() == KvType::F16 ? kTolF16 : kTol;
    const std::vector<int32_t> doc = random_tokens(230, 7);   // 29 windows
    const int64_t chunks[] = {13, 40, 1, 29, 7, 40, 33, 2, 40, 25};
    std::vector<float> a, b;
    size_t at = 0;
    for (int i = 0; at < doc.size(); ++i) {
        const int64_t n = std::min<int64_t>(chunks[i % 10], static_cast<int64_t>(doc.size() - at));
        step(fwd_ref, ref, doc.data() + at, n, LogitsMode::ALL, a);
        step(fwd, rel, doc.data() + at, n, LogitsMode::ALL, b);
        EXPECT_LT(rel_diff(a, b), tol) << "chunk at " << at;
        for (int64_t r = 0; r < n; ++r) EXPECT_EQ(argmax(a, r), argmax(b, r)) << "token " << at + r;
        expect_bounded(rel, hp, n, slack);
        at += static_cast<size_t>(n);
    }
    // Greedy decode for 12 windows: each side feeds its own choice.
    int32_t ta = argmax(a, static_cast<size_t>(a.size() / engine_test::kVocab - 1)), tb = ta;
    for (int t = 0; t < 12 * kWindow; ++t) {
        step(fwd_ref, ref, &ta, 1, LogitsMode::LAST, a);
        step(fwd, rel, &tb, 1, LogitsMode::LAST, b);
        ASSERT_LT(rel_diff(a, b), tol) << "decode step " << t;
        ta = argmax(a);
        tb = argmax(b);
        ASSERT_EQ(ta, tb) << "decode step " << t;
        expect_bounded(rel, hp, 1, slack);
    }
    for (int32_t l = 0; l < kLayers; ++l)   // it did release
        if (hp.window_of(l) > 0) EXPECT_GT(rel.first_held(l), rel.size() - 2 * kWindow) << "layer " << l;
    EXPECT_LT(rel.bytes(), ref.bytes());
}

INSTANTIATE_TEST_SUITE_P(KvTypes, WindowRelease, ::testing::Values(KvType::F32, KvType::F16),
                         [](const auto &info) { return info.param == KvType::F32 ? "f32" : "f16"; });

TEST(KvWindowRelease, WithoutAFloorTheSlidingLayersGrowAndKeepEverything) {
    auto m = tiny_gemma3();
    auto be = make_cpu_backend(2);
    Forward fwd_ref(*m, *be), fwd(*m, *be);
    KvStore ref(*be, m->hparams(), 200), rel(*be, m->hparams(), 200, -1, KvType::F32, 4);
    const std::vector<int32_t> doc = random_tokens(150, 3);
    std::vector<float> a, b;
    for (size_t at = 0; at < doc.size(); at += 30) {   // chunks larger than the slack, no promise
        step(fwd_ref, ref, doc.data() + at, 30, LogitsMode::LAST, a, false);
        step(fwd, rel, doc.data() + at, 30, LogitsMode::LAST, b, false);
        EXPECT_LT(rel_diff(a, b), kTol);
    }
    for (int32_t l = 0; l < kLayers; ++l) {
        EXPECT_EQ(rel.first_held(l), 0);
        EXPECT_GE(rel.layer_slots(l), 150);
    }
}

// The comparison sees a slot released too early: with a floor 3 positions
// past the truth, the last window - 1 keys before a chunk go too soon.
TEST(KvWindowRelease, AFloorAboveTheQueriesChangesTheLogits) {
    auto m = tiny_gemma3();
    auto be = make_cpu_backend(2);
    Forward fwd_ref(*m, *be), fwd(*m, *be);
    KvStore ref(*be, m->hparams(), 200), rel(*be, m->hparams(), 200, -1, KvType::F32, 16);
    const std::vector<int32_t> doc = random_tokens(120, 9);
    std::vector<float> a, b;
    double worst = 0;
    for (size_t at = 0; at < doc.size(); at += 12) {
        step(fwd_ref, ref, doc.data() + at, 12, LogitsMode::ALL, a, false);
        rel.raise_floor(static_cast<int32_t>(at) + 3);
        step(fwd, rel, doc.data() + at, 12, LogitsMode::ALL, b, false);
        worst = std::max(worst, rel_diff(a, b));
    }
    EXPECT_GT(worst, 1e-3);
}

TEST(KvWindowRelease, ReleasedSlotsCannotBeReadAndSlotMovesAreRefused) {
    auto m = tiny_gemma3();
    auto be = make_cpu_backend(1);
    Forward fwd(*m, *be);
    KvStore kv(*be, m->hparams(), 100, -1, KvType::F32, 8);
    const std::vector<int32_t> doc = random_tokens(60, 5);
    std::vector<float> logits, rows(64 * engine_test::kHeadDim);
    for (size_t at = 0; at < doc.size(); at += 6) step(fwd, kv, doc.data() + at, 6, LogitsMode::NONE, logits);
    ASSERT_GT(kv.first_held(0), 0);
    auto status = [](auto &&fn) {
        try {
            fn();
        } catch (const Error &e) {
            return e.status();
        }
        return LCTX_OK;
    };
    EXPECT_EQ(status([&] { kv.read_keys(0, 0, 0, 4, rows.data()); }), LCTX_ERR_INTERNAL);
    EXPECT_EQ(status([&] { kv.read_keys(0, 0, kv.first_held(0), 4, rows.data()); }), LCTX_OK);
    EXPECT_EQ(status([&] { kv.read_keys(5, 0, 0, 4, rows.data()); }), LCTX_OK);   // the global layer keeps all
    EXPECT_EQ(status([&] { kv.compact({0, 1, 2}); }), LCTX_ERR_INTERNAL);
    EXPECT_EQ(status([&] { kv.reposition(std::vector<int32_t>(static_cast<size_t>(kv.size()), 0)); }),
              LCTX_ERR_INTERNAL);
    // Emptied: a new sequence starts at position 0 with no floor.
    kv.clear();
    for (int32_t l = 0; l < kLayers; ++l) EXPECT_EQ(kv.first_held(l), 0);
    step(fwd, kv, doc.data(), 30, LogitsMode::NONE, logits, false);
    EXPECT_EQ(kv.first_held(0), 0);
}

// The sizes: a sliding layer holds window + slack slots of keys and values;
// positions stay per slot of the whole capacity (4 bytes each).
TEST(KvWindowRelease, BytesAndTheMemoryBudgetCountTheSmallerSlidingLayers) {
    auto m = tiny_gemma3();
    const Hparams &hp = m->hparams();
    const int64_t cap = 4096, slack = 64;
    const size_t row = size_t(hp.n_head_kv) * hp.head_dim * sizeof(float);
    const size_t pos = size_t(kLayers) * hp.n_head_kv * cap * 4;
    int32_t n_sliding = 0;
    for (int32_t l = 0; l < kLayers; ++l) n_sliding += hp.window_of(l) > 0;
    ASSERT_EQ(n_sliding, 6);
    const size_t full = 2 * size_t(kLayers) * cap * row + pos;
    const size_t windowed = 2 * (size_t(kLayers - n_sliding) * cap + size_t(n_sliding) * (kWindow + slack)) * row + pos;
    auto be = make_cpu_backend(1);
    EXPECT_EQ(KvStore(*be, hp, cap).bytes(), full);
    EXPECT_EQ(KvStore(*be, hp, cap, -1, KvType::F32, slack).bytes(), windowed);

    // A budget between the two: the store that keeps every slot is refused
    // before it allocates, the releasing one fits and charges its bytes.
    MemoryBudget budget((full + windowed) / 2);
    BudgetBackend charged(make_cpu_backend(1), budget);
    try {
        KvStore kv(charged, hp, cap);
        FAIL() << "a " << full << "-byte store fit a budget of " << budget.limit();
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY);
    }
    EXPECT_EQ(budget.used(), 0u);
    {
        KvStore kv(charged, hp, cap, -1, KvType::F32, slack);
        EXPECT_EQ(budget.used(), windowed);
    }
    EXPECT_EQ(budget.used(), 0u);
}

// FULL: a document in batches, a question and a greedy answer longer than the
// window, then a second question, which restarts at the document's end (the
// cache is truncated back there): both answers equal a reference that keeps
// every slot and runs the same batches.
TEST(KvWindowRelease, FullMethodAnswersTwoQuestionsLikeAStoreKeepingEverySlot) {
    auto m = tiny_gemma3();
    auto be = make_cpu_backend(2);
    const int32_t n_batch = 16;
    FullMethod full(*m, *be, 512, n_batch);
    std::atomic<bool> cancel{false};
    Progress progress(nullptr, nullptr, cancel);
    const std::vector<int32_t> doc = random_tokens(203, 11);
    for (size_t at = 0; at < doc.size(); at += 50) {
        const size_t n = std::min<size_t>(50, doc.size() - at);
        full.feed(doc.data() + at, n, progress);
    }
    full.finish(progress);

    // The reference: the same forward calls over a store keeping every slot.
    Forward fwd(*m, *be);
    KvStore ref(*be, m->hparams(), 512);
    std::vector<float> a, b;
    for (size_t at = 0; at < doc.size();) {   // FULL cuts each feed call into batches of n_batch
        const size_t call_end = std::min(doc.size(), (at / 50 + 1) * 50);
        const int64_t n = static_cast<int64_t>(std::min<size_t>(n_batch, call_end - at));
        step(fwd, ref, doc.data() + at, n, LogitsMode::NONE, a, false);
        at += static_cast<size_t>(n);
    }
    for (uint32_t q = 0; q < 2; ++q) {
        const std::vector<int32_t> question = random_tokens(5 + 3 * q, 100 + q);
        const Selection sel = full.select(question, progress);
        full.recompute(sel, progress, b);
        ref.truncate(static_cast<int64_t>(doc.size()));
        step(fwd, ref, question.data(), static_cast<int64_t>(question.size()), LogitsMode::LAST, a, false);
        ASSERT_LT(rel_diff(a, b), kTol) << "question " << q;
        for (int t = 0; t < 3 * kWindow; ++t) {
            const int32_t ta = argmax(a), tb = argmax(b);
            ASSERT_EQ(ta, tb) << "question " << q << " step " << t;
            full.append(tb, b);
            step(fwd, ref, &ta, 1, LogitsMode::LAST, a, false);
            ASSERT_LT(rel_diff(a, b), kTol) << "question " << q << " step " << t;
        }
    }
}

// REFORM / ILRe's decoder: a recompute of gathered tokens + the question,
// then greedy decoding; a second recompute starts over at position 0.
TEST(KvWindowRelease, GatheredDecoderMatchesAStoreKeepingEverySlot) {
    auto m = tiny_gemma3();
    auto be = make_cpu_backend(2);
    const int32_t n_batch = 24;
    GatheredDecoder dec(*m, *be, 400, n_batch, KvType::F32, "TEST");
    std::atomic<bool> cancel{false};
    Progress progress(nullptr, nullptr, cancel);
    const std::vector<int32_t> doc = random_tokens(300, 21);
    for (int round = 0; round < 2; ++round) {
        Selection sel;
        for (int64_t p = round; p < 300; p += 2 + round) sel.positions.push_back(p);
        sel.query = random_tokens(6, 200 + round);
        std::vector<int32_t> ids;
        for (int64_t p : sel.positions) ids.push_back(doc[static_cast<size_t>(p)]);
        ids.insert(ids.end(), sel.query.begin(), sel.query.end());

        std::vector<float> a, b;
        dec.recompute(doc, sel, progress, b);
        Forward fwd(*m, *be);
        KvStore ref(*be, m->hparams(), 400);
        for (size_t at = 0; at < ids.size(); at += n_batch) {
            const int64_t n = static_cast<int64_t>(std::min<size_t>(n_batch, ids.size() - at));
            step(fwd, ref, ids.data() + at, n, LogitsMode::LAST, a, false);
        }
        ASSERT_LT(rel_diff(a, b), kTol) << "round " << round;
        for (int t = 0; t < 3 * kWindow; ++t) {
            const int32_t ta = argmax(a), tb = argmax(b);
            ASSERT_EQ(ta, tb) << "round " << round << " step " << t;
            dec.append(tb, b);
            step(fwd, ref, &ta, 1, LogitsMode::LAST, a, false);
            ASSERT_LT(rel_diff(a, b), kTol) << "round " << round << " step " << t;
        }
        const KvStore &kv = *dec.cache();
        ASSERT_TRUE(kv.releases_window());
        for (int32_t l = 0; l < kLayers; ++l)
            if (m->hparams().window_of(l) > 0) {
                EXPECT_LE(kv.size() - kv.first_held(l), kWindow);   // decode: window - 1 + the token
                EXPECT_EQ(kv.layer_slots(l), kWindow + n_batch);
            }
    }
}

} // namespace
