"""Conversation: questions and answers over one document, keeping the history."""
from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

from . import _capi
from ._session import Sampling, Session

# Marks where the document goes in the first user turn (never in real text).
_MARK = "\x01lctx-document\x01"


class Conversation:
    """A chat on top of a Session: the document (optional) is read once, and
    every question is asked with the earlier questions and answers before it,
    so the second question sees the first Q/A.

    Framing, the same in every binding: with chat=True and a model whose chat
    template the library knows, the turns are that template's (the document
    and the first question share the first user turn); otherwise (chat=False,
    or no known template) the document is followed by "\\n\\n" + question +
    "\\n" + answer for each turn, the format of ``lctx run --no-chat``.
    """

    def __init__(self, session: Session, *, chat: bool = True) -> None:
        if session.n_fed != 0 or session._chat is not None:
            raise ValueError("a Conversation needs a session with nothing fed yet, made without chat=True "
                             "(the Conversation frames the turns itself)")
        self.session = session
        self.history: List[Tuple[str, str]] = []
        self._template = chat and self._has_template(session)
        self._prefix = self._render([], "")[0] if self._template else ""
        self._started = False

    @staticmethod
    def _has_template(session: Session) -> bool:
        try:
            session.model.chat_apply([("user", "x")])
            return True
        except _capi.UnsupportedError:
            return False

    def _render(self, history: Sequence[Tuple[str, str]], question: str) -> Tuple[str, str]:
        """(text before the document, text after it up to the answer)."""
        if not self._template:
            after = "".join(f"\n\n{q}\n{a}" for q, a in history) + f"\n\n{question}\n"
            return "", after
        turns = [q for q, _ in history] + [question]
        msgs = []
        for i, q in enumerate(turns):
            msgs.append(("user", (_MARK + "\n\n" + q) if i == 0 else q))
            if i < len(history):
                msgs.append(("assistant", history[i][1]))
        text = self.session.model.chat_apply(msgs, add_assistant=True)
        before, _, after = text.partition(_MARK)
        return before, after

    def _start(self) -> None:
        if not self._started:
            self._started = True
            if self._prefix:
                prefix = self.session.model.tokenize(self._prefix, add_special=True, parse_special=True)
                self.session.feed(prefix)

    def feed_text(self, document: str) -> int:
        """Appends document text (feed_text's rule: plain text, BOS first)."""
        self._start()
        return self.session.feed_text(document)

    def query(self, question: str) -> str:
        """The text that follows the document for this question (history included)."""
        return self._render(self.history, question)[1]

    def ask_stream(self, question: str, max_tokens: int = 256, sampling: Optional[Sampling] = None,
                   stop: Optional[Sequence[str]] = None) -> Iterator[str]:
        """Streams the answer; it joins the history once the stream ends."""
        self._start()
        s = self.session
        if s.n_fed == 0:
            raise ValueError("nothing to talk about: feed_text a document before the first question")
        answer = []
        for piece in s.ask_stream(self.query(question), max_tokens, sampling, stop):
            answer.append(piece)
            yield piece
        self.history.append((question, "".join(answer)))

    def ask(self, question: str, max_tokens: int = 256, sampling: Optional[Sampling] = None,
            stop: Optional[Sequence[str]] = None) -> str:
        return "".join(self.ask_stream(question, max_tokens, sampling, stop))

    def __repr__(self) -> str:
        return f"<lctx.Conversation turns={len(self.history)} template={self._template}>"
