// KvStore: slot bookkeeping, per-(layer, head) positions, compaction,
// re-positioning (checked against keys rotated from scratch with the scalar
// reference RoPE), un-rotated keys, f16 storage, gathered attention ranges
// and allocation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "engine/attention_policy.h"
#include "engine/kv_store.h"
#include "kernels/cpu/cpu_kernels.h"

using namespace lctx;

namespace {

Hparams tiny_hp() {
    Hparams hp;
    hp.arch = "llama";
    hp.n_layer = 3;
    hp.n_embd = 64;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_rot = 16;
    hp.n_ff = 128;
    hp.n_vocab = 300;
    hp.n_ctx_train = 4096;
    return hp;
}

float code(int32_t l, int32_t h, int64_t s, int32_t d) {
    return static_cast<float>(l * 1000000 + h * 100000 + s * 100 + d);
}

// Fills every filled slot with a value that encodes (layer, head, slot, dim).
void fill(KvStore &c) {
    std::vector<float> k(static_cast<size_t>(c.size() * c.head_dim())), v(k.size());
    for (int32_t l = 0; l < c.n_layers(); ++l)
        for (int32_t h = 0; h < c.n_head_kv(); ++h) {
            for (int64_t s = 0; s < c.size(); ++s)
                for (int32_t d = 0; d < c.head_dim(); ++d) {
                    k[s * c.head_dim() + d] = code(l, h, s, d);
                    v[s * c.head_dim() + d] = -code(l, h, s, d);
                }
            c.write_rows(l, h, 0, c.size(), k.data(), v.data());
        }
}

std::unique_ptr<Backend> backend() { return make_cpu_backend(2); }

} // namespace

TEST(EngineKvStore, AppendTruncateFull) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    KvStore c(*be, hp, 10);
    EXPECT_EQ(c.capacity(), 10);
    EXPECT_EQ(c.size(), 0);
    EXPECT_EQ(c.n_layers(), 3);
    EXPECT_EQ(c.n_head_kv(), 2);
    EXPECT_EQ(c.head_dim(), 16);
    EXPECT_EQ(c.type(), KvType::F32);
    EXPECT_EQ(c.append(4), 0);
    EXPECT_EQ(c.append(6), 4);
    EXPECT_EQ(c.size(), 10);
    try {
        c.append(1);
        FAIL() << "appended past the capacity";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_CONTEXT_FULL);
    }
    EXPECT_EQ(c.size(), 10);
    c.truncate(3);
    EXPECT_EQ(c.size(), 3);
    c.truncate(7);  // never grows
    EXPECT_EQ(c.size(), 3);
    EXPECT_THROW(c.append(-1), Error);
    c.clear();
    EXPECT_EQ(c.size(), 0);

    KvStore early(*be, hp, 5, 1);
    EXPECT_EQ(early.n_layers(), 1);
    EXPECT_THROW(KvStore(*be, hp, 5, 4), Error);
    EXPECT_THROW(KvStore(*be, hp, -1), Error);
    // f16 halves the key/value bytes.
    KvStore half(*be, hp, 10, -1, KvType::F16);
    EXPECT_EQ(half.bytes() - 3 * 2 * 10 * sizeof(int32_t), (c.bytes() - 3 * 2 * 10 * sizeof(int32_t)) / 2);
    // q8: a row of 16 values is 16 codes and a 4-byte scale (20 bytes against 64).
    KvStore q8(*be, hp, 10, -1, KvType::Q8);
    EXPECT_EQ((q8.bytes() - 3 * 2 * 10 * sizeof(int32_t)) * 64, (c.bytes() - 3 * 2 * 10 * sizeof(int32_t)) * 20);
}

TEST(EngineKvStore, OutOfMemory) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    for (int64_t cap : {int64_t(1) << 40, int64_t(1) << 60}) {
        try {
            KvStore c(*be, hp, cap);
            FAIL() << "allocated " << cap << " slots";
        } catch (const Error &e) {
            EXPECT_EQ(e.status(), LCTX_ERR_OUT_OF_MEMORY) << e.what();
        }
    }
}

