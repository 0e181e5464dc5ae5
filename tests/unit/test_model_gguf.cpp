// GGUF reader: valid v2/v3 files built in memory, malformed files (each with
// its own message), a mutation fuzz loop, and the real test models.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "common/error.h"
#include "gguf_test_writer.h"
#include "model/gguf.h"
#include "model/gguf_print.h"

using namespace gguf_test;
using lctx::GgufFile;
using lctx::GgufValueType;
using testing::HasSubstr;

namespace {

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t> &b) { return GgufFile::from_memory(b.data(), b.size()); }

struct Failure {
    lctx_status status = LCTX_OK;
    std::string message;
};

template <typename F> Failure failure_of(F &&f) {
    try {
        f();
    } catch (const lctx::Error &e) {
        return {e.status(), e.what()};
    }
    return {LCTX_OK, "(no error)"};
}

Failure parse_failure(const std::vector<uint8_t> &b) {
    return failure_of([&] { parse(b); });
}

std::string temp_path(const std::string &tag) {
    return (std::filesystem::temp_directory_path() /
            ("lctx_gguf_" + std::to_string(::getpid()) + "_" + tag + ".gguf")).string();
}

void write_file(const std::string &path, const std::vector<uint8_t> &b) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// A file with every metadata type, nested arrays and three tensors.
Writer full_writer(uint32_t version) {
    Writer w;
    w.version = version;
    w.kv<uint8_t>("t.u8", U8, 200)
        .kv<int8_t>("t.i8", I8, -100)
        .kv<uint16_t>("t.u16", U16, 60000)
        .kv<int16_t>("t.i16", I16, -30000)
        .kv<uint32_t>("t.u32", U32, 4000000000u)
        .kv<int32_t>("t.i32", I32, -2000000000)
        .kv<float>("t.f32", F32, 0.15625f)
        .kv<uint8_t>("t.bool", BOOL, 1)
        .kv_str("t.str", "hello \"gguf\"\n")
        .kv<uint64_t>("t.u64", U64, 18000000000000000000ull)
        .kv<int64_t>("t.i64", I64, -9000000000000000000ll)
        .kv<double>("t.f64", F64, -2.5e100)
        .kv_arr<uint32_t>("t.arr_u32", U32, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
        .kv_arr<float>("t.arr_f32", F32, {0.5f, -1.25f})
        .kv_arr<int8_t>("t.arr_i8", I8, {-1, 2, -3})
        .kv_arr_str("t.arr_str", {"a", "", "ccc"})
        .kv_arr<uint8_t>("t.arr_empty", U8, {});
    // array[array[int16]]: [[1, -2], [], [3]]
    Bytes nested;
    nested.u32(ARR).u64(3);
    nested.u32(I16).u64(2).put<int16_t>(1).put<int16_t>(-2);
    nested.u32(I16).u64(0);
    nested.u32(I16).u64(1).put<int16_t>(3);
    w.kv_raw("t.nested", ARR, nested);
    std::vector<float> a(12), c(8);
    for (int k = 0; k < 12; ++k) a[k] = static_cast<float>(k) * 0.5f;
    for (int k = 0; k < 8; ++k) c[k] = -static_cast<float>(k);
    std::vector<uint8_t> q8(2 * 34);  // two Q8_0 blocks: d = 1.0 (0x3c00), q = index
    for (int blk = 0; blk < 2; ++blk) {
        q8[blk * 34] = 0x00;
        q8[blk * 34 + 1] = 0x3c;
        for (int j = 0; j < 32; ++j) q8[blk * 34 + 2 + j] = static_cast<uint8_t>(j - 16);
    }
    w.tensor({"a", {4, 3}, 0, f32_bytes(a)});
    w.tensor({"q", {32, 2}, 8, q8});
    w.tensor({"c", {2, 2, 1, 2}, 0, f32_bytes(c)});
    return w;
}

Writer one_tensor_writer(TensorSpec t) {
    Writer w;
    w.tensor(std::move(t));
    return w;
}

void check_full(const GgufFile &g, uint32_t version) {
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(g.alignment(), 32u);
    ASSERT_EQ(g.metadata().size(), 18u);
    EXPECT_EQ(g.get_int("t.u8"), 200);
    EXPECT_EQ(g.get_int("t.i8"), -100);
    EXPECT_EQ(g.get_int("t.u16"), 60000);
    EXPECT_EQ(g.get_int("t.i16"), -30000);
    EXPECT_EQ(g.get_int("t.u32"), 4000000000ll);
    EXPECT_EQ(g.get_int("t.i32"), -2000000000);
    EXPECT_EQ(g.get_float("t.f32"), 0.15625);
    EXPECT_TRUE(g.get_bool_or("t.bool", false));
    EXPECT_EQ(g.get_string("t.str"), "hello \"gguf\"\n");
    EXPECT_EQ(g.find("t.u64")->u, 18000000000000000000ull);
    EXPECT_EQ(g.get_int("t.i64"), -9000000000000000000ll);
    EXPECT_EQ(g.get_float("t.f64"), -2.5e100);
    EXPECT_EQ(g.get_float("t.i32"), -2000000000.0);  // integers read as floats
    EXPECT_EQ(g.get_int_array_or_empty("t.arr_u32"), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
    EXPECT_EQ(g.get_float_array_or_empty("t.arr_f32"), (std::vector<float>{0.5f, -1.25f}));
    EXPECT_EQ(g.get_int_array_or_empty("t.arr_i8"), (std::vector<int32_t>{-1, 2, -3}));
    EXPECT_EQ(g.get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_TRUE(g.get_int_array_or_empty("t.arr_empty").empty());
    EXPECT_TRUE(g.get_int_array_or_empty("absent").empty());
    const lctx::GgufValue *n = g.find("t.nested");
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->type, GgufValueType::ARRAY);
    ASSERT_EQ(n->elem_type, GgufValueType::ARRAY);
    ASSERT_EQ(n->arr.size(), 3u);
    EXPECT_EQ(n->arr[0].elem_type, GgufValueType::INT16);
    ASSERT_EQ(n->arr[0].arr.size(), 2u);
    EXPECT_EQ(n->arr[0].arr[1].i, -2);
    EXPECT_TRUE(n->arr[1].arr.empty());
    EXPECT_EQ(n->arr[2].arr[0].i, 3);
    EXPECT_EQ(n->to_string(), "[[1, -2], [], [3]]");

    ASSERT_EQ(g.tensors().size(), 3u);
    const auto *a = g.find_tensor("a");
    const auto *q = g.find_tensor("q");
    const auto *c = g.find_tensor("c");
    ASSERT_TRUE(a && q && c);
    EXPECT_EQ(g.find_tensor("nope"), nullptr);
    EXPECT_EQ(a->n_dims, 2u);
    EXPECT_EQ(a->ne[0], 4);
    EXPECT_EQ(a->ne[1], 3);
    EXPECT_EQ(a->ne[2], 1);
    EXPECT_EQ(a->n_elements(), 12);
    EXPECT_EQ(a->type, lctx::GgmlType::F32);
    EXPECT_EQ(a->offset, 0u);
    EXPECT_EQ(a->nbytes, 48u);
    EXPECT_EQ(q->type, lctx::GgmlType::Q8_0);
    EXPECT_EQ(q->offset, 64u);  // 48 bytes rounded up to the alignment
    EXPECT_EQ(q->nbytes, 68u);
    EXPECT_EQ(c->n_dims, 4u);
    EXPECT_EQ(c->offset, 160u);
    EXPECT_EQ(c->n_elements(), 8);
    // Data pointers: relative placement follows the offsets, content matches.
    EXPECT_EQ(q->data - a->data, 64);
    EXPECT_EQ(c->data - a->data, 160);
    float v;
    std::memcpy(&v, a->data + 4 * 7, 4);
    EXPECT_EQ(v, 3.5f);
    EXPECT_EQ(static_cast<int8_t>(q->data[34 + 2 + 31]), 15);
    std::memcpy(&v, c->data + 4 * 5, 4);
    EXPECT_EQ(v, -5.0f);
}

} // namespace

TEST(Gguf, ParsesEveryValueTypeV3) { check_full(*parse(full_writer(3).build()), 3); }

TEST(Gguf, ParsesEveryValueTypeV2) { check_full(*parse(full_writer(2).build()), 2); }

TEST(Gguf, OpenWithAndWithoutMmap) {
    const auto bytes = full_writer(3).build();
    const std::string path = temp_path("valid");
    write_file(path, bytes);
    for (bool mmap : {true, false}) {
        auto g = GgufFile::open(path, mmap);
        EXPECT_EQ(g->is_mmapped(), mmap);
        EXPECT_EQ(g->file_size(), bytes.size());
        check_full(*g, 3);
        // The data section begins at an aligned file offset: check the first
        // tensor's bytes against the file at that offset.
        const size_t header_end = bytes.size() - 192;  // data: 64 + 96 + 32 bytes
        EXPECT_EQ(header_end % 32, 0u);
        EXPECT_EQ(std::memcmp(g->tensors()[0].data, bytes.data() + header_end, 48), 0);
    }
    std::remove(path.c_str());
}

TEST(Gguf, CustomAlignment) {
    Writer w;
    w.alignment = 64;
    w.kv<uint32_t>("general.alignment", U32, 64);
    w.tensor({"x", {3}, 0, f32_bytes({1, 2, 3})});
    w.tensor({"y", {2}, 0, f32_bytes({4, 5})});
    auto g = parse(w.build());
    EXPECT_EQ(g->alignment(), 64u);
    EXPECT_EQ(g->find_tensor("y")->offset, 64u);
    float v;
    std::memcpy(&v, g->find_tensor("y")->data + 4, 4);
    EXPECT_EQ(v, 5.0f);
}

TEST(Gguf, ScalarTensorHasNoDims) {
    auto g = parse(one_tensor_writer({"s", {}, 0, f32_bytes({2.5f})}).build());
    const auto *t = g->find_tensor("s");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->n_dims, 0u);
    EXPECT_EQ(t->n_elements(), 1);
    EXPECT_EQ(t->nbytes, 4u);
}

