#include "backend/registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "backend/module_abi.h"
#include "common/error.h"
#include "common/log.h"

namespace lctx {

namespace {

struct LoadedModule {
    BackendInfo info;
    const lctx_backend_module *table = nullptr;   // null when unusable
};

std::mutex g_mu;
bool g_scanned = false;
std::vector<LoadedModule> g_modules;
std::vector<std::string> g_extra_dirs;   // backends_add_module_dir

// Owns a backend made by a module and hands it back to the module to free.
class ModuleBackend final : public ForwardingBackend {
public:
    ModuleBackend(Backend *impl, const lctx_backend_module *m) : ForwardingBackend(impl), m_(m) {}
    ~ModuleBackend() override { m_->destroy(inner()); }

private:
    const lctx_backend_module *m_;
};

// Loads one module file; the handle stays open for the process lifetime
// (backends and their code must outlive every session).
LoadedModule load_module(const std::string &path) {
    LoadedModule m;
    m.info.path = path;
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        m.info.note = std::string("cannot load: ") + (e ? e : "unknown error");
        return m;
    }
    auto get = reinterpret_cast<lctx_backend_module_get_fn>(dlsym(h, LCTX_BACKEND_MODULE_SYMBOL));
    const lctx_backend_module *t = get ? get() : nullptr;
    if (!t) {
        m.info.note = std::string("no ") + LCTX_BACKEND_MODULE_SYMBOL + " table";
        return m;
    }
    m.info.name = t->name ? t->name : "";
    if (t->api_version != LCTX_BACKEND_API_VERSION || t->struct_size < sizeof(lctx_backend_module)) {
        m.info.note = "built for backend API version " + std::to_string(t->api_version) + ", this library uses " +
                      std::to_string(LCTX_BACKEND_API_VERSION);
        return m;
    }
    if (!t->score || !t->create || !t->destroy || m.info.name.empty()) {
        m.info.note = "incomplete module table";
        return m;
    }
    m.info.score = t->score();
    if (m.info.score <= 0) m.info.note = "cannot run on this machine (no device or driver)";
    m.table = t;
    return m;
}

std::string self_dir() {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void *>(&backends_summary), &info) || !info.dli_fname) return "";
    std::string p = info.dli_fname;
    const size_t slash = p.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : p.substr(0, slash);
    // The path as the library was loaded may be a run path such as
    // lib/pkgconfig/../../lib: log lines name modules by the plain one.
    char real[PATH_MAX];
    return realpath(dir.c_str(), real) ? std::string(real) : dir;
}

void scan_locked() {
    g_modules.clear();
    std::vector<std::string> paths;
    if (const char *env = std::getenv("LCTX_BACKEND_PATH")) {
        std::string s = env;
        for (size_t at = 0; at <= s.size();) {
            const size_t end = std::min(s.find(':', at), s.size());
            if (end > at) paths.push_back(s.substr(at, end - at));
            at = end + 1;
        }
    }
    std::vector<std::string> dirs{self_dir()};
    dirs.insert(dirs.end(), g_extra_dirs.begin(), g_extra_dirs.end());
    for (const std::string &dir : dirs) {
        DIR *d = dir.empty() ? nullptr : opendir(dir.c_str());
        if (!d) continue;
        std::vector<std::string> found;   // sorted: the same order on every file system
        while (dirent *e = readdir(d)) {
            const std::string f = e->d_name;
            if (f.rfind("liblctx-", 0) == 0 && f.size() > 11 && f.find(".so") != std::string::npos)
                found.push_back(dir + "/" + f);
        }
        closedir(d);
        std::sort(found.begin(), found.end());
        paths.insert(paths.end(), found.begin(), found.end());
    }
    // The same file reached twice (a libdir also added by the program, a
    // symlinked directory) is loaded once, under the first path found.
    std::set<std::string> seen;
    std::vector<std::string> unique;
    for (const std::string &p : paths) {
        char real[PATH_MAX];
        const std::string key = realpath(p.c_str(), real) ? std::string(real) : p;
        if (seen.insert(key).second) unique.push_back(p);
    }
    paths.swap(unique);
    for (const std::string &p : paths) {
        LoadedModule m = load_module(p);
        if (!m.info.note.empty())
            LCTX_LOG_INFO("backend module %s%s%s: %s", p.c_str(), m.info.name.empty() ? "" : " (",
                          m.info.name.empty() ? "" : (m.info.name + ")").c_str(), m.info.note.c_str());
        g_modules.push_back(std::move(m));
    }
    g_scanned = true;
}

