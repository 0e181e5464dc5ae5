// A session's backend wrapped so that every buffer it allocates is charged
// to the session's memory budget (lctx_session_params.max_memory) first and
// released when the buffer is freed. budget_of() finds the budget behind a
// Backend& for the host-side stores of the methods (nullptr: none).
#pragma once

#include <memory>

#include "backend/forwarding_backend.h"
#include "common/memory_budget.h"

namespace lctx {

class BudgetBackend final : public ForwardingBackend {
public:
    BudgetBackend(std::unique_ptr<Backend> inner, MemoryBudget &budget)
        : ForwardingBackend(inner.get()), owned_(std::move(inner)), budget_(budget) {}

    std::unique_ptr<Buffer> alloc(size_t bytes) override {
        MemoryCharge charge(&budget_, bytes, "a backend buffer");
        return std::make_unique<Charged>(inner()->alloc(bytes), std::move(charge));
    }
    MemoryBudget &budget() const { return budget_; }

private:
    struct Charged final : Buffer {
        Charged(std::unique_ptr<Buffer> b, MemoryCharge c) : buf(std::move(b)), charge(std::move(c)) {}
        void *data() override { return buf->data(); }
        size_t size() const override { return buf->size(); }
        std::unique_ptr<Buffer> buf;
        MemoryCharge charge;
    };
    std::unique_ptr<Backend> owned_;
    MemoryBudget &budget_;
};

inline MemoryBudget *budget_of(const Backend &backend) {
    const auto *b = dynamic_cast<const BudgetBackend *>(&backend);
    return b ? &b->budget() : nullptr;
}

} // namespace lctx
