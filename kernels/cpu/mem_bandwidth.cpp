// Read bandwidth of main memory with every pool thread streaming its own
// slice of a buffer much larger than the caches (lctx bench: the bound a
// decode step's KV and weight reads are measured against).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cpu_kernels.h"

namespace lctx::cpu {

double read_bandwidth_gb_s(ThreadPool &pool) {
    const size_t n = (size_t{256} << 20) / sizeof(uint64_t);   // 256 MiB
    std::vector<uint64_t> buf(n);
    pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i);   // pages owned by the reading thread
    });
    double best = 0.0;
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()) * 8);   // one line per thread
    for (int rep = 0; rep < 3; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e, int t) {
            uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;   // independent chains; the loop vectorises
            int64_t i = b;
            for (; i + 4 <= e; i += 4) {
                s0 += buf[i];
                s1 += buf[i + 1];
                s2 += buf[i + 2];
                s3 += buf[i + 3];
            }
            for (; i < e; ++i) s0 += buf[i];
            sums[static_cast<size_t>(t) * 8] += s0 + s1 + s2 + s3;
        });
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
    }
    volatile uint64_t sink = 0;
    for (uint64_t s : sums) sink = sink + s;
    return best;
}

} // namespace lctx::cpu