TEST(EngineKvStore, CompactKeepsRowsAndPositions) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    KvStore c(*be, hp, 8);
    c.append(8);
    std::vector<int32_t> pos(8);
    std::iota(pos.begin(), pos.end(), 10);
    c.set_positions(0, pos.data(), 8);
    fill(c);
    const std::vector<int64_t> keep = {0, 2, 3, 7};
    c.compact(keep);
    ASSERT_EQ(c.size(), 4);
    std::vector<float> k(4 * 16), v(4 * 16);
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            c.read_keys(l, h, 0, 4, k.data());
            c.read_values(l, h, 0, 4, v.data());
            for (size_t i = 0; i < keep.size(); ++i) {
                EXPECT_EQ(c.position(l, h, static_cast<int64_t>(i)), 10 + keep[i]);
                for (int32_t d = 0; d < 16; ++d) {
                    ASSERT_EQ(k[i * 16 + d], code(l, h, keep[i], d));
                    ASSERT_EQ(v[i * 16 + d], -code(l, h, keep[i], d));
                }
            }
        }
    EXPECT_THROW(c.compact({1, 1}), Error);   // not ascending
    EXPECT_THROW(c.compact({0, 4}), Error);   // out of range
    EXPECT_EQ(c.size(), 4);
    c.compact({});
    EXPECT_EQ(c.size(), 0);
}

// Keys written at positions `from` (pre-RoPE x rotated by the reference) and
// moved: every (layer, head) must equal x rotated at its new position
// directly, each head with its own positions.
static void check_moves(const Hparams &hp, KvType type, double tol) {
    auto be = backend();
    const int64_t n = 6;
    KvStore c(*be, hp, n, -1, type);
    c.append(n);
    const std::vector<int32_t> from = {0, 1, 2, 50, 51, 1000};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    std::vector<float> raw(static_cast<size_t>(3 * 2 * n * 16)), vals(raw.size());
    for (float &x : raw) x = nd(rng);
    for (float &x : vals) x = nd(rng);
    auto block = [&](const std::vector<float> &src, int32_t l, int32_t h) {
        return std::vector<float>(src.begin() + (l * 2 + h) * n * 16, src.begin() + (l * 2 + h + 1) * n * 16);
    };
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            std::vector<float> k = block(raw, l, h), v = block(vals, l, h);
            c.write_unrotated(l, h, 0, n, k.data(), v.data(), from.data());
        }
    // Un-rotated keys give back the projections.
    std::vector<float> got(static_cast<size_t>(n * 16));
    double err = 0;
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            c.unrotated_keys(l, h, 0, n, got.data());
            const std::vector<float> want = block(raw, l, h);
            for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::fabs(got[i] - want[i])));
        }
    EXPECT_LT(err, tol) << "unrotated keys, max abs diff";

    // Reposition every head to `to`.
    const std::vector<int32_t> to = {0, 7, 3, 10, 2000, 999};
    c.reposition(to);
    err = 0;
    for (int32_t l = 0; l < 3; ++l)
        for (int32_t h = 0; h < 2; ++h) {
            for (int64_t s = 0; s < n; ++s) EXPECT_EQ(c.position(l, h, s), to[s]);
            std::vector<float> want = block(raw, l, h);
            cpu::rope_ref(hp, want.data(), 16, n, 1, to.data());
            c.read_keys(l, h, 0, n, got.data());
            for (size_t i = 0; i < got.size(); ++i) err = std::max(err, double(std::fabs(got[i] - want[i])));
        }
    EXPECT_LT(err, tol) << "reposition, max abs diff";
    EXPECT_THROW(c.reposition({1, 2}), Error);

    // Per-head compaction: (layer 1, head 0) keeps {1, 4, 5} at positions
    // {40, 41, 42}; (layer 1, head 1) keeps {0, 2, 3} at {5, 6, 7}; the other
    // heads are untouched.
    const std::vector<int64_t> keep0 = {1, 4, 5}, keep1 = {0, 2, 3};
    const std::vector<int32_t> np0 = {40, 41, 42}, np1 = {5, 6, 7};
    c.compact_head(1, 0, keep0, np0.data());
    c.compact_head(1, 1, keep1, np1.data());
    err = 0;
    for (int32_t h = 0; h < 2; ++h) {
        const auto &keep = h == 0 ? keep0 : keep1;
        const auto &np = h == 0 ? np0 : np1;
        const std::vector<float> x = block(raw, 1, h), xv = block(vals, 1, h);
        std::vector<float> want(3 * 16), want_v(3 * 16), gv(3 * 16);
        for (int i = 0; i < 3; ++i)
            for (int d = 0; d < 16; ++d) {
                want[i * 16 + d] = x[keep[i] * 16 + d];
                want_v[i * 16 + d] = xv[keep[i] * 16 + d];
            }
        cpu::rope_ref(hp, want.data(), 16, 3, 1, np.data());
        c.read_keys(1, h, 0, 3, got.data());
        c.read_values(1, h, 0, 3, gv.data());
        for (int i = 0; i < 3 * 16; ++i) {
            err = std::max(err, double(std::fabs(got[i] - want[i])));
            err = std::max(err, double(std::fabs(gv[i] - want_v[i])));
        }
        for (int i = 0; i < 3; ++i) EXPECT_EQ(c.position(1, h, i), np[i]);
    }
    EXPECT_LT(err, tol) << "compact_head, max abs diff";
    EXPECT_EQ(c.position(0, 0, 4), to[4]);   // layer 0 untouched
    EXPECT_THROW(c.compact_head(0, 0, {3, 2}, np0.data()), Error);
}

