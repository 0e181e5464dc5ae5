// A loaded model: hyper-parameters, weight views into the GGUF data (kept in
// their quantized form), tokenizer and chat template. Immutable after load;
// shared by sessions on many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "common/model_types.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace lctx {

struct LayerWeights {
    WeightView attn_norm;   // [n_embd] F32
    WeightView wq;          // n_rows = n_head * head_dim, n_cols = n_embd
    WeightView wk;          // n_rows = n_head_kv * head_dim
    WeightView wv;          // n_rows = n_head_kv * head_dim
    WeightView wo;          // n_rows = n_embd, n_cols = n_head * head_dim
    WeightView ffn_norm;    // [n_embd]
    WeightView ffn_gate;    // n_rows = n_ff
    WeightView ffn_up;      // n_rows = n_ff
    WeightView ffn_down;    // n_rows = n_embd, n_cols = n_ff
    // phi3 stores q/k/v as one matrix and gate/up as one: wq..wv and
    // ffn_gate/ffn_up are then row ranges of those (same data).
    // qwen2 only: q/k/v biases [n_head * head_dim], [n_head_kv * head_dim] F32.
    WeightView bq, bk, bv;
    // gemma3, qwen3 (Q/K norms) and gemma2/3 (post norms); empty otherwise:
    // per-head Q/K norms [head_dim] and the norms applied to the attention
    // and FFN outputs before the residual add.
    WeightView q_norm, k_norm;
    WeightView attn_post_norm, ffn_post_norm;
};

class Model {
public:
    // Throws lctx::Error. n_threads <= 0: hardware concurrency.
    static std::unique_ptr<Model> load_file(const std::string &path, bool use_mmap, int32_t n_threads);
    static std::unique_ptr<Model> load_memory(const void *data, size_t size, int32_t n_threads);

    const Hparams &hparams() const { return hp_; }
    const GgufFile &gguf() const { return *file_; }
    const Tokenizer &tokenizer() const { return *tokenizer_; }
    const std::string &chat_template() const { return chat_template_; }
    int32_t n_threads() const { return n_threads_; }
    uint64_t n_params() const { return n_params_; }
    uint64_t size_bytes() const { return size_bytes_; }

    const WeightView &tok_embd() const { return tok_embd_; }    // n_rows = n_vocab
    const WeightView &output_norm() const { return output_norm_; }
    const WeightView &output() const { return output_; }        // tok_embd when tied
    const std::vector<LayerWeights> &layers() const { return layers_; }

private:
    Model() = default;
    void init(std::unique_ptr<GgufFile> file, int32_t n_threads);
    void read_rope_factors(const GgufFile &f);

    std::unique_ptr<GgufFile> file_;
    std::unique_ptr<Tokenizer> tokenizer_;
    Hparams hp_;
    std::string chat_template_;
    int32_t n_threads_ = 1;
    uint64_t n_params_ = 0;
    uint64_t size_bytes_ = 0;
    WeightView tok_embd_, output_norm_, output_;
    std::vector<LayerWeights> layers_;
};

} // namespace lctx
