package lctx

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
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
	if !MethodReform.Implemented() || MethodReAttention.Implemented() || Method(n).Implemented() {
		t.Error("Implemented disagrees with the registry")
	}
	if s := Method(n).String(); !strings.HasPrefix(s, "Method(") {
		t.Errorf("unknown method prints %q", s)
	}
	if _, err := ParseMethod("reformer"); !errors.Is(err, ErrInvalidArg) || !strings.Contains(err.Error(), "reformer") {
		t.Errorf("ParseMethod of an unknown name: %v", err)
	}
}

// The method structs reach the library: out-of-range knobs are refused
// with their names, and every implemented method makes a session.
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
		if !method.Implemented() {
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("%s: %v", method, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", method, err)
			continue
		}
		if err := s.FeedText("Once upon a time there was a little girl."); err != nil {
			t.Errorf("%s: %v", method, err)
		}
		s.Close()
	}
}

// ILRe with explicit knobs: the five stages run, the selection is the sinks
// + the budget (the document is longer), and bad values are refused with
// ErrInvalidArg and the field's name.
func TestIlreParams(t *testing.T) {
	m := tinyModel(t)
	layer := int32(1)
	params := func(edit func(*IlreParams)) *SessionParams {
		l := &IlreParams{RetrievalLayer: &layer, Sink: 4, Window: 32, Chunk: 64, Budget: 40, DCA: true,
			MaxKernels: "2,4", AvgKernels: "1-8"}
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
	sel, err := s.Select(q)
	if err != nil {
		t.Fatal(err)
	}
	pos := sel.Positions()
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

// SessionParams.KVType reaches lctx_session_params.kv_type, and
// ModelParams.Backend lctx_model_params.backend.
func TestKVTypeAndBackend(t *testing.T) {
	m := tinyModel(t)
	for _, kt := range []KVType{KVF32, KVF16} {
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
