//! Sampling parameters and iterators over generated tokens and text.
use crate::error::Result;
use crate::{sys, Session, Token};

/// Sampling parameters; `greedy()` (= `default()`) takes the argmax.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// <= 0: greedy.
    pub temperature: f32,
    /// <= 0: off.
    pub top_k: i32,
    /// >= 1: off.
    pub top_p: f32,
    /// <= 0: off.
    pub min_p: f32,
    /// 1: off.
    pub repeat_penalty: f32,
    /// Window of repeat_penalty; 0: off, -1: whole context.
    pub repeat_last_n: i32,
    /// Same seed and inputs give the same tokens.
    pub seed: u64,
}

impl Sampling {
    pub fn greedy() -> Sampling {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_sampling_params>() };
        unsafe { sys::lctx_sampling_default_params(&mut p) };
        Sampling {
            temperature: p.temperature,
            top_k: p.top_k,
            top_p: p.top_p,
            min_p: p.min_p,
            repeat_penalty: p.repeat_penalty,
            repeat_last_n: p.repeat_last_n,
            seed: p.seed,
        }
    }

    pub(crate) fn raw(&self) -> sys::lctx_sampling_params {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_sampling_params>() };
        unsafe { sys::lctx_sampling_default_params(&mut p) };
        p.temperature = self.temperature;
        p.top_k = self.top_k;
        p.top_p = self.top_p;
        p.min_p = self.min_p;
        p.repeat_penalty = self.repeat_penalty;
        p.repeat_last_n = self.repeat_last_n;
        p.seed = self.seed;
        p
    }
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling::greedy()
    }
}

/// Generated token ids: decodes until an end-of-generation token (not
/// yielded), `max_tokens`, or an error (yielded once, then the end).
pub struct Tokens<'s, 'm> {
    session: &'s mut Session<'m>,
    sampling: Sampling,
    left: usize,
}

impl Iterator for Tokens<'_, '_> {
    type Item = Result<Token>;
    fn next(&mut self) -> Option<Result<Token>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match self.session.decode(&self.sampling) {
            Ok(t) if self.session.model().is_eog(t) => {
                self.left = 0;
                None
            }
            Ok(t) => Some(Ok(t)),
            Err(e) => {
                self.left = 0;
                Some(Err(e))
            }
        }
    }
}

/// Generated text pieces; a UTF-8 character split over tokens is held back
/// until complete (invalid bytes become U+FFFD).
pub struct Pieces<'s, 'm> {
    tokens: Tokens<'s, 'm>,
    pending: Vec<u8>,
}

/// Length of b without a trailing incomplete UTF-8 character.
fn complete_utf8(b: &[u8]) -> usize {
    let n = b.len();
    for k in 1..=n.min(3) {
        let c = b[n - k];
        if c & 0xC0 != 0x80 {
            // A lead byte: does its sequence fit in the k bytes present?
            let need = if c >= 0xF0 { 4 } else if c >= 0xE0 { 3 } else if c >= 0xC0 { 2 } else { 1 };
            return if need > k { n - k } else { n };
        }
    }
    n
}

impl Iterator for Pieces<'_, '_> {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Result<String>> {
        loop {
            match self.tokens.next() {
                Some(Ok(t)) => {
                    match self.tokens.session.model().token_to_piece(t, false) {
                        Ok(b) => self.pending.extend_from_slice(&b),
                        Err(e) => return Some(Err(e)),
                    }
                    let cut = complete_utf8(&self.pending);
                    if cut > 0 {
                        let rest = self.pending.split_off(cut);
                        let text = String::from_utf8_lossy(&self.pending).into_owned();
                        self.pending = rest;
                        return Some(Ok(text));
                    }
                }
                Some(Err(e)) => return Some(Err(e)),
                None if self.pending.is_empty() => return None,
                None => {
                    let text = String::from_utf8_lossy(&self.pending).into_owned();
                    self.pending.clear();
                    return Some(Ok(text));
                }
            }
        }
    }
}

impl<'s, 'm> Pieces<'s, 'm> {
    /// Ends the text before the first occurrence of any of `stops` (the stop
    /// string and what follows are not returned); text that may begin a stop
    /// string is held back until it is known not to.
    pub fn stop_at<S: AsRef<str>>(self, stops: &[S]) -> StopAt<Pieces<'s, 'm>> {
        StopAt::new(self, stops)
    }
}

