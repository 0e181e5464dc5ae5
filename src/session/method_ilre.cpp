#include "session/method_ilre.h"

#include <algorithm>

#include "common/error.h"
#include "common/log.h"
#include "session/ilre_allocator.h"
#include "session/ilre_index_file.h"
#include "session/ilre_scorer.h"
#include "session/query_mask.h"
#include "session/selector.h"
#include "session/state_digest.h"

namespace lctx {

namespace {

IlreEncoderConfig encoder_config(const IlreParams &p) {
    IlreEncoderConfig c;
    c.sink = p.sink;
    c.window = p.window;
    c.chunk = p.chunk;
    c.dca = p.dca;
    c.dca_after = p.dca_after;
    c.kv_type = p.kv_type;
    return c;
}

} // namespace

IlreMethod::IlreMethod(const Model &model, Backend &backend, const lctx_session_params &sp)
    : IlreMethod(model, backend, sp, ilre_params_from(model, sp)) {}

IlreMethod::IlreMethod(const Model &model, Backend &backend, const lctx_session_params &sp, const IlreParams &params)
    : GatherMethod(model, backend, "ILRe", params.n_ctx, params.n_batch, params.kv_type, sp), params_(params) {
    encoder_ = std::make_unique<IlreEncoder>(model, backend, encoder_config(params_),
                                             std::vector<int32_t>{params_.retrieval_layer});
    feeder_.chunk = params_.chunk;
    feeder_.first_chunk = params_.sink + params_.chunk;
    feeder_.n_encoded = [this] { return encoder_->n_encoded(); };
    LCTX_LOG_INFO("ILRe: retrieval layer %d (%s), sink %lld, window %lld, chunk %lld, budget %lld%s",
                  params_.retrieval_layer, params_.layer_origin.c_str(), (long long)params_.sink,
                  (long long)params_.window, (long long)params_.chunk, (long long)params_.budget,
                  params_.dca ? ", DCA" : "");
}

ChunkStep IlreMethod::encode_step() {
    return [this](const int32_t *tokens, int64_t m, const std::function<bool()> &keep_going) {
        encoder_->step(tokens, m, keep_going);
    };
}

uint64_t IlreMethod::state_digest() const {
    Hash64 h;
    digest_vec(h, feeder_.ids);
    const IlreEncoder &e = *encoder_;
    h.add(e.n_encoded());
    if (e.cache()) digest_kv(h, *e.cache());
    for (int32_t g = 0; g < model_.hparams().n_head_kv; ++g) digest_store(h, e.keys(0, g));
    return h.digest();
}

void IlreMethod::save_index(const std::string &path) const {
    if (!sealed_) fail(LCTX_ERR_STATE, "lctx_index_save: call lctx_build_index first");
    write_ilre_index(path, model_, params_.retrieval_layer, feeder_.ids, *encoder_);
}

void IlreMethod::load_index(const std::string &path) {
    if (!feeder_.ids.empty() || sealed_) fail(LCTX_ERR_STATE, "ILRe: an index can only be loaded into a new session");
    std::vector<int32_t> ids;
    std::unique_ptr<IlreEncoder> enc;
    const IlreIndexInfo info = read_ilre_index(path, model_, ids, [&](const IlreIndexInfo &i) -> IlreEncoder & {
        IlreEncoderConfig cfg = i.cfg;
        cfg.dca_after = params_.dca_after;
        cfg.kv_type = params_.kv_type;   // the file stores f32 rows; the session chooses the element type
        enc = std::make_unique<IlreEncoder>(model_, backend_, cfg, std::vector<int32_t>{i.retrieval_layer});
        return *enc;
    });
    if (info.cfg.sink + params_.budget >= params_.n_ctx)
        fail(LCTX_ERR_INVALID_ARG, "ILRe: the index's %lld sinks + budget %lld leave no room in n_ctx = %lld",
             (long long)info.cfg.sink, (long long)params_.budget, (long long)params_.n_ctx);
    // Nothing above changed the method: a refused file leaves it as it was.
    encoder_ = std::move(enc);
    params_.retrieval_layer = info.retrieval_layer;
    params_.layer_origin = path;
    params_.sink = info.cfg.sink;
    params_.window = info.cfg.window;
    params_.chunk = info.cfg.chunk;
    params_.dca = info.cfg.dca;
    feeder_.ids = std::move(ids);
    feeder_.chunk = params_.chunk;
    feeder_.first_chunk = params_.sink + params_.chunk;
    sealed_ = true;
}

Selection IlreMethod::select(const std::vector<int32_t> &query, Progress &progress) {
    if (!sealed_) fail(LCTX_ERR_STATE, "ILRe: select before build_index");
    scores_valid_ = false;
    const int64_t N = static_cast<int64_t>(feeder_.ids.size()), q = static_cast<int64_t>(query.size());
    // The scoring part of the question: its last query_tokens tokens (all by
    // default), from the first token after the blank separator that puts
    // the question after the document: the paper's query is the question
    // and what follows, the separator belongs to the context
    // (docs/methods/ilre.md, "The separator").
    int64_t q0 = params_.query_tokens > 0 ? std::max<int64_t>(0, q - params_.query_tokens) : 0;
    // A question of blanks only is read whole.
    const int64_t blanks = leading_blank_tokens(model_.tokenizer(), query.data() + q0, q - q0);
    if (blanks < q - q0) q0 += blanks;
    std::vector<std::vector<float>> Q;
    encoder_->queries(query.data() + q0, q - q0, Q, [&] { return progress.keep_going(0.05); });
    last_q_ = std::move(Q[0]);

    IlreScoreArgs args;
    for (int32_t g = 0; g < model_.hparams().n_head_kv; ++g) args.keys.push_back(&encoder_->keys(0, g));
    args.n_keys = N;
    args.queries = last_q_.data();
    args.n_q = q - q0;
    const int64_t distance = effective_score_distance(N + (q - q0));
    if (distance >= 0) {
        args.fixed_distance = distance;
        args.query_pos0 = N;   // the question's tokens follow the document
    } else if (params_.dca && N + (q - q0) > params_.dca_after) {
        // DCA shifts keys only when the question would sit past the trained context.
        args.segments = ilre_dca_segments(N, params_.sink, params_.chunk);
    }
    last_scores_.assign(static_cast<size_t>(N), 0.0f);
    // The index layer's own RoPE (gemma3's sliding layers use another base).
    const Hparams layer_hp = model_.hparams().rope_of(encoder_->index_layers()[0]);
    ilre_scores(backend_, layer_hp, args, last_scores_.data(), [&] { return progress.keep_going(0.5); });

    // Repeated text is scored once (docs/methods/ilre.md, "Repeated text"):
    // later copies score 0 before the pooling; the raw scores are kept.
    // Without the filter the ranked scores are the raw ones (no copy).
    last_ranked_.clear();
    if (params_.repeat_window > 0) {
        if (repeat_.size() != static_cast<size_t>(N)) repeat_ = mark_repeats(feeder_.ids.data(), N, params_.repeat_window);
        last_ranked_ = last_scores_;
        for (int64_t t = 0; t < N; ++t)
            if (repeat_[static_cast<size_t>(t)]) last_ranked_[static_cast<size_t>(t)] = 0.0f;
    }
    const std::vector<float> &ranked = ranked_scores();
    Selection sel = decoder_.make_selection(ilre_allocate(ranked.data(), N, params_.sink, params_.budget,
                                                          params_.max_kernels, params_.avg_kernels),
                                            ranked, query, "the ILRe budget");
    scores_valid_ = true;
    progress.keep_going(1.0);
    return sel;
}

bool IlreMethod::token_scores(TokenScores &out) const {
    out = TokenScores{};
    if (!scores_valid_) return true;
    out.raw = &last_scores_;
    out.ranked = &ranked_scores();
    // ilre_allocate: the sinks always; everything when the rest fits the budget.
    const int64_t n = static_cast<int64_t>(last_scores_.size());
    out.forced_first = n - params_.sink <= params_.budget ? n : std::min(params_.sink, n);
    return true;
}

} // namespace lctx
