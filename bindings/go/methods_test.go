package lctx

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
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
