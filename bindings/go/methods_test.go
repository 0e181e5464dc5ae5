package lctx

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bindingMethods parses this package's source for the Method constants
// (MethodX Method = C.LCTX_METHOD_X) and returns their identifiers in order.
func bindingMethods(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root(), "bindings", "go", "session.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Method" {
				continue
			}
			for i, n := range v.Names {
				sel, ok := v.Values[i].(*ast.SelectorExpr)
				if !ok || !strings.EqualFold(strings.TrimPrefix(sel.Sel.Name, "LCTX_METHOD_"), strings.TrimPrefix(n.Name, "Method")) {
					t.Errorf("%s is not C.LCTX_METHOD_%s", n.Name, strings.ToUpper(strings.TrimPrefix(n.Name, "Method")))
				}
				names = append(names, n.Name)
			}
		}
	}
	return names
}

// The binding's Method constants against the library's registry (through
// the C API): the same methods with the same values and names.
func TestMethodsMatchRegistry(t *testing.T) {
	consts := bindingMethods(t)
	n := MethodCount()
	if n < 12 || len(consts) != n || len(Methods) != n {
		t.Fatalf("registry has %d methods, the binding %d constants %v and %d in Methods", n, len(consts), consts,
			len(Methods))
	}
	for i, m := range Methods {
		if int(m) != i {
			t.Errorf("Methods[%d] = %d", i, int(m))
		}
		want := strings.ToLower(strings.TrimPrefix(consts[i], "Method"))
		if m.String() != want {
			t.Errorf("method %d: registry name %q, binding constant %s", i, m.String(), consts[i])
		}
		if m.Description() == "" {
			t.Errorf("method %s has no description", m)
		}
		back, err := ParseMethod(strings.ToUpper(want))
		if err != nil || back != m {
			t.Errorf("ParseMethod(%q) = %v, %v", want, back, err)
		}
	}
	// Every method of the registry is implemented; a value outside the enum is not.
	for _, m := range Methods {
		if !m.Implemented() {
			t.Errorf("%s is not implemented", m)
		}
	}
	if Method(n).Implemented() || Method(-1).Implemented() {
		t.Error("a method value outside the enum reports implemented")
	}
	if s := Method(n).String(); !strings.HasPrefix(s, "Method(") {
		t.Errorf("unknown method prints %q", s)
	}
	if _, err := ParseMethod("reformer"); !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "reformer") {
		t.Errorf("ParseMethod of an unknown name: %v", err)
	}
}

// The method structs reach the library: out-of-range knobs are refused
// with their names, every method makes a session, and a method value
// outside the enum is refused (ErrInvalidArg).
func TestMethodParams(t *testing.T) {
	m := tinyModel(t)
	defer m.Close()
	cases := []struct {
		p    SessionParams
		want string
	}{
		{SessionParams{Method: MethodInfLLM, InfLLM: &InfLLMParams{Block: 4, Repr: 5}}, "infllm_repr"},
		{SessionParams{Method: MethodInfiniPot, KV: &KVParams{InfiniPotNucRatio: 2}}, "infinipot_nuc_ratio"},
		{SessionParams{Method: MethodInfLLM, KVChunk: -1}, "kv_chunk"},
		{SessionParams{Method: MethodReform, Reform: &ReformParams{HeadsPath: "/nonexistent/heads.json"}}, "/nonexistent/heads.json"},
		{SessionParams{Method: MethodReform, Reform: &ReformParams{RepeatWindow: 1}}, "repeat window"},
	}
	for _, c := range cases {
		s, err := NewSession(m, &c.p)
		if err == nil {
			s.Close()
			t.Errorf("%v accepted", c.p)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %q does not name %s", err, c.want)
		}
	}
	for _, method := range Methods {
		p := SessionParams{Method: method, Threads: 1, KV: &KVParams{Budget: 64, Chunk: 32, Sink: 4, Recent: 4,
			InfiniPotCatalyst: "Remember."}, InfLLM: &InfLLMParams{Block: 16}}
		s, err := NewSession(m, &p)
		if err != nil {
			t.Errorf("%s: %v", method, err)
			continue
		}
		if err := s.FeedText("Once upon a time there was a little girl."); err != nil {
			t.Errorf("%s: %v", method, err)
		}
		s.Close()
	}
	for _, bad := range []Method{Method(MethodCount()), Method(MethodCount() + 7), -1} {
		s, err := NewSession(m, &SessionParams{Method: bad, Threads: 1})
		if err == nil {
			s.Close()
			t.Errorf("method %d accepted", int32(bad))
		} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "unknown method") {
			t.Errorf("method %d: %v", int32(bad), err)
		}
	}
}