TEST(Gguf, NoTensorsNoPadding) {
    Writer w;
    w.kv_str("general.architecture", "llama");
    auto g = parse(w.build());
    EXPECT_TRUE(g->tensors().empty());
    EXPECT_EQ(g->get_string("general.architecture"), "llama");
}

TEST(Gguf, GetterErrors) {
    auto g = parse(full_writer(3).build());
    auto f = failure_of([&] { g->get_int("t.str"); });
    EXPECT_EQ(f.status, LCTX_ERR_FORMAT);
    EXPECT_THAT(f.message, HasSubstr("key 't.str' has type string, expected an integer"));
    f = failure_of([&] { g->get_string("t.u32"); });
    EXPECT_THAT(f.message, HasSubstr("key 't.u32' has type uint32, expected string"));
    f = failure_of([&] { g->get_float("t.arr_f32"); });
    EXPECT_THAT(f.message, HasSubstr("key 't.arr_f32' has type array[float32], expected a number"));
    f = failure_of([&] { g->get_string_array("t.arr_u32"); });
    EXPECT_THAT(f.message, HasSubstr("has type array[uint32], expected array[string]"));
    f = failure_of([&] { g->get_int_array_or_empty("t.arr_f32"); });
    EXPECT_THAT(f.message, HasSubstr("expected an integer array"));
    f = failure_of([&] { g->get_int_array_or_empty("t.nested"); });
    EXPECT_THAT(f.message, HasSubstr("array[array[int16]]"));
    f = failure_of([&] { g->get_bool_or("t.f32", false); });
    EXPECT_THAT(f.message, HasSubstr("expected bool"));
    f = failure_of([&] { g->get_int("t.u64"); });
    EXPECT_THAT(f.message, HasSubstr("does not fit in int64"));
    for (auto fn : {+[](const GgufFile &x) { x.get_string("nope"); }, +[](const GgufFile &x) { x.get_int("nope"); },
                    +[](const GgufFile &x) { x.get_float("nope"); }, +[](const GgufFile &x) { x.get_string_array("nope"); }}) {
        f = failure_of([&] { fn(*g); });
        EXPECT_EQ(f.status, LCTX_ERR_FORMAT);
        EXPECT_THAT(f.message, HasSubstr("missing required key 'nope'"));
    }
    EXPECT_EQ(g->get_int_or("nope", 7), 7);
    EXPECT_EQ(g->get_float_or("nope", 1.5), 1.5);
    EXPECT_EQ(g->get_string_or("nope", "d"), "d");
    EXPECT_EQ(g->get_bool_or("nope", true), true);
    EXPECT_EQ(g->get_int_or("t.bool", 0), 1);  // bools are integers
    EXPECT_TRUE(g->get_float_array_or_empty("nope").empty());
}

