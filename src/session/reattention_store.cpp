#include "session/reattention_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/ggml_type.h"

namespace lctx {

ReattentionStore::ReattentionStore(const Hparams &hp, KvType type, MemoryBudget *budget, uint64_t max_ram,
                                   std::string spill_dir)
    : n_layer_(hp.n_layer), n_kv_(hp.n_head_kv), head_dim_(hp.head_dim), type_(type), budget_(budget),
      max_ram_(max_ram), spill_dir_(std::move(spill_dir)) {
    if (n_layer_ <= 0 || n_kv_ <= 0 || head_dim_ <= 0)
        fail(LCTX_ERR_INVALID_ARG, "ReAttention store: bad model geometry");
}

ReattentionStore::~ReattentionStore() {
    for (Block &b : blocks_) {
        if (b.mapped) munmap(b.data, block_bytes());
        else std::free(b.data);
    }
    if (fd_ >= 0) close(fd_);
}

ReattentionStore::Block ReattentionStore::new_block() {
    const size_t bytes = block_bytes();
    Block b;
    if (max_ram_ == 0 || ram_bytes_ + bytes <= max_ram_) {
        b.charge = MemoryCharge(budget_, bytes, "a block of the ReAttention K/V store");
        b.data = static_cast<uint8_t *>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        if (!b.data)
            fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the ReAttention K/V store (%.1f MiB held): "
                 "set lctx_reattention_params.store_max_ram to continue in a file", double(bytes) / 1048576.0,
                 double(ram_bytes_) / 1048576.0);
        ram_bytes_ += bytes;
        return b;
    }
    if (fd_ < 0) {
        std::string path = spill_dir_ + "/lctx-reattention-XXXXXX";
        fd_ = mkstemp(path.data());
        if (fd_ < 0)
            fail(LCTX_ERR_IO, "ReAttention: cannot create the K/V store file in %s: %s", spill_dir_.c_str(),
                 std::strerror(errno));
        unlink(path.c_str());   // gone when the last descriptor closes
    }
    // posix_fallocate reserves the disk blocks now: a full disk is an error
    // here, never a SIGBUS on a later write through the mapping.
    const off_t at = static_cast<off_t>(file_bytes_);
    if (int err = posix_fallocate(fd_, at, static_cast<off_t>(bytes)); err != 0)
        fail(LCTX_ERR_OUT_OF_MEMORY, "ReAttention: cannot grow the K/V store file in %s by %.1f MiB (%.1f MiB in it): "
             "%s", spill_dir_.c_str(), double(bytes) / 1048576.0, double(file_bytes_) / 1048576.0,
             std::strerror(err));
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, at);
    if (p == MAP_FAILED) {
        const int err = errno;
        if (ftruncate(fd_, at) != 0) { /* the file keeps a spare tail; harmless */ }
        fail(LCTX_ERR_OUT_OF_MEMORY, "ReAttention: cannot map the K/V store file: %s", std::strerror(err));
    }
    b.data = static_cast<uint8_t *>(p);
    b.mapped = true;
    file_bytes_ += bytes;
    return b;
}

void ReattentionStore::reserve(int64_t n) {
    const int64_t need = (n + kBlockTokens - 1) / kBlockTokens;
    while (static_cast<int64_t>(blocks_.size()) < need) blocks_.push_back(new_block());
}

void ReattentionStore::write(int32_t layer, int64_t t0, int64_t n, const float *k, const float *v, int64_t ld) {
    if (t0 < 0 || t0 + n > static_cast<int64_t>(blocks_.size()) * kBlockTokens)
        fail(LCTX_ERR_INTERNAL, "ReAttention store: write past the reserved blocks");
    const int64_t D = head_dim_;
    for (int64_t i = 0; i < n; ++i)
        for (int32_t h = 0; h < n_kv_; ++h) {
            const float *ks = k + i * ld + h * D, *vs = v + i * ld + h * D;
            void *kd = row(layer, h, 0, t0 + i), *vd = row(layer, h, 1, t0 + i);
            if (type_ == KvType::F32) {
                std::memcpy(kd, ks, static_cast<size_t>(D) * sizeof(float));
                std::memcpy(vd, vs, static_cast<size_t>(D) * sizeof(float));
            } else {
                auto *k16 = static_cast<uint16_t *>(kd), *v16 = static_cast<uint16_t *>(vd);
                for (int64_t c = 0; c < D; ++c) {
                    k16[c] = fp32_to_fp16(ks[c]);
                    v16[c] = fp32_to_fp16(vs[c]);
                }
            }
        }
}

void ReattentionStore::commit(int64_t n) {
    if (n < size_ || n > static_cast<int64_t>(blocks_.size()) * kBlockTokens)
        fail(LCTX_ERR_INTERNAL, "ReAttention store: commit of %lld tokens (size %lld)", (long long)n,
             (long long)size_);
    size_ = n;
}

void ReattentionStore::truncate(int64_t n) { size_ = n < 0 ? 0 : (n < size_ ? n : size_); }

void ReattentionStore::read(int32_t layer, const int64_t *tok, int64_t n, float *k, float *v, int64_t ld) const {
    const int64_t D = head_dim_;
    for (int64_t i = 0; i < n; ++i)
        for (int32_t h = 0; h < n_kv_; ++h) {
            const void *ks = row(layer, h, 0, tok[i]), *vs = row(layer, h, 1, tok[i]);
            float *kd = k + i * ld + h * D, *vd = v + i * ld + h * D;
            if (type_ == KvType::F32) {
                std::memcpy(kd, ks, static_cast<size_t>(D) * sizeof(float));
                std::memcpy(vd, vs, static_cast<size_t>(D) * sizeof(float));
            } else {
                const auto *k16 = static_cast<const uint16_t *>(ks), *v16 = static_cast<const uint16_t *>(vs);
                for (int64_t c = 0; c < D; ++c) {
                    kd[c] = fp16_to_fp32(k16[c]);
                    vd[c] = fp16_to_fp32(v16[c]);
                }
            }
        }
}

} // namespace lctx
