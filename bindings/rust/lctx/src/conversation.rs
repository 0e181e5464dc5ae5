//! Conversation: questions and answers over one document, keeping the history.
use crate::error::{Error, Result, Status};
use crate::model::ChatMessage;
use crate::{Sampling, Session};

/// Marks where the document goes in the first user turn.
const DOCUMENT_MARK: &str = "\u{1}lctx-document\u{1}";

/// A chat on top of a [`Session`]: the document (optional with a chat
/// template) is read once, and every question is asked with the earlier
/// questions and answers before it, so the second question sees the first
/// Q/A. Framing, the same in every binding: with `chat` and a model whose
/// chat template the library knows, that template's turns (the document and
/// the first question share the first user turn); otherwise the document is
/// followed by "\n\n" + question + "\n" + answer for each turn (the format
/// of `lctx run --no-chat`).
pub struct Conversation<'s, 'm> {
    session: &'s mut Session<'m>,
    /// The (question, answer) turns so far.
    pub history: Vec<(String, String)>,
    template: bool,
    prefix: String,
    started: bool,
}

fn msg(role: &str, content: String) -> ChatMessage {
    ChatMessage { role: role.into(), content }
}

impl<'s, 'm> Conversation<'s, 'm> {
    /// Starts a conversation on a session with nothing fed yet.
    pub fn new(session: &'s mut Session<'m>, chat: bool) -> Result<Conversation<'s, 'm>> {
        if session.n_fed() != 0 {
            return Err(Error { status: Status::State, message: "the session has already been fed".into() });
        }
        let template = chat
            && match session.model().chat_apply(&[msg("user", "x".into())], true) {
                Ok(_) => true,
                Err(e) if e.status == Status::Unsupported => false,
                Err(e) => return Err(e),
            };
        let mut c = Conversation { session, history: Vec::new(), template, prefix: String::new(), started: false };
        if template {
            c.prefix = c.render("")?.0;
        }
        Ok(c)
    }

    /// The text before the document and the text after it up to the answer.
    fn render(&self, question: &str) -> Result<(String, String)> {
        if !self.template {
            let mut after: String = self.history.iter().map(|(q, a)| format!("\n\n{q}\n{a}")).collect();
            after.push_str(&format!("\n\n{question}\n"));
            return Ok((String::new(), after));
        }
        let mut msgs = Vec::new();
        for i in 0..=self.history.len() {
            let q = if i < self.history.len() { self.history[i].0.as_str() } else { question };
            let q = if i == 0 { format!("{DOCUMENT_MARK}\n\n{q}") } else { q.to_string() };
            msgs.push(msg("user", q));
            if i < self.history.len() {
                msgs.push(msg("assistant", self.history[i].1.clone()));
            }
        }
        let text = self.session.model().chat_apply(&msgs, true)?;
        let at = text.find(DOCUMENT_MARK).ok_or_else(|| Error {
            status: Status::Unsupported,
            message: "the chat template dropped the document".into(),
        })?;
        Ok((text[..at].to_string(), text[at + DOCUMENT_MARK.len()..].to_string()))
    }

    fn start(&mut self) -> Result<()> {
        if !self.started {
            self.started = true;
            if !self.prefix.is_empty() {
                let toks = self.session.model().tokenize(&self.prefix, true, true)?;
                self.session.feed(&toks)?;
            }
        }
        Ok(())
    }

    /// Appends document text (feed_text's rule: plain text, BOS first).
    pub fn feed_text(&mut self, document: &str) -> Result<usize> {
        self.start()?;
        self.session.feed_text(document)
    }

    /// The text that follows the document for `question` (history included).
    pub fn query(&self, question: &str) -> Result<String> {
        Ok(self.render(question)?.1)
    }

    /// Asks `question`, passing each text piece of the answer to `on_piece`,
    /// cut before the first of `stops`; the turn joins the history.
    pub fn ask_with<S: AsRef<str>>(&mut self, question: &str, max_tokens: usize, sampling: &Sampling, stops: &[S],
                                   mut on_piece: impl FnMut(&str)) -> Result<String> {
        self.start()?;
        if self.session.n_fed() == 0 {
            return Err(Error {
                status: Status::State,
                message: "nothing to talk about: feed_text a document before the first question".into(),
            });
        }
        let q = self.query(question)?;
        let mut answer = String::new();
        for piece in self.session.ask_stream(&q, max_tokens, sampling)?.stop_at(stops) {
            let piece = piece?;
            on_piece(&piece);
            answer.push_str(&piece);
        }
        self.history.push((question.to_string(), answer.clone()));
        Ok(answer)
    }

    /// ask_with without stop strings or a callback.
    pub fn ask(&mut self, question: &str, max_tokens: usize, sampling: &Sampling) -> Result<String> {
        self.ask_with(question, max_tokens, sampling, &[] as &[&str], |_| {})
    }

    /// The session underneath.
    pub fn session(&mut self) -> &mut Session<'m> {
        self.session
    }
}