TEST(Gguf, ToString) {
    auto g = parse(full_writer(3).build());
    EXPECT_EQ(g->find("t.arr_u32")->to_string(3), "[1, 2, 3, ... (10 items)]");
    EXPECT_EQ(g->find("t.arr_u32")->to_string(10), "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]");
    EXPECT_EQ(g->find("t.arr_str")->to_string(), "[\"a\", \"\", \"ccc\"]");
    EXPECT_EQ(g->find("t.arr_empty")->to_string(), "[]");
    EXPECT_EQ(g->find("t.str")->to_string(), "\"hello \\\"gguf\\\"\\n\"");
    EXPECT_EQ(g->find("t.f32")->to_string(), "0.15625");
    EXPECT_EQ(g->find("t.bool")->to_string(), "true");
    EXPECT_EQ(g->find("t.u64")->to_string(), "18000000000000000000");
    EXPECT_EQ(g->find("t.i8")->to_string(), "-100");
    EXPECT_EQ(g->find("t.f64")->to_string(), "-2.5e+100");
    Writer w;
    w.kv_str("long", std::string(300, 'x'));
    w.kv<float>("eps", F32, 1e-5f);
    auto h = parse(w.build());
    EXPECT_THAT(h->find("long")->to_string(), HasSubstr("... (300 bytes)"));
    EXPECT_EQ(h->find("eps")->to_string(), "1e-05");
}

