// lctx inspect MODEL: GGUF metadata and tensor table.
#include <cstdio>

#include "cli.h"
#include "common/error.h"
#include "model/gguf.h"
#include "model/gguf_print.h"

namespace lctx::cli {

int cmd_inspect(int argc, char **argv) {
    static const char *usage = "usage: lctx inspect MODEL.gguf\n";
    Args a = parse_args(argc, argv, {}, {}, {}, usage);
    if (a.positional.size() != 1) die("inspect takes one model file\n\n%s", usage);
    try {
        auto file = GgufFile::open(a.positional[0], true);
        print_gguf_summary(*file, stdout);
    } catch (const Error &e) {
        die("%s: %s", lctx_status_string(e.status()), e.what());
    }
    return 0;
}

} // namespace lctx::cli
