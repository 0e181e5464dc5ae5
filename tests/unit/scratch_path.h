// Scratch files for tests and fuzz targets: a path unique to this process
// (ctest runs the tests of one file in parallel processes) that is removed
// when the process exits normally, whether its tests passed or failed.
// A crash leaves it behind, with the pid in its name to tell whose it was.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

namespace scratch {

namespace detail {
// Removes what it holds when static objects are destroyed (exit() or a return
// from main; gtest's main and libFuzzer both leave that way).
struct Registry {
    std::mutex mu;
    std::vector<std::string> paths;
    ~Registry() {
        for (const std::string &p : paths) std::remove(p.c_str());
    }
};
inline Registry &registry() {
    static Registry r;
    return r;
}
} // namespace detail

// DIR/PREFIX_<pid>_NAME, with DIR the test temp dir (gtest's TempDir() is
// /tmp/ unless TEST_TMPDIR says otherwise; fuzz targets use /tmp/). The file
// is not created; whatever the caller writes there is removed at exit.
inline std::string path(const std::string &prefix, const std::string &name, const std::string &dir = "/tmp/") {
    std::string p = dir + prefix + "_" + std::to_string(::getpid()) + "_" + name;
    detail::Registry &r = detail::registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const std::string &q : r.paths)
        if (q == p) return p;
    r.paths.push_back(p);
    return p;
}

} // namespace scratch
