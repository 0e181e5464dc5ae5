// Getting a GGUF file's bytes: memory map (read-only, private) or, when
// mapping is not wanted or fails, read the whole file into memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "common/error.h"
#include "common/log.h"
#include "model/gguf.h"

namespace lctx {

namespace {

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

void read_all(int fd, const std::string &path, uint8_t *dst, size_t size) {
    size_t done = 0;
    while (done < size) {
        const ssize_t n = ::pread(fd, dst + done, size - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(LCTX_ERR_IO, "cannot read '%s': %s", path.c_str(), std::strerror(errno));
        if (n == 0) fail(LCTX_ERR_IO, "cannot read '%s': file shrank to %zu bytes while reading", path.c_str(), done);
        done += static_cast<size_t>(n);
    }
}

} // namespace

std::unique_ptr<GgufFile> GgufFile::open(const std::string &path, bool use_mmap) {
    Fd f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) fail(LCTX_ERR_IO, "cannot open '%s': %s", path.c_str(), std::strerror(errno));
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) fail(LCTX_ERR_IO, "cannot stat '%s': %s", path.c_str(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(LCTX_ERR_IO, "cannot open '%s': not a regular file", path.c_str());
    const size_t size = static_cast<size_t>(st.st_size);

    std::unique_ptr<GgufFile> g(new GgufFile());
    if (use_mmap && size > 0) {
        void *p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
        if (p != MAP_FAILED) {
            g->base_ = static_cast<const uint8_t *>(p);
            g->size_ = size;
            g->mapped_ = true;
        } else {
            LCTX_LOG_WARN("mmap of '%s' failed (%s); reading it into memory instead", path.c_str(), std::strerror(errno));
        }
    }
    if (!g->mapped_) {
        try {
            g->owned_.resize(size);
        } catch (const std::bad_alloc &) {
            fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read '%s'", size, path.c_str());
        }
        read_all(f.fd, path, g->owned_.data(), size);
        g->base_ = g->owned_.data();
        g->size_ = size;
    }
    try {
        g->parse();
    } catch (const Error &e) {
        throw Error(e.status(), path + ": " + e.what());
    }
    return g;
}

std::unique_ptr<GgufFile> GgufFile::from_memory(const void *data, size_t size) {
    std::unique_ptr<GgufFile> g(new GgufFile());
    try {
        if (size > 0) g->owned_.assign(static_cast<const uint8_t *>(data), static_cast<const uint8_t *>(data) + size);
    } catch (const std::bad_alloc &) {
        fail(LCTX_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for a copy of a GGUF file", size);
    }
    g->base_ = g->owned_.data();
    g->size_ = size;
    g->parse();
    return g;
}

GgufFile::~GgufFile() {
    if (mapped_) ::munmap(const_cast<uint8_t *>(base_), size_);
}

} // namespace lctx
