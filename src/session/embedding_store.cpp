#include "session/embedding_store.h"

#include <algorithm>
#include <new>

#include "common/error.h"
#include "common/ggml_type.h"

namespace lctx {

EmbeddingStore::EmbeddingStore(int32_t dim, MemoryBudget *budget) : dim_(dim), budget_(budget) {
    if (dim <= 0) fail(LCTX_ERR_INVALID_ARG, "embedding store: dimension %d must be positive", dim);
    block_rows_ = std::max<int64_t>(1, (int64_t(32) << 20) / (int64_t(dim) * 2));
}

size_t EmbeddingStore::memory_bytes() const {
    return blocks_.size() * static_cast<size_t>(block_rows_) * static_cast<size_t>(dim_) * sizeof(uint16_t);
}

void EmbeddingStore::reserve(int64_t n) {
    const int64_t need = (n + block_rows_ - 1) / block_rows_;
    try {
        const size_t block_bytes = static_cast<size_t>(block_rows_) * static_cast<size_t>(dim_) * sizeof(uint16_t);
        if (budget_ && need > static_cast<int64_t>(blocks_.size()))
            budget_->check(block_bytes * static_cast<size_t>(need - static_cast<int64_t>(blocks_.size())),
                           "the REFORM embedding store");
        while (static_cast<int64_t>(blocks_.size()) < need) {
            MemoryCharge c(budget_, block_bytes, "a block of the REFORM embedding store");
            blocks_.emplace_back(new uint16_t[static_cast<size_t>(block_rows_) * static_cast<size_t>(dim_)]);
            charges_.push_back(std::move(c));
        }
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot grow the embedding store to %lld tokens x %d (fp16)", (long long)n,
             dim_);
    }
}

void EmbeddingStore::commit(int64_t n) {
    if (n < size_ || n > static_cast<int64_t>(blocks_.size()) * block_rows_)
        fail(LCTX_ERR_INTERNAL, "embedding store: commit of %lld rows (size %lld)", (long long)n, (long long)size_);
    size_ = n;
}

void EmbeddingStore::truncate(int64_t n) { size_ = std::clamp<int64_t>(n, 0, size_); }

void EmbeddingStore::write(int64_t t, int32_t col, const float *v, int32_t n) {
    uint16_t *r = row(t) + col;
    for (int32_t i = 0; i < n; ++i) r[i] = fp32_to_fp16(v[i]);
}

} // namespace lctx
