// CudaBackend: the Backend interface (backend/backend.h) on one CUDA device
// (docs/backends/cuda.md).
//
// Memory. alloc() returns device memory (host_memory() is false), so the
// engine's activations, scratch and KV storage live on the device. Some op
// arguments are host memory by design (token ids, positions, gather indices,
// the column-sum arrays the forward pass adds up on the host, a method's
// host rows): every pointer an op receives is classified by the device
// runtime, and host ones are staged through temporary device copies (outputs
// copied back when the op ends). prepare() uploads the model's weights once
// (raw blocks for the GEMV and the dequantizing row copy, plus an f16 copy of
// every matmul weight for the cuBLAS GEMM); they are found by host address (a
// view may be a row range of one). Any other weight view is uploaded for the
// op that uses it, never cached: its host memory may be reused by the time
// of the next call.
//
// The CUDA runtime and cuBLAS are reached only through device.h (so the tests
// run this file on an emulated device). Ops may be called from several host
// threads at once (methods fill KV heads in parallel): temporaries are per
// call, and the weight table and the cuBLAS handle are behind a mutex.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/device.h"
#include "common/error.h"
#include "common/ggml_type.h"
#include "common/top_k.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/rope_setup.h"

namespace lctx {

namespace {

// q8 KV storage has CPU kernels only; sessions are refused it up front
// (supports_kv_type), and these calls say so if one is reached anyway.
void refuse_q8(KvType t, const char *who) {
    if (t == KvType::Q8)
        fail(LCTX_ERR_UNSUPPORTED, "%s on cuda: q8 KV storage is CPU only (use kv_type f16 or f32)", who);
}

using namespace lctx::cuda;

struct DevFree {
    bool temp = false;   // from dev::alloc_temp
    void operator()(void *p) const {
        if (temp) dev::free_temp(p);
        else dev::free(p);
    }
};
using DevMem = std::unique_ptr<void, DevFree>;

// Memory that lives as long as a weight or a buffer.
DevMem dev_alloc(size_t bytes) { return DevMem(dev::alloc(bytes)); }
// One op's temporary (cached blocks: no cudaMalloc or cudaFree per op).
DevMem dev_temp(size_t bytes) { return DevMem(dev::alloc_temp(bytes), DevFree{true}); }

class DeviceBuffer final : public Buffer {
public:
    explicit DeviceBuffer(size_t bytes) : mem_(dev_alloc(bytes)), size_(bytes) {}
    void *data() override { return mem_.get(); }
    size_t size() const override { return size_; }

private:
    DevMem mem_;
    size_t size_;
};

// Elements spanned by n rows of `row` elements, ld apart.
int64_t rows_extent(int64_t n, int64_t ld, int64_t row) { return n > 0 ? (n - 1) * ld + row : 0; }

// Device views of one op's arguments; host outputs are copied back by finish().
class Staging {
public:
    const void *in_bytes(const void *p, size_t bytes) {
        if (!p || bytes == 0 || dev::is_device(p)) return p;
        DevMem d = dev_temp(bytes);
        dev::copy(d.get(), p, bytes);
        const void *r = d.get();
        temps_.push_back(std::move(d));
        return r;
    }
    template <class T>
    const T *in(const T *p, int64_t count) {
        return static_cast<const T *>(in_bytes(p, static_cast<size_t>(count) * sizeof(T)));
    }
    // read and written by the op
    template <class T>
    T *inout(T *p, int64_t count) {
        const size_t bytes = static_cast<size_t>(count) * sizeof(T);
        if (!p || bytes == 0 || dev::is_device(p)) return p;
        T *d = const_cast<T *>(static_cast<const T *>(in_bytes(p, bytes)));
        back_.push_back({p, d, bytes});
        return d;
    }
    void finish() {
        for (const Back &b : back_) dev::copy(b.host, b.dev, b.bytes);
        back_.clear();
    }

private:
    struct Back {
        void *host;
        const void *dev;
        size_t bytes;
    };
    std::vector<DevMem> temps_;
    std::vector<Back> back_;
};

// A weight on the device: the raw blocks and, for matmul weights, an f16 copy.
struct DevWeight {
    const uint8_t *host = nullptr;
    size_t bytes = 0;
    GgmlType type = GgmlType::F32;
    int64_t n_rows = 0, n_cols = 0;
    size_t row_bytes = 0;
    uint64_t generation = 0;   // the prepare() call that uploaded it
    DevMem raw, f16;
};

// A view resolved to device memory: into a prepared weight, or (a view of
// memory prepare() did not see) uploaded for the one op that holds it.
struct DevView {
    const uint8_t *raw = nullptr;
    const uint16_t *f16 = nullptr;   // null: no f16 copy
    DevMem own_raw, own_f16;
};

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int n_threads) : pool_(std::max(1, n_threads)) {
        // LCTX_CUDA_ATTENTION=flat: the one-block-per-row kernel for every
        // batch (to measure the tiled one against it; docs/backends/cuda.md)
        const char *attn = std::getenv("LCTX_CUDA_ATTENTION");
        tiled_attention_ = !(attn && std::string(attn) == "flat");
        desc_ = "cuda (" + dev::init(&n_sm_) + ", " + std::to_string(pool_.size()) + " host threads" +
                (tiled_attention_ ? "" : ", flat attention") + ")";
        gemm_ = std::make_unique<dev::Gemm>();
    }

