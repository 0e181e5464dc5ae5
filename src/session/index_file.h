// REFORM index files: a document encoded once, questioned many times.
// Layout (little-endian), version 1:
//   "LCTXRIDX" | u32 version | u32 reserved | u64 file size | u64 model fingerprint
//   | u32 n + profile JSON | i64 chunk, budget, sink, recent, obs | u32 accumulate
//   | i32 n_layer, n_head_kv, head_dim, dim, exit layer | i64 n_tokens, n_slots
//   | i32 ids[n_tokens] | u16 embeddings[n_tokens][dim] (fp16)
//   | per layer < exit, per KV head: f32 K[n_slots][head_dim] (after RoPE at the
//     slot's position), f32 V[n_slots][head_dim], i64 orig[n_slots], f32 score[n_slots]
//   | u64 checksum (Hash64 of every byte before it)
// Readers check the size first (truncation), the fingerprint (another model),
// every count and index, and the checksum (any altered byte) before the
// session is used.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "session/embedding_store.h"
#include "session/head_profile.h"
#include "session/reform_encoder.h"

namespace lctx {

constexpr uint32_t kReformIndexVersion = 1;

void write_reform_index(const std::string &path, const Model &model, const HeadProfile &profile,
                        const std::vector<int32_t> &ids, const EmbeddingStore &store, const ReformEncoder &enc);

struct ReformIndexHeader {
    std::string path;
    HeadProfile profile;
    EncoderConfig cfg;
    int64_t n_tokens = 0, n_slots = 0;
    int32_t dim = 0, exit_layer = 0;
    // The open file positioned after the header, and the running checksum.
    std::shared_ptr<std::FILE> file;
    std::shared_ptr<void> hash;   // Hash64 state
    int32_t n_vocab = 0;
};

// Reads and checks the header against `model`.
ReformIndexHeader read_reform_index_header(const std::string &path, const Model &model);
// Reads the rest into an encoder made from header.cfg / header.profile and an
// empty store of its dimension; verifies the checksum at the end.
void read_reform_index_body(ReformIndexHeader &h, std::vector<int32_t> &ids, EmbeddingStore &store,
                            ReformEncoder &enc);

} // namespace lctx
