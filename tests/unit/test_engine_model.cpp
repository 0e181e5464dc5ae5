// Model loading: hyper-parameters, weight views and the errors for bad files.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine_tiny_model.h"
#include "model/model.h"

using namespace lctx;
using engine_test::make_tiny_llama;
using engine_test::TinyOptions;

namespace {

std::unique_ptr<Model> load(const TinyOptions &o) {
    const std::vector<uint8_t> bytes = make_tiny_llama(o);
    return Model::load_memory(bytes.data(), bytes.size(), 1);
}

// Loads and returns the error (status, message); fails the test if it loads.
std::pair<lctx_status, std::string> load_error(const TinyOptions &o) {
    try {
        load(o);
    } catch (const Error &e) {
        return {e.status(), e.what()};
    }
    ADD_FAILURE() << "the model loaded";
    return {LCTX_OK, ""};
}

} // namespace

TEST(EngineModel, LoadsTinyLlama) {
    auto m = load({});
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.arch, "llama");
    EXPECT_EQ(hp.name, "tiny");
    EXPECT_EQ(hp.n_layer, 2);
    EXPECT_EQ(hp.n_embd, 64);
    EXPECT_EQ(hp.n_head, 4);
    EXPECT_EQ(hp.n_head_kv, 2);
    EXPECT_EQ(hp.head_dim, 16);
    EXPECT_EQ(hp.n_ff, 128);
    EXPECT_EQ(hp.n_vocab, 300);
    EXPECT_EQ(hp.n_ctx_train, 4096);
    EXPECT_EQ(hp.n_rot, 16);
    EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
    EXPECT_FLOAT_EQ(hp.rope_base, 10000.0f);
    EXPECT_EQ(hp.rope_layout, RopeLayout::NORMAL);
    EXPECT_EQ(hp.rope_scaling, RopeScaling::NONE);
    EXPECT_FLOAT_EQ(hp.rope_freq_scale, 1.0f);
    ASSERT_EQ(m->layers().size(), 2u);
    const LayerWeights &L = m->layers()[1];
    EXPECT_EQ(L.wq.n_rows, 64);
    EXPECT_EQ(L.wk.n_rows, 32);
    EXPECT_EQ(L.wv.n_cols, 64);
    EXPECT_EQ(L.wo.n_cols, 64);
    EXPECT_EQ(L.ffn_down.n_cols, 128);
    EXPECT_EQ(L.ffn_gate.n_rows, 128);
    EXPECT_EQ(L.attn_norm.n_rows, 1);
    EXPECT_EQ(L.wq.row_bytes, 64 * sizeof(float));
    EXPECT_NE(m->output().data, m->tok_embd().data);  // untied
    EXPECT_EQ(m->tok_embd().n_rows, 300);
    // 300x64 embd + 300x64 output + 64 norm + 2 x (2x64 norms + 64x64 q + 2x32x64 kv + 64x64 o + 3x128x64)
    const uint64_t per_layer = 2 * 64 + 64 * 64 + 2 * 32 * 64 + 64 * 64 + 3 * 128 * 64;
    EXPECT_EQ(m->n_params(), 2u * 300 * 64 + 64 + 2 * per_layer);
    EXPECT_EQ(m->size_bytes(), m->n_params() * 4);
    EXPECT_EQ(m->tokenizer().n_vocab(), 300);
    EXPECT_EQ(m->chat_template(), "");
    EXPECT_GE(m->n_threads(), 1);
}

TEST(EngineModel, TiedOutputUsesEmbeddings) {
    TinyOptions o;
    o.tied = true;
    o.chat_template = "{{ messages }}";
    auto m = load(o);
    EXPECT_EQ(m->output().data, m->tok_embd().data);
    EXPECT_EQ(m->output().n_rows, 300);
    EXPECT_EQ(m->chat_template(), "{{ messages }}");
}

