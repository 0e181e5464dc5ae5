package lctx

/*
#include <stdlib.h>
#include "lctx.h"
int lctxgo_progress(float done, void *user_data);
*/
import "C"

import (
	"fmt"
	"runtime"
	"runtime/cgo"
	"unicode/utf8"
	"unsafe"
)

// Method of reading a long document.
type Method int32

const (
	MethodFull        Method = C.LCTX_METHOD_FULL
	MethodReform      Method = C.LCTX_METHOD_REFORM
	MethodILRe        Method = C.LCTX_METHOD_ILRE
	MethodReAttention Method = C.LCTX_METHOD_REATTENTION
	MethodRefreshKV   Method = C.LCTX_METHOD_REFRESHKV
	MethodTruncate    Method = C.LCTX_METHOD_TRUNCATE
	MethodStreaming   Method = C.LCTX_METHOD_STREAMING
	MethodH2O         Method = C.LCTX_METHOD_H2O
	MethodTOVA        Method = C.LCTX_METHOD_TOVA
	MethodSnapKV      Method = C.LCTX_METHOD_SNAPKV
	MethodInfiniPot   Method = C.LCTX_METHOD_INFINIPOT
	MethodInfLLM      Method = C.LCTX_METHOD_INFLLM
)

// Methods lists every Method constant of this binding, in value order (a
// test checks it against the library's registry).
var Methods = []Method{MethodFull, MethodReform, MethodILRe, MethodReAttention, MethodRefreshKV, MethodTruncate,
	MethodStreaming, MethodH2O, MethodTOVA, MethodSnapKV, MethodInfiniPot, MethodInfLLM}

// MethodCount is the number of methods the library knows (values 0 .. n-1).
func MethodCount() int { return int(C.lctx_method_count()) }

// String is the registry name of the method ("reform"), or "Method(N)" for a
// value the library does not know.
func (m Method) String() string {
	if n := C.lctx_method_name(C.lctx_method(m)); n != nil {
		return C.GoString(n)
	}
	return fmt.Sprintf("Method(%d)", int32(m))
}

// Description is one line about the method ("" for an unknown value).
func (m Method) Description() string {
	if d := C.lctx_method_description(C.lctx_method(m)); d != nil {
		return C.GoString(d)
	}
	return ""
}

// Implemented tells whether sessions can be created with the method.
func (m Method) Implemented() bool { return bool(C.lctx_method_is_implemented(C.lctx_method(m))) }

// ParseMethod gives the method of a registry name (any case).
func ParseMethod(name string) (Method, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var out C.lctx_method
	err := call("lctx_method_from_name", func() C.lctx_status { return C.lctx_method_from_name(cname, &out) })
	return Method(out), err
}

// Stage of a session, in order.
type Stage int32

const (
	StageFeeding  Stage = C.LCTX_STAGE_FEEDING
	StageIndexed  Stage = C.LCTX_STAGE_INDEXED
	StageSelected Stage = C.LCTX_STAGE_SELECTED
	StageDecoding Stage = C.LCTX_STAGE_DECODING
)

// ReformParams are REFORM's knobs (lctx_reform_params); zero fields keep the
// library defaults, derived from the model's trained context (see lctx.h).
type ReformParams struct {
	Chunk       int32  // tokens per encoding step
	Budget      int32  // working-cache tokens per layer and KV head
	Recompute   int32  // document tokens gathered for recompute
	Sink        int32  // first tokens the working cache always keeps
	Recent      int32  // most recent tokens it always keeps
	Obs         int32  // last queries of each chunk whose attention scores eviction
	KeepFirst   int32  // first document tokens always gathered
	KeepLast    int32  // last document tokens always gathered
	PoolHalf    int32  // score max-pool half width; < 0: no pooling
	H2OPerChunk bool   // eviction scores of the last chunk only
	HeadsPath   string // JSON head profile (lctx heads); "": the built-in one
	// RepeatWindow: repeated text competes for the recompute budget once
	// (tokens compared; 0: 16; < 0: off; 1 is refused)
	RepeatWindow int32
}

// KVParams are the KV baselines' knobs (lctx_kv_params: truncate, streaming,
// h2o, tova, snapkv, infinipot; infllm reads Budget, Chunk, Sink, Recent and
// Obs); zero fields keep the library defaults (see lctx.h).
type KVParams struct {
	Budget, Chunk, Sink, Recent, Obs int32
	SnapKVKernel                     int32
	InfiniPotNucRatio                float32
	InfiniPotCatalyst                string // "": the built-in catalyst prompt
}

// InfLLMParams are InfLLM's own knobs (lctx_infllm_params); zero: defaults.
type InfLLMParams struct {
	Block, Repr int32
}

