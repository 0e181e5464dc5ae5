// lctx_dequant_dump TYPE N IN OUT: dequantizes N elements of ggml type TYPE
// (number or name, e.g. 12 or Q4_K) from the raw bytes in IN with the scalar
// reference and writes N little-endian float32 to OUT. Used by
// tests/reference/test_dequant_reference.py to compare with gguf-py.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "common/error.h"
#include "common/ggml_type.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        std::fprintf(stderr, "usage: %s TYPE N IN OUT\n", argv[0]);
        return 2;
    }
    try {
        uint32_t type = 0;
        char *end = nullptr;
        const unsigned long t = std::strtoul(argv[1], &end, 10);
        if (*end == '\0') {
            type = static_cast<uint32_t>(t);
        } else {
            bool found = false;
            for (uint32_t k = 0; k < 64 && !found; ++k) {
                const lctx::GgmlTypeInfo *info = lctx::ggml_type_info(k);
                if (info && std::strcmp(info->name, argv[1]) == 0) type = k, found = true;
            }
            if (!found) lctx::fail(LCTX_ERR_INVALID_ARG, "unknown type name '%s'", argv[1]);
        }
        const lctx::GgmlTypeInfo *info = lctx::ggml_type_info(type);
        if (!info) lctx::fail(LCTX_ERR_INVALID_ARG, "unknown type %u", type);
        const long long n = std::atoll(argv[2]);
        std::ifstream in(argv[3], std::ios::binary);
        if (!in) lctx::fail(LCTX_ERR_IO, "cannot open '%s'", argv[3]);
        const std::vector<uint8_t> src((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto gt = static_cast<lctx::GgmlType>(type);
        const size_t need = lctx::ggml_row_size(gt, n);
        if (src.size() != need)
            lctx::fail(LCTX_ERR_INVALID_ARG, "%s: %lld elements of %s need %zu bytes, the file has %zu", argv[3], n,
                       info->name, need, src.size());
        std::vector<float> dst(static_cast<size_t>(n));
        lctx::dequantize_row_ref(gt, src.data(), dst.data(), n);
        std::ofstream out(argv[4], std::ios::binary);
        out.write(reinterpret_cast<const char *>(dst.data()), static_cast<std::streamsize>(dst.size() * sizeof(float)));
        if (!out) lctx::fail(LCTX_ERR_IO, "cannot write '%s'", argv[4]);
    } catch (const lctx::Error &e) {
        std::fprintf(stderr, "lctx_dequant_dump: %s\n", e.what());
        return 1;
    }
    return 0;
}
