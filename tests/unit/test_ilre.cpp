// ILRe: the allocator against a brute-force reference and its stated
// properties; two-pass scoring against a direct softmax (DCA shifts
// included); the streaming encoder's keys against a plain full prefill; the
// DCA distance bound; budget >= input gives FULL's answer; feed-split
// invariance; select has no side effects; parameter errors; index files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <numeric>
#include <random>
#include <set>

#include "api/handles.h"
#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "engine/forward.h"
#include "engine_tiny_model.h"
#include "session/ilre_allocator.h"
#include "session/ilre_params.h"
#include "session/ilre_scorer.h"
#include "session/method_ilre.h"
#include "session/session.h"
#include "session_test_util.h"

using namespace lctx;
using session_test::feed_split;
using session_test::random_tokens;

namespace {

const std::vector<int32_t> kMax{2, 4, 8};
const std::vector<int32_t> kAvg{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

// The allocator written from its definition, as plainly as possible: every
// bin's pooled score by direct summation, a full stable ranking, whole blocks.
std::vector<int64_t> brute_allocate(const std::vector<float> &a, int64_t S, int64_t B, const std::vector<int32_t> &M,
                                    const std::vector<int32_t> &N) {
    const int64_t L = static_cast<int64_t>(a.size());
    std::vector<int64_t> out;
    if (L - S <= B) {
        for (int64_t t = 0; t < L; ++t) out.push_back(t);
        return out;
    }
    std::set<int64_t> chosen;
    for (int64_t t = 0; t < S; ++t) chosen.insert(t);
    const int64_t n = L - S, pairs = int64_t(M.size() * N.size());
    int64_t pair = 0;
    for (int32_t m : M) {
        const int64_t nb = (n + m - 1) / m;
        std::vector<double> mp(static_cast<size_t>(nb), -1e30);
        for (int64_t u = 0; u < n; ++u) mp[u / m] = std::max(mp[u / m], double(a[S + u]));
        for (int32_t k : N) {
            int64_t quota = B / pairs + (pair < B % pairs ? 1 : 0);
            ++pair;
            std::vector<std::pair<double, int64_t>> rank;
            for (int64_t b = 0; b < nb; ++b) {
                double s = 0;
                for (int64_t i = 0; i < k; ++i) {
                    const int64_t u = b - k / 2 + i;
                    if (u >= 0 && u < nb) s += mp[u];
                }
                rank.push_back({-(s / k), b});
            }
            std::sort(rank.begin(), rank.end());
            for (auto [neg, b] : rank) {
                for (int64_t u = b * m; u < std::min(n, (b + 1) * m) && quota > 0; ++u)
                    if (chosen.insert(S + u).second) --quota;
                if (quota == 0) break;
            }
        }
    }
    return {chosen.begin(), chosen.end()};
}

} // namespace

TEST(IlreAllocator, MatchesBruteForceOnRandomScores) {
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
        const int64_t L = 50 + rng() % 3000, S = rng() % 6, B = 1 + rng() % std::max<int64_t>(1, L / 3);
        std::vector<float> a(static_cast<size_t>(L));
        // Quantised values make ties common: the tie rule is tested too.
        const bool ties = trial % 2;
        for (float &x : a) x = ties ? float(rng() % 8) / 8.0f : std::uniform_real_distribution<float>(0, 1)(rng);
        const auto got = ilre_allocate(a.data(), L, S, B, kMax, kAvg);
        const auto want = brute_allocate(a, S, B, kMax, kAvg);
        ASSERT_EQ(got, want) << "trial " << trial << " L " << L << " S " << S << " B " << B;
        ASSERT_EQ(static_cast<int64_t>(got.size()), std::min(L, S + B));
    }
}

TEST(IlreAllocator, PropertiesAndSpike) {
    const int64_t L = 20000, S = 4, B = 1000, spike = 12345;
    std::vector<float> a(L, 0.01f);
    a[spike] = 1.0f;
    const auto I = ilre_allocate(a.data(), L, S, B, kMax, kAvg);
    ASSERT_EQ(static_cast<int64_t>(I.size()), S + B);
    EXPECT_TRUE(std::is_sorted(I.begin(), I.end()));
    EXPECT_EQ(std::set<int64_t>(I.begin(), I.end()).size(), I.size());
    for (int64_t t = 0; t < S; ++t) EXPECT_EQ(I[t], t);
    EXPECT_TRUE(std::binary_search(I.begin(), I.end(), spike));
    // The first pairs (small kernels) take the spike's block first: its
    // neighbours within 8 tokens are all in.
    for (int64_t t = spike - 4; t <= spike + 4; ++t) EXPECT_TRUE(std::binary_search(I.begin(), I.end(), t)) << t;
    // Short documents pass through whole.
    std::vector<float> small(50, 0.5f);
    EXPECT_EQ(ilre_allocate(small.data(), 50, 4, 46, kMax, kAvg).size(), 50u);
}