    const char *name() const override { return "cuda"; }
    std::string description() const override { return desc_; }
    int n_threads() const override { return pool_.size(); }

    std::unique_ptr<Buffer> alloc(size_t bytes) override { return std::make_unique<DeviceBuffer>(bytes); }
    bool host_memory() const override { return false; }
    void to_host(void *dst, const void *src, size_t bytes) override { dev::copy(dst, src, bytes); }
    void from_host(void *dst, const void *src, size_t bytes) override { dev::copy(dst, src, bytes); }
    void copy(void *dst, const void *src, size_t bytes) override {
        if (!bytes || dst == src) return;
        const auto *d = static_cast<const uint8_t *>(dst), *s = static_cast<const uint8_t *>(src);
        if (d < s + bytes && s < d + bytes) {   // overlapping: cudaMemcpy does not allow it
            DevMem tmp = dev_temp(bytes);
            dev::copy(tmp.get(), src, bytes);
            dev::copy(dst, tmp.get(), bytes);
            return;
        }
        dev::copy(dst, src, bytes);
    }

    // Uploads the model's weights. A model seen before is skipped; another
    // model replaces entries at the same host addresses (a freed model's
    // memory reused), so lookups never return another model's weights.
    void prepare(const Model &model) override {
        std::lock_guard<std::mutex> lock(mu_);
        if (&model == prepared_model_ && model.n_params() == prepared_params_) return;
        ++generation_;
        upload(model.tok_embd(), false);
        upload(model.output_norm(), false);
        upload(model.output(), true);
        for (const LayerWeights &L : model.layers()) {
            upload(L.attn_norm, false);
            upload(L.ffn_norm, false);
            for (const WeightView *b : {&L.bq, &L.bk, &L.bv}) upload(*b, false);
            for (const WeightView *w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) upload(*w, true);
        }
        prepared_model_ = &model;
        prepared_params_ = model.n_params();
    }

