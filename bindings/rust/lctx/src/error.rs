//! Statuses of the C API as a Rust error type.
use crate::sys;
use std::fmt;

/// An lctx_status other than LCTX_OK. `Other` keeps codes newer than this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    InvalidArg,
    Io,
    Format,
    Unsupported,
    OutOfMemory,
    State,
    BufferTooSmall,
    Cancelled,
    ContextFull,
    Internal,
    Other(i32),
}

impl Status {
    pub fn from_raw(code: sys::lctx_status) -> Status {
        match code {
            sys::LCTX_ERR_INVALID_ARG => Status::InvalidArg,
            sys::LCTX_ERR_IO => Status::Io,
            sys::LCTX_ERR_FORMAT => Status::Format,
            sys::LCTX_ERR_UNSUPPORTED => Status::Unsupported,
            sys::LCTX_ERR_OUT_OF_MEMORY => Status::OutOfMemory,
            sys::LCTX_ERR_STATE => Status::State,
            sys::LCTX_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::LCTX_ERR_CANCELLED => Status::Cancelled,
            sys::LCTX_ERR_CONTEXT_FULL => Status::ContextFull,
            sys::LCTX_ERR_INTERNAL => Status::Internal,
            other => Status::Other(other as i32),
        }
    }

    pub fn raw(self) -> sys::lctx_status {
        match self {
            Status::InvalidArg => sys::LCTX_ERR_INVALID_ARG,
            Status::Io => sys::LCTX_ERR_IO,
            Status::Format => sys::LCTX_ERR_FORMAT,
            Status::Unsupported => sys::LCTX_ERR_UNSUPPORTED,
            Status::OutOfMemory => sys::LCTX_ERR_OUT_OF_MEMORY,
            Status::State => sys::LCTX_ERR_STATE,
            Status::BufferTooSmall => sys::LCTX_ERR_BUFFER_TOO_SMALL,
            Status::Cancelled => sys::LCTX_ERR_CANCELLED,
            Status::ContextFull => sys::LCTX_ERR_CONTEXT_FULL,
            Status::Internal => sys::LCTX_ERR_INTERNAL,
            Status::Other(c) => c as sys::lctx_status,
        }
    }

    /// The status's name, the same in every binding: its LCTX_ERR_ suffix in
    /// lower case ("invalid_arg", "state", ...).
    pub fn kind(self) -> String {
        match self {
            Status::InvalidArg => "invalid_arg".into(),
            Status::Io => "io".into(),
            Status::Format => "format".into(),
            Status::Unsupported => "unsupported".into(),
            Status::OutOfMemory => "out_of_memory".into(),
            Status::State => "state".into(),
            Status::BufferTooSmall => "buffer_too_small".into(),
            Status::Cancelled => "cancelled".into(),
            Status::ContextFull => "context_full".into(),
            Status::Internal => "internal".into(),
            Status::Other(c) => format!("status({c})"),
        }
    }

    /// The library's static text for this status.
    pub fn text(self) -> String {
        crate::c_text(unsafe { sys::lctx_status_string(self.raw()) })
    }
}

/// A failed lctx call: its status and the library's message for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub status: Status,
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.status.text())
        } else {
            write!(f, "{} ({})", self.message, self.status.text())
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Ok for LCTX_OK, else the error with this thread's last-error message
/// (read right away: it is valid only until the next failing call).
pub(crate) fn check(code: sys::lctx_status) -> Result<()> {
    if code == sys::LCTX_OK {
        Ok(())
    } else {
        Err(Error { status: Status::from_raw(code), message: crate::last_error() })
    }
}

/// An error made by this crate before calling the library.
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error { status: Status::InvalidArg, message: message.into() }
}