// IlreParams are ILRe's knobs (lctx_ilre_params); zero fields keep the
// library defaults (lctx_ilre_default_params), derived from the model (see
// lctx.h). Negative sizes and malformed kernel lists are refused (ErrInvalidArg).
type IlreParams struct {
	// 0-based layer whose keys are indexed; nil: the model's profile (-1).
	RetrievalLayer *int32
	Sink           int32  // first document tokens every chunk attends to, always gathered
	Window         int32  // tokens before a chunk that it attends to
	Chunk          int32  // tokens per encoding step
	Budget         int32  // document tokens gathered besides the sinks
	QueryTokens    int32  // score with the last N question tokens only; 0: all
	DCA            bool   // re-rotate keys so that distances stay within about two chunks
	MaxKernels     string // block max-pool sizes, e.g. "2,4,8"; "": the default
	AvgKernels     string // average-pool sizes, e.g. "1-16" or "1,3,5"; "": the default
	ProfilePath    string // JSON profile holding the retrieval layer (lctx heads --ilre); "": built-in
	// Position-free scoring, every key as if this many positions before the
	// question; nil: the default, each key at its own position (-1); -2:
	// auto, -1 within the trained context and 1024 past it.
	ScoreDistance *int32
	// RepeatWindow: repeated text competes for the budget once (tokens
	// compared; 0: 16; < 0: off; 1 is refused)
	RepeatWindow int32
}

// ReAttentionParams are ReAttention's knobs (lctx_reattention_params). Every
// value is passed as given, and 0 is a real value for some (NGlobal: no
// global tokens, NSpans: no middle): start from DefaultReAttentionParams(),
// whose -1 sizes are derived from the model's trained context (see lctx.h).
// Out-of-range values are refused (ErrInvalidArg).
type ReAttentionParams struct {
	NGlobal     int32  // G: first tokens always attended; -1: derived
	NLocal      int32  // L: last tokens always attended, the step's own included; -1: derived
	Span        int32  // m: tokens around each winner (even); -1: derived
	TopK        int32  // k: middle tokens each (query head, query token) votes for (1..64); -1: 4
	NSpans      int32  // k': winners of the vote; 0: no middle; -1: derived
	Chunk       int32  // tokens per prefill step after the first (at most 512 and NLocal); -1: derived
	ReuseSteps  int32  // decode: a layer's selection is reused for this many tokens; 1 (default)
	TileMax     bool   // the released kernel's approximation (one candidate per 128-key tile)
	StoreMaxRAM uint64 // bytes of the K/V store kept in RAM, then a file in StoreDir; 0: RAM only
	StoreDir    string // directory of that file; "": $TMPDIR, else /tmp
}

// DefaultReAttentionParams are lctx_reattention_default_params.
func DefaultReAttentionParams() ReAttentionParams {
	var c C.lctx_reattention_params
	C.lctx_reattention_default_params(&c)
	return ReAttentionParams{NGlobal: int32(c.n_global), NLocal: int32(c.n_local), Span: int32(c.span),
		TopK: int32(c.top_k), NSpans: int32(c.n_spans), Chunk: int32(c.chunk), ReuseSteps: int32(c.reuse_steps),
		TileMax: bool(c.tile_max), StoreMaxRAM: uint64(c.store_max_ram)}
}

// RefreshKVSchedule is when RefreshKV's layers refresh (lctx_refreshkv_schedule).
type RefreshKVSchedule int32

const (
	RefreshKVDynamic RefreshKVSchedule = C.LCTX_REFRESHKV_DYNAMIC // query-drift check every Stride steps, per layer (default)
	RefreshKVFixed   RefreshKVSchedule = C.LCTX_REFRESHKV_FIXED   // every layer refreshes every Stride steps
)

// RefreshKVParams are RefreshKV's knobs (lctx_refreshkv_params); zero fields
// keep the library defaults (DefaultRefreshKVParams is the zero value; see
// lctx.h). Negative sizes and an even PoolKernel are refused (ErrInvalidArg).
type RefreshKVParams struct {
	Partial       int32             // K: partial-cache slots per layer and KV head; 0: round(prompt / 8)
	Stride        int32             // S: steps between query checks (dynamic) or refreshes (fixed); 0: 10
	Threshold     float32           // refresh when the query cosine is <= it; 0: the model's value
	Schedule      RefreshKVSchedule // RefreshKVDynamic (default) or RefreshKVFixed
	PoolKernel    int32             // max-pool width over the scores (odd); 0: 7
	MaxPartialRun int32             // > 0: also refresh after this many steps without one; 0: never
	Gathered      bool              // REFORM and ILRe: decode their recomputed cache with RefreshKV
}

