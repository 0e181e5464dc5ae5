//! Safe Rust API for lctx: long-context inference for small models on CPU.
//!
//! ```no_run
//! let model = lctx::Model::load("model.gguf", &lctx::ModelParams::default())?;
//! let mut session = model.session(&lctx::SessionParams::default())?; // REFORM, the default
//! let mut chat = lctx::Conversation::new(&mut session, true)?;
//! chat.feed_text("a long document ...")?; // longer than the trained context is fine
//! chat.ask_with("Who built it?", 128, &lctx::Sampling::greedy(), &["\n\n"], |piece| print!("{piece}"))?;
//! let again = chat.ask("When?", 64, &lctx::Sampling::greedy())?; // sees the first question and answer
//! # Ok::<(), lctx::Error>(())
//! ```
//!
//! Threading follows lctx.h: a [`Model`] is immutable and `Send + Sync`; a
//! [`Session`] borrows its model (so it is freed first), is `Send` but not
//! `Sync`; [`Canceller`] stops a running call from any thread.
mod conversation;
mod error;
mod generate;
mod log;
mod model;
mod session;

pub use conversation::Conversation;
pub use error::{Error, Result, Status};
pub use generate::{Pieces, Sampling, StopAt, Tokens};
pub use log::{set_logger, LogLevel};
pub use model::{ChatMessage, Model, ModelParams};
pub use session::{
    Canceller, KvType, Method, OpTime, OpTimes, Precision, ProgressFn, RefreshKvParams, RefreshKvSchedule, RefreshKvStats, Selection, Session, SessionParams, Stage,
    StageProgressFn, STAGE_LABELS,
};

/// The raw FFI (bindgen output), for calls this crate does not wrap yet.
pub use lctx_sys as sys;

use std::ffi::CStr;
use std::os::raw::c_char;

/// A token id of the model's vocabulary.
pub type Token = i32;

/// Text of a library-owned C string ("" for NULL).
pub(crate) fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// "MAJOR.MINOR.PATCH" of the loaded library.
pub fn version() -> String {
    c_text(unsafe { sys::lctx_version() })
}

/// LCTX_VERSION_NUMBER of the loaded library (MAJOR*10000 + MINOR*100 + PATCH).
pub fn version_number() -> i32 {
    unsafe { sys::lctx_version_number() }
}

/// Compiler and CPU variant of the loaded library.
pub fn build_info() -> String {
    c_text(unsafe { sys::lctx_build_info() })
}

/// Message of the last failed lctx call on this thread ("" if none).
pub fn last_error() -> String {
    c_text(unsafe { sys::lctx_last_error() })
}