/// A text-piece iterator cut before the first stop string ([`Pieces::stop_at`]).
pub struct StopAt<I> {
    inner: I,
    stops: Vec<String>,
    text: String,
    sent: usize,
    done: bool,
}

impl<I: Iterator<Item = Result<String>>> StopAt<I> {
    pub fn new<S: AsRef<str>>(inner: I, stops: &[S]) -> StopAt<I> {
        let stops = stops.iter().map(|s| s.as_ref().to_string()).filter(|s| !s.is_empty()).collect();
        StopAt { inner, stops, text: String::new(), sent: 0, done: false }
    }

    /// The part of the text that can be returned after `piece`.
    fn push(&mut self, piece: &str) -> String {
        self.text.push_str(piece);
        let mut cut: Option<usize> = None;
        for s in &self.stops {
            let mut from = self.sent.saturating_sub(s.len() - 1);
            while !self.text.is_char_boundary(from) {
                from -= 1;
            }
            if let Some(i) = self.text[from..].find(s.as_str()) {
                cut = Some(cut.map_or(from + i, |c| c.min(from + i)));
            }
        }
        if let Some(c) = cut {
            self.done = true;
            let out = self.text[self.sent..c].to_string();
            self.sent = c;
            return out;
        }
        let mut hold = 0;
        for s in &self.stops {
            // longest tail of the text that begins a stop string
            for k in (hold + 1..=(s.len() - 1).min(self.text.len())).rev() {
                if s.is_char_boundary(k) && self.text.ends_with(&s[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        let safe = (self.text.len() - hold).max(self.sent);
        let out = self.text[self.sent..safe].to_string();
        self.sent = safe;
        out
    }
}

impl<I: Iterator<Item = Result<String>>> Iterator for StopAt<I> {
    type Item = Result<String>;
    fn next(&mut self) -> Option<Result<String>> {
        while !self.done {
            match self.inner.next() {
                Some(Ok(piece)) => {
                    let out = self.push(&piece);
                    if !out.is_empty() {
                        return Some(Ok(out));
                    }
                }
                Some(Err(e)) => return Some(Err(e)),
                None => {
                    self.done = true;
                    let out = self.text[self.sent..].to_string();
                    self.sent = self.text.len();
                    return (!out.is_empty()).then_some(Ok(out));
                }
            }
        }
        None
    }
}

impl<'m> Session<'m> {
    /// Iterator over up to `max_tokens` generated token ids (after recompute).
    pub fn tokens(&mut self, max_tokens: usize, sampling: &Sampling) -> Tokens<'_, 'm> {
        Tokens { session: self, sampling: *sampling, left: max_tokens }
    }
    /// Iterator over the text of up to `max_tokens` generated tokens.
    pub fn generate(&mut self, max_tokens: usize, sampling: &Sampling) -> Pieces<'_, 'm> {
        Pieces { tokens: self.tokens(max_tokens, sampling), pending: Vec::new() }
    }
}

#[cfg(test)]
mod tests {
    use super::complete_utf8;
    use super::StopAt;

    fn cut(pieces: &[&str], stops: &[&str]) -> Vec<String> {
        let it = pieces.iter().map(|p| Ok(p.to_string()));
        StopAt::new(it, stops).map(|r| r.unwrap()).collect()
    }

    #[test]
    fn stop_strings() {
        assert_eq!(cut(&["ab", "c\nd", "e"], &["\n"]).concat(), "abc");
        assert_eq!(cut(&["a<", "/s", ">b"], &["</s>"]).concat(), "a");
        assert_eq!(cut(&["a<", "b"], &["</s>"]), vec!["a", "<b"]);
        assert_eq!(cut(&["x", "y"], &[] as &[&str]).concat(), "xy");
        assert_eq!(cut(&["é<", "/"], &["</s>"]).concat(), "é</");
    }
    #[test]
    fn utf8_holdback() {
        assert_eq!(complete_utf8(b"h\xc3\xa9"), 3);
        assert_eq!(complete_utf8(b"h\xc3"), 1);
        assert_eq!(complete_utf8(b"\xe2\x82"), 0);
        assert_eq!(complete_utf8(b"\xe2\x82\xac"), 3);
        assert_eq!(complete_utf8(b"\xf0\x9f\x98"), 0);
        assert_eq!(complete_utf8(b"ab"), 2);
        assert_eq!(complete_utf8(b""), 0);
    }
}
