// The backend registry: which backends this process can use and which one a
// session gets. The CPU backend is built in; others are modules loaded at
// run time (module_abi.h) from
//   - LCTX_BACKEND_PATH: a ':'-separated list of module files, and
//   - the directory of liblctx itself: files named liblctx-*.so, and
//   - directories a program adds (backends_add_module_dir: the `lctx` command
//     line, which links the library statically, adds its install's libdir).
// A file found twice (the same real path) is loaded once.
// A backend is chosen by name (the LCTX_BACKEND environment variable, or a
// name the caller passes) or, by default, as the loaded module with the
// highest score, else the CPU. A module that cannot be used logs one line and
// is skipped; asking for a backend that is not available falls back to the
// CPU with one log line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace lctx {

struct BackendInfo {
    std::string name;     // "cpu", "cuda", ...
    std::string path;     // module file ("" for built-in)
    int32_t score = 0;    // 0: present but cannot run here
    std::string note;     // why it cannot be used, when it cannot
};

// Backends found (scanned once per process; rescan() re-reads the
// environment, for tests).
std::vector<BackendInfo> backends_available();
void backends_rescan();

// One more directory scanned for liblctx-*.so (the next scan; rescans when
// the registry was already scanned). For programs that link the library
// statically and so have no liblctx.so directory of their own.
void backends_add_module_dir(const std::string &dir);

// A backend for a session: `name` (or $LCTX_BACKEND when name is empty; ""
// or "auto": the best available). Never fails for lack of a device: falls
// back to the CPU and logs why.
std::unique_ptr<Backend> make_backend(const std::string &name, int n_threads);

// "cpu (avx512); cuda: no device" style summary for lctx_build_info().
std::string backends_summary();

} // namespace lctx