TEST(IlreAllocator, SingleKernelIsTopBOfPooledScores) {
    // M = {1}, N = {n}: SnapKV's pooling, then the top B tokens.
    std::mt19937 rng(3);
    const int64_t L = 3000, S = 4, B = 300;
    std::vector<float> a(L);
    for (float &x : a) x = std::uniform_real_distribution<float>(0, 1)(rng);
    const auto I = ilre_allocate(a.data(), L, S, B, {1}, {5});
    std::vector<float> u(a.begin() + S, a.end());
    const auto pooled = ilre_avg_pool(u, 5);
    std::vector<int64_t> idx(pooled.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return pooled[x] > pooled[y]; });
    std::vector<int64_t> want{0, 1, 2, 3};
    for (int64_t i = 0; i < B; ++i) want.push_back(S + idx[i]);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(I, want);
}

TEST(IlreParams, KernelListsAndRefusals) {
    EXPECT_EQ(parse_kernel_list("2,4,8", "k"), (std::vector<int32_t>{2, 4, 8}));
    EXPECT_EQ(parse_kernel_list("1-4, 9", "k"), (std::vector<int32_t>{1, 2, 3, 4, 9}));
    for (const char *bad : {"", "0", "3-1", "2,2", "a", "2,", "1-100000", "4;5"})
        EXPECT_THROW(parse_kernel_list(bad, "k"), Error) << bad;
}

namespace {

// n x D random keys rounded to fp16, in one store per KV head.
struct RandomIndex {
    std::vector<std::unique_ptr<EmbeddingStore>> stores;
    std::vector<std::vector<float>> keys;   // [g][t*D + d], fp16-rounded
    RandomIndex(int G, int64_t n, int D, uint32_t seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 1.5f);
        for (int g = 0; g < G; ++g) {
            stores.push_back(std::make_unique<EmbeddingStore>(D));
            stores.back()->reserve(n);
            keys.emplace_back(static_cast<size_t>(n * D));
            for (int64_t t = 0; t < n; ++t) {
                for (int d = 0; d < D; ++d) keys[g][t * D + d] = fp16_to_fp32(fp32_to_fp16(nd(rng)));
                stores.back()->write(t, 0, keys[g].data() + t * D, D);
            }
            stores.back()->commit(n);
        }
    }
};

Hparams score_hparams() {
    Hparams hp;
    hp.n_head = 6;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_embd = 96;
    hp.n_rot = 16;
    hp.rope_base = 10000.0f;
    return hp;
}

} // namespace

TEST(IlreScorer, TwoPassEqualsDirectSoftmax) {
    const Hparams hp = score_hparams();
    const int H = hp.n_head, G = hp.n_head_kv, D = hp.head_dim, rep = H / G;
    auto be = make_cpu_backend(2);
    for (int64_t n : {1, 7, 300, 5000}) {
        RandomIndex idx(G, n, D, uint32_t(n));
        const int64_t nq = 5;
        std::mt19937 rng(11);
        std::normal_distribution<float> nd(0.0f, 1.5f);
        std::vector<float> q(static_cast<size_t>(nq * H * D));
        for (float &x : q) x = nd(rng);
        IlreScoreArgs args;
        for (auto &s : idx.stores) args.keys.push_back(s.get());
        args.n_keys = n;
        args.queries = q.data();
        args.n_q = nq;
        std::vector<float> got(static_cast<size_t>(n));
        ilre_scores(*be, hp, args, got.data());
        // Direct: the whole softmax row of every (head, question token), in double.
        std::vector<double> want(static_cast<size_t>(n), 0.0);
        for (int h = 0; h < H; ++h)
            for (int64_t j = 0; j < nq; ++j) {
                std::vector<double> s(static_cast<size_t>(n));
                double mx = -1e300, sum = 0;
                for (int64_t t = 0; t < n; ++t) {
                    double d = 0;
                    for (int i = 0; i < D; ++i) d += double(q[(j * H + h) * D + i]) * idx.keys[h / rep][t * D + i];
                    s[t] = d / std::sqrt(double(D));
                    mx = std::max(mx, s[t]);
                }
                for (int64_t t = 0; t < n; ++t) sum += std::exp(s[t] - mx);
                for (int64_t t = 0; t < n; ++t) want[t] = std::max(want[t], std::exp(s[t] - mx) / sum);
            }
        for (int64_t t = 0; t < n; ++t)
            ASSERT_NEAR(got[t], want[t], 2e-5 * std::max(1e-3, want[t]) + 1e-9) << "n " << n << " t " << t;
    }
}

