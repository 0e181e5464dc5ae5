package lctx

/*
#include <stdlib.h>
#include <stdint.h>
#include "lctx.h"
void lctxgo_log(lctx_log_level level, const char *message, void *user_data);
int lctxgo_progress(float done, void *user_data);
*/
import "C"

import (
	"runtime/cgo"
	"sync"
	"unsafe"
)

// LogLevel of a library message.
type LogLevel int

const (
	LogDebug LogLevel = C.LCTX_LOG_DEBUG
	LogInfo  LogLevel = C.LCTX_LOG_INFO
	LogWarn  LogLevel = C.LCTX_LOG_WARN
	LogError LogLevel = C.LCTX_LOG_ERROR
)

var (
	logMu     sync.RWMutex
	logFn     func(LogLevel, string)
	logHandle unsafe.Pointer // C memory holding a cgo.Handle, kept while set
)

// SetLogger sends library messages at or above min to fn (nil: silent). fn
// may be called from the library's worker threads.
func SetLogger(fn func(level LogLevel, message string), min LogLevel) {
	logMu.Lock()
	defer logMu.Unlock()
	logFn = fn
	if fn == nil {
		C.lctx_log_set(nil, C.lctx_log_level(min), nil)
		return
	}
	if logHandle == nil { // one handle for the process; the function is read under logMu
		logHandle = newHandleBox(cgo.NewHandle(&logFn))
	}
	C.lctx_log_set(C.lctx_log_fn(C.lctxgo_log), C.lctx_log_level(min), logHandle)
}

//export goLctxLog
func goLctxLog(level C.int, message *C.char, userData unsafe.Pointer) {
	logMu.RLock()
	fn := logFn
	logMu.RUnlock()
	if fn != nil {
		fn(LogLevel(level), C.GoString(message))
	}
}

//export goLctxProgress
func goLctxProgress(done C.float, userData unsafe.Pointer) C.int {
	h := cgo.Handle(*(*C.uintptr_t)(userData))
	if fn, ok := h.Value().(func(float32) bool); ok && fn(float32(done)) {
		return 1
	}
	return 0
}

// newHandleBox stores h in C memory so that C can hold it as user_data.
func newHandleBox(h cgo.Handle) unsafe.Pointer {
	p := C.malloc(C.size_t(unsafe.Sizeof(C.uintptr_t(0))))
	*(*C.uintptr_t)(p) = C.uintptr_t(h)
	return p
}

func freeHandleBox(p unsafe.Pointer) {
	if p != nil {
		cgo.Handle(*(*C.uintptr_t)(p)).Delete()
		C.free(p)
	}
}
