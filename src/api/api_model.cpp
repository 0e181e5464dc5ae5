// Model loading and information getters.
#include <cstring>
#include <filesystem>
#include <thread>

#include "api/handles.h"
#include "common/memory_budget.h"
#include "common/params_abi.h"
#include "model/chat_template.h"

using lctx::api::guarded;
using lctx::api::require;

namespace {

lctx_model_params resolve(const lctx_model_params *params) {
    return lctx::read_params(params, lctx_model_default_params, "lctx_model_params", "lctx_model_default_params");
}

// lctx_model_params.max_memory: the model's data (file or buffer) must fit.
void check_model_memory(const lctx_model_params &p, uint64_t bytes, const char *what) {
    if (p.max_memory == 0) return;
    lctx::MemoryBudget budget(p.max_memory);
    budget.check(bytes, what);
}

int32_t resolve_threads(int32_t n) {
    if (n > 0) return n;
    unsigned hw = std::thread::hardware_concurrency();
    return hw ? static_cast<int32_t>(hw) : 1;
}

const lctx::Hparams *hp(const lctx_model *m) { return m && m->model ? &m->model->hparams() : nullptr; }

} // namespace

extern "C" {

LCTX_API void lctx_model_default_params(lctx_model_params *out) {
    if (!out) return;
    *out = lctx_model_params{};
    out->struct_size = sizeof(lctx_model_params);
    out->n_threads = 0;
    out->use_mmap = true;
}

LCTX_API lctx_status lctx_model_load(const char *path, const lctx_model_params *params, lctx_model **out) {
    if (out) *out = nullptr;
    return guarded(nullptr, [&] {
        require(out, "lctx_model_load", "out");
        require(path, "lctx_model_load", "path");
        lctx_model_params p = resolve(params);
        if (p.max_memory) {
            std::error_code ec;
            const uint64_t size = std::filesystem::file_size(path, ec);
            if (!ec) check_model_memory(p, size, lctx::format("model '%s'", path).c_str());
        }
        auto m = std::make_unique<lctx_model>();
        m->model = lctx::Model::load_file(path, p.use_mmap, resolve_threads(p.n_threads));
        m->backend = p.backend ? p.backend : "";
        *out = m.release();
    });
}

LCTX_API lctx_status lctx_model_load_from_memory(const void *data, size_t size, const lctx_model_params *params,
                                                 lctx_model **out) {
    if (out) *out = nullptr;
    return guarded(nullptr, [&] {
        require(out, "lctx_model_load_from_memory", "out");
        require(data, "lctx_model_load_from_memory", "data");
        lctx_model_params p = resolve(params);
        check_model_memory(p, size, "the model buffer (copied)");
        auto m = std::make_unique<lctx_model>();
        m->model = lctx::Model::load_memory(data, size, resolve_threads(p.n_threads));
        m->backend = p.backend ? p.backend : "";
        *out = m.release();
    });
}

LCTX_API void lctx_model_free(lctx_model *model) { delete model; }

LCTX_API const char *lctx_model_architecture(const lctx_model *m) { return hp(m) ? hp(m)->arch.c_str() : ""; }
LCTX_API const char *lctx_model_name(const lctx_model *m) { return hp(m) ? hp(m)->name.c_str() : ""; }
LCTX_API int32_t lctx_model_n_layer(const lctx_model *m) { return hp(m) ? hp(m)->n_layer : 0; }
LCTX_API int32_t lctx_model_n_head(const lctx_model *m) { return hp(m) ? hp(m)->n_head : 0; }
LCTX_API int32_t lctx_model_n_head_kv(const lctx_model *m) { return hp(m) ? hp(m)->n_head_kv : 0; }
LCTX_API int32_t lctx_model_head_dim(const lctx_model *m) { return hp(m) ? hp(m)->head_dim : 0; }
LCTX_API int32_t lctx_model_n_embd(const lctx_model *m) { return hp(m) ? hp(m)->n_embd : 0; }
LCTX_API int32_t lctx_model_n_vocab(const lctx_model *m) { return hp(m) ? hp(m)->n_vocab : 0; }
LCTX_API int32_t lctx_model_n_ctx_train(const lctx_model *m) { return hp(m) ? hp(m)->n_ctx_train : 0; }
LCTX_API uint64_t lctx_model_n_params(const lctx_model *m) { return m && m->model ? m->model->n_params() : 0; }
LCTX_API uint64_t lctx_model_size_bytes(const lctx_model *m) {
    return m && m->model ? m->model->size_bytes() : 0;
}

LCTX_API lctx_token lctx_model_token_bos(const lctx_model *m) { return m ? m->model->tokenizer().bos() : -1; }
LCTX_API lctx_token lctx_model_token_eos(const lctx_model *m) { return m ? m->model->tokenizer().eos() : -1; }
LCTX_API lctx_token lctx_model_token_eot(const lctx_model *m) { return m ? m->model->tokenizer().eot() : -1; }
LCTX_API lctx_token lctx_model_token_pad(const lctx_model *m) { return m ? m->model->tokenizer().pad() : -1; }

LCTX_API bool lctx_token_is_eog(const lctx_model *m, lctx_token token) {
    if (!m || token < 0 || token >= m->model->tokenizer().n_vocab()) return false;
    return m->model->tokenizer().is_eog(token);
}

LCTX_API const char *lctx_model_chat_template(const lctx_model *m) {
    return m ? m->model->chat_template().c_str() : "";
}

LCTX_API int32_t lctx_model_meta_string(const lctx_model *m, const char *key, char *buf, size_t buf_size) {
    if (!m || !key) return -1;
    const lctx::GgufValue *v = m->model->gguf().find(key);
    if (!v) return -1;
    std::string s;
    try {
        s = v->type == lctx::GgufValueType::STRING ? v->str : v->to_string();
    } catch (...) {
        return -1;
    }
    if (buf && buf_size > 0) {
        size_t n = std::min(s.size(), buf_size - 1);
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    }
    return static_cast<int32_t>(std::min<size_t>(s.size(), INT32_MAX));
}

} // extern "C"