    void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)> &fn) override {
        pool_.parallel_for(n, fn);
    }

    void get_rows(const WeightView &W, const int32_t *ids, int64_t n, float *out) override {
        if (n <= 0) return;
        const DevView dv = view(W, false);
        Staging st;
        // ids are checked on the host (a device kernel cannot report a bad one)
        std::vector<int32_t> h(static_cast<size_t>(n));
        to_host(h.data(), ids, h.size() * sizeof(int32_t));
        for (int64_t t = 0; t < n; ++t)
            if (h[t] < 0 || h[t] >= W.n_rows)
                fail(LCTX_ERR_INVALID_ARG, "get_rows: row %d out of range [0, %lld)", h[t], (long long)W.n_rows);
        DequantRowsArgs a{static_cast<uint32_t>(W.type), dv.raw, W.row_bytes, W.n_cols, st.in(h.data(), n),
                          st.inout(out, n * W.n_cols), false};
        launch_dequant_rows(a, n, nullptr);
        dev::check_launch("get_rows");
        st.finish();
    }

    void rms_norm(const float *x, const WeightView &w, float *y, int64_t n_rows, int64_t n, float eps) override {
        if (n_rows <= 0 || n <= 0) return;
        if (!w.empty() && (w.type != GgmlType::F32 || w.n_rows * w.n_cols < n))
            fail(LCTX_ERR_INVALID_ARG, "rms_norm: the scale weight must be F32 with %lld values", (long long)n);
        const DevView wv = w.empty() ? DevView() : view(w, false);
        const float *wd = reinterpret_cast<const float *>(wv.raw);
        Staging st;
        const RmsNormArgs a{st.in(x, n_rows * n), wd, st.inout(y, n_rows * n), n, eps};
        launch_rms_norm(a, n_rows, nullptr);
        dev::check_launch("rms_norm");
        st.finish();
    }

    void matmul(const WeightView &W, const float *x, int64_t ldx, int64_t n_tok, float *y) override {
        if (n_tok <= 0) return;
        if (W.empty() || W.n_rows <= 0 || W.n_cols <= 0 || ldx < W.n_cols)
            fail(LCTX_ERR_INVALID_ARG, "matmul: empty weight or row stride %lld below %lld columns", (long long)ldx,
                 (long long)W.n_cols);
        const DevView dv = view(W, n_tok > kGemvMaxTok);
        Staging st;
        const float *xd = st.in(x, rows_extent(n_tok, ldx, W.n_cols));
        float *yd = st.inout(y, n_tok * W.n_rows);
        if (n_tok > kGemvMaxTok && dv.f16) {
            gemm(W, dv.f16, xd, ldx, n_tok, yd);
        } else {
            for (int64_t t0 = 0; t0 < n_tok; t0 += kGemvMaxTok) {
                const int64_t nt = std::min<int64_t>(kGemvMaxTok, n_tok - t0);
                // y rows of this chunk: y[t * n_rows + r] for t in [t0, t0 + nt)
                const GemvArgs a{static_cast<uint32_t>(W.type), dv.raw, W.row_bytes, W.n_rows, W.n_cols,
                                 xd + t0 * ldx, ldx, nt, yd + t0 * W.n_rows, gemv_threads_per_row(W.n_cols)};
                launch_gemv(a, nullptr);
                dev::check_launch("matmul (gemv)");
            }
        }
        st.finish();
    }

    void matmul_multi(const MatmulJob *jobs, int n_jobs, const float *x, int64_t ldx, int64_t n_tok) override {
        for (int i = 0; i < n_jobs; ++i) matmul(*jobs[i].W, x, ldx, n_tok, jobs[i].y);
    }

    void rope(const Hparams &hp, float *x, int64_t ld, int64_t n_tok, int32_t n_heads, const int32_t *pos) override {
        if (n_tok <= 0) return;
        if (!x || !pos || n_heads <= 0) fail(LCTX_ERR_INVALID_ARG, "rope: null input or no heads");
        Staging st;
        const RopeArgs a{rope_setup(hp), st.inout(x, rows_extent(n_tok, ld, int64_t(n_heads) * hp.head_dim)), ld,
                         st.in(pos, n_tok)};
        launch_rope(a, n_tok, n_heads, nullptr);
        dev::check_launch("rope");
        st.finish();
    }

    void swiglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) override {
        gated_unit(gate, up, out, n_rows * n, launch_swiglu, "swiglu");
    }

    void geglu(const float *gate, const float *up, float *out, int64_t n_rows, int64_t n) override {
        gated_unit(gate, up, out, n_rows * n, launch_geglu, "geglu");
    }

    // out = act(gate) * up over total elements (SwiGLU, GeGLU).
    static void gated_unit(const float *gate, const float *up, float *out, int64_t total,
                           void (*launcher)(const SwigluArgs &, void *), const char *what) {
        if (total <= 0) return;
        Staging st;
        const SwigluArgs a{st.in(gate, total), st.in(up, total), st.inout(out, total), total};
        launcher(a, nullptr);
        dev::check_launch(what);
        st.finish();
    }

    void scale(float *x, float s, int64_t n) override {
        if (n <= 0) return;
        Staging st;
        const ScaleArgs a{st.inout(x, n), s, n};
        launch_scale(a, nullptr);
        dev::check_launch("scale");
        st.finish();
    }

    void add(float *x, const float *y, int64_t n) override {
        if (n <= 0) return;
        Staging st;
        const AddArgs a{st.inout(x, n), st.in(y, n), n};
        launch_add(a, nullptr);
        dev::check_launch("add");
        st.finish();
    }

    void add_bias(float *x, const WeightView &b, int64_t n_rows) override {
        if (n_rows <= 0) return;
        if (b.empty() || b.type != GgmlType::F32 || b.n_rows != 1)
            fail(LCTX_ERR_INVALID_ARG, "add_bias: the bias must be one F32 row");
        const DevView bv = view(b, false);
        Staging st;
        const AddBiasArgs a{st.inout(x, n_rows * b.n_cols), reinterpret_cast<const float *>(bv.raw), n_rows * b.n_cols,
                            b.n_cols};
        launch_add_bias(a, nullptr);
        dev::check_launch("add_bias");
        st.finish();
    }

    void attention(const AttentionArgs &a) override {
        if (a.n_q <= 0) return;
        if (a.n_head <= 0 || a.n_head_kv <= 0 || a.n_head % a.n_head_kv != 0 || a.head_dim <= 0)
            fail(LCTX_ERR_INVALID_ARG, "attention: %d heads over %d KV heads", a.n_head, a.n_head_kv);
        if (a.head_dim > kAttnThreads * kAttnMaxDimPerThread)
            fail(LCTX_ERR_UNSUPPORTED, "attention on cuda: head_dim %d exceeds %d", a.head_dim,
                 kAttnThreads * kAttnMaxDimPerThread);
        refuse_q8(a.kv_type, "attention");
        const bool f16 = a.kv_type == KvType::F16;
        const size_t es = f16 ? 2 : 4;
        const int64_t kv_elems = a.n_kv > 0 ? (a.n_head_kv - 1) * a.kv_head_stride + rows_extent(a.n_kv, a.ld_kv, a.head_dim) : 0;
        const int64_t pos_elems = a.n_kv > 0 ? (a.kv_pos_head_stride ? (a.n_head_kv - 1) * a.kv_pos_head_stride : 0) + a.n_kv : 0;
        Staging st;
        AttnArgs d{};
        d.q = st.in(a.q, rows_extent(a.n_q, a.ldq, int64_t(a.n_head) * a.head_dim));
        d.ldq = a.ldq;
        d.k = st.in_bytes(a.k, static_cast<size_t>(kv_elems) * es);
        d.v = st.in_bytes(a.v, static_cast<size_t>(kv_elems) * es);
        d.kv_f16 = f16;
        d.ld_kv = a.ld_kv;
        d.kv_head_stride = a.kv_head_stride;
        d.out = st.inout(a.out, rows_extent(a.n_q, a.ldo, int64_t(a.n_head) * a.head_dim));
        d.ldo = a.ldo;
        d.n_q = a.n_q;
        d.n_kv = a.n_kv;
        d.n_head = a.n_head;
        d.n_head_kv = a.n_head_kv;
        d.head_dim = a.head_dim;
        d.q_pos = st.in(a.q_pos, a.n_q);
        d.kv_pos = st.in(a.kv_pos, pos_elems);
        d.kv_pos_head_stride = a.kv_pos_head_stride;
        d.scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.head_dim));
        d.col_sums = a.col_sums ? st.inout(a.col_sums, int64_t(a.n_head_kv) * a.n_kv) : nullptr;
        d.obs_begin = a.obs_begin;
        d.col_max = a.col_max;
        d.window = a.window;
        d.softcap = a.softcap;
        // prefill batches: the tiled kernel, its keys split when its blocks
        // are too few for the device; few rows over many keys (decode): the
        // one-row kernel with its keys split
        d.tiled = tiled_attention_ && attention_tiled_fits(a.n_q, a.head_dim);
        d.n_split = d.tiled ? attention_tiled_splits(a.n_q, a.n_head, a.head_dim, a.n_kv, n_sm_)
                            : attention_splits(a.n_q * a.n_head, a.n_kv, 4 * int64_t(n_sm_));
        DevMem part, row_ml;
        if (d.n_split > 1) {
            part = dev_temp(static_cast<size_t>(a.n_q * a.n_head * d.n_split * (a.head_dim + 2)) * sizeof(float));
            d.part = static_cast<float *>(part.get());
        }
        if (attention_needs_row_ml(d)) {
            row_ml = dev_temp(static_cast<size_t>(a.n_q * a.n_head * 2) * sizeof(float));
            d.row_ml = static_cast<float *>(row_ml.get());
        }
        launch_attention(d, nullptr);
        dev::check_launch("attention");
        st.finish();
    }

    void gather_rows(KvType type, void *dst, const void *src, const int64_t *idx, int64_t n, int64_t row) override {
        refuse_q8(type, "gather_rows");
        if (n <= 0 || row <= 0) return;
        const size_t es = kv_type_size(type), row_bytes = static_cast<size_t>(row) * es;
        std::vector<int64_t> h(static_cast<size_t>(n));
        to_host(h.data(), idx, h.size() * sizeof(int64_t));
        int64_t n_src = 0;
        for (int64_t v : h) {
            if (v < 0) fail(LCTX_ERR_INVALID_ARG, "gather_rows: negative row index %lld", (long long)v);
            n_src = std::max(n_src, v + 1);
        }
        Staging st;
        const void *s = st.in_bytes(src, static_cast<size_t>(n_src) * row_bytes);
        uint8_t *d = static_cast<uint8_t *>(st.inout(static_cast<uint8_t *>(dst), static_cast<int64_t>(n * row_bytes)));
        // in place (compaction) or overlapping: gather into a temporary first
        const auto *sb = static_cast<const uint8_t *>(s);
        const bool overlap = d < sb + n_src * row_bytes && sb < d + n * row_bytes;
        DevMem tmp = overlap ? dev_temp(n * row_bytes) : DevMem();
        const GatherArgs a{overlap ? tmp.get() : d, s, st.in(h.data(), n), row, static_cast<int>(es)};
        launch_gather_rows(a, n, nullptr);
        dev::check_launch("gather_rows");
        if (overlap) dev::copy(d, tmp.get(), n * row_bytes);
        st.finish();
    }

    void store_rows(KvType type, void *dst, int64_t ld_dst, const float *src, int64_t ld_src, int64_t n,
                    int64_t row) override {
        refuse_q8(type, "store_rows");
        if (n <= 0 || row <= 0) return;
        const bool f16 = type == KvType::F16;
        Staging st;
        const int64_t dst_elems = rows_extent(n, ld_dst, row);
        void *d = f16 ? static_cast<void *>(st.inout(static_cast<uint16_t *>(dst), dst_elems))
                      : static_cast<void *>(st.inout(static_cast<float *>(dst), dst_elems));
        const RowConvertArgs a{d, ld_dst, f16, st.in(src, rows_extent(n, ld_src, row)), ld_src, false, row};
        launch_convert_rows(a, n, nullptr);
        dev::check_launch("store_rows");
        st.finish();
    }

    void load_rows(KvType type, float *dst, int64_t ld_dst, const void *src, int64_t ld_src, int64_t n,
                   int64_t row) override {
        refuse_q8(type, "load_rows");
        if (n <= 0 || row <= 0) return;
        const bool f16 = type == KvType::F16;
        Staging st;
        const RowConvertArgs a{st.inout(dst, rows_extent(n, ld_dst, row)), ld_dst, false,
                               st.in_bytes(src, static_cast<size_t>(rows_extent(n, ld_src, row)) * kv_type_size(type)),
                               ld_src, f16, row};
        launch_convert_rows(a, n, nullptr);
        dev::check_launch("load_rows");
        st.finish();
    }

    // One score vector: read on the host (the selection over one row is not
    // worth a launch; topk_dot has the device selection).
    std::vector<int64_t> top_k(const float *x, int64_t n, int64_t k) override {
        if (n <= 0) return top_k_indices(x, 0, k);
        std::vector<float> h(static_cast<size_t>(n));
        to_host(h.data(), x, h.size() * sizeof(float));
        return top_k_indices(h.data(), n, k);
    }

    void topk_dot(const TopkDotArgs &a) override;
    void synchronize() override { dev::synchronize(); }

