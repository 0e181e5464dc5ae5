#include "session/index_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "session/hash64.h"
#include "session/model_fingerprint.h"

namespace lctx {

namespace {

const char kMagic[8] = {'L', 'C', 'T', 'X', 'R', 'I', 'D', 'X'};
constexpr uint64_t kPreamble = 8 + 4 + 4 + 8;   // magic, version, kind, file size

// The process umask, read without changing it (umask(2) would change it for
// every thread for a moment): /proc/self/status, else the usual 022.
mode_t current_umask() {
    std::FILE *f = std::fopen("/proc/self/status", "r");
    mode_t mask = 022;
    if (!f) return mask;
    char line[256];
    while (std::fgets(line, sizeof line, f))
        if (std::strncmp(line, "Umask:", 6) == 0) {
            mask = static_cast<mode_t>(std::strtoul(line + 6, nullptr, 8));
            break;
        }
    std::fclose(f);
    return mask;
}

std::string parent_dir(const std::string &path) {
    const std::filesystem::path p(path);
    const std::string d = p.parent_path().string();
    return d.empty() ? "." : d;
}

} // namespace

const char *index_kind_name(IndexKind kind) {
    switch (kind) {
    case IndexKind::REFORM: return "REFORM";
    case IndexKind::ILRE: return "ILRe";
    }
    return "unknown";
}

IndexKind read_index_kind(const std::string &path) {
    std::FILE *fp = std::fopen(path.c_str(), "rb");
    if (!fp) fail(LCTX_ERR_IO, "cannot open index '%s': %s", path.c_str(), std::strerror(errno));
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> guard(fp, std::fclose);
    unsigned char pre[kPreamble];
    if (std::fread(pre, 1, sizeof pre, fp) != sizeof pre || std::memcmp(pre, kMagic, 8) != 0)
        fail(LCTX_ERR_FORMAT, "'%s' is not an lctx index", path.c_str());
    uint32_t version = 0, kind = 0;
    std::memcpy(&version, pre + 8, 4);
    std::memcpy(&kind, pre + 12, 4);
    if (version != kIndexVersion)
        fail(LCTX_ERR_FORMAT, "index '%s' has format version %u; this lctx reads version %u: rebuild the index "
             "(lctx_index_save)", path.c_str(), version, kIndexVersion);
    if (kind != static_cast<uint32_t>(IndexKind::REFORM) && kind != static_cast<uint32_t>(IndexKind::ILRE))
        fail(LCTX_ERR_FORMAT, "index '%s' holds an index of unknown kind %u", path.c_str(), kind);
    return static_cast<IndexKind>(kind);
}

IndexWriter::IndexWriter(const std::string &path, IndexKind kind, uint64_t payload_bytes)
    : path_(path), hash_(std::make_shared<Hash64>()) {
    if (path.empty()) fail(LCTX_ERR_INVALID_ARG, "index path is empty");
    const std::string name = std::filesystem::path(path).filename().string();
    if (name.empty() || name == "." || name == "..")
        fail(LCTX_ERR_INVALID_ARG, "index path '%s' names a directory, not a file", path.c_str());
    // A unique name in the target's directory (so the rename stays on one
    // file system), created with O_CREAT | O_EXCL by mkstemp: an existing
    // file or symbolic link there is never opened or followed.
    tmp_ = parent_dir(path) + "/." + name + ".tmp-XXXXXX";
    const int fd = ::mkstemp(tmp_.data());
    if (fd < 0) fail(LCTX_ERR_IO, "cannot create a temporary index file next to '%s': %s", path.c_str(),
                     std::strerror(errno));
    ::fchmod(fd, 0666 & ~current_umask());   // as a plain create would (mkstemp makes 0600)
    f_ = ::fdopen(fd, "wb");
    if (!f_) {
        const int err = errno;
        ::close(fd);
        ::unlink(tmp_.c_str());
        fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp_.c_str(), std::strerror(err));
    }
    total_ = kPreamble + payload_bytes + 8;
    try {
        bytes(kMagic, 8);
        put(kIndexVersion);
        put(static_cast<uint32_t>(kind));
        put(total_);
    } catch (...) {
        std::fclose(f_);
        ::unlink(tmp_.c_str());
        throw;
    }
}

IndexWriter::~IndexWriter() {
    if (f_) std::fclose(f_);
    if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void IndexWriter::bytes(const void *p, size_t len) {
    if (!f_) fail(LCTX_ERR_INTERNAL, "index writer used after commit");
    if (len && std::fwrite(p, 1, len, f_) != len)
        fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp_.c_str(), std::strerror(errno));
    static_cast<Hash64 *>(hash_.get())->update(p, len);
    written_ += len;
}

