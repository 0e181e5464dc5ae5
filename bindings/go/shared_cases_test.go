package lctx

// The cases of bindings/tests/shared_cases.json, which the Python, Java and
// Rust tests run too; the expected answers come from `lctx run`
// (bindings/tests/make_shared_cases.py).

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

type sharedSampling struct {
	Temperature float32 `json:"temperature"`
	TopK        int32   `json:"top_k"`
	TopP        float32 `json:"top_p"`
	Seed        uint64  `json:"seed"`
}

type sharedTurn struct {
	Question string         `json:"question"`
	NPredict int            `json:"n_predict"`
	Sampling sharedSampling `json:"sampling"`
	Stop     []string       `json:"stop"`
	Answer   string         `json:"answer"`
}

type sharedCases struct {
	Model       string `json:"model"`
	NThreads    int32  `json:"n_threads"`
	AnswerCases []struct {
		Name     string       `json:"name"`
		Method   *string      `json:"method"`
		Document string       `json:"document"`
		Turns    []sharedTurn `json:"turns"`
	} `json:"answer_cases"`
	ErrorCases []struct {
		Name     string   `json:"name"`
		Op       string   `json:"op"`
		Path     string   `json:"path"`
		Text     string   `json:"text"`
		Tokens   []Token  `json:"tokens"`
		Document string   `json:"document"`
		Error    string   `json:"error"`
		Labels   []string `json:"labels"`
	} `json:"error_cases"`
	ProgressCase struct {
		Method   string   `json:"method"`
		Document string   `json:"document"`
		Question string   `json:"question"`
		NPredict int      `json:"n_predict"`
		Labels   []string `json:"labels"`
	} `json:"progress_case"`
}

func loadSharedCases(t *testing.T) (*sharedCases, *Model) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root(), "bindings", "tests", "shared_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c sharedCases
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	m, err := LoadModel(filepath.Join(root(), c.Model), &ModelParams{Threads: int(c.NThreads)})
	if err != nil {
		t.Fatal(err)
	}
	return &c, m
}

// sharedSession: method by registry name, nil: the library default.
func sharedSession(t *testing.T, m *Model, method *string, threads int32, on func(string, float32) bool) (*Session, error) {
	p := DefaultSessionParams()
	if method != nil {
		meth, err := ParseMethod(*method)
		if err != nil {
			t.Fatal(err)
		}
		p.Method = meth
	}
	p.Threads = threads
	p.OnProgress = on
	return NewSession(m, &p)
}

func TestSharedAnswerCases(t *testing.T) {
	c, m := loadSharedCases(t)
	defer m.Close()
	for _, ac := range c.AnswerCases {
		t.Run(ac.Name, func(t *testing.T) {
			s, err := sharedSession(t, m, ac.Method, c.NThreads, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			conv, err := NewConversation(s, false)
			if err != nil {
				t.Fatal(err)
			}
			if err := conv.FeedText(ac.Document); err != nil {
				t.Fatal(err)
			}
			for i, turn := range ac.Turns {
				sp := &Sampling{Temperature: turn.Sampling.Temperature, TopK: turn.Sampling.TopK,
					TopP: turn.Sampling.TopP, Seed: turn.Sampling.Seed, Stop: turn.Stop}
				var streamed string
				got, err := conv.Ask(turn.Question, turn.NPredict, sp, func(p string) bool { streamed += p; return true })
				if err != nil {
					t.Fatal(err)
				}
				if got != turn.Answer || streamed != turn.Answer {
					t.Fatalf("turn %d: got %q (streamed %q), want %q", i, got, streamed, turn.Answer)
				}
			}
			if len(conv.History) != len(ac.Turns) {
				t.Fatalf("history has %d turns, want %d", len(conv.History), len(ac.Turns))
			}
		})
	}
}

func TestSharedErrorCases(t *testing.T) {
	c, m := loadSharedCases(t)
	defer m.Close()
	for _, ec := range c.ErrorCases {
		t.Run(ec.Name, func(t *testing.T) {
			var err error
			switch ec.Op {
			case "load_model":
				var bad *Model
				bad, err = LoadModel(filepath.Join(root(), ec.Path), nil)
				if bad != nil {
					bad.Close()
				}
			case "method_from_name":
				_, err = ParseMethod(ec.Text)
			case "feed_tokens":
				s, e := sharedSession(t, m, nil, c.NThreads, nil)
				if e != nil {
					t.Fatal(e)
				}
				err = s.Feed(ec.Tokens)
				s.Close()
			case "decode_after_feed":
				s, e := sharedSession(t, m, nil, c.NThreads, nil)
				if e != nil {
					t.Fatal(e)
				}
				if e := s.FeedText(ec.Document); e != nil {
					t.Fatal(e)
				}
				_, err = s.Decode(nil)
				s.Close()
			case "cancel_in_progress":
				seen := map[string]bool{}
				s, e := sharedSession(t, m, nil, c.NThreads, func(stage string, done float32) bool {
					seen[stage] = true
					return true
				})
				if e != nil {
					t.Fatal(e)
				}
				err = s.FeedText(ec.Document)
				s.Close()
				var labels []string
				for l := range seen {
					labels = append(labels, l)
				}
				if !reflect.DeepEqual(labels, ec.Labels) {
					t.Fatalf("labels %v, want %v", labels, ec.Labels)
				}
			default:
				t.Fatalf("unknown op %q", ec.Op)
			}
			var le *Error
			if !errors.As(err, &le) {
				t.Fatalf("want a %s error, got %v", ec.Error, err)
			}
			if le.Status.Kind() != ec.Error {
				t.Fatalf("want a %s error, got %s (%v)", ec.Error, le.Status.Kind(), err)
			}
		})
	}
}

func TestSharedProgressLabels(t *testing.T) {
	c, m := loadSharedCases(t)
	defer m.Close()
	pc := c.ProgressCase
	var seen []string
	s, err := sharedSession(t, m, &pc.Method, c.NThreads, func(stage string, done float32) bool {
		if len(seen) == 0 || seen[len(seen)-1] != stage {
			seen = append(seen, stage)
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.FeedText(pc.Document); err != nil {
		t.Fatal(err)
	}
	if err := s.Ask(pc.Question, pc.NPredict, nil, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, pc.Labels) {
		t.Fatalf("labels %v, want %v", seen, pc.Labels)
	}
}

func TestStopFilter(t *testing.T) {
	run := func(pieces []string, stops []string) string {
		f := newStopFilter(stops)
		out := ""
		for _, p := range pieces {
			out += f.push(p)
			if f.done {
				return out
			}
		}
		return out + f.flush()
	}
	if got := run([]string{"ab", "c\nd", "e"}, []string{"\n"}); got != "abc" {
		t.Fatalf("got %q", got)
	}
	if got := run([]string{"a<", "/s", ">b"}, []string{"</s>"}); got != "a" {
		t.Fatalf("got %q", got)
	}
	if got := run([]string{"a<", "b"}, []string{"</s>"}); got != "a<b" {
		t.Fatalf("got %q", got)
	}
}
