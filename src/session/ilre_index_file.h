// ILRe index files (payload kind ILRE of the index container, index_file.h;
// docs/index-format.md): a document encoded once, questioned many times.
// Payload (little-endian):
//   u64 model fingerprint | i32 retrieval layer, n_layer, n_head_kv, head_dim
//   | i64 sink, window, chunk | u32 dca | i64 n_tokens, n_slots
//   | i32 ids[n_tokens]
//   | per KV head: u16 keys[n_tokens][head_dim] (fp16, rotated at the token's position)
//   | per layer < retrieval layer, per KV head: f32 K[n_slots][head_dim] (as
//     stored: rotated at the slot's position), f32 V[n_slots][head_dim],
//     i32 position[n_slots]
//   | i64 n_dca_sinks | per layer < retrieval layer, per KV head:
//     f32 K[n_dca_sinks][head_dim] (pre-RoPE), f32 V[n_dca_sinks][head_dim]
// The container's checksum covers everything; the reader checks the
// fingerprint, every count against the model and the bytes left.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"
#include "session/ilre_encoder.h"

namespace lctx {

void write_ilre_index(const std::string &path, const Model &model, int32_t retrieval_layer,
                      const std::vector<int32_t> &ids, const IlreEncoder &enc);

// What a file says about the encoding (read before the encoder is made).
struct IlreIndexInfo {
    int32_t retrieval_layer = 0;
    IlreEncoderConfig cfg;
};

// Reads the whole file: info, then the document ids and the encoder state
// (make_encoder builds an encoder for the info; it is then filled).
IlreIndexInfo read_ilre_index(const std::string &path, const Model &model, std::vector<int32_t> &ids,
                              const std::function<IlreEncoder &(const IlreIndexInfo &)> &make_encoder);

} // namespace lctx
