#include "session/index_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "session/hash64.h"
#include "session/model_fingerprint.h"

namespace lctx {

namespace {

const char kMagic[8] = {'L', 'C', 'T', 'X', 'R', 'I', 'D', 'X'};

struct Writer {
    std::FILE *f;
    Hash64 h;
    uint64_t n = 0;
    std::string path;
    void bytes(const void *p, size_t len) {
        if (len && std::fwrite(p, 1, len, f) != len)
            fail(LCTX_ERR_IO, "cannot write index '%s': %s", path.c_str(), std::strerror(errno));
        h.update(p, len);
        n += len;
    }
    template <class T> void put(const T &v) { bytes(&v, sizeof v); }
};

struct Reader {
    std::FILE *f;
    Hash64 *h;
    uint64_t left;   // bytes before the checksum still to read
    std::string path;
    void bytes(void *p, size_t len) {
        if (len > left) fail(LCTX_ERR_FORMAT, "index '%s' is truncated or its sizes are inconsistent", path.c_str());
        if (len && std::fread(p, 1, len, f) != len)
            fail(LCTX_ERR_FORMAT, "index '%s' is truncated (read failed)", path.c_str());
        h->update(p, len);
        left -= len;
    }
    template <class T> T get() {
        T v;
        bytes(&v, sizeof v);
        return v;
    }
};

uint64_t body_bytes(int64_t n_tokens, int32_t dim, int32_t exit, int32_t n_kv, int32_t head_dim, int64_t n_slots) {
    const uint64_t per_head = uint64_t(n_slots) * (2ull * head_dim * 4 + 8 + 4);
    return uint64_t(n_tokens) * (4 + 2ull * uint64_t(dim)) + uint64_t(exit) * n_kv * per_head;
}

} // namespace

void write_reform_index(const std::string &path, const Model &model, const HeadProfile &profile,
                        const std::vector<int32_t> &ids, const EmbeddingStore &store, const ReformEncoder &enc) {
    const Hparams &hp = model.hparams();
    const std::string tmp = path + ".tmp";
    std::FILE *f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(LCTX_ERR_IO, "cannot create index '%s': %s", tmp.c_str(), std::strerror(errno));
    std::unique_ptr<std::FILE, int (*)(std::FILE *)> guard(f, std::fclose);
    try {
        Writer w{f, Hash64(), 0, tmp};
        const std::string pj = head_profile_json(profile);
        const EncoderConfig &c = enc.config();
        const int64_t N = static_cast<int64_t>(ids.size()), S = enc.n_slots();
        const int32_t D = enc.dim(), E = enc.exit_layer(), KV = hp.n_head_kv, d = hp.head_dim;
        const uint64_t header = 8 + 4 + 4 + 8 + 8 + 4 + pj.size() + 5 * 8 + 4 + 5 * 4 + 2 * 8;
        const uint64_t total = header + body_bytes(N, D, E, KV, d, S) + 8;
        w.bytes(kMagic, 8);
        w.put(kReformIndexVersion);
        w.put(uint32_t(0));
        w.put(total);
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
        const uint64_t sum = w.h.digest();
        w.bytes(&sum, sizeof sum);
        if (w.n != total) fail(LCTX_ERR_INTERNAL, "index size %llu != planned %llu", (unsigned long long)w.n,
                               (unsigned long long)total);
        if (std::fflush(f) != 0) fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp.c_str(), std::strerror(errno));
    } catch (...) {
        guard.reset();
        std::remove(tmp.c_str());
        throw;
    }
    if (std::fclose(guard.release()) != 0) {
        std::remove(tmp.c_str());
        fail(LCTX_ERR_IO, "cannot write index '%s': %s", tmp.c_str(), std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        fail(LCTX_ERR_IO, "cannot move the index to '%s': %s", path.c_str(), std::strerror(errno));
    }
}

ReformIndexHeader read_reform_index_header(const std::string &path, const Model &model) {
    const Hparams &hp = model.hparams();
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) fail(LCTX_ERR_IO, "cannot open index '%s': %s", path.c_str(), ec.message().c_str());
    std::FILE *fp = std::fopen(path.c_str(), "rb");
    if (!fp) fail(LCTX_ERR_IO, "cannot open index '%s': %s", path.c_str(), std::strerror(errno));
    ReformIndexHeader h;
    h.path = path;
    h.file.reset(fp, std::fclose);
    auto hash = std::make_shared<Hash64>();
    h.hash = hash;
    if (size < 8 + 4 + 4 + 8 + 8) fail(LCTX_ERR_FORMAT, "'%s' is not an lctx index (too short)", path.c_str());
    Reader r{fp, hash.get(), size - 8, path};
    char magic[8];
    r.bytes(magic, 8);
    if (std::memcmp(magic, kMagic, 8) != 0) fail(LCTX_ERR_FORMAT, "'%s' is not an lctx index", path.c_str());
    const uint32_t version = r.get<uint32_t>();
    if (version != kReformIndexVersion)
        fail(LCTX_ERR_FORMAT, "index '%s' has version %u; this lctx reads version %u: rebuild the index",
             path.c_str(), version, kReformIndexVersion);
    r.get<uint32_t>();
    const uint64_t total = r.get<uint64_t>();
    if (total != size)
        fail(LCTX_ERR_FORMAT, "index '%s' is %llu bytes but should be %llu: the file is truncated or damaged",
             path.c_str(), (unsigned long long)size, (unsigned long long)total);
    const uint64_t fp_file = r.get<uint64_t>();
    if (fp_file != model_fingerprint(model))
        fail(LCTX_ERR_INVALID_ARG, "index '%s' was built with another model (or quantization) than the one given",
             path.c_str());
    const uint32_t pj_len = r.get<uint32_t>();
    if (pj_len > (1u << 20)) fail(LCTX_ERR_FORMAT, "index '%s': profile of %u bytes is implausible", path.c_str(), pj_len);
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
    if (c.chunk < 1 || c.chunk > kMax || c.budget < 2 || c.budget > kMax || c.sink < 0 || c.recent < 0 ||
        c.sink + c.recent >= c.budget || c.obs < 1 || c.obs > c.chunk || acc > 1)
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
    if (h.n_tokens > int64_t(1) << 40 ||
        body_bytes(h.n_tokens, h.dim, h.exit_layer, hp.n_head_kv, hp.head_dim, h.n_slots) != r.left)
        fail(LCTX_ERR_FORMAT, "index '%s': the sizes in the header do not match the file size", path.c_str());
    h.n_vocab = hp.n_vocab;
    return h;
}

void read_reform_index_body(ReformIndexHeader &h, std::vector<int32_t> &ids, EmbeddingStore &store,
                            ReformEncoder &enc) {
    Hash64 *hash = static_cast<Hash64 *>(h.hash.get());
    const int32_t KV = enc.cache().n_head_kv(), d = enc.cache().head_dim();
    Reader r{h.file.get(), hash, body_bytes(h.n_tokens, h.dim, h.exit_layer, KV, d, h.n_slots) + 0, h.path};
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
    const uint64_t expect = hash->digest();
    uint64_t sum = 0;
    if (std::fread(&sum, 1, sizeof sum, h.file.get()) != sizeof sum)
        fail(LCTX_ERR_FORMAT, "index '%s' is truncated (no checksum)", h.path.c_str());
    if (sum != expect)
        fail(LCTX_ERR_FORMAT, "index '%s' is corrupted: checksum mismatch", h.path.c_str());
}

} // namespace lctx
