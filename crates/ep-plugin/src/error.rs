//! Errors and the panic guard every `extern "C"` entry goes through.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use ort_sys::OrtErrorCode;

use crate::abi::StatusPtr;
use crate::api::{make_status, try_api};

/// An error of the EP, reported to ORT as an `OrtStatus`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpError {
    /// ORT error code to report.
    pub code: OrtErrorCode,
    /// Human-readable message.
    pub message: String,
}

impl EpError {
    /// An `ORT_EP_FAIL` error.
    pub fn new(message: impl Into<String>) -> Self {
        EpError {
            code: OrtErrorCode::ORT_EP_FAIL,
            message: message.into(),
        }
    }

    /// An `ORT_INVALID_ARGUMENT` error (bad options, bad arguments from the caller).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        EpError {
            code: OrtErrorCode::ORT_INVALID_ARGUMENT,
            message: message.into(),
        }
    }

    /// Prefixes the message with context.
    pub fn context(mut self, what: impl std::fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl std::fmt::Display for EpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EpError {}

impl From<String> for EpError {
    fn from(message: String) -> Self {
        EpError::new(message)
    }
}

impl From<&str> for EpError {
    fn from(message: &str) -> Self {
        EpError::new(message)
    }
}

/// The text of a panic payload.
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`, turning an error or a panic into an `OrtStatus` (null on success).
///
/// `what` names the entry point for the message. Never unwinds.
pub fn guard(what: &str, f: impl FnOnce() -> Result<(), EpError>) -> StatusPtr {
    let err = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return ptr::null_mut(),
        Ok(Err(e)) => e,
        Err(payload) => EpError::new(format!("panic: {}", panic_message(&*payload))),
    };
    let msg = format!("MLXExecutionProvider {what}: {}", err.message);
    log::error!("{msg}");
    // Building the status must not unwind either.
    catch_unwind(AssertUnwindSafe(|| match try_api() {
        Some(api) => make_status(api.ort, err.code, &msg),
        None => ptr::null_mut(),
    }))
    .unwrap_or(ptr::null_mut())
}

/// Runs `f` for an entry point that can't return a status; a panic gives `fallback`.
pub fn guard_value<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = panic_message(&*payload);
            // Logging could itself panic (a broken logger); never let that escape.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                log::error!("MLXExecutionProvider {what}: panic: {msg}")
            }));
            fallback
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_catches_panics_and_errors() {
        // Unit tests negotiate no API, so no status can be built (null comes back); what
        // matters is that nothing unwinds out of the guard.
        assert!(guard("test", || panic!("boom")).is_null());
        assert!(guard("test", || Err(EpError::new("bad"))).is_null());
        assert!(guard("test", || Ok(())).is_null());
        assert_eq!(guard_value("test", 7, || -> i32 { panic!("x") }), 7);
        assert_eq!(guard_value("test", 7, || 3), 3);
    }

    #[test]
    fn panic_payloads_are_read() {
        let p = catch_unwind(|| panic!("static")).unwrap_err();
        assert_eq!(panic_message(&*p), "static");
        let p = catch_unwind(|| panic!("{}", 42)).unwrap_err();
        assert_eq!(panic_message(&*p), "42");
    }
}