TEST(EngineKvStore, MovesPlain) { check_moves(tiny_hp(), KvType::F32, 2e-5); }

TEST(EngineKvStore, MovesLinear) {
    Hparams hp = tiny_hp();
    hp.rope_scaling = RopeScaling::LINEAR;
    hp.rope_freq_scale = 0.25f;
    check_moves(hp, KvType::F32, 2e-5);
}

TEST(EngineKvStore, MovesYarn) {
    Hparams hp = tiny_hp();
    hp.rope_scaling = RopeScaling::YARN;
    hp.rope_freq_scale = 0.25f;
    hp.rope_orig_ctx = 256;
    hp.yarn_ext_factor = 1.0f;
    check_moves(hp, KvType::F32, 2e-5);
}

// f16 storage: one rounding per write and per move (|x| ~ 3: ulp 2e-3).
TEST(EngineKvStore, MovesF16) { check_moves(tiny_hp(), KvType::F16, 1e-2); }
// q8: half a step of max |x| / 127 per write and per move (|x| up to ~3.5:
// 0.014 each, three roundings at most on the way to a compacted row).
TEST(EngineKvStore, MovesQ8) { check_moves(tiny_hp(), KvType::Q8, 5e-2); }

TEST(EngineKvStore, CopyFrom) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    KvStore a(*be, hp, 8), b(*be, hp, 8), c(*be, hp, 2);
    a.append(5);
    fill(a);
    std::vector<int32_t> pos = {3, 1, 4, 1, 5};
    a.set_head_positions(2, 1, 0, pos.data(), 5);
    b.copy_from(a, 4);
    ASSERT_EQ(b.size(), 4);
    std::vector<float> k(4 * 16);
    b.read_keys(2, 1, 0, 4, k.data());
    for (int64_t s = 0; s < 4; ++s) {
        EXPECT_EQ(k[s * 16 + 3], code(2, 1, s, 3));
        EXPECT_EQ(b.position(2, 1, s), pos[s]);
    }
    EXPECT_THROW(c.copy_from(a, 4), Error);   // no room
}

// Attention over gathered ranges equals attention over a store that holds
// only those slots (brute-force reference kernel).
TEST(EngineKvStore, GatheredRangesMatchAStoreOfThoseSlots) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    const int64_t n = 40;
    KvStore full(*be, hp, n);
    full.append(n);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::vector<float> k(static_cast<size_t>(n * 16)), v(k.size());
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    for (int32_t h = 0; h < 2; ++h) {
        for (float &x : k) x = nd(rng);
        for (float &x : v) x = nd(rng);
        full.write_unrotated(0, h, 0, n, k.data(), v.data(), pos.data());
    }
    WindowPolicy window(4, 10);
    const int64_t n_q = 3;
    const SlotRanges r = window.ranges(0, n, n_q);   // sinks [0,4) and [n-13, n)
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0], std::make_pair(int64_t{0}, int64_t{4}));
    EXPECT_EQ(r[1], std::make_pair(n - n_q - 10, n));
    KvStore::GatherScratch scratch;
    AttentionArgs a = full.attention_args(0, r, scratch);
    ASSERT_EQ(a.n_kv, 4 + 13);

    KvStore part(*be, hp, a.n_kv);
    part.append(a.n_kv);
    std::vector<float> kr(static_cast<size_t>(a.n_kv * 16)), vr(kr.size());
    for (int32_t h = 0; h < 2; ++h) {
        int64_t at = 0;
        for (const auto &[b, e] : r) {
            full.read_keys(0, h, b, e - b, kr.data() + at * 16);
            full.read_values(0, h, b, e - b, vr.data() + at * 16);
            part.set_head_positions(0, h, at, full.positions(0, h) + b, e - b);
            at += e - b;
        }
        part.write_rows(0, h, 0, a.n_kv, kr.data(), vr.data());
    }
    std::vector<float> q(static_cast<size_t>(n_q * 4 * 16));
    for (float &x : q) x = nd(rng);
    std::vector<int32_t> qpos = {n - 3, n - 2, n - 1};
    auto run = [&](AttentionArgs args, std::vector<float> &out, std::vector<float> &cols) {
        args.q = q.data();
        args.ldq = 64;
        args.out = out.data();
        args.ldo = 64;
        args.n_q = n_q;
        args.n_head = 4;
        args.q_pos = qpos.data();
        args.col_sums = cols.data();
        be->attention(args);
    };
    std::vector<float> o1(q.size()), o2(q.size()), c1(2 * a.n_kv, 0.0f), c2(2 * a.n_kv, 0.0f);
    run(a, o1, c1);
    run(part.attention_args(0, a.n_kv), o2, c2);
    for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 1e-6);
    for (size_t i = 0; i < c1.size(); ++i) ASSERT_NEAR(c1[i], c2[i], 1e-6);
}

