#include "session/model_fingerprint.h"

#include <algorithm>

#include "session/head_profile.h"
#include "session/hash64.h"

namespace lctx {

namespace {

void add_weight(Hash64 &h, const WeightView &w) {
    h.add(static_cast<int32_t>(w.type));
    h.add(w.n_cols);
    h.add(w.n_rows);
    if (w.empty()) return;
    const size_t total = w.row_bytes * static_cast<size_t>(w.n_rows);
    const size_t kSample = 4096;
    if (total <= 3 * kSample) {
        h.update(w.data, total);
        return;
    }
    h.update(w.data, kSample);
    h.update(w.data + total / 2 - kSample / 2, kSample);
    h.update(w.data + total - kSample, kSample);
}

} // namespace

uint64_t model_fingerprint(const Model &model) {
    Hash64 h;
    const std::string key = model_shape_key(model.hparams());
    h.update(key.data(), key.size());
    h.add(model.hparams().rope_base);
    h.add(model.hparams().rms_eps);
    add_weight(h, model.tok_embd());
    add_weight(h, model.output_norm());
    add_weight(h, model.output());
    for (const LayerWeights &L : model.layers())
        for (const WeightView *w : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_norm, &L.ffn_gate, &L.ffn_up,
                                    &L.ffn_down})
            add_weight(h, *w);
    for (const LayerWeights &L : model.layers())   // only where present: other models' fingerprints unchanged
        for (const WeightView *w : {&L.bq, &L.bk, &L.bv})
            if (!w->empty()) add_weight(h, *w);
    return h.digest();
}

} // namespace lctx