TEST(IlreScorer, QueryShiftEqualsKeyShift) {
    // DCA: scoring keys of a segment with the queries rotated back by `shift`
    // equals scoring those keys rotated forward by `shift`.
    const Hparams hp = score_hparams();
    const int H = hp.n_head, G = hp.n_head_kv, D = hp.head_dim;
    auto be = make_cpu_backend(2);
    const int64_t n = 600;
    RandomIndex idx(G, n, D, 5);
    std::vector<float> q(static_cast<size_t>(3 * H * D));
    std::mt19937 rng(2);
    for (float &x : q) x = std::normal_distribution<float>(0, 1)(rng);
    const std::vector<KeySegment> segs{{0, 200, 400}, {200, 450, 150}, {450, 600, 0}};
    IlreScoreArgs args;
    for (auto &s : idx.stores) args.keys.push_back(s.get());
    args.n_keys = n;
    args.queries = q.data();
    args.n_q = 3;
    args.segments = segs;
    std::vector<float> got(n), want(n);
    ilre_scores(*be, hp, args, got.data());
    // Rotate the keys forward instead (f32 copies: no second fp16 rounding).
    const Hparams rot = rope_delta_hparams(hp);
    std::vector<std::unique_ptr<EmbeddingStore>> shifted;
    for (int g = 0; g < G; ++g) {
        std::vector<float> k = idx.keys[g];
        for (const KeySegment &s : segs) {
            std::vector<int32_t> pos(static_cast<size_t>(s.end - s.begin), static_cast<int32_t>(s.shift));
            be->rope(rot, k.data() + s.begin * D, D, s.end - s.begin, 1, pos.data());
        }
        shifted.push_back(std::make_unique<EmbeddingStore>(D));
        shifted.back()->reserve(n);
        for (int64_t t = 0; t < n; ++t) shifted.back()->write(t, 0, k.data() + t * D, D);
        shifted.back()->commit(n);
    }
    IlreScoreArgs plain = args;
    plain.keys.clear();
    for (auto &s : shifted) plain.keys.push_back(s.get());
    plain.segments.clear();
    ilre_scores(*be, hp, plain, want.data());
    for (int64_t t = 0; t < n; ++t) ASSERT_NEAR(got[t], want[t], 2e-3 * want[t] + 1e-7) << t;
}

namespace {

// NORMAL-layout RoPE of one head in double, written out here (not the
// backend's kernel): pairs (2i, 2i + 1) turned by pos * base^(-2i / D).
void rotate_pairs(double *x, int D, double pos, double base) {
    for (int i = 0; i < D / 2; ++i) {
        const double a = pos * std::pow(base, -2.0 * i / D), c = std::cos(a), s = std::sin(a);
        const double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
    }
}

} // namespace

