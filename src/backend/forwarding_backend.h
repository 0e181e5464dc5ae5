// A backend that hands every call to another one: the base of wrappers that
// change one thing (the registry's owner of a module's backend, which frees
// it through the module; the test module's renamed CPU backend).
#pragma once

#include "backend/backend.h"

namespace lctx {

class ForwardingBackend : public Backend {
public:
    explicit ForwardingBackend(Backend *inner) : in_(inner) {}

    const char *name() const override { return in_->name(); }
    std::string description() const override { return in_->description(); }
    int n_threads() const override { return in_->n_threads(); }
    std::unique_ptr<Buffer> alloc(size_t bytes) override { return in_->alloc(bytes); }
    bool host_memory() const override { return in_->host_memory(); }
    void to_host(void *d, const void *s, size_t n) override { in_->to_host(d, s, n); }
    void from_host(void *d, const void *s, size_t n) override { in_->from_host(d, s, n); }
    void copy(void *d, const void *s, size_t n) override { in_->copy(d, s, n); }
    void prepare(const Model &model) override { in_->prepare(model); }
    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override {
        in_->parallel_for(n, fn);
    }
    void get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) override {
        in_->get_rows(W, ids, n, out);
    }
    void rms_norm(const float *x, const WeightView &w, float *y, int64_t rows, int64_t n, float eps) override {
        in_->rms_norm(x, w, y, rows, n, eps);
    }
    void matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) override {
        in_->matmul(W, x, ldx, n_tok, y);
    }
    void matmul_multi(const MatmulJob *jobs, int n, const float *x, int64_t ldx, int64_t n_tok) override {
        in_->matmul_multi(jobs, n, x, ldx, n_tok);
    }
    void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t heads, const int32_t *pos) override {
        in_->rope(hp, x, ld, n_tok, heads, pos);
    }
    void swiglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) override {
        in_->swiglu(g, u, o, rows, n);
    }
    void geglu(const float *g, const float *u, float *o, int64_t rows, int64_t n) override {
        in_->geglu(g, u, o, rows, n);
    }
    void scale(float *x, float s, int64_t n) override { in_->scale(x, s, n); }
    void add(float *x, const float *y, int64_t n) override { in_->add(x, y, n); }
    void add_bias(float *x, const WeightView &b, int64_t n_rows) override { in_->add_bias(x, b, n_rows); }
    void attention(const AttentionArgs &a) override { in_->attention(a); }
    bool set_attention_bf16(bool on) override { return in_->set_attention_bf16(on); }
    bool set_matmul_precision(lctx_precision p) override { return in_->set_matmul_precision(p); }
    bool supports_kv_type(KvType t) const override { return in_->supports_kv_type(t); }
    void gather_rows(KvType t, void *d, const void *s, const int64_t *idx, int64_t n, int64_t row) override {
        in_->gather_rows(t, d, s, idx, n, row);
    }
    void store_rows(KvType t, void *d, int64_t ldd, const float *s, int64_t lds, int64_t n, int64_t row) override {
        in_->store_rows(t, d, ldd, s, lds, n, row);
    }
    void load_rows(KvType t, float *d, int64_t ldd, const void *s, int64_t lds, int64_t n, int64_t row) override {
        in_->load_rows(t, d, ldd, s, lds, n, row);
    }
    std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) override { return in_->top_k(x, n, k); }
    void topk_dot(const TopkDotArgs &a) override { in_->topk_dot(a); }
    void max_dot_f16(const MaxDotArgs &a) override { in_->max_dot_f16(a); }
    void token_surprisal(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens,
                         float *out) override {
        in_->token_surprisal(logits, n_rows, n_vocab, tokens, out);
    }
    void synchronize() override { in_->synchronize(); }

protected:
    Backend *inner() const { return in_; }

private:
    Backend *in_;
};

} // namespace lctx
