// Max-over-queries dot products driver (cpu_kernels.h, MaxDotArgs): tiles of
// kTopkTile keys handed out to the threads in order; each tile is widened,
// transposed and scored against all query rows by the active SIMD variant.
// Tiles own disjoint outputs, so no merge is needed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "cpu_kernels.h"
#include "simd.h"

namespace lctx::cpu {

void max_dot_f16(ThreadPool &pool, const MaxDotArgs &a) {
    if (a.n < 0 || a.dim <= 0 || a.n_q < 1 || a.n_q > INT32_MAX || a.ld < a.dim || a.ldq < a.dim)
        fail(LCTX_ERR_INVALID_ARG, "max_dot_f16: bad sizes (n %lld, dim %d, n_q %lld, ld %lld, ldq %lld)",
             (long long)a.n, a.dim, (long long)a.n_q, (long long)a.ld, (long long)a.ldq);
    if (a.n == 0) return;
    if (!a.keys || !a.q || !a.out) fail(LCTX_ERR_INVALID_ARG, "max_dot_f16: null keys, queries or output");
    const KernelTable &kt = active_kernels();
    const int64_t T = kTopkTile, n_tiles = (a.n + T - 1) / T;
    // Groups of tiles, taken dynamically: a shared machine slows threads unevenly.
    constexpr int64_t kTilesPerItem = 8;
    const int64_t n_items = (n_tiles + kTilesPerItem - 1) / kTilesPerItem;
    parallel_claim(pool, n_items, [&](auto &&claim) {
        std::vector<float> ktile(static_cast<size_t>(T * a.dim)), tmp(ktile.size());
        claim([&](int64_t item) {
            const int64_t t1 = std::min(n_tiles, (item + 1) * kTilesPerItem);
            for (int64_t ti = item * kTilesPerItem; ti < t1; ++ti) {
                const int64_t j0 = ti * T, nv = std::min(T, a.n - j0);
                kt.keys_transposed(a.keys + j0 * a.ld, true, a.ld, nv, a.dim, ktile.data(), T, tmp.data());
                kt.max_dot_tile(a.q, a.ldq, static_cast<int>(a.n_q), ktile.data(), T, nv, a.dim, a.out + j0);
            }
        });
    });
}

} // namespace lctx::cpu