// ILRe with explicit knobs: the five stages run, the selection is the sinks
// + the budget (the document is longer), and bad values are refused with
// ErrInvalidArg and the field's name.
func TestIlreParams(t *testing.T) {
	m := tinyModel(t)
	layer := int32(1)
	params := func(edit func(*IlreParams)) *SessionParams {
		// The document repeats itself: the repeat filter is off (-1) so that
		// ILRe ranks by its raw scores (the filter zeroes the later copies).
		l := &IlreParams{RetrievalLayer: &layer, Sink: 4, Window: 32, Chunk: 64, Budget: 40, DCA: true,
			MaxKernels: "2,4", AvgKernels: "1-8", RepeatWindow: -1}
		if edit != nil {
			edit(l)
		}
		return &SessionParams{Method: MethodILRe, NCtx: 256, Threads: 1, ILRe: l}
	}
	s, err := NewSession(m, params(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	doc := strings.Repeat("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. ", 4)
	if err := s.FeedText(doc); err != nil {
		t.Fatal(err)
	}
	n := s.NFed()
	if n <= 4+40 {
		t.Fatalf("document of %d tokens", n)
	}
	if err := s.BuildIndex(); err != nil {
		t.Fatal(err)
	}
	q, err := m.Tokenize(" Lily saw a", false, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, _, err := s.SelectScores(); !errors.Is(err, ErrState) {
		t.Fatalf("SelectScores before a select: %v, want ErrState", err)
	}
	sel, err := s.Select(q)
	if err != nil {
		t.Fatal(err)
	}
	pos := sel.Positions()
	// SelectScores: one score per document token; ILRe ranks by its raw
	// scores, the sinks are forced, the selection's scores are those at its
	// positions.
	raw, ranked, first, last, err := s.SelectScores()
	if err != nil || int64(len(raw)) != n || len(ranked) != len(raw) || first != 4 || last != 0 {
		t.Fatalf("SelectScores: %d raw, %d ranked, forced %d/%d, %v; want %d, %d, 4/0", len(raw), len(ranked),
			first, last, err, n, n)
	}
	for k, p := range pos {
		if raw[p] != ranked[p] || sel.Scores()[k] != raw[p] {
			t.Fatalf("token %d: raw %g ranked %g selection %g", p, raw[p], ranked[p], sel.Scores()[k])
		}
	}
	if sel.Size() != 4+40 || len(pos) != 4+40 {
		t.Fatalf("selection of %d (%d positions), want sink + budget = 44", sel.Size(), len(pos))
	}
	for k := range pos {
		if (k < 4 && pos[k] != int64(k)) || (k > 0 && pos[k] <= pos[k-1]) || pos[k] >= n {
			t.Fatalf("positions %v: want the 4 sinks first, ascending, below %d", pos, n)
		}
	}
	if err := s.Recompute(sel); err != nil {
		t.Fatal(err)
	}
	sel.Close()
	for k := 0; k < 4; k++ {
		tok, err := s.Decode(nil)
		if err != nil || tok < 0 || int(tok) >= m.NVocab() {
			t.Fatalf("decode %d: token %d, %v", k, tok, err)
		}
	}
	if s.Stage() != StageDecoding {
		t.Errorf("stage %v", s.Stage())
	}

	bad := []struct {
		edit func(*IlreParams)
		want string
	}{
		{func(l *IlreParams) { l.MaxKernels = "2,x" }, "max_kernels"},
		{func(l *IlreParams) { l.AvgKernels = "8-1" }, "avg_kernels"},
		{func(l *IlreParams) { l.Chunk = -1 }, "chunk"},
		{func(l *IlreParams) { big := int32(m.NLayer()); l.RetrievalLayer = &big }, "retrieval_layer"},
		{func(l *IlreParams) { d := int32(-3); l.ScoreDistance = &d }, "score_distance"},
		{func(l *IlreParams) { l.RepeatWindow = 1 }, "repeat_window"},
	}
	for _, b := range bad {
		s, err := NewSession(m, params(b.edit))
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", b.want)
		} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v", b.want, err)
		}
	}
}

// Attended (lctx_session_attended): one share per stored token, in [0, 1];
// the global and local tokens were in every layer's window, the middle only
// where a layer's spans fell (3 spans of 8: at most 24 of 264); refused with
// ErrUnsupported for FULL, whose decode attends to its whole cache.
func TestAttendedSharesOfReAttention(t *testing.T) {
	m := tinyModel(t)
	rng := rand.New(rand.NewSource(11))
	doc := make([]Token, 300)
	for k := range doc {
		doc[k] = Token(3 + rng.Intn(m.NVocab()-3))
	}
	a := DefaultReAttentionParams()
	a.NGlobal, a.NLocal, a.Span, a.NSpans, a.Chunk = 4, 32, 8, 3, 16
	s, err := NewSession(m, &SessionParams{Method: MethodReAttention, NCtx: 512, Threads: 1, ReAttention: &a})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if share, err := s.Attended(); err != nil || len(share) != 0 {
		t.Fatalf("Attended before feeding: %d shares, %v; want none", len(share), err)
	}
	if err := s.Feed(doc); err != nil {
		t.Fatal(err)
	}
	if err := s.BuildIndex(); err != nil {
		t.Fatal(err)
	}
	share, err := s.Attended()
	if err != nil || len(share) != 300 || s.NFed() != 300 {
		t.Fatalf("Attended: %d shares (%d fed), %v; want 300", len(share), s.NFed(), err)
	}
	unseen := 0
	for k, v := range share {
		if v < 0 || v > 1 {
			t.Errorf("token %d: share %g outside [0, 1]", k, v)
		}
		if (k < 4 || k >= 300-32) && v != 1 {
			t.Errorf("token %d (global or local): share %g, want 1", k, v)
		}
		if k >= 4 && k < 300-32 && v == 0 {
			unseen++
		}
	}
	if unseen == 0 {
		t.Errorf("every middle token was in some layer's window: %v", share[4:300-32])
	}

	f, err := NewSession(m, &SessionParams{Method: MethodFull, NCtx: 512, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Feed(doc); err != nil {
		t.Fatal(err)
	}
	if err := f.BuildIndex(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Attended(); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "attends to its whole cache") {
		t.Fatalf("Attended on FULL: %v, want ErrUnsupported", err)
	}
}

// SessionParams.KVType reaches lctx_session_params.kv_type, and
// ModelParams.Backend lctx_model_params.backend.
func TestKVTypeAndBackend(t *testing.T) {
	m := tinyModel(t)
	for _, kt := range []KVType{KVF32, KVF16, KVQ8} {
		s, err := NewSession(m, &SessionParams{NCtx: 128, Threads: 1, KVType: kt})
		if err != nil {
			t.Fatalf("kv type %d: %v", kt, err)
		}
		if err := s.FeedText("Once upon a time"); err != nil {
			t.Errorf("kv type %d: %v", kt, err)
		}
		s.Close()
	}
	if s, err := NewSession(m, &SessionParams{Threads: 1, KVType: 7}); err == nil {
		s.Close()
		t.Error("kv type 7 accepted")
	} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "kv_type") {
		t.Errorf("kv type 7: %v", err)
	}

	// AttnPrecision and MatmulPrecision reach lctx_session_params; a value
	// outside lctx_precision is refused with the field's name.
	bs, berr := NewSession(m, &SessionParams{NCtx: 128, Threads: 1, AttnPrecision: PrecisionBF16,
		MatmulPrecision: PrecisionBF16})
	if berr != nil {
		t.Fatalf("bf16 precisions: %v", berr)
	}
	if err := bs.FeedText("Once upon a time"); err != nil {
		t.Errorf("bf16 precisions: %v", err)
	}
	bs.Close()
	// int8 (docs/int8.md): matmuls only; attention refuses it by name.
	is, ierr := NewSession(m, &SessionParams{NCtx: 128, Threads: 1, MatmulPrecision: PrecisionInt8})
	if ierr != nil {
		t.Fatalf("int8 matmuls: %v", ierr)
	}
	if err := is.FeedText("Once upon a time"); err != nil {
		t.Errorf("int8 matmuls: %v", err)
	}
	is.Close()
	if s, err := NewSession(m, &SessionParams{Threads: 1, AttnPrecision: PrecisionInt8}); err == nil {
		s.Close()
		t.Error("int8 attention accepted")
	} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "attn_precision") {
		t.Errorf("int8 attention: %v", err)
	}
	if s, err := NewSession(m, &SessionParams{Threads: 1, MatmulPrecision: 5}); err == nil {
		s.Close()
		t.Error("matmul precision 5 accepted")
	} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "matmul_precision") {
		t.Errorf("matmul precision 5: %v", err)
	}

	// An unknown backend falls back to the CPU with a warning naming it.
	var warned bool
	SetLogger(func(l LogLevel, msg string) {
		if strings.Contains(msg, "no-such-backend") {
			warned = true
		}
	}, LogWarn)
	defer SetLogger(nil, LogError)
	path := filepath.Join(root(), "tests", "data", "stories260K.gguf")
	if p := os.Getenv("LCTX_TINY_MODEL"); p != "" {
		path = p
	}
	bm, err := LoadModel(path, &ModelParams{Threads: 1, Backend: "no-such-backend"})
	if err != nil {
		t.Fatal(err)
	}
	defer bm.Close()
	s, err := NewSession(bm, &SessionParams{NCtx: 128, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.FeedText("Once upon a time"); err != nil {
		t.Fatal(err)
	}
	if !warned {
		t.Error("no warning about the unknown backend: ModelParams.Backend did not reach the library")
	}
}

const storyDoc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "

// ReAttention with small sizes: a document longer than NGlobal + NLocal has a
// middle that every layer scores, so the answer differs from FULL's; Select
// returns every document position; an odd span and other bad values are
// refused with ErrInvalidArg and the field's name.
func TestReAttentionParams(t *testing.T) {
	m := tinyModel(t)
	d := DefaultReAttentionParams()
	if d != (ReAttentionParams{NGlobal: -1, NLocal: -1, Span: -1, TopK: -1, NSpans: -1, Chunk: -1, ReuseSteps: 1}) {
		t.Errorf("DefaultReAttentionParams() = %+v", d)
	}
	params := func(edit func(*ReAttentionParams)) *SessionParams {
		a := DefaultReAttentionParams()
		a.NGlobal, a.NLocal, a.Span, a.TopK, a.NSpans, a.Chunk = 4, 64, 8, 2, 4, 16
		if edit != nil {
			edit(&a)
		}
		return &SessionParams{Method: MethodReAttention, NCtx: 512, Threads: 1, ReAttention: &a}
	}
	q, err := m.Tokenize(" Lily saw a", false, true)
	if err != nil {
		t.Fatal(err)
	}
	run := func(p *SessionParams, decode int) ([]float32, int64) {
		s, err := NewSession(m, p)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.FeedText(strings.Repeat(storyDoc, 8)); err != nil {
			t.Fatal(err)
		}
		n := s.NFed()
		if err := s.BuildIndex(); err != nil {
			t.Fatal(err)
		}
		sel, err := s.Select(q)
		if err != nil {
			t.Fatal(err)
		}
		defer sel.Close()
		if p.Method == MethodReAttention {
			pos := sel.Positions()
			if int64(len(pos)) != n || pos[0] != 0 || pos[len(pos)-1] != n-1 {
				t.Errorf("ReAttention selection of %d positions, want every one of %d", len(pos), n)
			}
		}
		if err := s.Recompute(sel); err != nil {
			t.Fatal(err)
		}
		logits := s.Logits()
		for k := 0; k < decode; k++ {
			tok, err := s.Decode(nil)
			if err != nil || tok < 0 || int(tok) >= m.NVocab() {
				t.Fatalf("decode %d: token %d, %v", k, tok, err)
			}
		}
		if decode > 0 && s.Stage() != StageDecoding {
			t.Errorf("stage %v", s.Stage())
		}
		return logits, n
	}
	ra, n := run(params(nil), 6)
	if n <= 4+64+4*8 {
		t.Fatalf("document of %d tokens: no middle beyond the spans", n)
	}
	full, _ := run(&SessionParams{Method: MethodFull, NCtx: 512, Threads: 1}, 0)
	if len(ra) != m.NVocab() || len(full) != len(ra) {
		t.Fatalf("logits of %d and %d, vocabulary %d", len(ra), len(full), m.NVocab())
	}
	var diff float64
	for k := range ra {
		if d := math.Abs(float64(ra[k] - full[k])); d > diff {
			diff = d
		}
	}
	if diff <= 1e-4 {
		t.Errorf("ReAttention read the whole document (max logit difference %g)", diff)
	}

	bad := []struct {
		edit func(*ReAttentionParams)
		want string
	}{
		{func(a *ReAttentionParams) { a.Span = 7 }, "span"},
		{func(a *ReAttentionParams) { a.TopK = 65 }, "top_k"},
		{func(a *ReAttentionParams) { a.Chunk = 65 }, "chunk"},
		{func(a *ReAttentionParams) { a.NLocal = 0 }, "n_local"},
	}
	for _, b := range bad {
		s, err := NewSession(m, params(b.edit))
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", b.want)
		} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v", b.want, err)
		}
	}
}

