#include "session/gather_method.h"

#include "common/error.h"
#include "session/refreshkv.h"

namespace lctx {

GatherMethod::GatherMethod(const Model &model, Backend &backend, const char *who, int64_t n_ctx, int32_t n_batch,
                           KvType kv_type, const lctx_session_params &sp)
    : model_(model), backend_(backend),
      decoder_(model, backend, n_ctx, n_batch, kv_type, who, opt_ptr(gathered_refreshkv(model.hparams(), sp))) {
    feeder_.who = who;
}

void GatherMethod::feed(const int32_t *tokens, size_t n, Progress &progress) {
    if (sealed_) fail(LCTX_ERR_STATE, "%s: the document is sealed", feeder_.who);
    feeder_.feed(tokens, n, progress, encode_step());
}

void GatherMethod::finish(Progress &progress) {
    feeder_.finish(progress, encode_step());
    sealed_ = true;
}

void GatherMethod::recompute(const Selection &selection, Progress &progress, std::vector<float> &logits) {
    decoder_.recompute(feeder_.ids, selection, progress, logits);
}

void GatherMethod::append(int32_t token, std::vector<float> &logits) { decoder_.append(token, logits); }

} // namespace lctx
