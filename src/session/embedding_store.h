// REFORM's per-token embeddings: one fp16 row of `dim` numbers per document
// token, kept in fixed blocks of about 32 MiB so that growing to millions of
// tokens never copies (or transiently doubles) the store.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/memory_budget.h"

namespace lctx {

class EmbeddingStore {
public:
    // budget (may be NULL): the session's max_memory, charged block by block.
    explicit EmbeddingStore(int32_t dim, MemoryBudget *budget = nullptr);

    int32_t dim() const { return dim_; }
    int64_t size() const { return size_; }          // committed rows
    int64_t block_rows() const { return block_rows_; }
    size_t memory_bytes() const;

    // Makes rows [0, n) writable (allocating blocks); size() is unchanged.
    void reserve(int64_t n);
    // Rows [size(), n) become part of the store (they must have been written).
    void commit(int64_t n);
    // Drops rows >= n (blocks stay allocated).
    void truncate(int64_t n);

    uint16_t *row(int64_t t) { return blocks_[t / block_rows_].get() + (t % block_rows_) * dim_; }
    const uint16_t *row(int64_t t) const { return blocks_[t / block_rows_].get() + (t % block_rows_) * dim_; }
    // Writes v[0..n) as fp16 at columns [col, col + n) of row t.
    void write(int64_t t, int32_t col, const float *v, int32_t n);
    // Rows [t0, t0 + n) lie contiguously when they do not cross a block.
    int64_t contiguous_from(int64_t t) const { return block_rows_ - t % block_rows_; }

private:
    int32_t dim_;
    int64_t block_rows_;
    int64_t size_ = 0;
    std::vector<std::unique_ptr<uint16_t[]>> blocks_;
    MemoryBudget *budget_;
    std::vector<MemoryCharge> charges_;   // one per block
};

} // namespace lctx
