// A loaded model: hyper-parameters, weight views into the GGUF data (kept in
// their quantized form), tokenizer and chat template. Immutable after load;
// shared by sessions on many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/ggml_type.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace lctx {

// A 2-D weight matrix as stored: n_rows rows of n_cols elements each
// (GGUF ne[0] = n_cols, ne[1] = n_rows), row-major, quantized by `type`.
// A 1-D tensor (norm weight) has n_rows = 1.
struct WeightView {
    GgmlType type = GgmlType::F32;
    int64_t n_cols = 0;
    int64_t n_rows = 0;
    size_t row_bytes = 0;
    const uint8_t *data = nullptr;
    bool empty() const { return data == nullptr; }
    const uint8_t *row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
};

enum class RopeLayout { NORMAL, NEOX };  // NORMAL: pairs (2i, 2i+1); NEOX: pairs (i, i + n_rot/2)
enum class RopeScaling { NONE, LINEAR, YARN };

struct Hparams {
    std::string arch;         // "llama"
    std::string name;
    int32_t n_layer = 0;
    int32_t n_embd = 0;
    int32_t n_head = 0;
    int32_t n_head_kv = 0;
    int32_t head_dim = 0;     // n_embd / n_head unless the file says otherwise
    int32_t n_ff = 0;
    int32_t n_vocab = 0;
    int32_t n_ctx_train = 0;
    float rms_eps = 1e-5f;
    // RoPE
    int32_t n_rot = 0;        // rotated dims per head (rope.dimension_count, default head_dim)
    float rope_base = 10000.0f;
    RopeLayout rope_layout = RopeLayout::NORMAL;
    RopeScaling rope_scaling = RopeScaling::NONE;
    float rope_freq_scale = 1.0f;    // 1 / scaling factor
    int32_t rope_orig_ctx = 0;       // YaRN: original context length
    float yarn_ext_factor = 0.0f;    // YaRN ramp mix (1 with YaRN scaling)
    float yarn_attn_factor = 1.0f;
    float yarn_beta_fast = 32.0f;
    float yarn_beta_slow = 1.0f;
};

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