TEST(Gguf, PrintSummary) {
    auto g = parse(full_writer(3).build());
    char *buf = nullptr;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    lctx::print_gguf_summary(*g, out);
    std::fclose(out);
    const std::string s(buf, len);
    std::free(buf);
    EXPECT_THAT(s, HasSubstr("GGUF version 3"));
    EXPECT_THAT(s, HasSubstr("alignment 32"));
    EXPECT_THAT(s, HasSubstr("metadata: 18 keys"));
    EXPECT_THAT(s, HasSubstr("t.arr_u32"));
    EXPECT_THAT(s, HasSubstr("array[uint32]"));
    EXPECT_THAT(s, HasSubstr("[1, 2, 3, 4, 5, 6, 7, 8, ... (10 items)]"));
    EXPECT_THAT(s, HasSubstr("tensors: 3"));
    EXPECT_THAT(s, HasSubstr("Q8_0"));
    EXPECT_THAT(s, HasSubstr("[2, 2, 1, 2]"));
    EXPECT_THAT(s, HasSubstr("total: 3 tensors, 84 elements, 148 bytes"));
}

// --- malformed files --------------------------------------------------------

namespace {

struct BadCase {
    std::string name;
    std::vector<uint8_t> bytes;
    lctx_status status;
    std::string message;
};

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Bytes b;
    b.u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);
    return b;
}

