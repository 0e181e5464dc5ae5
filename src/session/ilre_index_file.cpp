#include "session/ilre_index_file.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "session/index_file.h"
#include "session/model_fingerprint.h"

namespace lctx {

namespace {

constexpr uint64_t kHeaderBytes = 8 + 4 * 4 + 3 * 8 + 4 + 2 * 8;

uint64_t payload_bytes(int64_t n_tokens, int32_t n_kv, int32_t head_dim, int32_t n_full, int64_t n_slots,
                       int64_t n_dca_sinks) {
    const uint64_t per_token = 4 + uint64_t(n_kv) * head_dim * 2;
    const uint64_t per_slot = uint64_t(n_full) * n_kv * (2ull * head_dim * 4 + 4);
    const uint64_t per_sink = uint64_t(n_full) * n_kv * (2ull * head_dim * 4);
    return kHeaderBytes + uint64_t(n_tokens) * per_token + uint64_t(n_slots) * per_slot + 8 +
           uint64_t(n_dca_sinks) * per_sink;
}

} // namespace

void write_ilre_index(const std::string &path, const Model &model, int32_t retrieval_layer,
                      const std::vector<int32_t> &ids, const IlreEncoder &enc) {
    const Hparams &hp = model.hparams();
    const IlreEncoderConfig &c = enc.config();
    const int64_t N = static_cast<int64_t>(ids.size());
    const KvStore *cache = enc.cache();
    const int64_t S = cache ? cache->size() : 0;
    const int32_t KV = hp.n_head_kv, D = hp.head_dim, F = enc.n_full_layers();
    if (enc.n_encoded() != N) fail(LCTX_ERR_INTERNAL, "ILRe index: %lld ids for %lld encoded tokens", (long long)N,
                                   (long long)enc.n_encoded());
    const int64_t NS = enc.n_dca_sinks();
    IndexWriter w(path, IndexKind::ILRE, payload_bytes(N, KV, D, F, S, NS));
    w.put(model_fingerprint(model));
    for (int32_t v : {retrieval_layer, hp.n_layer, KV, D}) w.put(v);
    for (int64_t v : {c.sink, c.window, c.chunk}) w.put(v);
    w.put(uint32_t(c.dca ? 1 : 0));
    w.put(N);
    w.put(S);
    w.bytes(ids.data(), ids.size() * sizeof(int32_t));
    for (int32_t g = 0; g < KV; ++g) {
        const EmbeddingStore &st = enc.keys(0, g);
        for (int64_t t = 0; t < N;) {
            const int64_t len = std::min(N - t, st.contiguous_from(t));
            w.bytes(st.row(t), static_cast<size_t>(len) * D * sizeof(uint16_t));
            t += len;
        }
    }
    std::vector<float> rows(static_cast<size_t>(S) * D);
    for (int32_t l = 0; l < F; ++l)
        for (int32_t g = 0; g < KV; ++g) {
            cache->read_keys(l, g, 0, S, rows.data());
            w.bytes(rows.data(), rows.size() * sizeof(float));
            cache->read_values(l, g, 0, S, rows.data());
            w.bytes(rows.data(), rows.size() * sizeof(float));
            w.bytes(cache->positions(l, g), static_cast<size_t>(S) * sizeof(int32_t));
        }
    w.put(NS);
    const size_t per_head = static_cast<size_t>(NS * D);
    for (size_t i = 0; i < static_cast<size_t>(F) * KV; ++i) {
        w.bytes(enc.dca_sink_keys().data() + i * per_head, per_head * sizeof(float));
        w.bytes(enc.dca_sink_values().data() + i * per_head, per_head * sizeof(float));
    }
    w.commit();
}

IlreIndexInfo read_ilre_index(const std::string &path, const Model &model, std::vector<int32_t> &ids,
                              const std::function<IlreEncoder &(const IlreIndexInfo &)> &make_encoder) {
    const Hparams &hp = model.hparams();
    IndexReader r(path, IndexKind::ILRE);   // the whole file is verified here
    if (r.get<uint64_t>() != model_fingerprint(model))
        fail(LCTX_ERR_INVALID_ARG, "index '%s' was built with another model (or quantization) than the one given",
             path.c_str());
    IlreIndexInfo info;
    info.retrieval_layer = r.get<int32_t>();
    const int32_t n_layer = r.get<int32_t>(), KV = r.get<int32_t>(), D = r.get<int32_t>();
    info.cfg.sink = r.get<int64_t>();
    info.cfg.window = r.get<int64_t>();
    info.cfg.chunk = r.get<int64_t>();
    info.cfg.dca = r.get<uint32_t>() != 0;
    const int64_t N = r.get<int64_t>(), S = r.get<int64_t>();
    if (n_layer != hp.n_layer || KV != hp.n_head_kv || D != hp.head_dim || info.retrieval_layer < 0 ||
        info.retrieval_layer >= hp.n_layer)
        fail(LCTX_ERR_FORMAT, "index '%s': its dimensions do not match the model", path.c_str());
    const int64_t kMax = int64_t(1) << 24;
    if (info.cfg.sink < 0 || info.cfg.sink > kMax || info.cfg.window < 1 || info.cfg.window > kMax ||
        info.cfg.chunk < 1 || info.cfg.chunk > kMax)
        fail(LCTX_ERR_FORMAT, "index '%s': invalid encoder sizes", path.c_str());
    const int32_t F = info.retrieval_layer;
    if (N < 0 || S < 0 || S > info.cfg.sink + info.cfg.window || (F == 0 && S != 0) || N > int64_t(1) << 40 ||
        payload_bytes(N, KV, D, F, S, 0) - kHeaderBytes > r.left())
        fail(LCTX_ERR_FORMAT, "index '%s': its token and slot counts do not match its size", path.c_str());
    ids.resize(static_cast<size_t>(N));
    r.bytes(ids.data(), ids.size() * sizeof(int32_t));
    for (int32_t id : ids)
        if (id < 0 || id >= hp.n_vocab) fail(LCTX_ERR_FORMAT, "index '%s': token id %d is out of range", path.c_str(), id);
    IlreEncoder &enc = make_encoder(info);
    for (int32_t g = 0; g < KV; ++g) {
        EmbeddingStore &st = enc.keys(0, g);
        st.reserve(N);
        for (int64_t t = 0; t < N;) {
            const int64_t len = std::min(N - t, st.contiguous_from(t));
            r.bytes(st.row(t), static_cast<size_t>(len) * D * sizeof(uint16_t));
            t += len;
        }
        st.commit(N);
    }
    if (KvStore *cache = enc.cache()) {
        cache->clear();
        cache->append(S);
        std::vector<float> k(static_cast<size_t>(S) * D), v(k.size());
        std::vector<int32_t> pos(static_cast<size_t>(S));
        for (int32_t l = 0; l < F; ++l)
            for (int32_t g = 0; g < KV; ++g) {
                r.bytes(k.data(), k.size() * sizeof(float));
                r.bytes(v.data(), v.size() * sizeof(float));
                r.bytes(pos.data(), pos.size() * sizeof(int32_t));
                for (int64_t i = 0; i < S; ++i)
                    if (pos[i] < 0 || pos[i] >= N || (i && pos[i] <= pos[i - 1]))
                        fail(LCTX_ERR_FORMAT, "index '%s': invalid cache positions", path.c_str());
                cache->write_rows(l, g, 0, S, k.data(), v.data());
                cache->set_head_positions(l, g, 0, pos.data(), S);
            }
    }
    const int64_t NS = r.get<int64_t>();
    if (NS < 0 || NS > std::min(info.cfg.sink, S) || (!info.cfg.dca && NS != 0) ||
        uint64_t(NS) * F * KV * D * 8 != r.left())
        fail(LCTX_ERR_FORMAT, "index '%s': invalid DCA sink rows", path.c_str());
    const size_t per_head = static_cast<size_t>(NS * D);
    std::vector<float> sk(per_head * F * KV), sv(sk.size());
    for (size_t i = 0; i < static_cast<size_t>(F) * KV; ++i) {
        r.bytes(sk.data() + i * per_head, per_head * sizeof(float));
        r.bytes(sv.data() + i * per_head, per_head * sizeof(float));
    }
    enc.restore(N, NS, std::move(sk), std::move(sv));
    return info;
}

} // namespace lctx