// DefaultRefreshKVParams are lctx_refreshkv_default_params.
func DefaultRefreshKVParams() RefreshKVParams {
	var c C.lctx_refreshkv_params
	C.lctx_refreshkv_default_params(&c)
	return RefreshKVParams{Partial: int32(c.partial), Stride: int32(c.stride), Threshold: float32(c.threshold),
		Schedule: RefreshKVSchedule(c.schedule), PoolKernel: int32(c.pool_kernel),
		MaxPartialRun: int32(c.max_partial_run), Gathered: bool(c.gathered)}
}

// native fills c from lctx_refreshkv_default_params and f's fields.
func (f *RefreshKVParams) native(c *C.lctx_refreshkv_params) {
	C.lctx_refreshkv_default_params(c)
	c.partial, c.stride, c.threshold = C.int32_t(f.Partial), C.int32_t(f.Stride), C.float(f.Threshold)
	c.schedule = C.lctx_refreshkv_schedule(f.Schedule)
	c.pool_kernel, c.max_partial_run = C.int32_t(f.PoolKernel), C.int32_t(f.MaxPartialRun)
	c.gathered = C.bool(f.Gathered)
}

// KVType is the element type of a session's KV caches (lctx_kv_type).
type KVType int32

const (
	KVF32 KVType = C.LCTX_KV_F32 // the default
	KVF16 KVType = C.LCTX_KV_F16 // half the memory (docs/kv-storage.md)
	KVQ8  KVType = C.LCTX_KV_Q8  // about a quarter, lossy, CPU backend only (docs/kv-storage.md)
)

// Precision is the arithmetic of a session's attention or weight matrix
// products (lctx_precision; docs/bf16.md and docs/int8.md have the speed
// and the effect).
type Precision int32

const (
	PrecisionF32  Precision = C.LCTX_PRECISION_F32  // exact, the default
	PrecisionBF16 Precision = C.LCTX_PRECISION_BF16 // opt-in, lossy: bf16 products on CPUs with AVX512_BF16
	PrecisionInt8 Precision = C.LCTX_PRECISION_INT8 // MatmulPrecision only; opt-in, lossy: int8 activations on CPUs with AVX2
)

// SessionParams: zero fields keep the library defaults (see lctx.h), except
// Method, which is passed as given (its zero value is MethodFull): start from
// DefaultSessionParams(), or pass nil, for the library's default method
// (MethodReform).
type SessionParams struct {
	Method  Method
	NCtx    int32
	Threads int32
	Batch   int32
	KVType  KVType // element type of the session's KV caches; zero: KVF32
	// Arithmetic of attention and of the weight matrix products; zero: PrecisionF32.
	AttnPrecision, MatmulPrecision Precision
	// The method structs; nil: the library defaults.
	Reform *ReformParams
	KV     *KVParams
	InfLLM *InfLLMParams
	ILRe   *IlreParams
	// ReAttention: nil is DefaultReAttentionParams(); RefreshKV (also REFORM
	// and ILRe with Gathered): nil is DefaultRefreshKVParams().
	ReAttention *ReAttentionParams
	RefreshKV   *RefreshKVParams
	// Shorthands for KV.Budget and KV.Chunk (applied when non-zero).
	KVBudget int32
	KVChunk  int32
	Progress func(done float32) (cancel bool) // called during long calls
	// OnProgress is Progress with the running call's label: "feed",
	// "build_index", "select" or "recompute" (StageLabels). Set one of the two.
	OnProgress func(stage string, done float32) (cancel bool)
	// Configure, if set, edits the C params last (fields added to lctx.h
	// before this struct knows them): p is a *C.lctx_session_params.
	Configure func(p unsafe.Pointer)
}

// StageLabels are the labels OnProgress receives, one per long call.
var StageLabels = []string{"feed", "build_index", "select", "recompute"}

// DefaultSessionParams are the library's defaults (lctx_session_default_params):
// Method is MethodReform, every other field zero (= derived).
func DefaultSessionParams() SessionParams {
	var c C.lctx_session_params
	C.lctx_session_default_params(&c)
	return SessionParams{Method: Method(c.method)}
}

// Session reads one document and answers questions about it. Use it from
// one goroutine at a time; Cancel may be called from any goroutine.
type Session struct {
	h        *C.lctx_session
	model    *Model
	progress unsafe.Pointer // handle box of the progress function
	label    *string        // the running call's label, read by OnProgress
}

// cParams is C memory for what lctx_session_params points to during one call
// (cgo forbids Go pointers inside the struct passed to C).
type cParams struct {
	ptrs []unsafe.Pointer
}