// A module that did not load has no name from its table: liblctx-NAME.so
// (liblctx-NAME.so.1 ...) still tells which backend it was meant to be.
bool file_names(const std::string &path, const std::string &name) {
    const std::string f = path.substr(path.rfind('/') + 1), stem = "liblctx-" + name + ".so";
    return f.compare(0, stem.size(), stem) == 0 && (f.size() == stem.size() || f[stem.size()] == '.');
}

void ensure_scanned() {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_scanned) scan_locked();
}

} // namespace

std::vector<BackendInfo> backends_available() {
    ensure_scanned();
    std::vector<BackendInfo> out;
    BackendInfo cpu;
    cpu.name = "cpu";
    cpu.score = 1;
    out.push_back(cpu);
    std::lock_guard<std::mutex> lock(g_mu);
    for (const LoadedModule &m : g_modules) out.push_back(m.info);
    return out;
}

void backends_rescan() {
    std::lock_guard<std::mutex> lock(g_mu);
    scan_locked();
}

void backends_add_module_dir(const std::string &dir) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_extra_dirs.push_back(dir);
    if (g_scanned) scan_locked();
}

std::unique_ptr<Backend> make_backend(const std::string &requested, int n_threads) {
    ensure_scanned();
    std::string name = requested;
    if (name.empty())
        if (const char *env = std::getenv("LCTX_BACKEND")) name = env;
    if (name == "cpu") return make_cpu_backend(n_threads);
    const bool any = name.empty() || name == "auto";
    const LoadedModule *best = nullptr;
    std::string why_not;   // a requested backend that cannot run: its module and why
    {
        std::lock_guard<std::mutex> lock(g_mu);
        for (const LoadedModule &m : g_modules) {
            if (!any && m.info.name != name && !(m.info.name.empty() && file_names(m.info.path, name))) continue;
            if (!m.table || m.info.score <= 0) {
                if (!any && why_not.empty()) why_not = "module " + m.info.path + ": " + m.info.note;
                continue;
            }
            if (!best || m.info.score > best->info.score) best = &m;
        }
        if (!any && !best && why_not.empty()) {
            why_not = "no module provides it; found: cpu";
            for (const LoadedModule &m : g_modules) why_not += ", " + (m.info.name.empty() ? m.info.path : m.info.name);
        }
    }
    if (best) {
        char err[512] = "";
        void *impl = best->table->create(n_threads, err, sizeof err);
        if (impl) return std::make_unique<ModuleBackend>(static_cast<Backend *>(impl), best->table);
        LCTX_LOG_WARN("backend '%s' (%s) failed to start: %s; using the CPU", best->info.name.c_str(),
                      best->info.path.c_str(), err[0] ? err : "no reason given");
    } else if (!any) {
        LCTX_LOG_WARN("backend '%s' is not available on this machine (%s); using the CPU", name.c_str(),
                      why_not.c_str());
    }
    return make_cpu_backend(n_threads);
}

std::string backends_summary() {
    std::string s = std::string("backends: cpu (") + cpu_backend_variant() + ")";
    for (const BackendInfo &b : backends_available()) {
        if (b.name == "cpu") continue;
        s += "; " + (b.name.empty() ? b.path : b.name);
        s += b.score > 0 ? " (score " + std::to_string(b.score) + ")" : " (unusable: " + b.note + ")";
    }
    return s;
}

} // namespace lctx