TEST(IlreScorer, FixedDistanceEqualsDirectScoringAtThatDistance) {
    // Keys stored rotated at their positions t (fp16), queries rotated at
    // N + j: with a fixed distance, every key must score as if it sat that
    // many positions before every question token, whatever its position.
    const Hparams hp = score_hparams();
    const int H = hp.n_head, G = hp.n_head_kv, D = hp.head_dim, rep = H / G;
    auto be = make_cpu_backend(2);
    const int64_t n = 3000, nq = 4;
    std::mt19937 rng(21);
    std::normal_distribution<double> nd(0.0, 1.5);
    std::vector<std::vector<double>> k_pre(G, std::vector<double>(static_cast<size_t>(n * D)));
    std::vector<std::unique_ptr<EmbeddingStore>> stores;
    for (int g = 0; g < G; ++g) {
        stores.push_back(std::make_unique<EmbeddingStore>(D));
        stores.back()->reserve(n);
        for (int64_t t = 0; t < n; ++t) {
            std::vector<double> k(static_cast<size_t>(D));
            for (double &x : k) x = nd(rng);
            std::vector<double> kr = k;
            rotate_pairs(kr.data(), D, double(t), hp.rope_base);
            std::vector<float> row(static_cast<size_t>(D));
            for (int d = 0; d < D; ++d) row[d] = fp16_to_fp32(fp32_to_fp16(static_cast<float>(kr[d])));
            stores.back()->write(t, 0, row.data(), D);
            // The reference's pre-RoPE key: the stored (fp16) row turned back in double.
            std::vector<double> back(row.begin(), row.end());
            rotate_pairs(back.data(), D, -double(t), hp.rope_base);
            std::copy(back.begin(), back.end(), k_pre[g].begin() + t * D);
        }
        stores.back()->commit(n);
    }
    std::vector<double> q_pre(static_cast<size_t>(nq * H * D));
    for (double &x : q_pre) x = nd(rng);
    std::vector<float> q(q_pre.size());   // rotated at N + j, as the encoder gives them
    for (int64_t j = 0; j < nq; ++j)
        for (int h = 0; h < H; ++h) {
            std::vector<double> x(q_pre.begin() + (j * H + h) * D, q_pre.begin() + (j * H + h + 1) * D);
            rotate_pairs(x.data(), D, double(n + j), hp.rope_base);
            for (int d = 0; d < D; ++d) q[(j * H + h) * D + d] = static_cast<float>(x[d]);
        }
    for (int64_t dist : {0, 37, 1024}) {
        IlreScoreArgs args;
        for (auto &s : stores) args.keys.push_back(s.get());
        args.n_keys = n;
        args.queries = q.data();
        args.n_q = nq;
        args.fixed_distance = dist;
        args.query_pos0 = n;
        std::vector<float> got(static_cast<size_t>(n));
        ilre_scores(*be, hp, args, got.data());
        std::vector<double> want(static_cast<size_t>(n), 0.0);
        for (int h = 0; h < H; ++h)
            for (int64_t j = 0; j < nq; ++j) {
                std::vector<double> qd(q_pre.begin() + (j * H + h) * D, q_pre.begin() + (j * H + h + 1) * D);
                rotate_pairs(qd.data(), D, double(dist), hp.rope_base);   // the query `dist` after a key at 0
                std::vector<double> s(static_cast<size_t>(n));
                double mx = -1e300, sum = 0;
                for (int64_t t = 0; t < n; ++t) {
                    double d = 0;
                    for (int i = 0; i < D; ++i) d += qd[i] * k_pre[h / rep][t * D + i];
                    s[t] = d / std::sqrt(double(D));
                    mx = std::max(mx, s[t]);
                }
                for (int64_t t = 0; t < n; ++t) sum += std::exp(s[t] - mx);
                for (int64_t t = 0; t < n; ++t) want[t] = std::max(want[t], std::exp(s[t] - mx) / sum);
            }
        for (int64_t t = 0; t < n; ++t)
            ASSERT_NEAR(got[t], want[t], 1e-3 * want[t] + 1e-8) << "distance " << dist << " t " << t;
    }
    // Segments (DCA) and a fixed distance do not combine.
    IlreScoreArgs bad;
    for (auto &s : stores) bad.keys.push_back(s.get());
    bad.n_keys = n;
    bad.queries = q.data();
    bad.n_q = nq;
    bad.fixed_distance = 0;
    bad.segments = ilre_dca_segments(n, 4, 512);
    std::vector<float> out(static_cast<size_t>(n));
    EXPECT_THROW(ilre_scores(*be, hp, bad, out.data()), Error);
}

TEST(IlreScorer, DcaSegmentsBoundEveryDistance) {
    for (int64_t L : {5, 1028, 1029, 3000, 100000, 1000003}) {
        const int64_t S = 4, C = 1024, q = 37;
        const auto segs = ilre_dca_segments(L, S, C);
        ASSERT_EQ(segs.front().begin, 0);
        ASSERT_EQ(segs.back().end, L);
        for (size_t i = 0; i < segs.size(); ++i) {
            if (i) ASSERT_EQ(segs[i].begin, segs[i - 1].end);
            for (int64_t t : {segs[i].begin, segs[i].end - 1}) {
                const int64_t eff = t + segs[i].shift;
                EXPECT_LE(eff, L - 1) << "a key lands after the question";
                EXPECT_LE((L + q - 1) - eff, S + 2 * C + q - 1) << "L " << L << " t " << t;
            }
        }
    }
}