func (c *cParams) alloc(size C.size_t) unsafe.Pointer {
	p := C.calloc(1, size)
	c.ptrs = append(c.ptrs, p)
	return p
}

func (c *cParams) str(s string) *C.char {
	if s == "" {
		return nil
	}
	p := C.CString(s)
	c.ptrs = append(c.ptrs, unsafe.Pointer(p))
	return p
}

func (c *cParams) free() {
	for _, p := range c.ptrs {
		C.free(p)
	}
	c.ptrs = nil
}

// native fills the C params; free mem after the call that reads them.
func (p *SessionParams) native(mem *cParams, label *string) (C.lctx_session_params, unsafe.Pointer) {
	var c C.lctx_session_params
	C.lctx_session_default_params(&c)
	var box unsafe.Pointer
	if p != nil {
		c.method = C.lctx_method(p.Method)
		if p.NCtx != 0 {
			c.n_ctx = C.int32_t(p.NCtx)
		}
		if p.Threads != 0 {
			c.n_threads = C.int32_t(p.Threads)
		}
		if p.Batch != 0 {
			c.n_batch = C.int32_t(p.Batch)
		}
		if p.KVType != 0 {
			c.kv_type = C.lctx_kv_type(p.KVType)
		}
		if p.AttnPrecision != 0 {
			c.attn_precision = C.lctx_precision(p.AttnPrecision)
		}
		if p.MatmulPrecision != 0 {
			c.matmul_precision = C.lctx_precision(p.MatmulPrecision)
		}
		if r := p.Reform; r != nil {
			cr := (*C.lctx_reform_params)(mem.alloc(C.sizeof_lctx_reform_params))
			C.lctx_reform_default_params(cr)
			cr.chunk, cr.budget, cr.recompute = C.int32_t(r.Chunk), C.int32_t(r.Budget), C.int32_t(r.Recompute)
			cr.sink, cr.recent, cr.obs = C.int32_t(r.Sink), C.int32_t(r.Recent), C.int32_t(r.Obs)
			cr.keep_first, cr.keep_last = C.int32_t(r.KeepFirst), C.int32_t(r.KeepLast)
			cr.pool_half = C.int32_t(r.PoolHalf)
			cr.repeat_window = C.int32_t(r.RepeatWindow)
			cr.h2o_per_chunk = C.bool(r.H2OPerChunk)
			cr.heads_path = mem.str(r.HeadsPath)
			c.reform = cr
		}
		if p.KV != nil || p.KVBudget != 0 || p.KVChunk != 0 {
			k := KVParams{}
			if p.KV != nil {
				k = *p.KV
			}
			if p.KVBudget != 0 {
				k.Budget = p.KVBudget
			}
			if p.KVChunk != 0 {
				k.Chunk = p.KVChunk
			}
			ck := (*C.lctx_kv_params)(mem.alloc(C.sizeof_lctx_kv_params))
			C.lctx_kv_default_params(ck)
			ck.budget, ck.chunk, ck.sink = C.int32_t(k.Budget), C.int32_t(k.Chunk), C.int32_t(k.Sink)
			ck.recent, ck.obs, ck.snapkv_kernel = C.int32_t(k.Recent), C.int32_t(k.Obs), C.int32_t(k.SnapKVKernel)
			ck.infinipot_nuc_ratio = C.float(k.InfiniPotNucRatio)
			ck.infinipot_catalyst = mem.str(k.InfiniPotCatalyst)
			c.kv = ck
		}
		if i := p.InfLLM; i != nil {
			ci := (*C.lctx_infllm_params)(mem.alloc(C.sizeof_lctx_infllm_params))
			C.lctx_infllm_default_params(ci)
			ci.block, ci.repr = C.int32_t(i.Block), C.int32_t(i.Repr)
			c.infllm = ci
		}
		if l := p.ILRe; l != nil {
			cl := (*C.lctx_ilre_params)(mem.alloc(C.sizeof_lctx_ilre_params))
			C.lctx_ilre_default_params(cl)
			if l.RetrievalLayer != nil {
				cl.retrieval_layer = C.int32_t(*l.RetrievalLayer)
			}
			cl.sink, cl.window, cl.chunk = C.int32_t(l.Sink), C.int32_t(l.Window), C.int32_t(l.Chunk)
			cl.budget, cl.query_tokens = C.int32_t(l.Budget), C.int32_t(l.QueryTokens)
			cl.dca = C.bool(l.DCA)
			cl.max_kernels = mem.str(l.MaxKernels)
			cl.avg_kernels = mem.str(l.AvgKernels)
			cl.profile_path = mem.str(l.ProfilePath)
			if l.ScoreDistance != nil {
				cl.score_distance = C.int32_t(*l.ScoreDistance)
			}
			cl.repeat_window = C.int32_t(l.RepeatWindow)
			c.ilre = cl
		}
		if a := p.ReAttention; a != nil {
			ca := (*C.lctx_reattention_params)(mem.alloc(C.sizeof_lctx_reattention_params))
			C.lctx_reattention_default_params(ca)
			ca.n_global, ca.n_local, ca.span = C.int32_t(a.NGlobal), C.int32_t(a.NLocal), C.int32_t(a.Span)
			ca.top_k, ca.n_spans, ca.chunk = C.int32_t(a.TopK), C.int32_t(a.NSpans), C.int32_t(a.Chunk)
			ca.reuse_steps = C.int32_t(a.ReuseSteps)
			ca.tile_max = C.bool(a.TileMax)
			ca.store_max_ram = C.uint64_t(a.StoreMaxRAM)
			ca.store_dir = mem.str(a.StoreDir)
			c.reattention = ca
		}
		if f := p.RefreshKV; f != nil {
			cf := (*C.lctx_refreshkv_params)(mem.alloc(C.sizeof_lctx_refreshkv_params))
			f.native(cf)
			c.refreshkv = cf
		}
		progress := p.Progress
		if on := p.OnProgress; on != nil && progress == nil {
			progress = func(done float32) bool { return on(*label, done) }
		}
		if progress != nil {
			box = newHandleBox(cgo.NewHandle(progress))
			c.progress = C.lctx_progress_fn(C.lctxgo_progress)
			c.progress_user_data = box
		}
		if p.Configure != nil {
			p.Configure(unsafe.Pointer(&c))
		}
	}
	return c, box
}

