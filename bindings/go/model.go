package lctx

/*
#include <stdlib.h>
#include "lctx.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// ModelParams for LoadModel; the zero value gives the library defaults.
type ModelParams struct {
	Threads int  // worker threads for sessions of this model; <= 0: all cores
	NoMmap  bool // read the file instead of mapping it
	// Backend of this model's sessions: "cpu" or a backend module's name
	// ("cuda"); "": $LCTX_BACKEND if set, else the best one available.
	Backend string
}

// native fills the C params; free mem after the call that reads them.
func (p *ModelParams) native(mem *cParams) C.lctx_model_params {
	var c C.lctx_model_params
	C.lctx_model_default_params(&c)
	if p != nil {
		c.n_threads = C.int32_t(p.Threads)
		c.use_mmap = C.bool(!p.NoMmap)
		c.backend = mem.str(p.Backend)
	}
	return c
}

// Model is a loaded GGUF model. It is immutable and may be shared by
// sessions on any goroutines. Close it after its sessions.
type Model struct {
	h *C.lctx_model
}

// LoadModel loads a GGUF file.
func LoadModel(path string, p *ModelParams) (*Model, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var mem cParams
	defer mem.free()
	cp := p.native(&mem)
	m := &Model{}
	if err := call("lctx_model_load", func() C.lctx_status { return C.lctx_model_load(cpath, &cp, &m.h) }); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(m, (*Model).Close) // safety net only; call Close
	return m, nil
}

// LoadModelFromMemory loads a GGUF image from a buffer (which is copied).
func LoadModelFromMemory(data []byte, p *ModelParams) (*Model, error) {
	var mem cParams
	defer mem.free()
	cp := p.native(&mem)
	m := &Model{}
	var ptr unsafe.Pointer
	if len(data) > 0 {
		ptr = unsafe.Pointer(&data[0])
	}
	if err := call("lctx_model_load_from_memory", func() C.lctx_status {
		return C.lctx_model_load_from_memory(ptr, C.size_t(len(data)), &cp, &m.h)
	}); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// Close frees the model; it is safe to call twice.
func (m *Model) Close() {
	if m != nil && m.h != nil {
		C.lctx_model_free(m.h)
		m.h = nil
	}
}

func (m *Model) Architecture() string { return C.GoString(C.lctx_model_architecture(m.h)) }
func (m *Model) Name() string         { return C.GoString(C.lctx_model_name(m.h)) }
func (m *Model) NLayer() int          { return int(C.lctx_model_n_layer(m.h)) }
func (m *Model) NHead() int           { return int(C.lctx_model_n_head(m.h)) }
func (m *Model) NHeadKV() int         { return int(C.lctx_model_n_head_kv(m.h)) }
func (m *Model) HeadDim() int         { return int(C.lctx_model_head_dim(m.h)) }
func (m *Model) NEmbd() int           { return int(C.lctx_model_n_embd(m.h)) }
func (m *Model) NVocab() int          { return int(C.lctx_model_n_vocab(m.h)) }
func (m *Model) NCtxTrain() int       { return int(C.lctx_model_n_ctx_train(m.h)) }
func (m *Model) NParams() uint64      { return uint64(C.lctx_model_n_params(m.h)) }
func (m *Model) SizeBytes() uint64    { return uint64(C.lctx_model_size_bytes(m.h)) }
func (m *Model) TokenBOS() Token      { return Token(C.lctx_model_token_bos(m.h)) }
func (m *Model) TokenEOS() Token      { return Token(C.lctx_model_token_eos(m.h)) }
func (m *Model) TokenEOT() Token      { return Token(C.lctx_model_token_eot(m.h)) }
func (m *Model) TokenPad() Token      { return Token(C.lctx_model_token_pad(m.h)) }
func (m *Model) ChatTemplate() string { return C.GoString(C.lctx_model_chat_template(m.h)) }

// IsEOG reports whether t ends generation (eos, eot, <|im_end|> ...).
func (m *Model) IsEOG(t Token) bool { return bool(C.lctx_token_is_eog(m.h, C.lctx_token(t))) }

// Meta returns a GGUF metadata value as text, and whether the key exists.
func (m *Model) Meta(key string) (string, bool) {
	ckey := C.CString(key)
	defer C.free(unsafe.Pointer(ckey))
	n := C.lctx_model_meta_string(m.h, ckey, nil, 0)
	if n < 0 {
		return "", false
	}
	buf := make([]byte, int(n)+1)
	C.lctx_model_meta_string(m.h, ckey, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return string(buf[:n]), true
}

// Tokenize UTF-8 text. addSpecial adds BOS/EOS as the model asks;
// parseSpecial recognises control tokens written in the text.
func (m *Model) Tokenize(text string, addSpecial, parseSpecial bool) ([]Token, error) {
	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	out := make([]Token, len(text)+8) // each token covers >= 1 byte, BOS/EOS none
	// check reads the thread-local message: stay on this OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		var n C.size_t
		st := C.lctx_tokenize(m.h, ctext, C.size_t(len(text)), C.bool(addSpecial), C.bool(parseSpecial),
			(*C.lctx_token)(unsafe.Pointer(&out[0])), C.size_t(len(out)), &n)
		if Status(st) == ErrBufferTooSmall && int(n) > len(out) {
			out = make([]Token, int(n))
			continue
		}
		if err := check("lctx_tokenize", st); err != nil {
			return nil, err
		}
		return out[:n], nil
	}
}

// bytesCall runs a C call that fills (buf, size, &n), growing buf once.
func bytesCall(op string, guess int, fill func(buf *C.char, size C.size_t, n *C.size_t) C.lctx_status) ([]byte, error) {
	buf := make([]byte, guess+1)
	// check reads the thread-local message: stay on this OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		var n C.size_t
		st := fill((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n)
		if Status(st) == ErrBufferTooSmall && int(n) >= len(buf) {
			buf = make([]byte, int(n)+1)
			continue
		}
		if err := check(op, st); err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// TokenToPiece gives the bytes of one token (maybe part of a UTF-8 character).
func (m *Model) TokenToPiece(t Token, special bool) ([]byte, error) {
	return bytesCall("lctx_token_to_piece", 32, func(b *C.char, s C.size_t, n *C.size_t) C.lctx_status {
		return C.lctx_token_to_piece(m.h, C.lctx_token(t), C.bool(special), b, s, n)
	})
}

// Detokenize joins the pieces of tokens into text.
func (m *Model) Detokenize(tokens []Token, special bool) (string, error) {
	var p *C.lctx_token
	if len(tokens) > 0 {
		p = (*C.lctx_token)(unsafe.Pointer(&tokens[0]))
	}
	b, err := bytesCall("lctx_detokenize", 8*len(tokens)+16, func(b *C.char, s C.size_t, n *C.size_t) C.lctx_status {
		return C.lctx_detokenize(m.h, p, C.size_t(len(tokens)), C.bool(special), b, s, n)
	})
	return string(b), err
}

// ChatMessage is one turn for ChatApply.
type ChatMessage struct{ Role, Content string }

// ChatApply formats messages with the model's chat template (ErrUnsupported
// when the model has none that lctx knows).
func (m *Model) ChatApply(msgs []ChatMessage, addAssistant bool) (string, error) {
	cmsgs := (*[1 << 20]C.lctx_chat_message)(C.malloc(C.size_t(len(msgs)+1) * C.size_t(unsafe.Sizeof(C.lctx_chat_message{}))))[: len(msgs)+1 : len(msgs)+1]
	defer C.free(unsafe.Pointer(&cmsgs[0]))
	guess := 256
	for i, msg := range msgs {
		cmsgs[i].role = C.CString(msg.Role)
		cmsgs[i].content = C.CString(msg.Content)
		guess += len(msg.Content) + 32
	}
	defer func() {
		for i := range msgs {
			C.free(unsafe.Pointer(cmsgs[i].role))
			C.free(unsafe.Pointer(cmsgs[i].content))
		}
	}()
	b, err := bytesCall("lctx_chat_apply", guess, func(b *C.char, s C.size_t, n *C.size_t) C.lctx_status {
		return C.lctx_chat_apply(m.h, &cmsgs[0], C.size_t(len(msgs)), C.bool(addAssistant), b, s, n)
	})
	return string(b), err
}

// PromptParts returns the text before and after one user turn in the chat
// template, ending with the assistant prefix; ("", "\n") without a template.
func (m *Model) PromptParts() (prefix, suffix string) {
	const marker = "\x01lctx-user-turn\x01"
	text, err := m.ChatApply([]ChatMessage{{"user", marker}}, true)
	if err != nil {
		return "", "\n"
	}
	for i := 0; i+len(marker) <= len(text); i++ {
		if text[i:i+len(marker)] == marker {
			return text[:i], text[i+len(marker):]
		}
	}
	return "", "\n"
}
