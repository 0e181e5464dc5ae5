//! Model: a loaded GGUF file, its metadata and its tokenizer.
use crate::error::{check, invalid, Result, Status};
use crate::{c_text, sys, Token};
use std::ffi::CString;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::NonNull;

/// Parameters of Model::load; `default()` gives the library's defaults.
#[derive(Debug, Clone)]
pub struct ModelParams {
    /// Worker threads for sessions of this model; <= 0: all cores.
    pub n_threads: i32,
    /// Map the file instead of reading it.
    pub use_mmap: bool,
    /// Backend of this model's sessions: "cpu" or a backend module's name
    /// ("cuda"); None: $LCTX_BACKEND if set, else the best one available.
    pub backend: Option<String>,
}

impl ModelParams {
    /// The C params and the backend string they point to (keep it alive
    /// for the call; the library copies it).
    fn raw(&self) -> Result<(sys::lctx_model_params, Option<CString>)> {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_model_params>() };
        unsafe { sys::lctx_model_default_params(&mut p) };
        p.n_threads = self.n_threads;
        p.use_mmap = self.use_mmap;
        let backend = self.backend.as_deref().map(|s| cstring(s, "backend")).transpose()?;
        if let Some(b) = &backend {
            p.backend = b.as_ptr();
        }
        Ok((p, backend))
    }
}

impl Default for ModelParams {
    fn default() -> Self {
        let mut p = unsafe { std::mem::zeroed::<sys::lctx_model_params>() };
        unsafe { sys::lctx_model_default_params(&mut p) };
        ModelParams { n_threads: p.n_threads, use_mmap: p.use_mmap, backend: None }
    }
}

/// One chat turn for Model::chat_apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// A loaded model. Immutable after load: lctx.h allows sharing it between
/// threads, hence `Send + Sync`. Sessions borrow it, so it outlives them.
pub struct Model {
    pub(crate) h: NonNull<sys::lctx_model>,
}

// SAFETY: lctx.h: "An lctx_model is immutable after load and may be shared by
// any number of sessions on any number of threads."
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Drop for Model {
    fn drop(&mut self) {
        unsafe { sys::lctx_model_free(self.h.as_ptr()) }
    }
}

pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| invalid(format!("{what} contains a NUL byte")))
}

/// Runs a C call that fills (buf, size, &n) with n = bytes needed, growing
/// the buffer when the library reports it too small.
fn fill_bytes(guess: usize, mut call: impl FnMut(*mut c_char, usize, &mut usize) -> sys::lctx_status) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; guess.max(1)];
    loop {
        let mut n = 0usize;
        let st = call(buf.as_mut_ptr().cast(), buf.len(), &mut n);
        if st == sys::LCTX_ERR_BUFFER_TOO_SMALL && n >= buf.len() {
            buf = vec![0u8; n + 1];
            continue;
        }
        check(st)?;
        buf.truncate(n.min(buf.len()));
        return Ok(buf);
    }
}

impl Model {
    fn from_out(st: sys::lctx_status, out: *mut sys::lctx_model) -> Result<Model> {
        check(st)?;
        NonNull::new(out).map(|h| Model { h }).ok_or_else(|| crate::Error {
            status: Status::Internal,
            message: "the library returned LCTX_OK and a NULL model".into(),
        })
    }

    /// Loads a GGUF file.
    pub fn load(path: impl AsRef<Path>, params: &ModelParams) -> Result<Model> {
        let path = path.as_ref().to_str().ok_or_else(|| invalid("model path is not UTF-8"))?;
        let cpath = cstring(path, "model path")?;
        let (p, _backend) = params.raw()?;
        let mut out = std::ptr::null_mut();
        let st = unsafe { sys::lctx_model_load(cpath.as_ptr(), &p, &mut out) };
        Model::from_out(st, out)
    }

    /// Loads a GGUF image from memory (the library copies it).
    pub fn load_from_memory(data: &[u8], params: &ModelParams) -> Result<Model> {
        let (p, _backend) = params.raw()?;
        let mut out = std::ptr::null_mut();
        let st = unsafe { sys::lctx_model_load_from_memory(data.as_ptr().cast(), data.len(), &p, &mut out) };
        Model::from_out(st, out)
    }

    /// The raw handle, for calls through `lctx::sys` (owned by this Model).
    pub fn as_ptr(&self) -> *const sys::lctx_model {
        self.h.as_ptr()
    }

    pub fn architecture(&self) -> String {
        c_text(unsafe { sys::lctx_model_architecture(self.h.as_ptr()) })
    }
    pub fn name(&self) -> String {
        c_text(unsafe { sys::lctx_model_name(self.h.as_ptr()) })
    }
    /// The GGUF chat template, "" if none.
    pub fn chat_template(&self) -> String {
        c_text(unsafe { sys::lctx_model_chat_template(self.h.as_ptr()) })
    }
    pub fn n_layer(&self) -> i32 {
        unsafe { sys::lctx_model_n_layer(self.h.as_ptr()) }
    }
    pub fn n_head(&self) -> i32 {
        unsafe { sys::lctx_model_n_head(self.h.as_ptr()) }
    }
    pub fn n_head_kv(&self) -> i32 {
        unsafe { sys::lctx_model_n_head_kv(self.h.as_ptr()) }
    }
    pub fn head_dim(&self) -> i32 {
        unsafe { sys::lctx_model_head_dim(self.h.as_ptr()) }
    }
    pub fn n_embd(&self) -> i32 {
        unsafe { sys::lctx_model_n_embd(self.h.as_ptr()) }
    }
    pub fn n_vocab(&self) -> i32 {
        unsafe { sys::lctx_model_n_vocab(self.h.as_ptr()) }
    }
    pub fn n_ctx_train(&self) -> i32 {
        unsafe { sys::lctx_model_n_ctx_train(self.h.as_ptr()) }
    }
    pub fn n_params(&self) -> u64 {
        unsafe { sys::lctx_model_n_params(self.h.as_ptr()) }
    }
    pub fn size_bytes(&self) -> u64 {
        unsafe { sys::lctx_model_size_bytes(self.h.as_ptr()) }
    }