private:
    void upload(const WeightView &W, bool matmul_weight);   // with mu_ held
    void make_f16(const uint8_t *raw, const WeightView &W, DevMem &out);
    DevView view(const WeightView &W, bool want_f16);
    void gemm(const WeightView &W, const uint16_t *w16, const float *x, int64_t ldx, int64_t n_tok, float *y);

    cpu::ThreadPool pool_;
    int n_sm_ = 1;
    bool tiled_attention_ = true;
    std::string desc_;
    std::unique_ptr<dev::Gemm> gemm_;
    std::mutex mu_;                                    // weights_ and gemm_
    std::map<const uint8_t *, DevWeight> weights_;   // prepared weights by host address
    std::vector<DevWeight> retired_;                   // replaced entries (views handed out may point into them)
    uint64_t generation_ = 0;
    const Model *prepared_model_ = nullptr;
    uint64_t prepared_params_ = 0;
};

void CudaBackend::make_f16(const uint8_t *raw, const WeightView &W, DevMem &out) {
    out = dev_alloc(static_cast<size_t>(W.n_rows * W.n_cols) * sizeof(uint16_t));
    const DequantRowsArgs a{static_cast<uint32_t>(W.type), raw, W.row_bytes, W.n_cols, nullptr, out.get(), true};
    launch_dequant_rows(a, W.n_rows, nullptr);
    dev::check_launch("f16 copy of a weight");
}

