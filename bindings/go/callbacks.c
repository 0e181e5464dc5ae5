// C trampolines for the Go callbacks (cgo forbids C definitions in a file
// with //export). user_data points at a C-allocated uintptr_t holding a
// cgo.Handle, so no Go pointer is ever kept by C.
#include "_cgo_export.h"

int lctxgo_progress(float done, void *user_data) { return goLctxProgress(done, user_data); }
void lctxgo_log(lctx_log_level level, const char *message, void *user_data) {
    goLctxLog((int)level, (char *)message, user_data);
}