func checkProgress(p *SessionParams) error {
	if p != nil && p.Progress != nil && p.OnProgress != nil {
		return &Error{Op: "lctx_session_create", Status: ErrInvalidArg, Message: "set Progress or OnProgress, not both"}
	}
	return nil
}

// NewSession creates a session on m (free it before the model). p nil: the
// library defaults (MethodReform).
func NewSession(m *Model, p *SessionParams) (*Session, error) {
	if err := checkProgress(p); err != nil {
		return nil, err
	}
	var mem cParams
	defer mem.free()
	label := new(string)
	*label = "feed"
	c, box := p.native(&mem, label)
	s := &Session{model: m, progress: box, label: label}
	if err := call("lctx_session_create", func() C.lctx_status { return C.lctx_session_create(m.h, &c, &s.h) }); err != nil {
		freeHandleBox(box)
		return nil, err
	}
	runtime.SetFinalizer(s, (*Session).Close)
	return s, nil
}

// LoadIndex creates a REFORM session in stage Indexed from a file written
// by SaveIndex.
func LoadIndex(m *Model, path string, p *SessionParams) (*Session, error) {
	if err := checkProgress(p); err != nil {
		return nil, err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var mem cParams
	defer mem.free()
	label := new(string)
	*label = "feed"
	c, box := p.native(&mem, label)
	s := &Session{model: m, progress: box, label: label}
	if err := call("lctx_session_load_index", func() C.lctx_status {
		return C.lctx_session_load_index(m.h, cpath, &c, &s.h)
	}); err != nil {
		freeHandleBox(box)
		return nil, err
	}
	runtime.SetFinalizer(s, (*Session).Close)
	return s, nil
}

// Close frees the session; safe to call twice.
func (s *Session) Close() {
	if s != nil && s.h != nil {
		C.lctx_session_free(s.h)
		s.h = nil
		freeHandleBox(s.progress)
		s.progress = nil
	}
}

func (s *Session) Stage() Stage      { return Stage(C.lctx_session_stage(s.h)) }
func (s *Session) NFed() int64       { return int64(C.lctx_session_n_fed(s.h)) }
func (s *Session) LastError() string { return C.GoString(C.lctx_session_last_error(s.h)) }
func (s *Session) Cancel()           { C.lctx_session_cancel(s.h) }
func (s *Session) Model() *Model     { return s.model }

func tokPtr(t []Token) *C.lctx_token {
	if len(t) == 0 {
		return nil
	}
	return (*C.lctx_token)(unsafe.Pointer(&t[0]))
}

func (s *Session) setLabel(l string) {
	if s.label != nil {
		*s.label = l
	}
}

// Feed appends document tokens (stage 1).
func (s *Session) Feed(tokens []Token) error {
	s.setLabel("feed")
	return call("lctx_feed_chunk", func() C.lctx_status {
		return C.lctx_feed_chunk(s.h, tokPtr(tokens), C.size_t(len(tokens)))
	})
}

// FeedText tokenizes text and feeds it, the rule of every binding: BOS
// (when the model adds one) before the first chunk only, and special-token
// text such as "<|im_start|>" is NOT parsed: a document is data, read as
// plain text. To feed control tokens, Tokenize with parseSpecial and Feed.
func (s *Session) FeedText(text string) error {
	toks, err := s.model.Tokenize(text, s.NFed() == 0, false)
	if err != nil {
		return err
	}
	return s.Feed(toks)
}

// BuildIndex seals the document (stage 2).
func (s *Session) BuildIndex() error {
	s.setLabel("build_index")
	return call("lctx_build_index", func() C.lctx_status { return C.lctx_build_index(s.h) })
}

// SaveIndex writes the REFORM index of an indexed session to path.
func (s *Session) SaveIndex(path string) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	return call("lctx_index_save", func() C.lctx_status { return C.lctx_index_save(s.h, cpath) })
}

