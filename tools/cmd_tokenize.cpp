// lctx tokenize -m MODEL TEXT: token ids on one line.
#include <cstdio>

#include "cli.h"

namespace lctx::cli {

int cmd_tokenize(int argc, char **argv) {
    static const char *usage =
        "usage: lctx tokenize -m MODEL [--no-special] [--parse-special] [--pieces] [--lossy] TEXT\n"
        "  --no-special     do not add BOS/EOS\n"
        "  --parse-special  turn special token texts (e.g. <|im_start|>) into their ids\n"
        "  --pieces         print id:piece pairs instead of ids\n"
        "  --lossy          accept invalid UTF-8 (each invalid sequence becomes U+FFFD; default: refused)\n";
    Args a = parse_args(argc, argv, {"--model"}, {"--no-special", "--parse-special", "--pieces", "--lossy"}, {{"-m", "--model"}},
                        usage);
    if (a.positional.empty()) die("tokenize needs a TEXT\n\n%s", usage);
    std::string text = a.positional[0];
    for (size_t i = 1; i < a.positional.size(); ++i) text += " " + a.positional[i];
    text = check_text(text, "TEXT", a.on("--lossy"), true);
    lctx_model *m = load_model(a);
    std::vector<lctx_token> ids = tokenize(m, text, !a.on("--no-special"), a.on("--parse-special"));
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) std::fputc(' ', stdout);
        if (a.on("--pieces"))
            std::printf("%d:'%s'", ids[i], piece(m, ids[i]).c_str());
        else
            std::printf("%d", ids[i]);
    }
    std::fputc('\n', stdout);
    lctx_model_free(m);
    return 0;
}

} // namespace lctx::cli