void IndexWriter::commit() {
    const uint64_t sum = static_cast<Hash64 *>(hash_.get())->digest();
    bytes(&sum, sizeof sum);
    if (written_ != total_)
        fail(LCTX_ERR_INTERNAL, "index size %llu != planned %llu", (unsigned long long)written_,
             (unsigned long long)total_);
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
        fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp_.c_str(), std::strerror(errno));
    std::FILE *f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp_.c_str(), std::strerror(errno));
    // rename(2) replaces the target itself (a symbolic link there is replaced, not followed).
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
        fail(LCTX_ERR_IO, "cannot move the index to '%s': %s", path_.c_str(), std::strerror(errno));
    committed_ = true;
    // The rename is durable once the directory is.
    const std::string dir = parent_dir(path_);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || ::fsync(dfd) != 0) {
        const int err = errno;
        if (dfd >= 0) ::close(dfd);
        fail(LCTX_ERR_IO, "index '%s' written, but its directory could not be synced: %s", path_.c_str(),
             std::strerror(err));
    }
    ::close(dfd);
}

IndexReader::IndexReader(const std::string &path, IndexKind kind) : path_(path) {
    std::FILE *fp = std::fopen(path.c_str(), "rb");
    if (!fp) fail(LCTX_ERR_IO, "cannot open index '%s': %s", path.c_str(), std::strerror(errno));
    file_.reset(fp, std::fclose);
    struct stat st {};
    if (::fstat(::fileno(fp), &st) != 0) fail(LCTX_ERR_IO, "cannot stat index '%s': %s", path.c_str(), std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(LCTX_ERR_IO, "index '%s' is not a regular file", path.c_str());
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < kPreamble + 8) fail(LCTX_ERR_FORMAT, "'%s' is not an lctx index (too short)", path.c_str());
    unsigned char pre[kPreamble];
    if (std::fread(pre, 1, sizeof pre, fp) != sizeof pre)
        fail(LCTX_ERR_FORMAT, "index '%s' is truncated (read failed)", path.c_str());
    if (std::memcmp(pre, kMagic, 8) != 0) fail(LCTX_ERR_FORMAT, "'%s' is not an lctx index", path.c_str());
    uint32_t version = 0, file_kind = 0;
    uint64_t total = 0;
    std::memcpy(&version, pre + 8, 4);
    std::memcpy(&file_kind, pre + 12, 4);
    std::memcpy(&total, pre + 16, 8);
    if (version != kIndexVersion)
        fail(LCTX_ERR_FORMAT, "index '%s' has format version %u; this lctx reads version %u: rebuild the index "
             "(lctx_index_save)", path.c_str(), version, kIndexVersion);
    if (file_kind != static_cast<uint32_t>(kind))
        fail(LCTX_ERR_FORMAT, "index '%s' holds a %s index (kind %u), not a %s one", path.c_str(),
             index_kind_name(static_cast<IndexKind>(file_kind)), file_kind, index_kind_name(kind));
    if (total != size)
        fail(LCTX_ERR_FORMAT, "index '%s' is %llu bytes but should be %llu: the file is truncated or damaged",
             path.c_str(), (unsigned long long)size, (unsigned long long)total);
    // The checksum of every byte before it, in one pass with a fixed buffer.
    Hash64 h;
    h.update(pre, sizeof pre);
    std::vector<unsigned char> buf(1 << 16);
    for (uint64_t left = size - kPreamble - 8; left > 0;) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
        if (std::fread(buf.data(), 1, n, fp) != n)
            fail(LCTX_ERR_FORMAT, "index '%s' is truncated (read failed)", path.c_str());
        h.update(buf.data(), n);
        left -= n;
    }
    uint64_t sum = 0;
    if (std::fread(&sum, 1, sizeof sum, fp) != sizeof sum)
        fail(LCTX_ERR_FORMAT, "index '%s' is truncated (no checksum)", path.c_str());
    if (sum != h.digest())
        fail(LCTX_ERR_FORMAT, "index '%s' is corrupted: checksum mismatch (an altered or damaged file)", path.c_str());
    if (std::fseek(fp, static_cast<long>(kPreamble), SEEK_SET) != 0)
        fail(LCTX_ERR_IO, "cannot read index '%s': %s", path.c_str(), std::strerror(errno));
    left_ = size - kPreamble - 8;
}

