#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>

#include "common/error.h"
#include "common/ggml_type.h"
#include "common/top_k.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/thread_pool.h"

namespace lctx {

double cpu_backend_fma_peak_gflops(Backend &backend);
double cpu_backend_read_bandwidth_gb_s(Backend &backend);

namespace {

class HostBuffer final : public Buffer {
public:
    explicit HostBuffer(size_t bytes) : size_(bytes) {
        if (bytes == 0) return;
        p_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p_) fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB", double(bytes) / (1024.0 * 1024.0));
    }
    ~HostBuffer() override { std::free(p_); }
    void *data() override { return p_; }
    size_t size() const override { return size_; }

private:
    void *p_ = nullptr;
    size_t size_;
};

cpu::AttentionArgs to_cpu(const AttentionArgs &a, const float *k, const float *v, int64_t ld_kv,
                          int64_t head_stride, bool bf16) {
    cpu::AttentionArgs c;
    c.q = a.q;
    c.ldq = a.ldq;
    c.k = k;
    c.v = v;
    c.ld_kv = ld_kv;
    c.kv_head_stride = head_stride;
    c.out = a.out;
    c.ldo = a.ldo;
    c.n_q = a.n_q;
    c.n_kv = a.n_kv;
    c.n_head = a.n_head;
    c.n_head_kv = a.n_head_kv;
    c.head_dim = a.head_dim;
    c.q_pos = a.q_pos;
    c.kv_pos = a.kv_pos;
    c.kv_pos_head_stride = a.kv_pos_head_stride;
    c.scale = a.scale;
    c.window = a.window;
    c.softcap = a.softcap;
    c.col_sums = a.col_sums;
    c.obs_begin = a.obs_begin;
    c.col_max = a.col_max;
    c.colsum_seconds = a.colsum_seconds;
    c.bf16 = bf16;
    return c;
}

class CpuBackend final : public Backend {
public:
    explicit CpuBackend(int n_threads) : pool_(std::max(1, n_threads)) {}

    const char *name() const override { return "cpu"; }
    std::string description() const override {
        return std::string("cpu (") + cpu::simd_variant() + ", " + std::to_string(pool_.size()) + " threads)";
    }
    int n_threads() const override { return pool_.size(); }

    std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
    bool host_memory() const override { return true; }
    void to_host(void *dst, const void *src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void from_host(void *dst, const void *src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void copy(void *dst, const void *src, size_t bytes) override { std::memmove(dst, src, bytes); }
    void prepare(const Model &) override {}

    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override {
        pool_.parallel_for(n, fn);
    }

    void get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) override {
        for (int64_t t = 0; t < n; ++t) cpu::get_row(W, ids[t], out + t * W.n_cols);
    }

    void rms_norm(const float *x, const WeightView &w, float *y, int64_t n_rows, int64_t n, float eps) override {
        const float *wd = reinterpret_cast<const float *>(w.data);
        if (n_rows == 1) {
            cpu::rms_norm(x, wd, y, n, eps);
            return;
        }
        pool_.parallel_for(n_rows, [&](int64_t b, int64_t e, int) {
            for (int64_t t = b; t < e; ++t) cpu::rms_norm(x + t * n, wd, y + t * n, n, eps);
        });
    }

    void matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) override {
        cpu::matmul(pool_, W, x, ldx, n_tok, y, matmul_arith_);
    }

    void matmul_multi(const MatmulJob *jobs, int n_jobs, const float *x, int64_t ldx, int64_t n_tok) override {
        if (n_jobs > cpu::kMaxMatmulJobs) fail(LCTX_ERR_INTERNAL, "matmul_multi: %d jobs", n_jobs);
        cpu::MatmulJob cj[cpu::kMaxMatmulJobs];
        for (int i = 0; i < n_jobs; ++i) cj[i] = {jobs[i].W, jobs[i].y};
        cpu::matmul_multi(pool_, cj, n_jobs, x, ldx, n_tok, matmul_arith_);
    }

