package lctx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

const doc = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
	"One day, she saw a big red ball under a tree. "

func root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func tinyModel(t *testing.T) *Model {
	t.Helper()
	path := os.Getenv("LCTX_TINY_MODEL")
	if path == "" {
		path = filepath.Join(root(), "tests", "data", "stories260K.gguf")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("test model missing: %s (stories260K.gguf is committed under tests/data/): %v", path, err)
	}
	m, err := LoadModel(path, &ModelParams{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// Every function of the header is called somewhere in this package.
func TestWholeAPIIsReachable(t *testing.T) {
	hdr, err := os.ReadFile(filepath.Join(root(), "include", "lctx.h"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`LCTX_API\s+(?:LCTX_NODISCARD\s+)?[\w\s\*]+?\b(lctx_\w+)\s*\(`).FindAllStringSubmatch(string(hdr), -1)
	var src strings.Builder
	files, _ := filepath.Glob(filepath.Join(root(), "bindings", "go", "*.go"))
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			b, _ := os.ReadFile(f)
			src.Write(b)
		}
	}
	if len(names) < 40 {
		t.Fatalf("parsed only %d functions from lctx.h", len(names))
	}
	for _, n := range names {
		if !strings.Contains(src.String(), "C."+n[1]+"(") {
			t.Errorf("%s is not wrapped by the Go binding", n[1])
		}
	}
}

func TestErrors(t *testing.T) {
	_, err := LoadModel("/nonexistent/x.gguf", nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrIO || !errors.Is(err, ErrIO) {
		t.Fatalf("want an ErrIO *Error, got %v", err)
	}
	if !strings.Contains(e.Message, "/nonexistent/x.gguf") {
		t.Errorf("message lacks the path: %q", e.Message)
	}
	if _, err := LoadModelFromMemory([]byte("not gguf"), nil); !errors.Is(err, ErrFormat) {
		t.Errorf("want ErrFormat, got %v", err)
	}
	if Version() == "" || BuildInfo() == "" || VersionNumber() <= 0 || StatusString(ErrState) == "" {
		t.Error("version or status text empty")
	}
}

// The error message is thread-local in C; goroutines move between OS threads,
// so many goroutines failing at once must each still get their own message.
func TestErrorsAcrossGoroutines(t *testing.T) {
	const workers, calls = 32, 2000
	wrong := make(chan string, workers)
	for w := 0; w < workers; w++ {
		go func(w int) {
			for i := 0; i < calls; i++ {
				path := fmt.Sprintf("/nonexistent/w%d-%d.gguf", w, i)
				_, err := LoadModel(path, nil)
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, path) {
					wrong <- fmt.Sprintf("%s: got %v", path, err)
					return
				}
				runtime.Gosched()
			}
			wrong <- ""
		}(w)
	}
	for w := 0; w < workers; w++ {
		if msg := <-wrong; msg != "" {
			t.Error(msg)
		}
	}
}

func TestTokenizer(t *testing.T) {
	m := tinyModel(t)
	if m.Architecture() != "llama" || m.NVocab() != 512 || m.NLayer() <= 0 {
		t.Fatalf("unexpected model info %s %d %d", m.Architecture(), m.NVocab(), m.NLayer())
	}
	toks, err := m.Tokenize(doc, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if toks[0] != m.TokenBOS() {
		t.Errorf("no BOS: %v", toks[:3])
	}
	text, err := m.Detokenize(toks, false)
	if err != nil || strings.TrimSpace(text) != strings.TrimSpace(doc) {
		t.Errorf("roundtrip: %q %v", text, err)
	}
	var joined []byte
	for _, tk := range toks[1:] {
		p, err := m.TokenToPiece(tk, false)
		if err != nil {
			t.Fatal(err)
		}
		joined = append(joined, p...)
	}
	if strings.TrimSpace(string(joined)) != strings.TrimSpace(doc) {
		t.Errorf("pieces: %q", joined)
	}
	if _, err := m.TokenToPiece(Token(m.NVocab()+3), false); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("bad token: %v", err)
	}
	if v, ok := m.Meta("general.architecture"); !ok || v != "llama" {
		t.Errorf("meta: %q %v", v, ok)
	}
	if _, ok := m.Meta("no.such.key"); ok {
		t.Error("absent key found")
	}
	if _, err := m.ChatApply([]ChatMessage{{"user", "hi"}}, true); !errors.Is(err, ErrUnsupported) {
		t.Errorf("chat template: %v", err)
	}
	if p, s := m.PromptParts(); p != "" || s != "\n" {
		t.Errorf("prompt parts %q %q", p, s)
	}
}

func ask(t *testing.T, m *Model, q string) string {
	s, err := NewSession(m, &SessionParams{NCtx: 512, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.FeedText(doc + doc); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := s.Ask(q, 16, nil, func(p string) bool { out.WriteString(p); return true }); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestStagesAndGreedy(t *testing.T) {
	m := tinyModel(t)
	s, err := NewSession(m, &SessionParams{NCtx: 512, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Decode(nil); !errors.Is(err, ErrState) || s.LastError() == "" {
		t.Fatalf("decode before recompute: %v", err)
	}
	if err := s.FeedText(doc); err != nil {
		t.Fatal(err)
	}
	if err := s.BuildIndex(); err != nil || s.Stage() != StageIndexed {
		t.Fatal(err, s.Stage())
	}
	q, _ := m.Tokenize(" She", false, false)
	sel, err := s.Select(q)
	if err != nil {
		t.Fatal(err)
	}
	pos := sel.Positions()
	if int64(len(pos)) != sel.Size() || len(sel.Scores()) != len(pos) {
		t.Errorf("selection sizes %d %d %d", sel.Size(), len(pos), len(sel.Scores()))
	}
	for i := 1; i < len(pos); i++ {
		if pos[i] <= pos[i-1] || pos[i] >= s.NFed() {
			t.Fatalf("positions not ascending in range: %v", pos)
		}
	}
	if err := s.Recompute(sel); err != nil {
		t.Fatal(err)
	}
	sel.Close()
	logits := s.Logits()
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	tok, err := s.Decode(nil)
	if err != nil || int(tok) != best || len(logits) != m.NVocab() {
		t.Fatalf("greedy %d != argmax %d (%v)", tok, best, err)
	}
	a, b := ask(t, m, " Lily saw a"), ask(t, m, " Lily saw a")
	if a == "" || a != b {
		t.Errorf("ask not deterministic: %q %q", a, b)
	}
}

func TestProgressCancelAndLog(t *testing.T) {
	m := tinyModel(t)
	var calls int
	s, err := NewSession(m, &SessionParams{NCtx: 512, Threads: 1, Batch: 8,
		Progress: func(d float32) bool { calls++; return d > 0 }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.FeedText(doc)
	if !errors.Is(err, ErrCancelled) || calls == 0 {
		t.Fatalf("want cancel, got %v after %d calls", err, calls)
	}
	if s.Stage() != StageFeeding {
		t.Error("session not left valid")
	}
	var logged int
	SetLogger(func(l LogLevel, msg string) { logged++ }, LogDebug)
	s2, err := NewSession(m, &SessionParams{NCtx: 64, Threads: 1})
	if err == nil {
		s2.Close()
	}
	SetLogger(nil, LogError)
	// Every registry method is implemented: a value outside the enum is refused.
	if _, err := NewSession(m, &SessionParams{Method: Method(MethodCount())}); !errors.Is(err, ErrInvalidArg) {
		t.Errorf("a method outside the enum: %v", err)
	}
}

func TestCompleteUTF8(t *testing.T) {
	e := []byte("h\xc3\xa9")
	if completeUTF8(e) != 3 || completeUTF8(e[:2]) != 1 || completeUTF8([]byte("\xe2\x82")) != 0 {
		t.Error("completeUTF8")
	}
}

// A session made while LCTX_PROFILE_OPS is set times its backend ops: FULL
// attends once per layer and forward pass; others answer ErrUnsupported.
func TestOpTimesOfAProfiledSession(t *testing.T) {
	m := tinyModel(t)
	t.Setenv("LCTX_PROFILE_OPS", "1")
	s, err := NewSession(m, &SessionParams{Method: MethodFull, NCtx: 512, Threads: 1, Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	toks := make([]Token, 200)
	for i := range toks {
		toks[i] = Token(3 + i)
	}
	if err := s.Feed(toks); err != nil {
		t.Fatal(err)
	}
	ops, life, err := s.OpTimes()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	calls := map[string]int64{}
	for _, o := range ops {
		if o.Calls <= 0 || o.Seconds < 0 {
			t.Errorf("op %+v", o)
		}
		sum += o.Seconds
		calls[o.Op] = o.Calls
	}
	// 200 tokens in passes of 64; a fed chunk reads no logits, so the last layer computes no row.
	if want := int64(4 * (m.NLayer() - 1)); calls["attention"] != want {
		t.Errorf("attention calls %d, want %d", calls["attention"], want)
	}
	if sum > life {
		t.Errorf("ops took %f s of a %f s lifetime", sum, life)
	}
	os.Unsetenv("LCTX_PROFILE_OPS")
	plain, err := NewSession(m, &SessionParams{Method: MethodFull, NCtx: 256, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, _, err := plain.OpTimes(); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OpTimes without LCTX_PROFILE_OPS: %v", err)
	}
}