// RefreshKV with small K and stride: the statistics count every decoded
// token at every layer (full + partial = steps), DecodeToken teacher-forces,
// and bad values are refused with ErrInvalidArg and the field's name.
func TestRefreshKVParams(t *testing.T) {
	m := tinyModel(t)
	if d := DefaultRefreshKVParams(); d != (RefreshKVParams{}) {
		t.Errorf("DefaultRefreshKVParams() = %+v, want the zero value", d)
	}
	params := func(edit func(*RefreshKVParams)) *SessionParams {
		f := &RefreshKVParams{Partial: 16, Stride: 2, Threshold: 0.5, Schedule: RefreshKVDynamic, PoolKernel: 3,
			MaxPartialRun: 3}
		if edit != nil {
			edit(f)
		}
		return &SessionParams{Method: MethodRefreshKV, NCtx: 512, Threads: 1, RefreshKV: f}
	}
	s, err := NewSession(m, params(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.FeedText(strings.Repeat(storyDoc, 4)); err != nil {
		t.Fatal(err)
	}
	if err := s.BuildIndex(); err != nil {
		t.Fatal(err)
	}
	q, err := m.Tokenize(" Lily saw a", false, true)
	if err != nil {
		t.Fatal(err)
	}
	sel, err := s.Select(q)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recompute(sel); err != nil {
		t.Fatal(err)
	}
	sel.Close()
	var first Token
	for k := 0; k < 9; k++ {
		tok, err := s.Decode(nil)
		if err != nil || tok < 0 || int(tok) >= m.NVocab() {
			t.Fatalf("decode %d: token %d, %v", k, tok, err)
		}
		if k == 0 {
			first = tok
		}
	}
	lp, err := s.DecodeToken(first)
	if err != nil || lp > 0 {
		t.Fatalf("DecodeToken: %g, %v", lp, err)
	}
	if _, err := s.DecodeToken(Token(m.NVocab() + 5)); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("DecodeToken of a token outside the vocabulary: %v", err)
	}
	st, err := s.RefreshKVStats()
	if err != nil {
		t.Fatal(err)
	}
	if st.NLayer != m.NLayer() || st.Partial != 16 || st.NSteps != 9 {
		t.Errorf("stats %+v: want %d layers, K 16, 9 steps (10 decoded, the last not yet appended)", st, m.NLayer())
	}
	if st.NFull+st.NPartial != st.NSteps*int64(st.NLayer) || len(st.LayerFull) != st.NLayer ||
		len(st.LayerPartial) != st.NLayer {
		t.Errorf("stats %+v: full + partial != steps x layers", st)
	}
	var sumFull int64
	for l := range st.LayerFull {
		if st.LayerFull[l]+st.LayerPartial[l] != st.NSteps || st.LayerFull[l] < 3 {
			t.Errorf("layer %d: %d full + %d partial (steps %d; max run 3: at least 3 full)", l, st.LayerFull[l],
				st.LayerPartial[l], st.NSteps)
		}
		sumFull += st.LayerFull[l]
	}
	if sumFull != st.NFull || st.EffectiveStride < 1 {
		t.Errorf("stats %+v", st)
	}
	f, err := NewSession(m, &SessionParams{NCtx: 256, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.RefreshKVStats(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("stats of a FULL session: %v", err)
	}
	f.Close()

	bad := []struct {
		edit func(*RefreshKVParams)
		want string
	}{
		{func(f *RefreshKVParams) { f.PoolKernel = 4 }, "pool_kernel"},
		{func(f *RefreshKVParams) { f.Stride = -1 }, "stride"},
		{func(f *RefreshKVParams) { f.Partial = -2 }, "partial"},
		{func(f *RefreshKVParams) { f.Schedule = 7 }, "schedule"},
	}
	for _, b := range bad {
		s, err := NewSession(m, params(b.edit))
		if err == nil {
			s.Close()
			t.Errorf("%s: accepted", b.want)
		} else if !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %v", b.want, err)
		}
	}
}

// One REFRESHKV session answers a question with RefreshKV, densely after
// SetRefreshKV(nil), then with RefreshKV again; each answer (greedy tokens,
// then the logits after them) equals the one of a fresh session of that way
// (MethodFull for dense). K = 8 slots of a ~100-token prompt: the two ways
// answer differently, so the comparisons mean something. Bad knobs and a
// method that cannot switch are refused by status.
func TestSetRefreshKVSwitchesBetweenRefreshKVAndDense(t *testing.T) {
	m := tinyModel(t)
	knobs := &RefreshKVParams{Partial: 8, Stride: 3}
	question, err := m.Tokenize(" Lily saw a", false, true)
	if err != nil {
		t.Fatal(err)
	}
	opened := func(method Method) *Session {
		s, err := NewSession(m, &SessionParams{Method: method, NCtx: 512, Threads: 1, RefreshKV: knobs, KVBudget: 64})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FeedText(strings.Repeat(storyDoc, 4)); err != nil {
			t.Fatal(err)
		}
		if err := s.BuildIndex(); err != nil {
			t.Fatal(err)
		}
		return s
	}
	type answer struct {
		tokens []Token
		logits []float32
	}
	ask := func(s *Session) answer {
		sel, err := s.Select(question)
		if err != nil {
			t.Fatal(err)
		}
		defer sel.Close()
		if err := s.Recompute(sel); err != nil {
			t.Fatal(err)
		}
		var a answer
		for k := 0; k < 16; k++ {
			tok, err := s.Decode(nil)
			if err != nil {
				t.Fatal(err)
			}
			a.tokens = append(a.tokens, tok)
		}
		a.logits = s.Logits()
		return a
	}
	tokensEqual := func(a, b []Token) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	expectSame := func(got, want answer, what string) {
		t.Helper()
		if !tokensEqual(got.tokens, want.tokens) {
			t.Errorf("%s: tokens %v, want %v", what, got.tokens, want.tokens)
		}
		if len(got.logits) != len(want.logits) || len(want.logits) == 0 {
			t.Fatalf("%s: %d logits, want %d", what, len(got.logits), len(want.logits))
		}
		for i := range want.logits {
			if got.logits[i] != want.logits[i] {
				t.Errorf("%s: logit %d is %g, want %g", what, i, got.logits[i], want.logits[i])
				break
			}
		}
	}

	f := opened(MethodRefreshKV)
	wantRKV := ask(f)
	f.Close()
	f = opened(MethodFull)
	wantFull := ask(f)
	f.Close()
	if tokensEqual(wantRKV.tokens, wantFull.tokens) {
		t.Fatalf("K too large for RefreshKV to differ from dense: both answer %v", wantFull.tokens)
	}

	s := opened(MethodRefreshKV)
	defer s.Close()
	expectSame(ask(s), wantRKV, "RefreshKV first")
	if err := s.SetRefreshKV(nil); err != nil {
		t.Fatal(err)
	}
	expectSame(ask(s), wantFull, "dense after SetRefreshKV(nil)")
	if _, err := s.RefreshKVStats(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("stats of a session switched to dense: %v", err)
	}
	if err := s.SetRefreshKV(knobs); err != nil {
		t.Fatal(err)
	}
	expectSame(ask(s), wantRKV, "RefreshKV again")
	if st, err := s.RefreshKVStats(); err != nil || st.Partial != 8 {
		t.Errorf("stats after switching back: %+v, %v", st, err)
	}

	bad := *knobs
	bad.Stride = -3
	if err := s.SetRefreshKV(&bad); !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "stride") {
		t.Errorf("stride -3: %v", err)
	}
	expectSame(ask(s), wantRKV, "RefreshKV after the refused switch")

	h := opened(MethodH2O)
	defer h.Close()
	if err := h.SetRefreshKV(knobs); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "h2o") {
		t.Errorf("H2O switched to RefreshKV: %v", err)
	}
	if err := h.SetRefreshKV(nil); !errors.Is(err, ErrUnsupported) {
		t.Errorf("H2O switched to dense: %v", err)
	}
}
