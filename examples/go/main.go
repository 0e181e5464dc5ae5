// ask: load a model, read a (long) text file, ask a question, stream the answer.
// usage: go run . MODEL.gguf FILE.txt "question" [max_tokens]
//
// The session uses the library's default method, REFORM, so FILE.txt may be
// far longer than the model's trained context (examples/make_haystack.py
// writes one). Progress goes to stderr with the stage of each long call.
package main

import (
	"fmt"
	"os"
	"strconv"

	lctx "github.com/lctx/lctx/bindings/go"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, `usage: ask MODEL.gguf FILE.txt "question" [max_tokens]`)
		os.Exit(2)
	}
	maxTokens := 128
	if len(os.Args) > 4 {
		maxTokens, _ = strconv.Atoi(os.Args[4])
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3], maxTokens); err != nil {
		fmt.Fprintln(os.Stderr, "ask:", err)
		os.Exit(1)
	}
}

func run(modelPath, textPath, question string, maxTokens int) error {
	doc, err := os.ReadFile(textPath)
	if err != nil {
		return err
	}
	m, err := lctx.LoadModel(modelPath, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	p := lctx.DefaultSessionParams() // REFORM
	p.OnProgress = func(stage string, done float32) bool {
		end := ""
		if done >= 1 {
			end = "\n"
		}
		fmt.Fprintf(os.Stderr, "\r%s %3.0f%%%s", stage, 100*done, end)
		return false // true would cancel
	}
	s, err := lctx.NewSession(m, &p)
	if err != nil {
		return err
	}
	defer s.Close()
	chat, err := lctx.NewConversation(s, true) // the model's chat template, history kept
	if err != nil {
		return err
	}
	if err := chat.FeedText(string(doc)); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ask: %d tokens (trained context %d)\n", s.NFed(), m.NCtxTrain())
	_, err = chat.Ask(question, maxTokens, nil, func(piece string) bool {
		fmt.Print(piece)
		return true
	})
	fmt.Println()
	return err
}
