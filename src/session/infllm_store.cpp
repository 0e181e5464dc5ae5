#include "session/infllm_store.h"

#include <new>

#include "common/error.h"

namespace lctx {

void Fp16Rows::resize(int64_t n) {
    if (n < 0) fail(LCTX_ERR_INTERNAL, "Fp16Rows: negative size %lld", (long long)n);
    const size_t pages = static_cast<size_t>((n + page_rows_ - 1) / page_rows_);
    try {
        pages_.reserve(pages);
        charges_.reserve(pages);
        const size_t page_bytes = static_cast<size_t>(page_rows_ * width_) * sizeof(uint16_t);
        while (pages_.size() < pages) {
            MemoryCharge c(budget_, page_bytes, "INFLLM: a page of the KV memory store");
            pages_.emplace_back(new uint16_t[static_cast<size_t>(page_rows_ * width_)]);
            charges_.push_back(std::move(c));
        }
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "INFLLM: cannot grow the KV memory store to %lld tokens (%.1f MiB per layer "
             "for keys or values)", (long long)n, double(n) * double(width_) * 2.0 / (1024.0 * 1024.0));
    }
    size_ = n;   // pages beyond n are kept for reuse
}

} // namespace lctx