// Selection is the set of document tokens chosen for a question.
type Selection struct{ h *C.lctx_selection }

// Select chooses document tokens for a question (stage 3).
func (s *Session) Select(query []Token) (*Selection, error) {
	sel := &Selection{}
	s.setLabel("select")
	if err := call("lctx_select", func() C.lctx_status {
		return C.lctx_select(s.h, tokPtr(query), C.size_t(len(query)), &sel.h)
	}); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(sel, (*Selection).Close)
	return sel, nil
}

func (sel *Selection) Close() {
	if sel != nil && sel.h != nil {
		C.lctx_selection_free(sel.h)
		sel.h = nil
	}
}

func (sel *Selection) Size() int64 { return int64(C.lctx_selection_size(sel.h)) }

// Positions of the selected tokens, ascending.
func (sel *Selection) Positions() []int64 {
	out := make([]int64, sel.Size()+1)
	n := C.lctx_selection_positions(sel.h, (*C.int64_t)(unsafe.Pointer(&out[0])), C.int64_t(len(out)))
	return out[:n]
}

// Scores of the selected tokens.
func (sel *Selection) Scores() []float32 {
	out := make([]float32, sel.Size()+1)
	n := C.lctx_selection_scores(sel.h, (*C.float)(unsafe.Pointer(&out[0])), C.int64_t(len(out)))
	return out[:n]
}

// Recompute builds the decode cache from a selection (stage 4).
func (s *Session) Recompute(sel *Selection) error {
	s.setLabel("recompute")
	return call("lctx_recompute", func() C.lctx_status { return C.lctx_recompute(s.h, sel.h) })
}

// Sampling parameters; nil means greedy.
type Sampling struct {
	Temperature   float32
	TopK          int32
	TopP          float32 // 0 means off (1)
	MinP          float32
	RepeatPenalty float32 // 0 means off (1)
	RepeatLastN   int32   // 0 keeps the default window
	Seed          uint64
	// Stop strings: generation ends before the first occurrence of any of
	// them; the stop string and what follows are not returned.
	Stop []string
}

func (sp *Sampling) native() C.lctx_sampling_params {
	var c C.lctx_sampling_params
	C.lctx_sampling_default_params(&c)
	if sp != nil {
		c.temperature = C.float(sp.Temperature)
		c.top_k = C.int32_t(sp.TopK)
		if sp.TopP > 0 {
			c.top_p = C.float(sp.TopP)
		}
		c.min_p = C.float(sp.MinP)
		if sp.RepeatPenalty > 0 {
			c.repeat_penalty = C.float(sp.RepeatPenalty)
		}
		if sp.RepeatLastN != 0 {
			c.repeat_last_n = C.int32_t(sp.RepeatLastN)
		}
		c.seed = C.uint64_t(sp.Seed)
	}
	return c
}

// Decode samples the next token (stage 5).
func (s *Session) Decode(sp *Sampling) (Token, error) {
	c := sp.native()
	var t C.lctx_token
	if err := call("lctx_decode", func() C.lctx_status { return C.lctx_decode(s.h, &c, &t) }); err != nil {
		return -1, err
	}
	return Token(t), nil
}

// DecodeToken is stage 5 with the caller's token (teacher forcing): it
// returns the natural log of the token's probability under the logits the
// next Decode would sample from, then appends it as if it had been sampled.
func (s *Session) DecodeToken(tok Token) (float32, error) {
	var lp C.float
	if err := call("lctx_decode_token", func() C.lctx_status {
		return C.lctx_decode_token(s.h, C.lctx_token(tok), &lp)
	}); err != nil {
		return 0, err
	}
	return float32(lp), nil
}