TEST(IlreEncoder, DcaSinkShiftBoundsEveryDistance) {
    // While a block that starts at p0 is encoded, the sinks sit at
    // sink_shift(p0).. so that no token of the block is farther than
    // sink + 2 * chunk - 1 positions from a sink.
    engine_test::TinyOptions o;
    o.n_layer = 4;
    auto bytes = engine_test::make_tiny_llama(o);
    auto model = Model::load_memory(bytes.data(), bytes.size(), 2);
    auto be = make_cpu_backend(2);
    IlreEncoderConfig cfg;
    cfg.sink = 4;
    cfg.window = 32;
    cfg.chunk = 64;
    cfg.dca = true;
    IlreEncoder enc(*model, *be, cfg, {2});
    const auto doc = random_tokens(700, 31);
    for (int64_t at = 0; at < int64_t(doc.size());) {
        const int64_t m = std::min(enc.step_size(), int64_t(doc.size()) - at);
        const int64_t shift = enc.sink_shift(at, m);
        EXPECT_GE(shift, 0);
        EXPECT_LE((at + m - 1) - shift, cfg.sink + 2 * cfg.chunk - 1) << "block at " << at;
        enc.step(doc.data() + at, m, nullptr);
        at += m;
        // The sinks the cache holds are at the shift of the block just read
        // (rotated from their saved rows), the window at its own positions.
        EXPECT_EQ(enc.cache()->position(0, 0, 0), at - m == 0 ? 0 : shift);
    }
    const auto q = random_tokens(10, 32);
    std::vector<std::vector<float>> Q;
    enc.queries(q.data(), 10, Q, nullptr);
    EXPECT_EQ(enc.cache()->position(1, 1, 3), enc.sink_shift(700, 10) + 3);
    EXPECT_EQ(enc.cache()->size(), 4 + 32);
}

namespace {

// n_ctx: the trained context (DCA acts past it).
struct Tiny {
    std::unique_ptr<Model> model;
    explicit Tiny(int n_ctx = 4096) {
        engine_test::TinyOptions o;
        o.n_layer = 4;
        o.n_ctx = n_ctx;
        auto bytes = engine_test::make_tiny_llama(o);
        model = Model::load_memory(bytes.data(), bytes.size(), 2);
    }
};

session_test::SessionParams ilre_params(int layer, int chunk, int window, int budget) {
    session_test::SessionParams p;
    p.method = LCTX_METHOD_ILRE;
    p.n_ctx = 2048;
    p.n_threads = 2;
    p.ilre_p.retrieval_layer = layer;
    p.ilre_p.sink = 4;
    p.ilre_p.chunk = chunk;
    p.ilre_p.window = window;
    p.ilre_p.budget = budget;
    p.ilre_p.dca = false;
    p.ilre_p.score_distance = -1;   // keys at their positions; the auto default has its own test
    return p;
}

IlreMethod &ilre(Session &s) { return dynamic_cast<IlreMethod &>(s.method()); }

std::vector<float> index_f32(const IlreEncoder &e, int32_t g) {
    const EmbeddingStore &st = e.keys(0, g);
    std::vector<float> out;
    for (int64_t t = 0; t < st.size(); ++t)
        for (int32_t i = 0; i < st.dim(); ++i) out.push_back(fp16_to_fp32(st.row(t)[i]));
    return out;
}

} // namespace