    void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos) override {
        const cpu::RopeParams p = cpu::rope_params(hp);
        int64_t max_pos = -1;
        for (int64_t t = 0; t < n_tok && pos; ++t) max_pos = std::max<int64_t>(max_pos, pos[t]);
        const std::shared_ptr<const cpu::RopeTable> table = rope_tables_.get(p, max_pos + 1);
        if (n_tok < 64) {
            cpu::rope_cached(p, table.get(), x, ld, n_tok, n_heads, pos);
            return;
        }
        pool_.parallel_for(n_tok, [&](int64_t t0, int64_t t1, int) {
            cpu::rope_cached(p, table.get(), x + t0 * ld, ld, t1 - t0, n_heads, pos + t0);
        });
    }

    void swiglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) override {
        pool_.parallel_for(n_rows, [&](int64_t t0, int64_t t1, int) {
            cpu::swiglu(gate + t0 * n, up + t0 * n, out + t0 * n, (t1 - t0) * n);
        });
    }

    void geglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) override {
        pool_.parallel_for(n_rows, [&](int64_t t0, int64_t t1, int) {
            cpu::geglu(gate + t0 * n, up + t0 * n, out + t0 * n, (t1 - t0) * n);
        });
    }

    void scale(float *x, float s, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] *= s;
    }

    void add(float *x, const float *y, int64_t n) override {
        for (int64_t i = 0; i < n; ++i) x[i] += y[i];
    }

    void add_bias(float *x, const WeightView &b, int64_t n_rows) override {
        if (b.type != GgmlType::F32 || b.n_rows != 1 || b.empty())
            fail(LCTX_ERR_INVALID_ARG, "add_bias: the bias must be one F32 row");
        const float *bias = reinterpret_cast<const float *>(b.data);
        for (int64_t r = 0; r < n_rows; ++r)
            for (int64_t i = 0; i < b.n_cols; ++i) x[r * b.n_cols + i] += bias[i];
    }

    void attention(const AttentionArgs &a) override {
        if (a.kv_type == KvType::F32) {
            cpu::attention(pool_, to_cpu(a, static_cast<const float *>(a.k), static_cast<const float *>(a.v),
                                         a.ld_kv, a.kv_head_stride, attn_bf16_));
            return;
        }
        // f16 and q8 storage: the few-row (decode) kernel reads it in place,
        // the tiled one widens each work item's key range to f32
        // (docs/kv-storage.md has the measured effect).
        cpu::AttentionArgs c = to_cpu(a, nullptr, nullptr, a.ld_kv, a.kv_head_stride, attn_bf16_);
        if (a.kv_type == KvType::Q8) {
            c.k8 = static_cast<const uint8_t *>(a.k);
            c.v8 = static_cast<const uint8_t *>(a.v);
        } else {
            c.k16 = static_cast<const uint16_t *>(a.k);
            c.v16 = static_cast<const uint16_t *>(a.v);
        }
        cpu::attention(pool_, c);
    }

    bool supports_kv_type(KvType) const override { return true; }

    void gather_rows(KvType type, void *dst, const void *src, const int64_t *idx, int64_t n, int64_t row) override {
        const size_t bytes = kv_row_bytes(type, row);
        auto *d = static_cast<uint8_t *>(dst);
        const auto *s = static_cast<const uint8_t *>(src);
        for (int64_t i = 0; i < n; ++i) {
            if (d + i * bytes == s + idx[i] * bytes) continue;
            std::memmove(d + i * bytes, s + idx[i] * bytes, bytes);
        }
    }

    void store_rows(KvType type, void *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t n,
                    int64_t row) override {
        if (type == KvType::F32) {
            float *d = static_cast<float *>(dst);
            for (int64_t i = 0; i < n; ++i) std::memcpy(d + i * ld_dst, src + i * ld_src, row * sizeof(float));
            return;
        }
        if (type == KvType::Q8) {
            uint8_t *d = static_cast<uint8_t *>(dst);
            for (int64_t i = 0; i < n; ++i) cpu::q8_quantize_row(src + i * ld_src, row, d + i * ld_dst);
            return;
        }
        uint16_t *d = static_cast<uint16_t *>(dst);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < row; ++c) d[i * ld_dst + c] = fp32_to_fp16(src[i * ld_src + c]);
    }

    void load_rows(KvType type, float *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t n,
                   int64_t row) override {
        if (type == KvType::F32) {
            const float *s = static_cast<const float *>(src);
            for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * ld_dst, s + i * ld_src, row * sizeof(float));
            return;
        }
        if (type == KvType::Q8) {
            const uint8_t *s = static_cast<const uint8_t *>(src);
            for (int64_t i = 0; i < n; ++i) cpu::q8_dequantize_row(s + i * ld_src, row, dst + i * ld_dst);
            return;
        }
        const uint16_t *s = static_cast<const uint16_t *>(src);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t c = 0; c < row; ++c) dst[i * ld_dst + c] = fp16_to_fp32(s[i * ld_src + c]);
    }

    std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) override { return top_k_indices(x, n, k); }

    void topk_dot(const TopkDotArgs &a) override {
        cpu::TopkDotArgs c;
        c.q = a.q;
        c.ldq = a.ldq;
        c.n_rows = a.n_rows;
        std::vector<cpu::TopkDotArgs::Segment> segs(static_cast<size_t>(std::max<int64_t>(a.n_segments, 0)));
        for (size_t i = 0; i < segs.size(); ++i) segs[i] = {a.segments[i].keys, a.segments[i].n, a.segments[i].index_base};
        c.segments = segs.data();
        c.n_segments = a.n_segments;
        if (a.key_type == KvType::Q8)
            fail(LCTX_ERR_UNSUPPORTED, "topk_dot: q8 keys (ReAttention keeps its store in f16 when the cache is q8)");
        c.keys_f16 = a.key_type == KvType::F16;
        c.ld_keys = a.ld_keys;
        c.dim = a.dim;
        c.k = a.k;
        c.tile_max = a.tile_max;
        c.best_score = a.best_score;
        c.best_index = a.best_index;
        cpu::topk_dot(pool_, c);
    }

    void max_dot_f16(const MaxDotArgs &a) override {
        cpu::MaxDotArgs c;
        c.keys = a.keys;
        c.n = a.n;
        c.ld = a.ld;
        c.dim = a.dim;
        c.q = a.q;
        c.n_q = a.n_q;
        c.ldq = a.ldq;
        c.out = a.out;
        cpu::max_dot_f16(pool_, c);
    }

    void token_surprisal(const float *logits, int64_t n_rows, int64_t n_vocab, const int32_t *tokens,
                         float *out) override {
        if (n_rows <= 0 || n_vocab <= 0) return;
        pool_.parallel_for(n_rows, [&](int64_t b, int64_t e, int) {
            for (int64_t r = b; r < e; ++r) {
                const float *x = logits + r * n_vocab;
                out[r] = static_cast<float>(cpu::log_sum_exp(x, n_vocab) - double(x[tokens[r]]));
            }
        });
    }

    bool set_attention_bf16(bool on) override {
        attn_bf16_ = on && cpu::attention_bf16_available();
        return attn_bf16_ == on;
    }
    bool set_matmul_precision(lctx_precision p) override {
        matmul_arith_ = p == LCTX_PRECISION_BF16 && cpu::matmul_bf16_available()   ? cpu::MatmulArith::BF16
                        : p == LCTX_PRECISION_INT8 && cpu::matmul_int8_available() ? cpu::MatmulArith::INT8
                                                                                   : cpu::MatmulArith::F32;
        return matmul_arith_ != cpu::MatmulArith::F32 || p == LCTX_PRECISION_F32;
    }

private:
    cpu::ThreadPool pool_;
    bool attn_bf16_ = false;
    cpu::MatmulArith matmul_arith_ = cpu::MatmulArith::F32;
    cpu::RopeTableCache rope_tables_;   // (cos, sin) per position, shared by every layer's q and k

    friend double lctx::cpu_backend_fma_peak_gflops(Backend &);
    friend double lctx::cpu_backend_read_bandwidth_gb_s(Backend &);
};

} // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

const char *cpu_backend_variant() { return cpu::simd_variant(); }
bool cpu_backend_bf16_available() { return cpu::attention_bf16_available() && cpu::matmul_bf16_available(); }
bool cpu_backend_int8_available() { return cpu::matmul_int8_available(); }

double cpu_backend_fma_peak_gflops(Backend &backend) {
    auto *cpu = dynamic_cast<CpuBackend *>(&backend);
    return cpu ? cpu::fma_peak_gflops(cpu->pool_) : 0.0;
}

double cpu_backend_read_bandwidth_gb_s(Backend &backend) {
    auto *cpu = dynamic_cast<CpuBackend *>(&backend);
    return cpu ? cpu::read_bandwidth_gb_s(cpu->pool_) : 0.0;
}

} // namespace lctx