// RefreshKVStats are RefreshKV's decoding statistics since the last Recompute
// (lctx_refreshkv_stats plus the per-layer step counts). A layer step is one
// layer of one decoded token: NFull + NPartial == NSteps * NLayer and
// LayerFull[l] + LayerPartial[l] == NSteps.
type RefreshKVStats struct {
	NLayer            int
	Partial           int64   // K in use (partial-cache slots per layer and KV head)
	NSteps            int64   // decoded tokens
	NFull             int64   // layer steps with full attention (and a refresh)
	NPartial          int64   // layer steps over the partial cache
	EffectiveStride   float64 // mean over layers of NSteps / full steps of the layer
	FullAttentionS    float64 // seconds in full steps' attention, refresh included
	PartialAttentionS float64 // seconds in partial steps' attention
	RefreshS          float64 // of FullAttentionS: rebuilding the partial caches
	LayerFull         []int64
	LayerPartial      []int64
}

// RefreshKVStats reads the statistics of a session decoding with RefreshKV
// (MethodRefreshKV, or REFORM/ILRe with RefreshKV.Gathered); ErrUnsupported
// for other sessions.
func (s *Session) RefreshKVStats() (*RefreshKVStats, error) {
	n := s.model.NLayer()
	full := make([]int64, n+1)
	part := make([]int64, n+1)
	var c C.lctx_refreshkv_stats
	c.struct_size = C.uint32_t(C.sizeof_lctx_refreshkv_stats)
	if err := call("lctx_session_refreshkv_stats", func() C.lctx_status {
		return C.lctx_session_refreshkv_stats(s.h, &c, (*C.int64_t)(unsafe.Pointer(&full[0])),
			(*C.int64_t)(unsafe.Pointer(&part[0])), C.size_t(n))
	}); err != nil {
		return nil, err
	}
	nl := int(c.n_layer)
	if nl > n {
		nl = n
	}
	return &RefreshKVStats{NLayer: int(c.n_layer), Partial: int64(c.partial), NSteps: int64(c.n_steps),
		NFull: int64(c.n_full), NPartial: int64(c.n_partial), EffectiveStride: float64(c.effective_stride),
		FullAttentionS: float64(c.full_attention_s), PartialAttentionS: float64(c.partial_attention_s),
		RefreshS: float64(c.refresh_s), LayerFull: full[:nl], LayerPartial: part[:nl]}, nil
}

// SetRefreshKV sets how the next questions decode, from the next Recompute on
// (an answer in progress keeps its decoding; the document is not read
// again): p non-nil: RefreshKV with those knobs (Gathered is not read); nil:
// dense decoding. For sessions of MethodFull, MethodRefreshKV, MethodReform
// and MethodILRe; ErrUnsupported for others, ErrInvalidArg for bad knobs (nothing changes on
// an error).
func (s *Session) SetRefreshKV(p *RefreshKVParams) error {
	var c *C.lctx_refreshkv_params
	if p != nil {
		c = new(C.lctx_refreshkv_params) // holds no Go pointer: may be passed to C
		p.native(c)
	}
	return call("lctx_session_set_refreshkv", func() C.lctx_status { return C.lctx_session_set_refreshkv(s.h, c) })
}

// OpTime is one backend op of a session (lctx_op_time).
type OpTime struct {
	Op      string
	Calls   int64
	Seconds float64 // wall time inside the op, summed over its calls
	Bytes   int64   // to_host, from_host, copy: moved; alloc: allocated; else 0
}

// OpTimes reads where the session's time went, per backend op, in the
// header's fixed order, and the session's lifetime in seconds
// (docs/profiling.md). Only for a session created while the environment
// variable LCTX_PROFILE_OPS was set; ErrUnsupported for others.
func (s *Session) OpTimes() ([]OpTime, float64, error) {
	var n C.size_t
	var life C.double
	if err := call("lctx_session_op_times", func() C.lctx_status {
		return C.lctx_session_op_times(s.h, nil, 0, &n, &life)
	}); err != nil {
		return nil, 0, err
	}
	if n == 0 {
		return nil, float64(life), nil
	}
	buf := make([]C.lctx_op_time, int(n))
	if err := call("lctx_session_op_times", func() C.lctx_status {
		return C.lctx_session_op_times(s.h, &buf[0], n, &n, &life)
	}); err != nil {
		return nil, 0, err
	}
	if int(n) < len(buf) {
		buf = buf[:int(n)]
	}
	out := make([]OpTime, len(buf))
	for i, o := range buf {
		out[i] = OpTime{Op: C.GoString(o.op), Calls: int64(o.calls), Seconds: float64(o.seconds), Bytes: int64(o.bytes)}
	}
	return out, float64(life), nil
}