// Attention with per-head positions (f32, f16 or q8 storage, decode and prefill
// shapes) equals the naive reference kernel on the same stored slots.
static void check_attention(KvType type, int64_t n_q) {
    const Hparams hp = tiny_hp();
    auto be = backend();
    const int64_t n = 700;   // more than one key block and split
    KvStore s(*be, hp, n, -1, type);
    s.append(n);
    std::mt19937 rng(9);
    std::normal_distribution<float> nd;
    std::vector<float> k(static_cast<size_t>(n * 16)), v(k.size());
    for (int32_t h = 0; h < 2; ++h) {
        std::vector<int32_t> pos(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) pos[i] = h == 0 ? int32_t(i) : int32_t(rng() % 1400);
        for (float &x : k) x = nd(rng);
        for (float &x : v) x = nd(rng);
        s.write_unrotated(0, h, 0, n, k.data(), v.data(), pos.data());
    }
    std::vector<float> q(static_cast<size_t>(n_q * 64));
    for (float &x : q) x = nd(rng);
    std::vector<int32_t> qpos(static_cast<size_t>(n_q));
    for (int64_t i = 0; i < n_q; ++i) qpos[i] = int32_t(rng() % 1400);
    AttentionArgs a = s.attention_args(0, n);
    a.q = q.data();
    a.ldq = 64;
    a.ldo = 64;
    a.n_q = n_q;
    a.n_head = 4;
    a.q_pos = qpos.data();
    std::vector<float> out(q.size()), ref(q.size()), cols(2 * n, 0.0f), cref(2 * n, 0.0f);
    a.out = out.data();
    a.col_sums = cols.data();
    be->attention(a);
    // Reference: cpu::attention_ref on the same arguments (f32 store).
    cpu::AttentionArgs r;
    r.q = q.data();
    r.ldq = 64;
    if (type == KvType::F16) {
        r.k16 = static_cast<const uint16_t *>(a.k);
        r.v16 = static_cast<const uint16_t *>(a.v);
    } else if (type == KvType::Q8) {
        r.k8 = static_cast<const uint8_t *>(a.k);
        r.v8 = static_cast<const uint8_t *>(a.v);
    } else {
        r.k = static_cast<const float *>(a.k);
        r.v = static_cast<const float *>(a.v);
    }
    r.ld_kv = a.ld_kv;
    r.kv_head_stride = a.kv_head_stride;
    r.out = ref.data();
    r.ldo = 64;
    r.n_q = n_q;
    r.n_kv = n;
    r.n_head = 4;
    r.n_head_kv = 2;
    r.head_dim = 16;
    r.q_pos = qpos.data();
    r.kv_pos = a.kv_pos;
    r.kv_pos_head_stride = a.kv_pos_head_stride;
    r.col_sums = cref.data();
    cpu::attention_ref(r);
    // q8 decode scores the keys with the query rounded to int16 (about 1e-5 relative)
    const double tol = type == KvType::Q8 && n_q == 1 ? 5e-5 : 1e-5;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], tol) << i;
    for (size_t i = 0; i < cols.size(); ++i) ASSERT_NEAR(cols[i], cref[i], 1e-4) << i;
}

TEST(EngineKvStore, AttentionPerHeadPositionsF32Decode) { check_attention(KvType::F32, 1); }
TEST(EngineKvStore, AttentionPerHeadPositionsF32Prefill) { check_attention(KvType::F32, 37); }
TEST(EngineKvStore, AttentionPerHeadPositionsF16Decode) { check_attention(KvType::F16, 1); }
TEST(EngineKvStore, AttentionPerHeadPositionsF16Prefill) { check_attention(KvType::F16, 37); }
TEST(EngineKvStore, AttentionPerHeadPositionsQ8Decode) { check_attention(KvType::Q8, 1); }
TEST(EngineKvStore, AttentionPerHeadPositionsQ8Prefill) { check_attention(KvType::Q8, 37); }
