// A fast 64-bit hash for checksums and fingerprints (not cryptographic):
// 8 bytes per step, multiply-xorshift mixing, streaming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lctx {

class Hash64 {
public:
    explicit Hash64(uint64_t seed = 0x9E3779B97F4A7C15ull) : h_(seed) {}

    void update(const void *data, size_t n) {
        const auto *p = static_cast<const uint8_t *>(data);
        len_ += n;
        if (fill_) {   // finish a partial word first
            while (n && fill_ < 8) { buf_[fill_++] = *p++; --n; }
            if (fill_ < 8) return;
            mix_word(load(buf_));
            fill_ = 0;
        }
        for (; n >= 8; n -= 8, p += 8) mix_word(load(p));
        std::memcpy(buf_ + fill_, p, n);   // n < 8 and fill_ == 0 here
        fill_ += n;
    }
    template <class T> void add(const T &v) { update(&v, sizeof v); }

    uint64_t digest() const {
        uint64_t h = h_;
        uint8_t tail[8] = {0};
        std::memcpy(tail, buf_, fill_);
        h ^= load(tail) * 0xC2B2AE3D27D4EB4Full;
        h ^= len_;
        h ^= h >> 33; h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 33;
        return h;
    }

private:
    static uint64_t load(const uint8_t *p) { uint64_t w; std::memcpy(&w, p, 8); return w; }
    void mix_word(uint64_t w) {
        w *= 0x87C37B91114253D5ull;
        w = (w << 31) | (w >> 33);
        h_ ^= w * 0x4CF5AD432745937Full;
        h_ = ((h_ << 27) | (h_ >> 37)) * 5 + 0x52DCE729;
    }
    uint64_t h_;
    uint64_t len_ = 0;
    uint8_t buf_[8] = {0};
    size_t fill_ = 0;
};

} // namespace lctx