// Logits returns a copy of the logits the next Decode samples from (nil
// before Recompute).
func (s *Session) Logits() []float32 {
	p := C.lctx_session_logits(s.h)
	if p == nil {
		return nil
	}
	n := s.model.NVocab()
	out := make([]float32, n)
	copy(out, unsafe.Slice((*float32)(unsafe.Pointer(p)), n))
	return out
}

// Generate decodes up to maxTokens tokens, stopping at end-of-generation
// or before the first of sp.Stop, and calls yield with each text piece
// (UTF-8 characters split over tokens are held back until complete, and so
// is text that may begin a stop string). yield returning false stops early.
func (s *Session) Generate(maxTokens int, sp *Sampling, yield func(piece string) bool) error {
	var stops []string
	if sp != nil {
		stops = sp.Stop
	}
	f := newStopFilter(stops)
	out := func(piece string) bool {
		t := f.push(piece)
		if t != "" && !yield(t) {
			return false
		}
		return !f.done
	}
	if err := s.generate(maxTokens, sp, out); err != nil {
		return err
	}
	if t := f.flush(); t != "" {
		yield(t)
	}
	return nil
}

func (s *Session) generate(maxTokens int, sp *Sampling, yield func(piece string) bool) error {
	var pending []byte
	for i := 0; i < maxTokens; i++ {
		t, err := s.Decode(sp)
		if err != nil {
			return err
		}
		if s.model.IsEOG(t) {
			break
		}
		b, err := s.model.TokenToPiece(t, false)
		if err != nil {
			return err
		}
		pending = append(pending, b...)
		cut := completeUTF8(pending)
		if cut > 0 {
			if !yield(string(pending[:cut])) {
				return nil
			}
			pending = append(pending[:0], pending[cut:]...)
		}
	}
	if len(pending) > 0 {
		yield(string(pending))
	}
	return nil
}

// completeUTF8 is the length of b without a trailing incomplete character.
func completeUTF8(b []byte) int {
	n := len(b)
	for k := 1; k <= 3 && k <= n; k++ {
		if utf8.RuneStart(b[n-k]) {
			if !utf8.FullRune(b[n-k:]) {
				return n - k
			}
			break
		}
	}
	return n
}

// Ask seals the document on the first question, selects and recomputes for
// the question, and streams the answer to yield. Ask again for more
// questions on the same document.
func (s *Session) Ask(question string, maxTokens int, sp *Sampling, yield func(piece string) bool) error {
	if s.Stage() == StageFeeding {
		if err := s.BuildIndex(); err != nil {
			return err
		}
	}
	q, err := s.model.Tokenize(question, false, true)
	if err != nil {
		return err
	}
	sel, err := s.Select(q)
	if err != nil {
		return err
	}
	defer sel.Close()
	if err := s.Recompute(sel); err != nil {
		return err
	}
	return s.Generate(maxTokens, sp, yield)
}

// SelectScores returns every token's score from the last successful Select
// (REFORM, ILRe): the raw scores, the scores the selection ranks by, and the
// always-gathered ranges [0, forcedFirst) and [n - forcedLast, n).
func (s *Session) SelectScores() (raw, ranked []float32, forcedFirst, forcedLast int64, err error) {
	var n, first, last C.int64_t
	if err = call("lctx_session_select_scores", func() C.lctx_status {
		return C.lctx_session_select_scores(s.h, nil, nil, 0, &n, &first, &last)
	}); err != nil {
		return
	}
	raw, ranked = make([]float32, int(n)), make([]float32, int(n))
	var pr, pk *C.float
	if n > 0 {
		pr, pk = (*C.float)(unsafe.Pointer(&raw[0])), (*C.float)(unsafe.Pointer(&ranked[0]))
	}
	err = call("lctx_session_select_scores", func() C.lctx_status {
		return C.lctx_session_select_scores(s.h, pr, pk, n, &n, &first, &last)
	})
	return raw, ranked, int64(first), int64(last), err
}

// Attended returns what the latest step's attention could see (ReAttention):
// for each stored token (document, then question and answer so far), the
// share of layers whose attention window held it, in [0, 1]; all 0 before the
// first step. ErrUnsupported for a method whose decode attends to its whole
// cache.
func (s *Session) Attended() ([]float32, error) {
	var n C.int64_t
	if err := call("lctx_session_attended", func() C.lctx_status {
		return C.lctx_session_attended(s.h, nil, 0, &n)
	}); err != nil {
		return nil, err
	}
	share := make([]float32, int(n))
	var p *C.float
	if n > 0 {
		p = (*C.float)(unsafe.Pointer(&share[0]))
	}
	if err := call("lctx_session_attended", func() C.lctx_status {
		return C.lctx_session_attended(s.h, p, n, &n)
	}); err != nil {
		return nil, err
	}
	return share, nil
}
