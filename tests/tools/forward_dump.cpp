// lctx_forward_dump: runs token ids through Forward::run and writes the
// logits and the per-layer hidden states as raw little-endian float32, for
// comparison with the numpy reference (tests/reference/llama_ref.py).
//
//   lctx_forward_dump MODEL OUT_DIR [options] [ID...]
//     --tokens FILE   whitespace-separated token ids (instead of / before IDs)
//     --last          logits of the last token only (default: every token)
//     --batch N       feed the tokens in calls of at most N tokens
//     --threads N     worker threads (default 2)
//     --n-layers N    early exit after N layers
//
// Writes OUT_DIR/logits.f32 ([rows][n_vocab]) and OUT_DIR/hidden.f32
// ([n_layers][n_tokens][n_embd]); prints "n_tokens n_vocab n_embd n_layers".
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/forward.h"
#include "engine/kv_store.h"
#include "backend/cpu/cpu_backend.h"
#include "model/model.h"

namespace {

long parse_int(const char *s, const char *what) {
    char *end = nullptr;
    errno = 0;
    const long v = std::strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') throw std::runtime_error(std::string("bad ") + what + ": " + s);
    return v;
}

void write_floats(const std::string &path, const std::vector<float> &v) {
    std::ofstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot write " + path);
    f.write(reinterpret_cast<const char *>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    if (!f) throw std::runtime_error("cannot write " + path);
}

int run(int argc, char **argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL OUT_DIR [--tokens FILE] [--last] [--batch N] [--threads N] "
                             "[--n-layers N] [--attn-bf16] [--matmul-bf16] [--matmul-int8] [--kv f32|f16|q8] [ID...]\n", argv[0]);
        return 2;
    }
    const std::string model_path = argv[1], out_dir = argv[2];
    std::vector<int32_t> tokens;
    bool last = false;
    long batch = 0, threads = 2, n_layers = -1;
    bool attn_bf16 = false, matmul_bf16 = false, matmul_int8 = false;
    lctx::KvType kv = lctx::KvType::F32;
    for (int i = 3; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&](const char *what) {
            if (i + 1 >= argc) throw std::runtime_error(std::string("missing value for ") + what);
            return argv[++i];
        };
        if (a == "--tokens") {
            std::ifstream f(next("--tokens"));
            if (!f) throw std::runtime_error("cannot read the tokens file");
            std::string w;
            while (f >> w) tokens.push_back(static_cast<int32_t>(parse_int(w.c_str(), "token id")));
        } else if (a == "--attn-bf16") {
            attn_bf16 = true;
        } else if (a == "--matmul-bf16") {
            matmul_bf16 = true;
        } else if (a == "--matmul-int8") {
            matmul_int8 = true;
        } else if (a == "--kv") {
            const std::string t = next("--kv");
            if (t == "f16") kv = lctx::KvType::F16;
            else if (t == "q8") kv = lctx::KvType::Q8;
            else if (t != "f32") throw std::runtime_error("--kv must be f32, f16 or q8");
        } else if (a == "--last") {
            last = true;
        } else if (a == "--batch") {
            batch = parse_int(next("--batch"), "batch size");
        } else if (a == "--threads") {
            threads = parse_int(next("--threads"), "thread count");
        } else if (a == "--n-layers") {
            n_layers = parse_int(next("--n-layers"), "layer count");
        } else {
            tokens.push_back(static_cast<int32_t>(parse_int(a.c_str(), "token id")));
        }
    }
    if (tokens.empty()) throw std::runtime_error("no tokens given");
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (batch <= 0) batch = n;
    if (threads < 1) threads = 1;

    auto model = lctx::Model::load_file(model_path, true, static_cast<int32_t>(threads));
    const lctx::Hparams &hp = model->hparams();
    const int32_t layers_run = n_layers < 0 ? hp.n_layer : static_cast<int32_t>(n_layers);
    std::unique_ptr<lctx::Backend> backend = lctx::make_cpu_backend(static_cast<int>(threads));
    if (attn_bf16 && !backend->set_attention_bf16(true)) throw std::runtime_error("no bf16 attention on this CPU");
    if (matmul_bf16 && !backend->set_matmul_precision(LCTX_PRECISION_BF16))
        throw std::runtime_error("no bf16 matmuls on this CPU");
    if (matmul_int8 && !backend->set_matmul_precision(LCTX_PRECISION_INT8))
        throw std::runtime_error("no int8 matmuls on this CPU");
    lctx::Forward fwd(*model, *backend);
    lctx::KvStore cache(*backend, hp, n, layers_run, kv);   // validates layers_run

    std::vector<float> hidden(static_cast<size_t>(layers_run) * n * hp.n_embd);
    // Rows arrive in token order for every layer (calls, and sub-batches
    // within a call): count the rows seen per layer.
    std::vector<int64_t> seen(static_cast<size_t>(layers_run), 0);
    lctx::ForwardHooks hooks;
    hooks.on_hidden = [&](int32_t layer, const float *h, int64_t n_tok) {
        int64_t &row = seen.at(static_cast<size_t>(layer));
        if (row + n_tok > n) throw std::runtime_error("more hidden rows than tokens");
        std::memcpy(hidden.data() + (static_cast<size_t>(layer) * n + row) * hp.n_embd, h,
                    static_cast<size_t>(n_tok * hp.n_embd) * sizeof(float));
        row += n_tok;
    };
    lctx::ForwardOptions opt;
    opt.n_layers = static_cast<int32_t>(n_layers);
    opt.hooks = &hooks;
    opt.logits = last ? lctx::LogitsMode::LAST : lctx::LogitsMode::ALL;

    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
    std::vector<float> all_logits, logits;
    for (int64_t offset = 0; offset < n; offset += batch) {
        const int64_t nb = std::min<int64_t>(batch, n - offset);
        if (last) opt.logits = offset + nb == n ? lctx::LogitsMode::LAST : lctx::LogitsMode::NONE;
        fwd.run(tokens.data() + offset, pos.data() + offset, nb, cache, opt, logits);
        if (!last || offset + nb == n) all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    }
    write_floats(out_dir + "/logits.f32", all_logits);
    write_floats(out_dir + "/hidden.f32", hidden);
    std::printf("%lld %d %d %d\n", (long long)n, hp.n_vocab, hp.n_embd, layers_run);
    return 0;
}

} // namespace

int main(int argc, char **argv) {
    try {
        return run(argc, argv);
    } catch (const lctx::Error &e) {
        std::fprintf(stderr, "error (status %d): %s\n", static_cast<int>(e.status()), e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