void IndexReader::bytes(void *p, size_t len) {
    if (len > left_) fail(LCTX_ERR_FORMAT, "index '%s': its sizes do not match the file size", path_.c_str());
    if (len && std::fread(p, 1, len, file_.get()) != len)
        fail(LCTX_ERR_FORMAT, "index '%s' is truncated (read failed)", path_.c_str());
    left_ -= len;
}

namespace {

uint64_t body_bytes(int64_t n_tokens, int32_t dim, int32_t exit, int32_t n_kv, int32_t head_dim, int64_t n_slots) {
    const uint64_t per_head = uint64_t(n_slots) * (2ull * head_dim * 4 + 8 + 4);
    return uint64_t(n_tokens) * (4 + 2ull * uint64_t(dim)) + uint64_t(exit) * n_kv * per_head;
}

} // namespace

void write_reform_index(const std::string &path, const Model &model, const HeadProfile &profile,
                        const std::vector<int32_t> &ids, const EmbeddingStore &store, const ReformEncoder &enc) {
    const Hparams &hp = model.hparams();
    const std::string pj = head_profile_json(profile);
    const EncoderConfig &c = enc.config();
    const int64_t N = static_cast<int64_t>(ids.size()), S = enc.n_slots();
    const int32_t D = enc.dim(), E = enc.exit_layer(), KV = hp.n_head_kv, d = hp.head_dim;
    const uint64_t header = 8 + 4 + pj.size() + 5 * 8 + 4 + 5 * 4 + 2 * 8;
    IndexWriter w(path, IndexKind::REFORM, header + body_bytes(N, D, E, KV, d, S));
    w.put(model_fingerprint(model));
    w.put(uint32_t(pj.size()));
    w.bytes(pj.data(), pj.size());
    for (int64_t v : {c.chunk, c.budget, c.sink, c.recent, c.obs}) w.put(v);
    w.put(uint32_t(c.accumulate ? 1 : 0));
    for (int32_t v : {hp.n_layer, KV, d, D, E}) w.put(v);
    w.put(N);
    w.put(S);
    w.bytes(ids.data(), ids.size() * sizeof(int32_t));
    for (int64_t t = 0; t < N;) {
        const int64_t len = std::min(N - t, store.contiguous_from(t));
        w.bytes(store.row(t), static_cast<size_t>(len) * D * sizeof(uint16_t));
        t += len;
    }
    const KvStore &cache = enc.cache();
    std::vector<float> rows(static_cast<size_t>(S) * d);
    for (int32_t l = 0; l < E; ++l)
        for (int32_t g = 0; g < KV; ++g) {
            cache.read_keys(l, g, 0, S, rows.data());
            w.bytes(rows.data(), rows.size() * sizeof(float));
            cache.read_values(l, g, 0, S, rows.data());
            w.bytes(rows.data(), rows.size() * sizeof(float));
            w.bytes(enc.orig(l, g).data(), static_cast<size_t>(S) * sizeof(int64_t));
            w.bytes(enc.score(l, g).data(), static_cast<size_t>(S) * sizeof(float));
        }
    w.commit();
}

