// ReAttention's K/V store: the keys (before RoPE) and values of every token
// of every layer, which each step scores and gathers from. Tokens are kept in
// blocks of kBlockTokens; a block holds, per layer and KV head, the block's
// key rows then its value rows, so the keys one (layer, head) scores lie
// contiguously within a block. Blocks live in RAM up to a byte limit and then
// in a memory-mapped temporary file (unlinked as soon as it is created, so it
// disappears with the session, even after a crash). Element type f32 or f16.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "common/memory_budget.h"
#include "model/model.h"

namespace lctx {

class ReattentionStore {
public:
    static constexpr int64_t kBlockTokens = 1024;

    // max_ram: bytes of blocks kept in RAM (0: no limit, never a file);
    // spill_dir: where the file goes. budget (may be NULL): RAM blocks are charged to it.
    ReattentionStore(const Hparams &hp, KvType type, MemoryBudget *budget, uint64_t max_ram, std::string spill_dir);
    ~ReattentionStore();
    ReattentionStore(const ReattentionStore &) = delete;
    ReattentionStore &operator=(const ReattentionStore &) = delete;

    KvType type() const { return type_; }
    int64_t size() const { return size_; }   // committed tokens
    uint64_t ram_bytes() const { return ram_bytes_; }
    uint64_t file_bytes() const { return file_bytes_; }

    // Blocks for tokens [0, n); throws LCTX_ERR_OUT_OF_MEMORY (RAM, max_memory
    // or disk) with nothing changed.
    void reserve(int64_t n);
    // Writes tokens [t0, t0 + n) of `layer` from rows of n_head_kv * head_dim
    // floats (k and v, ld floats apart) into reserved blocks.
    void write(int32_t layer, int64_t t0, int64_t n, const float *k, const float *v, int64_t ld);
    void commit(int64_t n);     // tokens [size(), n) were written for every layer
    void truncate(int64_t n);   // drops tokens >= n (blocks stay)

    // Row t of the keys / values of (layer, head); rows stay contiguous up to
    // the end of t's block (contiguous_from).
    const void *keys(int32_t layer, int32_t head, int64_t t) const { return row(layer, head, 0, t); }
    const void *values(int32_t layer, int32_t head, int64_t t) const { return row(layer, head, 1, t); }
    static int64_t contiguous_from(int64_t t) { return kBlockTokens - t % kBlockTokens; }
    // Tokens tok[0..n) of `layer` as f32 rows of n_head_kv * head_dim (ld floats apart).
    void read(int32_t layer, const int64_t *tok, int64_t n, float *k, float *v, int64_t ld) const;

private:
    struct Block {
        uint8_t *data = nullptr;
        bool mapped = false;   // in the file (munmap) or RAM (free)
        MemoryCharge charge;
    };
    size_t esize() const { return kv_type_size(type_); }
    size_t region_bytes() const { return static_cast<size_t>(kBlockTokens) * head_dim_ * esize(); }
    size_t block_bytes() const { return region_bytes() * 2 * n_layer_ * n_kv_; }
    const void *row(int32_t layer, int32_t head, int kind, int64_t t) const {
        const Block &b = blocks_[static_cast<size_t>(t / kBlockTokens)];
        return b.data + ((static_cast<size_t>(layer) * n_kv_ + head) * 2 + kind) * region_bytes() +
               static_cast<size_t>(t % kBlockTokens) * head_dim_ * esize();
    }
    void *row(int32_t layer, int32_t head, int kind, int64_t t) {
        return const_cast<void *>(static_cast<const ReattentionStore *>(this)->row(layer, head, kind, t));
    }
    Block new_block();

    int32_t n_layer_, n_kv_, head_dim_;
    KvType type_;
    MemoryBudget *budget_;
    uint64_t max_ram_;
    std::string spill_dir_;
    int fd_ = -1;                 // the spill file, once needed
    uint64_t ram_bytes_ = 0, file_bytes_ = 0;
    int64_t size_ = 0;
    std::vector<Block> blocks_;
};

} // namespace lctx
