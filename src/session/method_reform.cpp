#include "session/method_reform.h"

#include <algorithm>
#include <numeric>

#include "backend/budget_backend.h"
#include "common/error.h"
#include "session/state_digest.h"
#include "common/log.h"
#include "session/index_file.h"
#include "session/query_mask.h"
#include "session/selector.h"

namespace lctx {

ReformMethod::ReformMethod(const Model &model, Backend &backend, const lctx_session_params &sp)
    : ReformMethod(model, backend, sp, reform_params_from(model.hparams(), sp)) {}

ReformMethod::ReformMethod(const Model &model, Backend &backend, const lctx_session_params &sp,
                           const ReformParams &params)
    : GatherMethod(model, backend, "REFORM", params.n_ctx, params.n_batch, params.kv_type, sp), params_(params),
      profile_(choose_head_profile(model.hparams(), reform_heads_path(sp))) {
    EncoderConfig cfg;
    cfg.chunk = params_.chunk;
    cfg.budget = params_.budget;
    cfg.sink = params_.sink;
    cfg.recent = params_.recent;
    cfg.obs = params_.obs;
    cfg.accumulate = params_.h2o_accumulate;
    cfg.kv_type = params_.kv_type;
    cfg.evictor = params_.evictor;
    make_encoder(cfg);
    feeder_.n_encoded = [this] { return encoder_->n_encoded(); };
}

void ReformMethod::make_encoder(const EncoderConfig &cfg) {
    encoder_ = std::make_unique<ReformEncoder>(model_, backend_, cfg, profile_.heads);
    encoder_->set_profile(encode_profile_);
    store_ = std::make_unique<EmbeddingStore>(encoder_->dim(), budget_of(backend_));
    feeder_.chunk = cfg.chunk;
}

void ReformMethod::set_encode_profile(ReformProfile *p) {
    encode_profile_ = p;
    encoder_->set_profile(p);
}

ChunkStep ReformMethod::encode_step() {
    return [this](const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
        encoder_->step(tokens, m, *store_, keep_going);
    };
}

uint64_t ReformMethod::state_digest() const {
    Hash64 h;
    digest_vec(h, feeder_.ids);
    const ReformEncoder &e = *encoder_;
    h.add(e.n_encoded());
    digest_kv(h, e.cache());
    for (int32_t l = 0; l < e.cache().n_layers(); ++l)
        for (int32_t g = 0; g < e.cache().n_head_kv(); ++g) {
            digest_vec(h, e.orig(l, g));
            digest_vec(h, e.score(l, g));
        }
    digest_store(h, *store_);
    return h.digest();
}

Selection ReformMethod::select(const std::vector<int32_t> &query, Progress &progress) {
    if (!sealed_) fail(LCTX_ERR_STATE, "REFORM: select before build_index");
    scores_valid_ = false;
    const int64_t q = static_cast<int64_t>(query.size()), N = store_->size();
    encoder_->embed_query(query.data(), q, last_qemb_, [&] { return progress.keep_going(0.2); });
    last_mask_ = query_score_mask(model_.tokenizer(), query);
    const int32_t D = encoder_->dim();
    std::vector<float> qs;
    for (int64_t u = 0; u < q; ++u)
        if (last_mask_[u]) qs.insert(qs.end(), last_qemb_.begin() + u * D, last_qemb_.begin() + (u + 1) * D);
    const int64_t nq = static_cast<int64_t>(qs.size()) / D;
    last_s_.assign(static_cast<size_t>(N), 0.0f);
    for (int64_t t = 0; t < N;) {
        const int64_t len = std::min(N - t, store_->contiguous_from(t));
        score_tokens(store_->row(t), len, D, qs.data(), nq, encoder_->n_heads(), last_s_.data() + t, &backend_);
        t += len;
    }
    if (!progress.keep_going(0.8)) fail(LCTX_ERR_CANCELLED, "select cancelled");
    // Repeated text is ranked once (docs/methods/reform.md, "Repeated text"):
    // its later copies score below everything else before pooling.
    std::vector<float> demoted;
    if (params_.repeat_window > 0) {
        if (repeat_.size() != static_cast<size_t>(N)) repeat_ = mark_repeats(feeder_.ids.data(), N, params_.repeat_window);
        demoted = demote_repeats(last_s_, repeat_);
    }
    const float *ranked_s = params_.repeat_window > 0 ? demoted.data() : last_s_.data();
    last_p_.assign(static_cast<size_t>(N), 0.0f);
    max_pool(ranked_s, N, params_.pool_half, last_p_.data());
    Selection sel = decoder_.make_selection(select_top(ranked_s, last_p_.data(), N, params_.recompute,
                                                       params_.keep_first, params_.keep_last),
                                            last_p_, query, "reform_recompute");
    scores_valid_ = true;
    progress.keep_going(1.0);
    return sel;
}

bool ReformMethod::token_scores(TokenScores &out) const {
    out = TokenScores{};
    if (!scores_valid_) return true;
    out.raw = &last_s_;
    out.ranked = &last_p_;
    // select_top's forced ranges (everything is gathered when N fits the budget).
    const int64_t n = static_cast<int64_t>(last_s_.size());
    if (n <= params_.recompute) {
        out.forced_first = n;
    } else {
        out.forced_first = std::min(params_.keep_first, n);
        out.forced_last = n - std::max(out.forced_first, n - params_.keep_last);
    }
    return true;
}

void ReformMethod::save_index(const std::string &path) const {
    if (!sealed_) fail(LCTX_ERR_STATE, "lctx_index_save: call lctx_build_index first");
    write_reform_index(path, model_, profile_, feeder_.ids, *store_, *encoder_);
}

void ReformMethod::load_index(const std::string &path, const lctx_session_params &sp) {
    if (!feeder_.ids.empty() || sealed_) fail(LCTX_ERR_STATE, "REFORM: an index can only be loaded into a new session");
    ReformIndexHeader h = read_reform_index_header(path, model_);
    const std::string heads_path = reform_heads_path(sp);
    if (!heads_path.empty() && profile_.heads_string() != h.profile.heads_string())
        fail(LCTX_ERR_INVALID_ARG, "index %s was built with the head profile %s, not %s (%s)", path.c_str(),
             h.profile.heads_string().c_str(), profile_.heads_string().c_str(), heads_path.c_str());
    profile_ = h.profile;
    params_.chunk = h.cfg.chunk;
    params_.budget = h.cfg.budget;
    params_.sink = h.cfg.sink;
    params_.recent = h.cfg.recent;
    params_.obs = h.cfg.obs;
    params_.h2o_accumulate = h.cfg.accumulate;
    EncoderConfig cfg = h.cfg;
    cfg.kv_type = params_.kv_type;   // the file stores f32 rows; the session chooses the element type
    store_.reset();     // the session's own (empty) encoder goes first: the
    encoder_.reset();   // loaded one is charged to max_memory alone
    make_encoder(cfg);
    read_reform_index_body(h, feeder_.ids, *store_, *encoder_);
    sealed_ = true;
}

} // namespace lctx
