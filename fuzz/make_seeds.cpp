// Writes the binary seeds of fuzz/corpus/ (run once; the seeds are committed):
//   gguf/micro1.gguf, gguf/micro2.gguf   the micro model with 1 and 2 layers
//   index/reform.bin                     the payload of a REFORM index of the micro
//                                        model (first byte 0: wrapped by fuzz_index)
//   index/container.bin                  the same file as it is (first byte 1)
// Usage: fuzz_make_seeds <corpus dir>
#include <fstream>
#include <iterator>

#include "fuzz_common.h"

namespace {
void write(const std::string &path, const std::string &bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}
void check(lctx_status st) {
    if (st != LCTX_OK) {
        std::fprintf(stderr, "make_seeds: %s\n", lctx_last_error());
        std::exit(1);
    }
}
} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: fuzz_make_seeds <corpus dir>\n");
        return 2;
    }
    const std::string dir = argv[1];
    for (uint32_t layers : {1u, 2u}) {
        const std::vector<uint8_t> g = fuzz::micro_model_gguf(layers);
        write(dir + "/gguf/micro" + std::to_string(layers) + ".gguf", std::string(g.begin(), g.end()));
    }
    lctx_session_params sp;
    lctx_session_default_params(&sp);
    sp.method = LCTX_METHOD_REFORM;
    sp.n_ctx = 64;
    sp.n_threads = 1;
    lctx_reform_params rp;
    lctx_reform_default_params(&rp);
    rp.chunk = 8;
    rp.budget = 8;
    rp.recompute = 32;
    rp.obs = 4;
    rp.sink = 1;
    rp.recent = 1;
    sp.reform = &rp;
    lctx_session *s = nullptr;
    check(lctx_session_create(fuzz::micro_model(), &sp, &s));
    lctx_token doc[24];
    for (int i = 0; i < 24; ++i) doc[i] = 3 + (i * 37) % 290;
    check(lctx_feed_chunk(s, doc, 24));
    check(lctx_build_index(s));
    const std::string tmp = dir + "/index/.seed.lctx";
    check(lctx_index_save(s, tmp.c_str()));
    lctx_session_free(s);
    std::ifstream in(tmp, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(tmp.c_str());
    write(dir + "/index/reform.bin", std::string(1, '\0') + file.substr(24, file.size() - 32));
    write(dir + "/index/container.bin", std::string(1, '\1') + file);
    std::printf("make_seeds: wrote gguf/ and index/ seeds under %s (index of %zu bytes)\n", dir.c_str(), file.size());
    return 0;
}
