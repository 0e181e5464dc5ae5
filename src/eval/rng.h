// Deterministic random numbers for the task generator: splitmix64 seeding a
// xoshiro256**. The same seed gives the same samples on every platform and
// standard library (std:: distributions are implementation-defined).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lctx::eval {

inline uint64_t splitmix64(uint64_t &state) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// One 64-bit value mixed from a and b (for deriving sub-seeds).
inline uint64_t mix_seed(uint64_t a, uint64_t b) {
    uint64_t s = a ^ (b * 0xd1b54a32d192ed03ULL);
    splitmix64(s);
    return splitmix64(s);
}

// FNV-1a of a string, to fold names into seeds.
inline uint64_t hash_str(const std::string &s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
    return h;
}

class Rng {
public:
    explicit Rng(uint64_t seed) {
        for (auto &x : s_) x = splitmix64(seed);
    }

    uint64_t next() {
        const uint64_t r = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return r;
    }
    // Uniform in [0, n), n > 0 (rejection sampling: no modulo bias).
    uint64_t below(uint64_t n) {
        const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
        uint64_t v;
        do v = next(); while (v >= limit);
        return v % n;
    }
    // Uniform in [lo, hi].
    int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(uint64_t(hi - lo) + 1)); }
    // Uniform in [0, 1).
    double unit() { return double(next() >> 11) * 0x1.0p-53; }

    template <class T> const T &pick(const std::vector<T> &v) { return v[below(v.size())]; }
    // Fisher-Yates.
    template <class T> void shuffle(std::vector<T> &v) {
        for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t s_[4];
};

} // namespace lctx::eval