void CudaBackend::upload(const WeightView &W, bool matmul_weight) {
    if (W.empty()) return;
    if (!weight_type_supported(W.type))
        fail(LCTX_ERR_UNSUPPORTED, "cuda backend: weight type %s is not supported (F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)",
             ggml_type_name(W.type));
    const size_t bytes = static_cast<size_t>(W.n_rows) * W.row_bytes;
    auto it = weights_.find(W.data);
    if (it != weights_.end() && (it->second.generation != generation_ || it->second.bytes != bytes ||
                                 it->second.type != W.type || it->second.row_bytes != W.row_bytes)) {
        // from an earlier model (or another view of the same start): keep its
        // memory alive for views handed out before, upload this one
        retired_.push_back(std::move(it->second));
        weights_.erase(it);
        it = weights_.end();
    }
    if (it == weights_.end()) {
        DevWeight dw;
        dw.host = W.data;
        dw.bytes = bytes;
        dw.type = W.type;
        dw.n_rows = W.n_rows;
        dw.n_cols = W.n_cols;
        dw.row_bytes = W.row_bytes;
        dw.generation = generation_;
        dw.raw = dev_alloc(dw.bytes);
        dev::copy(dw.raw.get(), W.data, dw.bytes);
        it = weights_.emplace(W.data, std::move(dw)).first;
    }
    DevWeight &dw = it->second;
    if (matmul_weight && !dw.f16) make_f16(static_cast<const uint8_t *>(dw.raw.get()), W, dw.f16);
}

