// lctx index files: a document encoded once, questioned many times.
// docs/index-format.md describes the format. Every index file is one
// container (little-endian), version 2:
//   "LCTXRIDX" | u32 version | u32 payload kind | u64 file size | payload
//   | u64 checksum (Hash64 of every byte before it: header and payload)
// IndexReader checks the magic, version, kind and size against the file,
// then the checksum over the whole file, before the payload is parsed: no
// allocation sized by the file happens before every byte is known to be
// what lctx wrote, and every payload read is bounded by the bytes left.
// IndexWriter writes a unique temporary file in the target's directory
// (created with O_EXCL: no symlink is followed), fsyncs it, renames it over
// the target and fsyncs the directory: a save that fails or is interrupted
// leaves the previous file whole.
//
// The REFORM payload (kind 1):
//   u64 model fingerprint | u32 n + profile JSON | i64 chunk, budget, sink, recent, obs | u32 accumulate
//   | i32 n_layer, n_head_kv, head_dim, dim, exit layer | i64 n_tokens, n_slots
//   | i32 ids[n_tokens] | u16 embeddings[n_tokens][dim] (fp16)
//   | per layer < exit, per KV head: f32 K[n_slots][head_dim] (after RoPE at the
//     slot's position), f32 V[n_slots][head_dim], i64 orig[n_slots], f32 score[n_slots]
// Readers check the fingerprint (another model), every count and index
// against the model and the bytes left.
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

constexpr uint32_t kIndexVersion = 2;   // 1: REFORM only, checksum checked after the payload was allocated

// What an index file holds (the container's payload kind). Append-only.
enum class IndexKind : uint32_t { REFORM = 1, ILRE = 2 };
const char *index_kind_name(IndexKind kind);
// The payload kind of an index file, from its first bytes (magic and version
// checked, LCTX_ERR_IO / LCTX_ERR_FORMAT otherwise); the rest is verified by
// IndexReader. Lets lctx_session_load_index pick the method of a file.
IndexKind read_index_kind(const std::string &path);

// Writes one index file durably (see above). Nothing is visible under
// `path` until commit() returns; the destructor removes the temporary file
// of a writer that was not committed.
class IndexWriter {
public:
    // payload_bytes: the exact number of payload bytes that will be written.
    IndexWriter(const std::string &path, IndexKind kind, uint64_t payload_bytes);
    ~IndexWriter();
    IndexWriter(const IndexWriter &) = delete;
    IndexWriter &operator=(const IndexWriter &) = delete;

    void bytes(const void *p, size_t len);
    template <class T> void put(const T &v) { bytes(&v, sizeof v); }
    // Checksum, flush, fsync, rename over the target, fsync of the directory.
    void commit();
    const std::string &temp_path() const { return tmp_; }

private:
    std::string path_, tmp_;
    std::FILE *f_ = nullptr;
    std::shared_ptr<void> hash_;   // Hash64 state
    uint64_t written_ = 0, total_ = 0;
    bool committed_ = false;
};

// Reads one index file: the constructor verifies the container (magic,
// version, kind, size, checksum) in one streaming pass with a fixed buffer.
class IndexReader {
public:
    IndexReader(const std::string &path, IndexKind kind);
    // Reads len payload bytes; LCTX_ERR_FORMAT when fewer are left.
    void bytes(void *p, size_t len);
    template <class T> T get() {
        T v;
        bytes(&v, sizeof v);
        return v;
    }
    uint64_t left() const { return left_; }   // payload bytes not read yet
    const std::string &path() const { return path_; }

private:
    std::string path_;
    std::shared_ptr<std::FILE> file_;
    uint64_t left_ = 0;
};

void write_reform_index(const std::string &path, const Model &model, const HeadProfile &profile,
                        const std::vector<int32_t> &ids, const EmbeddingStore &store, const ReformEncoder &enc);

struct ReformIndexHeader {
    std::string path;
    HeadProfile profile;
    EncoderConfig cfg;
    int64_t n_tokens = 0, n_slots = 0;
    int32_t dim = 0, exit_layer = 0;
    // The verified file, positioned after the header.
    std::shared_ptr<IndexReader> reader;
    int32_t n_vocab = 0;
};

// Reads and checks the header against `model`.
ReformIndexHeader read_reform_index_header(const std::string &path, const Model &model);
// Reads the rest into an encoder made from header.cfg / header.profile and an
// empty store of its dimension.
void read_reform_index_body(ReformIndexHeader &h, std::vector<int32_t> &ids, EmbeddingStore &store,
                            ReformEncoder &enc);

} // namespace lctx
