// lctx_write_tiny_model: writes the unit tests' tiny random model
// (unit/engine_tiny_model.h) as a GGUF file, for the command-line tests that
// need an architecture stories260K is not (a gemma3 with sliding layers).
//
//   lctx_write_tiny_model OUT.gguf [ARCH [N_LAYER]]   (default llama, 2 layers)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine_tiny_model.h"

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        std::fprintf(stderr, "usage: %s OUT.gguf [ARCH [N_LAYER]]\n", argv[0]);
        return 2;
    }
    engine_test::TinyOptions o;
    if (argc > 2) o.arch = argv[2];
    if (argc > 3) o.n_layer = std::atoi(argv[3]);
    if (o.n_layer < 1 || o.n_layer > 64) {
        std::fprintf(stderr, "N_LAYER must be 1..64\n");
        return 2;
    }
    const std::vector<uint8_t> bytes = engine_test::make_tiny_llama(o);
    FILE *f = std::fopen(argv[1], "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
        std::perror(argv[1]);
        return 1;
    }
    return 0;
}
