package lctx

import "strings"

// stopFilter streams text pieces, holding back a tail that may begin a stop
// string, and stops at the first complete one (which is dropped).
type stopFilter struct {
	stops []string
	text  string
	sent  int
	done  bool
}

func newStopFilter(stops []string) *stopFilter {
	f := &stopFilter{}
	for _, s := range stops {
		if s != "" {
			f.stops = append(f.stops, s)
		}
	}
	return f
}

func (f *stopFilter) push(piece string) string {
	f.text += piece
	cut := -1
	for _, s := range f.stops {
		from := f.sent - len(s) + 1
		if from < 0 {
			from = 0
		}
		if i := strings.Index(f.text[from:], s); i >= 0 && (cut < 0 || from+i < cut) {
			cut = from + i
		}
	}
	if cut >= 0 {
		f.done = true
		out := f.text[f.sent:cut]
		f.sent = cut
		return out
	}
	hold := 0
	for _, s := range f.stops { // longest tail of the text that begins a stop string
		k := len(s) - 1
		if k > len(f.text) {
			k = len(f.text)
		}
		for ; k > hold; k-- {
			if strings.HasSuffix(f.text, s[:k]) {
				hold = k
				break
			}
		}
	}
	safe := len(f.text) - hold
	if safe < f.sent {
		safe = f.sent
	}
	out := f.text[f.sent:safe]
	f.sent = safe
	return out
}

func (f *stopFilter) flush() string {
	if f.done {
		return ""
	}
	out := f.text[f.sent:]
	f.sent = len(f.text)
	return out
}