std::vector<BadCase> bad_cases() {
    std::vector<BadCase> c;
    const auto F = LCTX_ERR_FORMAT, U = LCTX_ERR_UNSUPPORTED;
    auto add = [&](std::string name, std::vector<uint8_t> b, lctx_status s, std::string m) {
        c.push_back({std::move(name), std::move(b), s, std::move(m)});
    };
    const TensorSpec ok{"w", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8})};

    add("empty", {}, F, "file is too small to be GGUF: 0 bytes");
    add("short", {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0}, F, "file is too small to be GGUF: 10 bytes");
    {
        Writer w;
        w.magic = 0x4c4d4747;  // "GGML"
        add("bad magic", w.build(), F, "bad magic 0x4c4d4747");
    }
    {
        Writer w;
        w.version = 1;
        add("version 1", w.build(), U, "GGUF version 1 is not supported");
        w.version = 4;
        add("version 4", w.build(), U, "unsupported GGUF version 4");
        w.version = 0x03000000;
        add("big endian", w.build(), U, "big-endian GGUF files are not supported");
    }
    add("absurd kv count", header(0, uint64_t(1) << 40).u64(0).b, F, "absurd kv count 1099511627776");
    add("absurd tensor count", header(uint64_t(1) << 61, 0).u64(0).b, F, "absurd tensor count 2305843009213693952");
    add("key length overflows", header(0, 1).u64(1000).u64(0).u64(0).b, F,
        "key of kv 0 length 1000 at offset 24 overflows the file (16 bytes left)");
    add("key length over the limit", [] {
            Bytes b = header(0, 1);
            b.str(std::string(70000, 'k')).u32(U8).u8(0);
            return b.b;
        }(), F, "exceeds the limit of 65535 bytes");
    add("empty key", header(0, 1).str("").u32(U8).u8(0).u64(0).b, F, "empty key of kv 0 at offset 24");
    add("truncated value", header(0, 1).str("a").u32(U64).u32(0).b, F,
        "truncated while reading value of key 'a' at offset 37: need 8 bytes, 4 left");
    add("truncated second kv", header(0, 2).str("a").u32(U8).u8(1).str("b").u32(U32).u8(0).u8(0).b, F,
        "truncated while reading value of key 'b'");
    add("string value overflows", header(0, 1).str("s").u32(STR).u64(999).u64(0).b, F,
        "string value of key 's' length 999 at offset 37 overflows the file");
    add("invalid value type", header(0, 1).str("x").u32(13).u64(0).b, F, "invalid value type 13 for key 'x' at offset 33");
    add("invalid array element type", header(0, 1).str("x").u32(ARR).u32(99).u64(0).b, F,
        "invalid array element type 99 for key 'x'");
    add("array count overflow", header(0, 1).str("x").u32(ARR).u32(U32).u64(uint64_t(1) << 62).u64(0).b, F,
        "array element count 4611686018427387904 of key 'x' overflows the file");
    add("array of strings count overflow", header(0, 1).str("x").u32(ARR).u32(STR).u64(3).str("a").b, F,
        "array element count 3 of key 'x' overflows the file");
    add("nested array depth", [] {
            Bytes b = header(0, 1);
            b.str("deep").u32(ARR);
            for (int k = 0; k < 9; ++k) b.u32(ARR).u64(1);
            b.u32(U8).u64(0);
            return b.b;
        }(), F, "arrays of key 'deep' are nested deeper than 8 levels");
    {
        Writer w;
        w.kv<uint8_t>("a", U8, 1).kv<uint8_t>("a", U8, 2);
        add("duplicate key", w.build(), F, "duplicate key 'a'");
    }
    add("bool value 2", header(0, 1).str("b").u32(BOOL).u8(2).u64(0).b, F,
        "bool value of key 'b' at offset 37 is 2 (must be 0 or 1)");
    {
        Writer w = one_tensor_writer(ok);
        w.kv<uint32_t>("general.alignment", U32, 0);
        add("alignment 0", w.build(), F, "general.alignment = 0 is not a power of two");
        Writer w3 = one_tensor_writer(ok);
        w3.kv<uint32_t>("general.alignment", U32, 48);
        add("alignment 48", w3.build(), F, "general.alignment = 48 is not a power of two");
        Writer ws = one_tensor_writer(ok);
        ws.kv_str("general.alignment", "32");
        add("alignment string", ws.build(), F, "general.alignment has type string, expected an unsigned integer");
    }
    {
        Writer w = one_tensor_writer(ok);
        w.tensor(ok);
        add("duplicate tensor name", w.build(), F, "duplicate tensor name 'w'");
    }
    add("empty tensor name", one_tensor_writer({"", {8}, 0, f32_bytes(std::vector<float>(8))}).build(), F, "empty name of tensor 0");
    {
        TensorSpec t = ok;
        t.dims = {1, 1, 1, 1, 8};
        t.data = f32_bytes(std::vector<float>(8));
        add("five dims", one_tensor_writer(t).build(), F, "tensor 'w' has 5 dimensions (at most 4)");
        t.dims = {4, -3};
        add("negative dim", one_tensor_writer(t).build(), F, "dimension 1 of tensor 'w' is -3 (must be positive)");
        t.dims = {0, 2};
        add("zero dim", one_tensor_writer(t).build(), F, "dimension 0 of tensor 'w' is 0 (must be positive)");
        t.dims = {int64_t(1) << 32, int64_t(1) << 32};
        add("element count overflow", one_tensor_writer(t).build(), F, "element count of tensor 'w' overflows 64 bits");
        t.dims = {int64_t(1) << 62, 1};
        add("byte size overflow", one_tensor_writer(t).build(), F, "byte size of tensor 'w' overflows");
    }
    {
        TensorSpec t = ok;
        t.type = 99;
        add("unknown type", one_tensor_writer(t).build(), U, "tensor 'w' has unknown or unsupported type 99");
        t.type = 16;  // IQ2_XXS: a ggml type lctx does not know
        add("unsupported type", one_tensor_writer(t).build(), U, "tensor 'w' has unknown or unsupported type 16");
        t.type = 2;  // Q4_0
        t.dims = {33, 1};
        add("row not a multiple of the block", one_tensor_writer(t).build(), F,
            "row size 33 of tensor 'w' is not a multiple of the Q4_0 block size 32");
    }
    {
        TensorSpec t = ok;
        t.offset = 4;
        add("misaligned offset", one_tensor_writer(t).build(), F, "offset 4 of tensor 'w' is not a multiple of the alignment 32");
        t.offset = 1 << 20;
        add("offset out of bounds", one_tensor_writer(t).build(), F, "data of tensor 'w' (32 bytes at data offset 1048576) is out of bounds");
    }
    {
        Writer w = one_tensor_writer(ok);
        w.truncate_data = 4;
        add("data truncated", w.build(), F, "data of tensor 'w' (32 bytes at data offset 0) is out of bounds of the file (data section: 28 bytes)");
        TensorSpec t = ok;
        t.dims = {4, 4};  // claims 64 bytes, has 32
        add("tensor bigger than data", one_tensor_writer(t).build(), F, "is out of bounds of the file");
    }
    {
        Writer w = one_tensor_writer(ok);
        TensorSpec t2 = ok;
        t2.name = "v";
        t2.offset = 0;
        w.tensor(t2);
        add("overlapping tensors", w.build(), F, "data of tensors 'w' and 'v' overlap");
    }
    add("truncated tensor info", header(1, 0).str("w").u32(4).i64(2).i64(2).u32(0).b, F,
        "truncated while reading tensor info 'w'");
    add("data section beyond end", header(1, 0).str("w").u32(1).i64(2).u32(0).u64(0).b, F,
        "data section at offset 64 starts beyond the end of the file (57 bytes)");
    return c;
}

} // namespace

