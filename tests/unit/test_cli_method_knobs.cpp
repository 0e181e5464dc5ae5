// The method variants of `lctx eval --methods` (tools/method_knobs.cpp):
// "METHOD:KEY=VALUE..." parsed into settings, a canonical name, and the
// structs of include/lctx.h filled field by field. Expected structs are the
// library's defaults with the named fields written here by hand.
#include <gtest/gtest.h>

#include <string>

#include "method_knobs.h"

using namespace lctx::cli;

namespace {

// Field-by-field equality (padding bytes of the structs are not compared).
bool same(const lctx_reform_params &a, const lctx_reform_params &b) {
    return a.struct_size == b.struct_size && a.chunk == b.chunk && a.budget == b.budget && a.recompute == b.recompute &&
           a.sink == b.sink && a.recent == b.recent && a.obs == b.obs && a.keep_first == b.keep_first &&
           a.keep_last == b.keep_last && a.pool_half == b.pool_half && a.h2o_per_chunk == b.h2o_per_chunk &&
           a.heads_path == b.heads_path && a.evictor == b.evictor && a.repeat_window == b.repeat_window;
}
bool same(const lctx_kv_params &a, const lctx_kv_params &b) {
    return a.struct_size == b.struct_size && a.budget == b.budget && a.chunk == b.chunk && a.sink == b.sink &&
           a.recent == b.recent && a.obs == b.obs && a.snapkv_kernel == b.snapkv_kernel &&
           a.infinipot_nuc_ratio == b.infinipot_nuc_ratio && a.infinipot_catalyst == b.infinipot_catalyst;
}
bool same(const lctx_refreshkv_params &a, const lctx_refreshkv_params &b) {
    return a.struct_size == b.struct_size && a.partial == b.partial && a.stride == b.stride &&
           a.threshold == b.threshold && a.schedule == b.schedule && a.pool_kernel == b.pool_kernel &&
           a.max_partial_run == b.max_partial_run && a.gathered == b.gathered;
}
bool same(const lctx_reattention_params &a, const lctx_reattention_params &b) {
    return a.struct_size == b.struct_size && a.n_global == b.n_global && a.n_local == b.n_local && a.span == b.span &&
           a.top_k == b.top_k && a.n_spans == b.n_spans && a.chunk == b.chunk && a.reuse_steps == b.reuse_steps &&
           a.tile_max == b.tile_max && a.store_max_ram == b.store_max_ram && a.store_dir == b.store_dir;
}

MethodVariant parse_ok(const std::string &text, const std::string &base, lctx_method m, bool rkv = false) {
    MethodVariant v;
    std::string err;
    EXPECT_TRUE(parse_method_variant(text, base, m, rkv, v, err)) << text << ": " << err;
    return v;
}

std::string parse_error(const std::string &text, const std::string &base, lctx_method m, bool rkv = false) {
    MethodVariant v;
    std::string err;
    EXPECT_FALSE(parse_method_variant(text, base, m, rkv, v, err)) << text << " was accepted as " << v.name;
    return err;
}

TEST(CliMethodKnobs, PlainMethodHasNoSettings) {
    const MethodVariant v = parse_ok("reform", "reform", LCTX_METHOD_REFORM);
    EXPECT_EQ(v.name, "reform");
    EXPECT_TRUE(v.settings.empty());
    EXPECT_EQ(parse_ok("full", "full", LCTX_METHOD_FULL).name, "full");
}

TEST(CliMethodKnobs, NameIsSortedAndNormalized) {
    // The same settings in another order or spelling name the same variant:
    // a resumed run finds its rows.
    const MethodVariant a = parse_ok("h2o:chunk=0512:budget=+96", "h2o", LCTX_METHOD_H2O);
    const MethodVariant b = parse_ok("h2o:budget=96:chunk=512", "h2o", LCTX_METHOD_H2O);
    EXPECT_EQ(a.name, "h2o:budget=96:chunk=512");
    EXPECT_EQ(b.name, a.name);
    ASSERT_EQ(a.settings.size(), 2u);
    EXPECT_EQ(a.settings[0].key, "kv.budget");
    EXPECT_EQ(a.settings[0].value, "96");
    EXPECT_FALSE(a.settings[0].text);
    EXPECT_EQ(a.settings[1].key, "kv.chunk");
    EXPECT_EQ(parse_ok("infinipot:infinipot_nuc_ratio=0.50", "infinipot", LCTX_METHOD_INFINIPOT).name,
              "infinipot:infinipot_nuc_ratio=0.5");
    EXPECT_EQ(parse_ok("ilre:dca=0", "ilre", LCTX_METHOD_ILRE).name, "ilre:dca=false");
}

TEST(CliMethodKnobs, KeysOutsideTheMethodsOwnStructAreQualified) {
    // InfLLM reads its own struct and the KV baselines' one.
    const MethodVariant v = parse_ok("infllm:budget=512:block=64", "infllm", LCTX_METHOD_INFLLM);
    EXPECT_EQ(v.name, "infllm:block=64:kv.budget=512");
    // REFORM decoded with RefreshKV: its stride is RefreshKV's.
    const MethodVariant r =
        parse_ok("reform+refreshkv:stride=5:recompute=2048:refreshkv.schedule=fixed", "reform+refreshkv",
                 LCTX_METHOD_REFORM, true);
    EXPECT_EQ(r.name, "reform+refreshkv:recompute=2048:refreshkv.schedule=fixed:refreshkv.stride=5");
    ASSERT_EQ(r.settings.size(), 3u);
    EXPECT_TRUE(r.settings[1].text);   // "fixed": an enum, quoted in a row's "params"
    // A qualified key names the struct: "reform.chunk" is REFORM's own chunk.
    EXPECT_EQ(parse_ok("reform:reform.chunk=1024", "reform", LCTX_METHOD_REFORM).name, "reform:chunk=1024");
}

TEST(CliMethodKnobs, RefusesWhatTheMethodDoesNotRead) {
    EXPECT_NE(parse_error("reform:bogus=1", "reform", LCTX_METHOD_REFORM).find("chunk, budget, recompute"),
              std::string::npos);
    parse_error("h2o:reform.recompute=1", "h2o", LCTX_METHOD_H2O);     // another method's struct
    parse_error("reform:refreshkv.stride=3", "reform", LCTX_METHOD_REFORM);   // dense decoding reads no RefreshKV
    parse_error("reform:stride=3", "reform", LCTX_METHOD_REFORM);
    parse_error("reform:struct_size=8", "reform", LCTX_METHOD_REFORM);
    parse_error("refreshkv:gathered=true", "refreshkv", LCTX_METHOD_REFRESHKV);   // set by the method name
    EXPECT_NE(parse_error("full:budget=1", "full", LCTX_METHOD_FULL).find("no parameters"), std::string::npos);
    EXPECT_NE(parse_error("oracle:budget=1", "oracle", LCTX_METHOD_FULL).find("no parameters"), std::string::npos);
}

TEST(CliMethodKnobs, RefusesMalformedValues) {
    parse_error("reform:recompute", "reform", LCTX_METHOD_REFORM);          // no '='
    parse_error("reform:=4", "reform", LCTX_METHOD_REFORM);                 // no key
    parse_error("reform:recompute=", "reform", LCTX_METHOD_REFORM);         // no value
    parse_error("reform:recompute=4k", "reform", LCTX_METHOD_REFORM);
    parse_error("reform:recompute=1.5", "reform", LCTX_METHOD_REFORM);
    parse_error("reform:recompute=2147483648", "reform", LCTX_METHOD_REFORM);   // past int32
    parse_ok("reform:recompute=-2147483648", "reform", LCTX_METHOD_REFORM);      // the library judges the range
    parse_error("reattention:store_max_ram=-1", "reattention", LCTX_METHOD_REATTENTION);
    parse_error("refreshkv:threshold=nan", "refreshkv", LCTX_METHOD_REFRESHKV);
    parse_error("refreshkv:threshold=1e40", "refreshkv", LCTX_METHOD_REFRESHKV);   // not a finite float
    parse_error("refreshkv:schedule=sometimes", "refreshkv", LCTX_METHOD_REFRESHKV);
    parse_error("reform:evictor=lru", "reform", LCTX_METHOD_REFORM);
    parse_error("ilre:dca=yes", "ilre", LCTX_METHOD_ILRE);
    parse_error("reform:heads_path=", "reform", LCTX_METHOD_REFORM);
    EXPECT_NE(parse_error("reform:chunk=1:reform.chunk=2", "reform", LCTX_METHOD_REFORM).find("twice"),
              std::string::npos);
}

TEST(CliMethodKnobs, SettingsFillTheirFieldsAndNothingElse) {
    const MethodVariant v = parse_ok(
        "reform:recompute=4096:evictor=tova:h2o_per_chunk=true:heads_path=/tmp/heads.json", "reform", LCTX_METHOD_REFORM);
    MethodKnobs k;
    apply_settings(v.settings, k);
    lctx_reform_params want;
    lctx_reform_default_params(&want);
    want.recompute = 4096;
    want.evictor = LCTX_EVICTOR_TOVA;
    want.h2o_per_chunk = true;
    ASSERT_NE(k.reform.heads_path, nullptr);
    EXPECT_STREQ(k.reform.heads_path, "/tmp/heads.json");
    want.heads_path = k.reform.heads_path;
    EXPECT_TRUE(same(want, k.reform));
    lctx_kv_params kv;
    lctx_kv_default_params(&kv);
    EXPECT_TRUE(same(kv, k.kv));   // other structs keep their defaults

    const MethodVariant r = parse_ok("refreshkv:threshold=-0.25:schedule=fixed:partial=77:pool_kernel=5",
                                     "refreshkv", LCTX_METHOD_REFRESHKV);
    MethodKnobs k2;
    apply_settings(r.settings, k2);
    lctx_refreshkv_params rw;
    lctx_refreshkv_default_params(&rw);
    rw.threshold = -0.25f;
    rw.schedule = LCTX_REFRESHKV_FIXED;
    rw.partial = 77;
    rw.pool_kernel = 5;
    EXPECT_TRUE(same(rw, k2.refreshkv));

    const MethodVariant a = parse_ok("reattention:store_max_ram=17179869184:tile_max=on:n_local=2048",
                                     "reattention", LCTX_METHOD_REATTENTION);
    MethodKnobs k3;
    apply_settings(a.settings, k3);
    lctx_reattention_params aw;
    lctx_reattention_default_params(&aw);
    aw.store_max_ram = uint64_t(1) << 34;
    aw.tile_max = true;
    aw.n_local = 2048;
    EXPECT_TRUE(same(aw, k3.reattention));

    const MethodVariant f = parse_ok("infllm:block=64:repr=2:budget=512:sink=-1", "infllm", LCTX_METHOD_INFLLM);
    MethodKnobs k4;
    apply_settings(f.settings, k4);
    EXPECT_EQ(k4.infllm.block, 64);
    EXPECT_EQ(k4.infllm.repr, 2);
    EXPECT_EQ(k4.kv.budget, 512);
    EXPECT_EQ(k4.kv.sink, -1);
}

TEST(CliMethodKnobs, AttachPointsTheSessionAtTheStructs) {
    MethodKnobs k;
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    k.attach(sp);
    EXPECT_EQ(sp.reform, &k.reform);
    EXPECT_EQ(sp.kv, &k.kv);
    EXPECT_EQ(sp.infllm, &k.infllm);
    EXPECT_EQ(sp.ilre, &k.ilre);
    EXPECT_EQ(sp.reattention, &k.reattention);
    EXPECT_EQ(sp.refreshkv, &k.refreshkv);
}

} // namespace
