// Package lctx is the Go binding of lctx, long-context inference for small
// language models on the CPU (cgo over include/lctx.h).
//
// Build against an installed lctx (pkg-config: go build -tags lctx_pkgconfig)
// or a build tree: CGO_LDFLAGS="-L<build> -Wl,-rpath,<build>".
// Every handle has a Close method; errors are *Error values carrying the
// library's message, and errors.Is(err, lctx.ErrCancelled) style checks work
// on the status.
package lctx

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#cgo !lctx_pkgconfig LDFLAGS: -llctx
#cgo lctx_pkgconfig pkg-config: lctx
#include <stdlib.h>
#include "lctx.h"
*/
import "C"

import (
	"fmt"
	"runtime"
)

// Token is one token id.
type Token = int32

// Status is an lctx_status code. Statuses below zero are errors.
type Status int32

const (
	OK                Status = C.LCTX_OK
	ErrInvalidArg     Status = C.LCTX_ERR_INVALID_ARG
	ErrIO             Status = C.LCTX_ERR_IO
	ErrFormat         Status = C.LCTX_ERR_FORMAT
	ErrUnsupported    Status = C.LCTX_ERR_UNSUPPORTED
	ErrOutOfMemory    Status = C.LCTX_ERR_OUT_OF_MEMORY
	ErrState          Status = C.LCTX_ERR_STATE
	ErrBufferTooSmall Status = C.LCTX_ERR_BUFFER_TOO_SMALL
	ErrCancelled      Status = C.LCTX_ERR_CANCELLED
	ErrContextFull    Status = C.LCTX_ERR_CONTEXT_FULL
	ErrInternal       Status = C.LCTX_ERR_INTERNAL
)

// Kind is the status's name, the same in every binding: its LCTX_ERR_
// suffix in lower case ("invalid_arg", "state", ...; "ok" for OK).
func (s Status) Kind() string {
	switch s {
	case OK:
		return "ok"
	case ErrInvalidArg:
		return "invalid_arg"
	case ErrIO:
		return "io"
	case ErrFormat:
		return "format"
	case ErrUnsupported:
		return "unsupported"
	case ErrOutOfMemory:
		return "out_of_memory"
	case ErrState:
		return "state"
	case ErrBufferTooSmall:
		return "buffer_too_small"
	case ErrCancelled:
		return "cancelled"
	case ErrContextFull:
		return "context_full"
	case ErrInternal:
		return "internal"
	}
	return fmt.Sprintf("status(%d)", int32(s))
}

// Error makes a Status usable as an error (a sentinel for errors.Is).
func (s Status) Error() string { return StatusString(s) }

// Error is a failed lctx call: the operation, its status and the message.
type Error struct {
	Op      string
	Status  Status
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Op, e.Message) }

// Unwrap gives the Status, so errors.Is(err, lctx.ErrState) works.
func (e *Error) Unwrap() error { return e.Status }

// check turns a status into nil or an *Error with the thread's last message.
// lctx_last_error is thread-local and the Go scheduler may move a goroutine
// to another OS thread between two cgo calls, so the caller must hold
// runtime.LockOSThread across the failing C call and this read (see call).
func check(op string, st C.lctx_status) error {
	if st >= 0 {
		return nil
	}
	msg := C.GoString(C.lctx_last_error())
	if msg == "" {
		msg = StatusString(Status(st))
	}
	return &Error{Op: op, Status: Status(st), Message: msg}
}

// call runs one C call and turns its status into an error, with the goroutine
// locked to its OS thread so the message read is the one this call left.
func call(op string, f func() C.lctx_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(op, f())
}

// Version of the loaded library ("MAJOR.MINOR.PATCH").
func Version() string { return C.GoString(C.lctx_version()) }

// VersionNumber is MAJOR*10000 + MINOR*100 + PATCH of the loaded library.
func VersionNumber() int { return int(C.lctx_version_number()) }

// BuildInfo names the compiler and CPU variant of the library.
func BuildInfo() string { return C.GoString(C.lctx_build_info()) }

// StatusString is the static text of a status.
func StatusString(s Status) string { return C.GoString(C.lctx_status_string(C.lctx_status(s))) }

// LastError is the message of the last failed call on this OS thread. Go may
// move a goroutine between threads; prefer the Message of a returned *Error.
func LastError() string { return C.GoString(C.lctx_last_error()) }