TEST(IlreEncoder, KeysMatchAFullPrefillWhenNothingIsDropped) {
    // One chunk and a window longer than the document: the streaming prefill
    // is an ordinary causal prefill, so the index holds that prefill's keys.
    Tiny t;
    const Hparams &hp = t.model->hparams();
    const auto doc = random_tokens(200, 9);
    for (int layer : {0, 1, 3}) {
        Session s(*t.model, ilre_params(layer, 512, 512, 100));
        feed_split(s, doc, {77});
        auto be = make_cpu_backend(2);
        Forward fwd(*t.model, *be);
        KvStore full(*be, hp, 256, layer + 1);
        std::vector<int32_t> pos(doc.size());
        std::iota(pos.begin(), pos.end(), 0);
        ForwardOptions opt;
        opt.n_layers = layer + 1;
        opt.logits = LogitsMode::NONE;
        std::vector<float> none;
        fwd.run(doc.data(), pos.data(), int64_t(doc.size()), full, opt, none);
        for (int32_t g = 0; g < hp.n_head_kv; ++g) {
            std::vector<float> want(doc.size() * hp.head_dim);
            full.read_keys(layer, g, 0, int64_t(doc.size()), want.data());
            const auto got = index_f32(ilre(s).encoder(), g);
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_NEAR(got[i], want[i], 2e-3 * std::fabs(want[i]) + 1e-4) << "layer " << layer << " g " << g;
        }
    }
}

TEST(IlreEncoder, StreamingCacheHoldsSinksAndWindowAtOriginalPositions) {
    Tiny t;
    const auto doc = random_tokens(500, 4);
    Session s(*t.model, ilre_params(2, 64, 32, 100));
    feed_split(s, doc, {500});
    const KvStore *c = ilre(s).encoder().cache();
    ASSERT_NE(c, nullptr);
    ASSERT_EQ(c->size(), 4 + 32);
    for (int32_t l = 0; l < c->n_layers(); ++l)
        for (int32_t g = 0; g < c->n_head_kv(); ++g) {
            for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(c->position(l, g, k), k);
            for (int64_t k = 0; k < 32; ++k) EXPECT_EQ(c->position(l, g, 4 + k), 500 - 32 + k);
        }
}

TEST(IlreMethod, BudgetCoveringTheDocumentEqualsFull) {
    Tiny t;
    const auto doc = random_tokens(300, 1), query = random_tokens(12, 2);
    auto ip = ilre_params(2, 64, 32, 400);
    lctx_session_params fp = ip;
    fp.method = LCTX_METHOD_FULL;
    Session full(*t.model, fp), ref(*t.model, ip);
    feed_split(full, doc, {100});
    feed_split(ref, doc, {37, 200, 5});
    auto sf = full.select(query.data(), query.size());
    auto sr = ref.select(query.data(), query.size());
    ASSERT_EQ(sr->positions.size(), doc.size());
    full.recompute(*sf);
    ref.recompute(*sr);
    for (int32_t i = 0; i < t.model->hparams().n_vocab; ++i)
        ASSERT_NEAR(full.logits()[i], ref.logits()[i], 1e-4 * std::max(1.0f, std::fabs(full.logits()[i])));
    lctx_sampling_params g;
    lctx_sampling_default_params(&g);
    for (int k = 0; k < 8; ++k) ASSERT_EQ(full.decode(g), ref.decode(g)) << "greedy token " << k;
}

TEST(IlreMethod, FeedSplitInvarianceAndSelectWithoutSideEffects) {
    Tiny t(256);   // DCA acts past 256 tokens
    const auto doc = random_tokens(1000, 5), query = random_tokens(9, 6);
    for (bool dca : {false, true}) {
        auto p = ilre_params(2, 64, 32, 120);
        p.ilre_p.dca = dca;
        Session a(*t.model, p), b(*t.model, p);
        feed_split(a, doc, {1000});
        feed_split(b, doc, {1, 67, 3, 200});
        for (int32_t g = 0; g < t.model->hparams().n_head_kv; ++g)
            ASSERT_EQ(index_f32(ilre(a).encoder(), g), index_f32(ilre(b).encoder(), g)) << "dca " << dca;
        auto s1 = a.select(query.data(), query.size());
        auto s2 = a.select(query.data(), query.size());
        auto s3 = b.select(query.data(), query.size());
        EXPECT_EQ(s1->positions, s2->positions);
        EXPECT_EQ(s1->positions, s3->positions);
        EXPECT_EQ(s1->scores, s3->scores);
        EXPECT_EQ(s1->positions.size(), 4u + 120u);
        EXPECT_EQ(ilre(a).encoder().cache()->size(), 4 + 32);   // the question's rows are gone
    }
}