DevView CudaBackend::view(const WeightView &W, bool want_f16) {
    DevView v;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = weights_.upper_bound(W.data);
        if (it != weights_.begin()) {
            const DevWeight &dw = (--it)->second;
            const size_t off = static_cast<size_t>(W.data - dw.host);
            // a row range of a prepared weight (same layout)
            if (off + static_cast<size_t>(W.n_rows) * W.row_bytes <= dw.bytes && W.type == dw.type &&
                W.row_bytes == dw.row_bytes && W.n_cols == dw.n_cols && off % dw.row_bytes == 0) {
                v.raw = static_cast<const uint8_t *>(dw.raw.get()) + off;
                if (dw.f16)
                    v.f16 = static_cast<const uint16_t *>(dw.f16.get()) + static_cast<int64_t>(off / dw.row_bytes) * dw.n_cols;
                if (v.f16 || !want_f16) return v;
            }
        }
    }
    // not prepared (or without its f16 copy): this op's own upload
    if (!weight_type_supported(W.type))
        fail(LCTX_ERR_UNSUPPORTED, "cuda backend: weight type %s is not supported (F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)",
             ggml_type_name(W.type));
    if (!v.raw) {
        v.own_raw = dev_temp(static_cast<size_t>(W.n_rows) * W.row_bytes);
        dev::copy(v.own_raw.get(), W.data, static_cast<size_t>(W.n_rows) * W.row_bytes);
        v.raw = static_cast<const uint8_t *>(v.own_raw.get());
    }
    if (want_f16) {
        make_f16(v.raw, W, v.own_f16);
        v.f16 = static_cast<const uint16_t *>(v.own_f16.get());
    }
    return v;
}

// y (n_tok x n_rows, row-major) = x (n_tok x n_cols, stride ldx) * W^T, the
// activations rounded to f16 for the tensor cores, f32 accumulation.
void CudaBackend::gemm(const WeightView &W, const uint16_t *w16, const float *x, int64_t ldx, int64_t n_tok, float *y) {
    DevMem x16 = dev_temp(static_cast<size_t>(n_tok * W.n_cols) * sizeof(uint16_t));
    const RowConvertArgs cv{x16.get(), W.n_cols, true, x, ldx, false, W.n_cols};
    launch_convert_rows(cv, n_tok, nullptr);
    dev::check_launch("matmul (activations to f16)");
    std::lock_guard<std::mutex> lock(mu_);
    gemm_->f16(W.n_rows, n_tok, W.n_cols, w16, static_cast<const uint16_t *>(x16.get()), y);
}

