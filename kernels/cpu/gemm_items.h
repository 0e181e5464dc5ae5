// Internal, shared by the packed GEMMs (f32/bf16 in matmul.cpp, int8 in
// matmul_int8.cpp): their aligned scratch, and how they split their work
// over the pool. An item is one panel of MR rows of one job's weight and one
// chunk of its token tiles; items are numbered panel-major, so consecutive
// items of a thread mostly share a panel and pack it once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu_kernels.h"
#include "thread_pool.h"

namespace lctx::cpu {

// n T's of 64-byte aligned scratch in v (grown as needed): the GEMM
// micro-kernels' panel loads must not split cache lines (measured: 15% of
// the f32 kernel's speed).
template <class T>
T *scratch_aligned(std::vector<T> &v, size_t n) {
    const size_t pad = 64 / sizeof(T);
    if (v.size() < n + pad) v.resize(n + pad);
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<T *>((p + 63) & ~static_cast<uintptr_t>(63));
}

struct GemmItems {
    int64_t first[kMaxMatmulJobs + 1];   // first panel of each job
    int64_t n_panels = 0, n_chunks = 1, n_tiles = 0, mr = 0;

    // Token chunks are added while the panels alone would leave threads idle:
    // the items should be many or a multiple of the threads (9 panels on 2
    // threads would leave one thread a tenth idle).
    GemmItems(const MatmulJob *jobs, int n_jobs, int64_t MR, int64_t tiles, int64_t n_threads)
        : n_tiles(tiles), mr(MR) {
        first[0] = 0;
        for (int j = 0; j < n_jobs; ++j) first[j + 1] = first[j] + (jobs[j].W->n_rows + MR - 1) / MR;
        n_panels = first[n_jobs];
        while (n_chunks < n_tiles && (n_panels * n_chunks) % n_threads != 0 && n_panels * n_chunks < 16 * n_threads)
            ++n_chunks;
    }
    int64_t count() const { return n_panels * n_chunks; }

    // Calls work(each) once on each of min(threads, count()) threads of the
    // pool; each(fn) calls fn like for_each for every item the thread claims.
    // Items are claimed one at a time rather than split in equal ranges: on a
    // shared machine the threads run at uneven speeds, and equal ranges wait
    // for the slowest. Each item writes its own outputs, so the results do
    // not depend on which thread ran it.
    template <class Work>
    void claim(ThreadPool &pool, const MatmulJob *jobs, Work &&work) const {
        parallel_claim(pool, count(), [&](auto &&claim_items) {
            work([&](auto &&fn) { claim_items([&](int64_t i) { for_each(jobs, i, i + 1, fn); }); });
        });
    }

    // fn(job, panel, r0, n_r, t0, t1) for the items [b, e): rows [r0, r0 +
    // n_r) of jobs[job]'s weight (panel: its global number) against the
    // token tiles [t0, t1).
    template <class Fn>
    void for_each(const MatmulJob *jobs, int64_t b, int64_t e, Fn &&fn) const {
        int j = 0;
        for (int64_t item = b; item < e; ++item) {
            const int64_t gp = item / n_chunks, c = item % n_chunks;
            while (gp >= first[j + 1]) ++j;
            const int64_t r0 = (gp - first[j]) * mr, n_r = std::min(mr, jobs[j].W->n_rows - r0);
            fn(j, gp, r0, n_r, n_tiles * c / n_chunks, n_tiles * (c + 1) / n_chunks);
        }
    }
};

} // namespace lctx::cpu
