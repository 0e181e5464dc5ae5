// ask: load a model, read a text file, ask a question, stream the answer.
// usage: go run . MODEL.gguf FILE.txt "question" [max_tokens]
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
	s, err := lctx.NewSession(m, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	prefix, suffix := m.PromptParts()
	toks, err := m.Tokenize(prefix+string(doc), true, true)
	if err != nil {
		return err
	}
	if err := s.Feed(toks); err != nil {
		return err
	}
	err = s.Ask("\n\n"+question+suffix, maxTokens, nil, func(piece string) bool {
		fmt.Print(piece)
		return true
	})
	fmt.Println()
	return err
}