TEST(GgufMalformed, EachRefusedWithItsOwnMessage) {
    const auto cases = bad_cases();
    EXPECT_GE(cases.size(), 15u);
    std::map<std::string, std::string> seen;  // message -> case: every case must fail differently
    for (const BadCase &bc : cases) {
        SCOPED_TRACE(bc.name);
        const Failure f = parse_failure(bc.bytes);
        EXPECT_EQ(f.status, bc.status) << f.message;
        EXPECT_THAT(f.message, HasSubstr(bc.message));
        EXPECT_TRUE(seen.emplace(f.message, bc.name).second) << "same message as " << seen[f.message];
    }
}

TEST(GgufMalformed, ThroughOpenToo) {
    const auto cases = bad_cases();
    for (size_t k = 0; k < cases.size(); k += 3) {
        const BadCase &bc = cases[k];
        SCOPED_TRACE(bc.name);
        const std::string path = temp_path("bad" + std::to_string(k));
        write_file(path, bc.bytes);
        for (bool mmap : {true, false}) {
            const Failure f = failure_of([&] { GgufFile::open(path, mmap); });
            EXPECT_EQ(f.status, bc.status);
            EXPECT_THAT(f.message, HasSubstr(bc.message));
            EXPECT_THAT(f.message, HasSubstr(path));
        }
        std::remove(path.c_str());
    }
}