    fn special(t: Token) -> Option<Token> {
        (t >= 0).then_some(t)
    }
    pub fn token_bos(&self) -> Option<Token> {
        Model::special(unsafe { sys::lctx_model_token_bos(self.h.as_ptr()) })
    }
    pub fn token_eos(&self) -> Option<Token> {
        Model::special(unsafe { sys::lctx_model_token_eos(self.h.as_ptr()) })
    }
    pub fn token_eot(&self) -> Option<Token> {
        Model::special(unsafe { sys::lctx_model_token_eot(self.h.as_ptr()) })
    }
    pub fn token_pad(&self) -> Option<Token> {
        Model::special(unsafe { sys::lctx_model_token_pad(self.h.as_ptr()) })
    }
    /// True for end-of-generation tokens (eos, eot, <|im_end|> ...).
    pub fn is_eog(&self, token: Token) -> bool {
        unsafe { sys::lctx_token_is_eog(self.h.as_ptr(), token) }
    }

    /// A GGUF metadata value as text, None when the key is absent.
    pub fn meta(&self, key: &str) -> Option<String> {
        let ckey = cstring(key, "metadata key").ok()?;
        let n = unsafe { sys::lctx_model_meta_string(self.h.as_ptr(), ckey.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            return None;
        }
        let mut buf = vec![0u8; n as usize + 1];
        let n2 = unsafe { sys::lctx_model_meta_string(self.h.as_ptr(), ckey.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        buf.truncate((n2.max(0) as usize).min(n as usize));
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Tokenizes UTF-8 text. `add_special`: BOS/EOS as the model asks;
    /// `parse_special`: recognise control tokens written in the text.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<Token>> {
        let mut out: Vec<Token> = vec![0; text.len() + 8];
        loop {
            let mut n = 0usize;
            let st = unsafe {
                sys::lctx_tokenize(self.h.as_ptr(), text.as_ptr().cast(), text.len(), add_special, parse_special,
                                   out.as_mut_ptr(), out.len(), &mut n)
            };
            if st == sys::LCTX_ERR_BUFFER_TOO_SMALL && n > out.len() {
                out = vec![0; n];
                continue;
            }
            check(st)?;
            out.truncate(n);
            return Ok(out);
        }
    }

    /// Bytes of one token's text (possibly part of a UTF-8 character).
    /// `special`: render control tokens as their text.
    pub fn token_to_piece(&self, token: Token, special: bool) -> Result<Vec<u8>> {
        fill_bytes(32, |buf, size, n| unsafe { sys::lctx_token_to_piece(self.h.as_ptr(), token, special, buf, size, n) })
    }

    /// Text of a token sequence.
    pub fn detokenize(&self, tokens: &[Token], special: bool) -> Result<String> {
        let bytes = fill_bytes(8 * tokens.len() + 16, |buf, size, n| unsafe {
            sys::lctx_detokenize(self.h.as_ptr(), tokens.as_ptr(), tokens.len(), special, buf, size, n)
        })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Formats messages with the model's chat template (Status::Unsupported
    /// when it has none that lctx knows).
    pub fn chat_apply(&self, messages: &[ChatMessage], add_assistant: bool) -> Result<String> {
        let mut owned = Vec::with_capacity(messages.len());
        for m in messages {
            owned.push((cstring(&m.role, "chat role")?, cstring(&m.content, "chat content")?));
        }
        let raw: Vec<sys::lctx_chat_message> =
            owned.iter().map(|(r, c)| sys::lctx_chat_message { role: r.as_ptr(), content: c.as_ptr() }).collect();
        let guess = 256 + messages.iter().map(|m| m.content.len() + 32).sum::<usize>();
        let bytes = fill_bytes(guess, |buf, size, n| unsafe {
            sys::lctx_chat_apply(self.h.as_ptr(), raw.as_ptr(), raw.len(), add_assistant, buf, size, n)
        })?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The text before and after one user turn of the chat template, the
    /// latter ending with the assistant's prefix; ("", "\n") without one.
    pub fn prompt_parts(&self) -> (String, String) {
        const MARKER: &str = "\u{1}lctx-user-turn\u{1}";
        let msg = ChatMessage { role: "user".into(), content: MARKER.into() };
        match self.chat_apply(&[msg], true) {
            Ok(text) => match text.find(MARKER) {
                Some(at) => (text[..at].to_string(), text[at + MARKER.len()..].to_string()),
                None => (String::new(), "\n".into()),
            },
            Err(_) => (String::new(), "\n".into()),
        }
    }

    /// A new session reading one document with this model.
    pub fn session(&self, params: &crate::SessionParams) -> Result<crate::Session<'_>> {
        crate::Session::new(self, params)
    }
}