ReformIndexHeader read_reform_index_header(const std::string &path, const Model &model) {
    const Hparams &hp = model.hparams();
    ReformIndexHeader h;
    h.path = path;
    h.reader = std::make_shared<IndexReader>(path, IndexKind::REFORM);   // container and checksum verified
    IndexReader &r = *h.reader;
    const uint64_t fp_file = r.get<uint64_t>();
    if (fp_file != model_fingerprint(model))
        fail(LCTX_ERR_INVALID_ARG, "index '%s' was built with another model (or quantization) than the one given",
             path.c_str());
    const uint32_t pj_len = r.get<uint32_t>();
    if (pj_len > (1u << 20) || pj_len > r.left()) fail(LCTX_ERR_FORMAT, "index '%s': profile of %u bytes is implausible", path.c_str(), pj_len);
    std::string pj(pj_len, '\0');
    r.bytes(pj.data(), pj_len);
    h.profile = parse_head_profile(pj, path + " (profile)");
    h.profile.origin = path;
    validate_head_profile(h.profile, hp);
    h.cfg.chunk = r.get<int64_t>();
    h.cfg.budget = r.get<int64_t>();
    h.cfg.sink = r.get<int64_t>();
    h.cfg.recent = r.get<int64_t>();
    h.cfg.obs = r.get<int64_t>();
    const uint32_t acc = r.get<uint32_t>();
    h.cfg.accumulate = acc != 0;
    const EncoderConfig &c = h.cfg;
    const int64_t kMax = int64_t(1) << 24;
    // Each size in range before any sum of them (no overflow on crafted values: found by fuzz_index).
    if (c.chunk < 1 || c.chunk > kMax || c.budget < 2 || c.budget > kMax || c.sink < 0 || c.sink > kMax ||
        c.recent < 0 || c.recent > kMax || c.sink + c.recent >= c.budget || c.obs < 1 || c.obs > c.chunk || acc > 1)
        fail(LCTX_ERR_FORMAT, "index '%s': invalid encoder sizes", path.c_str());
    int32_t dims[5];
    for (int32_t &v : dims) v = r.get<int32_t>();
    h.dim = dims[3];
    h.exit_layer = dims[4];
    if (dims[0] != hp.n_layer || dims[1] != hp.n_head_kv || dims[2] != hp.head_dim ||
        h.dim != static_cast<int32_t>(h.profile.heads.size()) * hp.head_dim || h.exit_layer != h.profile.exit_layer())
        fail(LCTX_ERR_FORMAT, "index '%s': dimensions do not match the model and the profile", path.c_str());
    h.n_tokens = r.get<int64_t>();
    h.n_slots = r.get<int64_t>();
    if (h.n_tokens < 0 || h.n_slots < 0 || h.n_slots > c.budget || h.n_slots > h.n_tokens ||
        (h.exit_layer == 0 && h.n_slots != 0))
        fail(LCTX_ERR_FORMAT, "index '%s': invalid token or slot count", path.c_str());
    // Counts bounded by the bytes left before they are multiplied.
    if (h.n_tokens > int64_t(1) << 40 || static_cast<uint64_t>(h.n_tokens) > r.left() / (4 + 2 * uint64_t(h.dim)) ||
        body_bytes(h.n_tokens, h.dim, h.exit_layer, hp.n_head_kv, hp.head_dim, h.n_slots) != r.left())
        fail(LCTX_ERR_FORMAT, "index '%s': the sizes in the header do not match the file size", path.c_str());
    h.n_vocab = hp.n_vocab;
    return h;
}

void read_reform_index_body(ReformIndexHeader &h, std::vector<int32_t> &ids, EmbeddingStore &store,
                            ReformEncoder &enc) {
    const int32_t KV = enc.cache().n_head_kv(), d = enc.cache().head_dim();
    IndexReader &r = *h.reader;
    if (r.left() != body_bytes(h.n_tokens, h.dim, h.exit_layer, KV, d, h.n_slots))
        fail(LCTX_ERR_INTERNAL, "index reader: the body does not match the header");
    if (store.dim() != h.dim || enc.exit_layer() != h.exit_layer)
        fail(LCTX_ERR_INTERNAL, "index reader: encoder does not match the header");
    ids.resize(static_cast<size_t>(h.n_tokens));
    r.bytes(ids.data(), ids.size() * sizeof(int32_t));
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= h.n_vocab)
            fail(LCTX_ERR_FORMAT, "index '%s': token id %d at %zu is out of range", h.path.c_str(), ids[i], i);
    store.reserve(h.n_tokens);
    for (int64_t t = 0; t < h.n_tokens;) {
        const int64_t len = std::min(h.n_tokens - t, store.contiguous_from(t));
        r.bytes(store.row(t), static_cast<size_t>(len) * h.dim * sizeof(uint16_t));
        t += len;
    }
    store.commit(h.n_tokens);
    enc.restore(h.n_slots, h.n_tokens);
    KvStore &cache = enc.cache();
    const size_t S = static_cast<size_t>(h.n_slots);
    std::vector<float> keys(S * d), values(S * d);
    for (int32_t l = 0; l < h.exit_layer; ++l)
        for (int32_t g = 0; g < KV; ++g) {
            r.bytes(keys.data(), keys.size() * sizeof(float));
            r.bytes(values.data(), values.size() * sizeof(float));
            cache.write_rows(l, g, 0, static_cast<int64_t>(S), keys.data(), values.data());
            std::vector<int64_t> &o = enc.orig(l, g);
            r.bytes(o.data(), S * sizeof(int64_t));
            r.bytes(enc.score(l, g).data(), S * sizeof(float));
            for (size_t s = 0; s < S; ++s)
                if (o[s] < 0 || o[s] >= h.n_tokens || (s > 0 && o[s] <= o[s - 1]))
                    fail(LCTX_ERR_FORMAT, "index '%s': working-cache token indices are invalid", h.path.c_str());
        }
    if (r.left() != 0) fail(LCTX_ERR_FORMAT, "index '%s': %llu bytes left after the payload", h.path.c_str(),
                            (unsigned long long)r.left());
}

} // namespace lctx