TEST(IlreMethod, DcaActsOnlyPastTheTrainedContext) {
    Tiny t(256);
    const auto query = random_tokens(9, 6);
    for (int n : {60, 200, 1000}) {
        const auto doc = random_tokens(n, 5);
        auto p = ilre_params(2, 64, 32, 50);
        Session plain(*t.model, p);
        p.ilre_p.dca = true;
        Session dca(*t.model, p);
        feed_split(plain, doc, {size_t(n)});
        feed_split(dca, doc, {size_t(n)});
        plain.select(query.data(), query.size());
        dca.select(query.data(), query.size());
        const auto &a = ilre(plain).last_scores(), &b = ilre(dca).last_scores();
        // Document and question within the trained context: DCA moves
        // neither the sinks nor any key.
        if (n + 9 <= 256) {
            EXPECT_EQ(a, b) << "within the trained context DCA changes nothing";
        } else {
            EXPECT_NE(a, b);
        }
    }
}

TEST(IlreMethod, AutoScoreDistanceIsPositionalWithinTheTrainedContextAndFixedPastIt) {
    Tiny t(256);
    const auto query = random_tokens(9, 6);
    auto scores = [&](const std::vector<int32_t> &doc, int32_t distance) {
        auto p = ilre_params(2, 64, 32, 50);
        p.ilre_p.score_distance = distance;
        Session s(*t.model, p);
        feed_split(s, doc, {doc.size()});
        s.select(query.data(), query.size());
        return ilre(s).last_scores();
    };
    // 240 + 9 tokens fit the 256 trained positions; 600 + 9 do not.
    for (int n : {240, 600}) {
        const auto doc = random_tokens(n, 5);
        const auto autos = scores(doc, LCTX_ILRE_SCORE_AUTO);
        const auto positional = scores(doc, -1);
        const auto fixed = scores(doc, int32_t(IlreParams::kAutoScoreDistance));
        ASSERT_EQ(autos.size(), size_t(n));
        EXPECT_NE(positional, fixed) << "the two scorings must differ for this test to say anything";
        if (n + 9 <= 256) {
            EXPECT_EQ(autos, positional) << n;
        } else {
            EXPECT_EQ(autos, fixed) << n;
        }
    }
}

TEST(IlreMethod, ParameterErrors) {
    Tiny t;
    auto check = [&](session_test::SessionParams p, const char *what) {
        try {
            Session s(*t.model, p);
            ADD_FAILURE() << what << " accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG) << what << ": " << e.what();
        }
    };
    auto p = ilre_params(2, 64, 32, 100);
    p.ilre_p.retrieval_layer = 4;
    check(p, "layer past the model");
    p = ilre_params(2, 64, 32, 100);
    p.ilre_p.chunk = -5;
    check(p, "negative chunk");
    p = ilre_params(2, 64, 32, 100);
    p.ilre_p.budget = 5000;
    check(p, "budget beyond n_ctx");
    p = ilre_params(2, 64, 32, 100);
    p.ilre_p.max_kernels = "2,x";
    check(p, "bad kernel list");
    p = ilre_params(2, 64, 32, 100);
    p.ilre_p.score_distance = -3;
    check(p, "score_distance below auto");
    p = ilre_params(2, 64, 32, 100);
    p.ilre_p.repeat_window = 1;
    check(p, "repeat window of one token");
    // A question longer than a chunk is refused with a clear status.
    Session s(*t.model, ilre_params(2, 64, 32, 100));
    const auto doc = random_tokens(300, 1), q = random_tokens(65, 2);
    feed_split(s, doc, {300});
    try {
        s.select(q.data(), q.size());
        ADD_FAILURE() << "long question accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_INVALID_ARG);
    }
}

