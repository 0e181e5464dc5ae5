package lctx

import (
	"errors"
	"strings"
)

// documentMark marks where the document goes in the first user turn.
const documentMark = "\x01lctx-document\x01"

// Turn is one question and its answer.
type Turn struct{ Question, Answer string }

// Conversation is a chat on top of a Session: the document (optional with a
// chat template) is read once, and every question is asked with the earlier
// questions and answers before it, so the second question sees the first
// Q/A. Framing, the same in every binding: with chat true and a model whose
// chat template the library knows, that template's turns (the document and
// the first question share the first user turn); otherwise the document is
// followed by "\n\n" + question + "\n" + answer for each turn (the format of
// lctx run --no-chat).
type Conversation struct {
	s        *Session
	History  []Turn
	template bool
	prefix   string
	started  bool
}

// NewConversation starts a conversation on a session with nothing fed yet.
func NewConversation(s *Session, chat bool) (*Conversation, error) {
	if s.NFed() != 0 {
		return nil, &Error{Op: "NewConversation", Status: ErrState, Message: "the session has already been fed"}
	}
	c := &Conversation{s: s}
	if chat {
		if _, err := s.model.ChatApply([]ChatMessage{{"user", "x"}}, true); err == nil {
			c.template = true
		} else if !errors.Is(err, ErrUnsupported) {
			return nil, err
		}
	}
	if c.template {
		before, _, err := c.render(nil, "")
		if err != nil {
			return nil, err
		}
		c.prefix = before
	}
	return c, nil
}

// render gives the text before the document and the text after it up to
// the answer, for history followed by question.
func (c *Conversation) render(history []Turn, question string) (before, after string, err error) {
	if !c.template {
		var b strings.Builder
		for _, t := range history {
			b.WriteString("\n\n" + t.Question + "\n" + t.Answer)
		}
		b.WriteString("\n\n" + question + "\n")
		return "", b.String(), nil
	}
	var msgs []ChatMessage
	for i := 0; i <= len(history); i++ {
		q := question
		if i < len(history) {
			q = history[i].Question
		}
		if i == 0 {
			q = documentMark + "\n\n" + q
		}
		msgs = append(msgs, ChatMessage{"user", q})
		if i < len(history) {
			msgs = append(msgs, ChatMessage{"assistant", history[i].Answer})
		}
	}
	text, err := c.s.model.ChatApply(msgs, true)
	if err != nil {
		return "", "", err
	}
	at := strings.Index(text, documentMark)
	if at < 0 {
		return "", "", &Error{Op: "Conversation", Status: ErrUnsupported, Message: "the chat template dropped the document"}
	}
	return text[:at], text[at+len(documentMark):], nil
}

func (c *Conversation) start() error {
	if c.started {
		return nil
	}
	c.started = true
	if c.prefix == "" {
		return nil
	}
	toks, err := c.s.model.Tokenize(c.prefix, true, true)
	if err != nil {
		return err
	}
	return c.s.Feed(toks)
}

// FeedText appends document text (FeedText's rule: plain text, BOS first).
func (c *Conversation) FeedText(document string) error {
	if err := c.start(); err != nil {
		return err
	}
	return c.s.FeedText(document)
}

// Query is the text that follows the document for question (history included).
func (c *Conversation) Query(question string) (string, error) {
	_, after, err := c.render(c.History, question)
	return after, err
}

// Ask streams the answer to yield (nil: none) and returns it; the turn joins
// the history.
func (c *Conversation) Ask(question string, maxTokens int, sp *Sampling, yield func(piece string) bool) (string, error) {
	if err := c.start(); err != nil {
		return "", err
	}
	if c.s.NFed() == 0 {
		return "", &Error{Op: "Conversation.Ask", Status: ErrState,
			Message: "nothing to talk about: FeedText a document before the first question"}
	}
	q, err := c.Query(question)
	if err != nil {
		return "", err
	}
	var answer strings.Builder
	err = c.s.Ask(q, maxTokens, sp, func(piece string) bool {
		answer.WriteString(piece)
		return yield == nil || yield(piece)
	})
	if err != nil {
		return "", err
	}
	c.History = append(c.History, Turn{question, answer.String()})
	return answer.String(), nil
}
