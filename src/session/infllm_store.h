// Append-only table of fp16 rows in fixed-size pages: the InfLLM memory
// store grows with the document without reallocating (and transiently
// doubling) what it already holds.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/memory_budget.h"

namespace lctx {

class Fp16Rows {
public:
    // budget (may be NULL): the session's max_memory, charged page by page.
    explicit Fp16Rows(int64_t width, MemoryBudget *budget = nullptr, int64_t page_rows = 4096)
        : width_(width), page_rows_(page_rows), budget_(budget) {}

    int64_t size() const { return size_; }
    int64_t width() const { return width_; }
    // Grows (allocating pages; Error LCTX_ERR_OUT_OF_MEMORY if that fails,
    // the table then unchanged) or shrinks to n rows.
    void resize(int64_t n);
    uint16_t *row(int64_t t) { return pages_[t / page_rows_].get() + (t % page_rows_) * width_; }
    const uint16_t *row(int64_t t) const { return pages_[t / page_rows_].get() + (t % page_rows_) * width_; }
    size_t bytes() const { return pages_.size() * static_cast<size_t>(page_rows_ * width_) * sizeof(uint16_t); }

private:
    int64_t width_, page_rows_, size_ = 0;
    std::vector<std::unique_ptr<uint16_t[]>> pages_;
    MemoryBudget *budget_;
    std::vector<MemoryCharge> charges_;   // one per page
};

} // namespace lctx