TEST(EngineModel, RopeScaling) {
    TinyOptions o;
    o.scaling = "linear";
    o.scaling_factor = 4.0f;
    auto m = load(o);
    EXPECT_EQ(m->hparams().rope_scaling, RopeScaling::LINEAR);
    EXPECT_FLOAT_EQ(m->hparams().rope_freq_scale, 0.25f);

    o.scaling = "yarn";
    m = load(o);
    EXPECT_EQ(m->hparams().rope_scaling, RopeScaling::YARN);
    EXPECT_FLOAT_EQ(m->hparams().rope_freq_scale, 0.25f);
    EXPECT_EQ(m->hparams().rope_orig_ctx, 256);
    EXPECT_FLOAT_EQ(m->hparams().yarn_ext_factor, 1.0f);
    EXPECT_FLOAT_EQ(m->hparams().yarn_beta_fast, 32.0f);

    o.scaling = "none";
    m = load(o);
    EXPECT_EQ(m->hparams().rope_scaling, RopeScaling::NONE);
    EXPECT_FLOAT_EQ(m->hparams().rope_freq_scale, 1.0f);

    o.scaling = "longrope";
    auto [st, msg] = load_error(o);
    EXPECT_EQ(st, LCTX_ERR_UNSUPPORTED);
    EXPECT_NE(msg.find("longrope"), std::string::npos) << msg;
}

TEST(EngineModel, UnsupportedArchitecture) {
    TinyOptions o;
    o.arch = "gpt2";
    auto [st, msg] = load_error(o);
    EXPECT_EQ(st, LCTX_ERR_UNSUPPORTED);
    EXPECT_EQ(msg, "architecture 'gpt2' is not supported (llama, gemma2, gemma3, qwen2, qwen3, phi3)");
}

TEST(EngineModel, MissingTensor) {
    TinyOptions o;
    o.skip_tensor = "blk.1.attn_q.weight";
    auto [st, msg] = load_error(o);
    EXPECT_EQ(st, LCTX_ERR_FORMAT);
    EXPECT_EQ(msg, "missing tensor 'blk.1.attn_q.weight'");

    o.skip_tensor = "output_norm.weight";
    auto [st2, msg2] = load_error(o);
    EXPECT_EQ(st2, LCTX_ERR_FORMAT);
    EXPECT_EQ(msg2, "missing tensor 'output_norm.weight'");
}

TEST(EngineModel, WrongShape) {
    TinyOptions o;
    o.bad_tensor = "blk.0.attn_k.weight";
    auto [st, msg] = load_error(o);
    EXPECT_EQ(st, LCTX_ERR_FORMAT);
    EXPECT_NE(msg.find("blk.0.attn_k.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[64, 33, 1, 1]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected [64, 32]"), std::string::npos) << msg;

    o.bad_tensor = "token_embd.weight";
    auto [st2, msg2] = load_error(o);
    EXPECT_EQ(st2, LCTX_ERR_FORMAT);
    EXPECT_NE(msg2.find("expected [64, 300]"), std::string::npos) << msg2;
}

TEST(EngineModel, BadHyperParameter) {
    TinyOptions o;
    o.n_layer = 0;  // out of range
    auto [st, msg] = load_error(o);
    EXPECT_EQ(st, LCTX_ERR_FORMAT);
    EXPECT_NE(msg.find("block_count"), std::string::npos) << msg;
}

TEST(EngineModel, LoadFileErrors) {
    try {
        Model::load_file("/nonexistent/dir/model.gguf", true, 1);
        FAIL() << "loaded";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LCTX_ERR_IO) << e.what();
    }
    EXPECT_THROW(Model::load_memory(nullptr, 10, 1), Error);
}

TEST(EngineModel, Stories260K) {
    const std::string path = engine_test::stories260k_path();
    auto m = Model::load_file(path, true, 2);
    const Hparams &hp = m->hparams();
    EXPECT_EQ(hp.n_layer, 5);
    EXPECT_EQ(hp.n_embd, 64);
    EXPECT_EQ(hp.n_head, 8);
    EXPECT_EQ(hp.n_head_kv, 4);
    EXPECT_EQ(hp.head_dim, 8);
    EXPECT_EQ(hp.n_ff, 172);
    EXPECT_EQ(hp.n_vocab, 512);
    EXPECT_EQ(hp.n_ctx_train, 2048);
    EXPECT_EQ(m->n_threads(), 2);
    EXPECT_NE(m->output().data, m->tok_embd().data);
}