// Scores of a chunk of keys on the device, the per-row top-k of the chunk on
// the device, the merge into the caller's host lists on the host. Chunks end
// on aligned tiles of kTopkTileSize indices, so tile_max sees whole tiles.
void CudaBackend::topk_dot(const TopkDotArgs &a) {
    if (a.n_rows < 0 || a.n_segments < 0 || a.dim <= 0 || a.k < 1 || a.k > 64)
        fail(LCTX_ERR_INVALID_ARG, "topk_dot: bad sizes (rows %lld, segments %lld, dim %d, k %d)", (long long)a.n_rows,
             (long long)a.n_segments, a.dim, a.k);
    if (a.n_rows == 0) return;
    if (!a.q || !a.best_score || !a.best_index || a.ldq < a.dim || (a.n_segments > 0 && (!a.segments || a.ld_keys < a.dim)))
        fail(LCTX_ERR_INVALID_ARG, "topk_dot: null queries, lists or segments, or a stride below dim");
    refuse_q8(a.key_type, "topk_dot");
    constexpr int64_t kChunk = 64 * 1024, kRowChunk = 4096;
    const bool f16 = a.key_type == KvType::F16;
    const size_t es = f16 ? 2 : 4;
    const int64_t k = a.k;
    Staging st;
    const float *q = st.in(a.q, rows_extent(a.n_rows, a.ldq, a.dim));
    DevMem scores = dev_temp(static_cast<size_t>(std::min(a.n_rows, kRowChunk) * kChunk) * sizeof(float));
    DevMem cs = dev_temp(static_cast<size_t>(std::min(a.n_rows, kRowChunk) * k) * sizeof(float));
    DevMem ci = dev_temp(static_cast<size_t>(std::min(a.n_rows, kRowChunk) * k) * sizeof(int64_t));
    std::vector<float> hs(static_cast<size_t>(std::min(a.n_rows, kRowChunk) * k));
    std::vector<int64_t> hi(hs.size());
    for (int64_t s = 0; s < a.n_segments; ++s) {
        const TopkKeySegment &seg = a.segments[s];
        if (seg.n < 0 || seg.index_base < 0 || (seg.n > 0 && !seg.keys))
            fail(LCTX_ERR_INVALID_ARG, "topk_dot: bad segment %lld", (long long)s);
        for (int64_t j0 = 0; j0 < seg.n;) {
            const int64_t idx_end = ((seg.index_base + j0 + kChunk) / kTopkTileSize) * kTopkTileSize;
            const int64_t j1 = std::min(seg.n, std::max(j0 + 1, idx_end - seg.index_base));
            const int64_t n = j1 - j0;
            Staging keys;
            const void *kd = keys.in_bytes(static_cast<const uint8_t *>(seg.keys) + static_cast<size_t>(j0 * a.ld_keys) * es,
                                     static_cast<size_t>(rows_extent(n, a.ld_keys, a.dim)) * es);
            for (int64_t r0 = 0; r0 < a.n_rows; r0 += kRowChunk) {
                const int64_t R = std::min(kRowChunk, a.n_rows - r0);
                const DotScoresArgs d{q + r0 * a.ldq, a.ldq, kd, f16, a.ld_keys, n, a.dim, static_cast<float *>(scores.get())};
                launch_dot_scores(d, R, nullptr);
                dev::check_launch("topk_dot (scores)");
                const RowTopkArgs t{static_cast<const float *>(scores.get()), n, seg.index_base + j0, a.tile_max, a.k,
                                    static_cast<float *>(cs.get()), static_cast<int64_t *>(ci.get())};
                launch_row_topk(t, R, nullptr);
                dev::check_launch("topk_dot (selection)");
                dev::copy(hs.data(), cs.get(), static_cast<size_t>(R * k) * sizeof(float));
                dev::copy(hi.data(), ci.get(), static_cast<size_t>(R * k) * sizeof(int64_t));
                for (int64_t r = 0; r < R; ++r)
                    merge_topk(a.best_score + (r0 + r) * k, a.best_index + (r0 + r) * k, hs.data() + r * k,
                               hi.data() + r * k, a.k);
            }
            j0 = j1;
        }
    }
}

} // namespace

int cuda_device_count() { return dev::device_count(); }

std::unique_ptr<Backend> make_cuda_backend(int n_threads) { return std::make_unique<CudaBackend>(n_threads); }

} // namespace lctx