TEST(GgufMalformed, IoErrors) {
    Failure f = failure_of([] { GgufFile::open("/nonexistent/dir/model.gguf"); });
    EXPECT_EQ(f.status, LCTX_ERR_IO);
    EXPECT_THAT(f.message, HasSubstr("cannot open '/nonexistent/dir/model.gguf'"));
    f = failure_of([] { GgufFile::open(std::filesystem::temp_directory_path().string()); });
    EXPECT_EQ(f.status, LCTX_ERR_IO);
    EXPECT_THAT(f.message, HasSubstr("not a regular file"));
}

// Deterministic mutations of a valid file must only ever produce lctx::Error
// (and never read out of bounds: this test also runs under ASan).
TEST(GgufMalformed, MutationFuzz) {
    const std::vector<uint8_t> base = full_writer(3).build();
    std::mt19937_64 rng(20240611);
    int parsed = 0, refused = 0;
    const char *env = std::getenv("LCTX_FUZZ_ITERS");  // longer runs by hand
    const int iters = env ? std::atoi(env) : 2000;
    for (int iter = 0; iter < iters; ++iter) {
        std::vector<uint8_t> b = base;
        const int kind = static_cast<int>(rng() % 5);
        const size_t header_part = b.size() - 192;  // mutate the metadata/tensor infos mostly
        if (kind == 0) {  // flip 1..4 random bits
            for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) b[rng() % header_part] ^= uint8_t(1u << (rng() % 8));
        } else if (kind == 1) {  // truncate
            b.resize(rng() % b.size());
        } else if (kind == 2) {  // overwrite 8 bytes with a random or extreme value
            const uint64_t vals[] = {rng(), ~0ull, 0, 1ull << 63, 0x7fffffffffffffffull, rng() % 64};
            const uint64_t v = vals[rng() % 6];
            const size_t at = rng() % (header_part - 8);
            std::memcpy(b.data() + at, &v, 8);
        } else if (kind == 3) {  // random bytes
            for (int k = 0, n = 1 + static_cast<int>(rng() % 16); k < n; ++k) b[rng() % b.size()] = uint8_t(rng());
        } else {  // delete or insert a few bytes
            const size_t at = rng() % header_part, n = 1 + rng() % 8;
            if (rng() % 2) b.erase(b.begin() + at, b.begin() + std::min(b.size(), at + n));
            else b.insert(b.begin() + at, n, uint8_t(rng()));
        }
        try {
            auto g = parse(b);
            ++parsed;
            for (const auto &kv : g->metadata()) (void)kv.value.to_string();
            for (const auto &t : g->tensors()) {
                ASSERT_NE(t.data, nullptr);
                volatile uint8_t sink = 0;
                for (size_t k = 0; k < t.nbytes; ++k) sink = sink + t.data[k];  // ASan checks the bounds
            }
        } catch (const lctx::Error &e) {
            ++refused;
            EXPECT_NE(std::string(e.what()), "");
        }
    }
    EXPECT_GT(refused, iters / 4);
    EXPECT_GT(parsed, iters / 40);  // flips inside values/strings keep the file valid
}

// --- real files (facts checked with gguf-py's GGUFReader) -------------------

namespace {
std::string test_data_model(const char *name) { return std::string(LCTX_TEST_DATA_DIR) + "/" + name; }
std::string local_model(const char *name) {
    const char *dir = std::getenv("LCTX_MODELS_DIR");
    return (dir ? std::string(dir) : std::string(LCTX_SOURCE_DIR) + "/models") + "/" + name;
}
} // namespace