TEST(IlreMethod, IndexRoundTripAndRefusals) {
    // Through the C API: lctx_session_load_index picks ILRe from the file.
    engine_test::TinyOptions o;
    o.n_layer = 4;
    o.n_ctx = 256;   // DCA acts past 256 tokens
    const auto bytes = engine_test::make_tiny_llama(o);
    lctx_model *m = nullptr;
    ASSERT_EQ(lctx_model_load_from_memory(bytes.data(), bytes.size(), nullptr, &m), LCTX_OK);
    const auto doc = random_tokens(900, 21), query = random_tokens(7, 22);
    for (bool dca : {false, true}) {
        SCOPED_TRACE(dca ? "dca" : "plain");
        auto p = ilre_params(2, 64, 32, 100);
        p.ilre_p.dca = dca;
        lctx_session *a = nullptr, *b = nullptr;
        ASSERT_EQ(lctx_session_create(m, &p, &a), LCTX_OK);
        ASSERT_EQ(lctx_feed_chunk(a, doc.data(), doc.size()), LCTX_OK);
        ASSERT_EQ(lctx_build_index(a), LCTX_OK);
        const std::string path = ::testing::TempDir() + "ilre_" + std::to_string(::getpid()) + (dca ? "_dca" : "");
        ASSERT_EQ(lctx_index_save(a, path.c_str()), LCTX_OK) << lctx_last_error();
        auto lp = ilre_params(0, 0, 0, 100);   // encoding sizes come from the file
        lp.ilre_p.retrieval_layer = -1;
        ASSERT_EQ(lctx_session_load_index(m, path.c_str(), &lp, &b), LCTX_OK) << lctx_last_error();
        EXPECT_EQ(lctx_session_stage(b), LCTX_STAGE_INDEXED);
        EXPECT_EQ(lctx_session_n_fed(b), int64_t(doc.size()));
        EXPECT_EQ(a->session->method().state_digest(), b->session->method().state_digest());
        lctx_selection *sa = nullptr, *sb = nullptr;
        ASSERT_EQ(lctx_select(a, query.data(), query.size(), &sa), LCTX_OK);
        ASSERT_EQ(lctx_select(b, query.data(), query.size(), &sb), LCTX_OK);
        ASSERT_EQ(lctx_selection_size(sa), lctx_selection_size(sb));
        std::vector<int64_t> pa(lctx_selection_size(sa)), pb(pa.size());
        std::vector<float> fa(pa.size()), fb(pa.size());
        lctx_selection_positions(sa, pa.data(), int64_t(pa.size()));
        lctx_selection_positions(sb, pb.data(), int64_t(pb.size()));
        lctx_selection_scores(sa, fa.data(), int64_t(fa.size()));
        lctx_selection_scores(sb, fb.data(), int64_t(fb.size()));
        EXPECT_EQ(pa, pb);
        EXPECT_EQ(fa, fb);
        lctx_selection_free(sa);
        lctx_selection_free(sb);

        // One altered byte anywhere is refused; so is a truncated file.
        std::string data;
        {
            std::ifstream f(path, std::ios::binary);
            data.assign(std::istreambuf_iterator<char>(f), {});
        }
        for (size_t at : {size_t(12), size_t(40), data.size() / 2, data.size() - 3}) {
            std::string bad = data;
            bad[at] ^= 0x20;
            std::ofstream(path, std::ios::binary) << bad;
            lctx_session *c = nullptr;
            EXPECT_EQ(lctx_session_load_index(m, path.c_str(), &lp, &c), LCTX_ERR_FORMAT) << "byte " << at;
            EXPECT_EQ(c, nullptr);
        }
        std::ofstream(path, std::ios::binary) << data.substr(0, data.size() - 100);
        lctx_session *c = nullptr;
        EXPECT_EQ(lctx_session_load_index(m, path.c_str(), &lp, &c), LCTX_ERR_FORMAT);
        std::remove(path.c_str());
        lctx_session_free(a);
        lctx_session_free(b);
    }
    // Another model's index is refused.
    {
        auto p = ilre_params(2, 64, 32, 100);
        lctx_session *a = nullptr;
        ASSERT_EQ(lctx_session_create(m, &p, &a), LCTX_OK);
        ASSERT_EQ(lctx_feed_chunk(a, doc.data(), 200), LCTX_OK);
        ASSERT_EQ(lctx_build_index(a), LCTX_OK);
        const std::string path = ::testing::TempDir() + "ilre_other_" + std::to_string(::getpid());
        ASSERT_EQ(lctx_index_save(a, path.c_str()), LCTX_OK);
        o.seed = 99;
        const auto other_bytes = engine_test::make_tiny_llama(o);
        lctx_model *other = nullptr;
        ASSERT_EQ(lctx_model_load_from_memory(other_bytes.data(), other_bytes.size(), nullptr, &other), LCTX_OK);
        lctx_session *c = nullptr;
        EXPECT_EQ(lctx_session_load_index(other, path.c_str(), nullptr, &c), LCTX_ERR_INVALID_ARG);
        lctx_model_free(other);
        std::remove(path.c_str());
        lctx_session_free(a);
    }
    lctx_model_free(m);
}
