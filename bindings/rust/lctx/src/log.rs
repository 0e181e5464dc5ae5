//! The global log sink (lctx_log_set) as a Rust closure.
use crate::sys;
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};
use std::sync::{Arc, RwLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn raw(self) -> sys::lctx_log_level {
        match self {
            LogLevel::Debug => sys::LCTX_LOG_DEBUG,
            LogLevel::Info => sys::LCTX_LOG_INFO,
            LogLevel::Warn => sys::LCTX_LOG_WARN,
            LogLevel::Error => sys::LCTX_LOG_ERROR,
        }
    }
    fn from_raw(l: sys::lctx_log_level) -> LogLevel {
        match l {
            sys::LCTX_LOG_DEBUG => LogLevel::Debug,
            sys::LCTX_LOG_INFO => LogLevel::Info,
            sys::LCTX_LOG_WARN => LogLevel::Warn,
            _ => LogLevel::Error,
        }
    }
}

type Logger = Arc<dyn Fn(LogLevel, &str) + Send + Sync>;

// The C side gets no user_data: the closure lives here, so replacing it while
// a worker thread logs is safe (the worker holds its own Arc clone).
static LOGGER: RwLock<Option<Logger>> = RwLock::new(None);

unsafe extern "C" fn trampoline(level: sys::lctx_log_level, message: *const c_char, _: *mut c_void) {
    let logger = LOGGER.read().ok().and_then(|g| g.clone());
    if let (Some(f), false) = (logger, message.is_null()) {
        let text = CStr::from_ptr(message).to_string_lossy();
        // A panic must not unwind into C.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(LogLevel::from_raw(level), &text)));
    }
}

/// Sends library messages at or above `min_level` to `logger` (None: silent,
/// the default). The logger may be called from the library's worker threads.
pub fn set_logger(logger: Option<Box<dyn Fn(LogLevel, &str) + Send + Sync>>, min_level: LogLevel) {
    let mut guard = LOGGER.write().unwrap_or_else(|e| e.into_inner());
    match logger {
        Some(f) => {
            *guard = Some(Arc::from(f));
            unsafe { sys::lctx_log_set(Some(trampoline), min_level.raw(), std::ptr::null_mut()) };
        }
        None => {
            unsafe { sys::lctx_log_set(None, min_level.raw(), std::ptr::null_mut()) };
            *guard = None;
        }
    }
}