TEST(GgufReal, Stories260K) {
    const std::string path = test_data_model("stories260K.gguf");
    ASSERT_TRUE(std::filesystem::exists(path)) << "test model missing: " << path << " (committed under tests/data/)";
    const auto bytes = read_file(path);
    for (bool mmap : {true, false}) {
        auto g = GgufFile::open(path, mmap);
        EXPECT_EQ(g->version(), 3u);
        EXPECT_EQ(g->metadata().size(), 19u);
        EXPECT_EQ(g->tensors().size(), 48u);
        EXPECT_EQ(g->get_string("general.architecture"), "llama");
        EXPECT_EQ(g->get_int("llama.embedding_length"), 64);
        EXPECT_EQ(g->get_int("llama.block_count"), 5);
        EXPECT_EQ(g->get_int("llama.attention.head_count_kv"), 4);
        EXPECT_EQ(g->get_int("tokenizer.ggml.padding_token_id"), 4294967295ll);
        EXPECT_FLOAT_EQ(static_cast<float>(g->get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
        EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens").size(), 512u);
        EXPECT_EQ(g->get_float_array_or_empty("tokenizer.ggml.scores").size(), 512u);
        const auto *t = g->find_tensor("token_embd.weight");
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(t->type, lctx::GgmlType::F32);
        EXPECT_EQ(t->ne[0], 64);
        EXPECT_EQ(t->ne[1], 512);
        EXPECT_EQ(t->nbytes, 131072u);
        EXPECT_EQ(std::memcmp(t->data, bytes.data() + 14176, t->nbytes), 0);  // absolute offset per gguf-py
        const auto *o = g->find_tensor("output.weight");
        ASSERT_NE(o, nullptr);
        EXPECT_EQ(std::memcmp(o->data, bytes.data() + 145504, o->nbytes), 0);
    }
}

TEST(GgufReal, SmolLM2Q4_1) {
    const std::string path = local_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    ASSERT_TRUE(std::filesystem::exists(path)) << "model missing: " << path << " (run scripts/fetch-models.sh)";
    auto g = GgufFile::open(path);
    EXPECT_TRUE(g->is_mmapped());
    EXPECT_EQ(g->version(), 3u);
    EXPECT_EQ(g->metadata().size(), 33u);
    EXPECT_EQ(g->tensors().size(), 272u);
    EXPECT_EQ(g->get_string("general.architecture"), "llama");
    EXPECT_EQ(g->get_string("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(g->get_int("llama.embedding_length"), 576);
    EXPECT_EQ(g->get_int("llama.block_count"), 30);
    EXPECT_EQ(g->get_float("llama.rope.freq_base"), 100000.0);
    EXPECT_FALSE(g->get_bool_or("tokenizer.ggml.add_bos_token", true));
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.tokens").size(), 49152u);
    EXPECT_EQ(g->get_string_array("tokenizer.ggml.merges").size(), 48900u);
    EXPECT_EQ(g->get_int_array_or_empty("tokenizer.ggml.token_type").size(), 49152u);
    std::map<lctx::GgmlType, int> counts;
    for (const auto &t : g->tensors()) counts[t.type]++;
    EXPECT_EQ(counts[lctx::GgmlType::Q4_1], 210);
    EXPECT_EQ(counts[lctx::GgmlType::F32], 61);
    EXPECT_EQ(counts[lctx::GgmlType::Q8_0], 1);
    const auto *e = g->find_tensor("token_embd.weight");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->type, lctx::GgmlType::Q8_0);
    EXPECT_EQ(e->ne[0], 576);
    EXPECT_EQ(e->ne[1], 49152);
    EXPECT_EQ(e->nbytes, 30081024u);
    EXPECT_EQ(e->offset, 0u);
    const auto *d = g->find_tensor("blk.0.ffn_down.weight");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->type, lctx::GgmlType::Q4_1);
    EXPECT_EQ(d->nbytes, 552960u);
    EXPECT_EQ(d->data - e->data, 31868992 - 1785664);  // absolute offsets per gguf-py
}
