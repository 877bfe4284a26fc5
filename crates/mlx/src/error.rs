//! MLX errors as `Result`s.
//!
//! mlx-c reports a failure by calling a process-wide error handler and returning non-zero;
//! its default handler calls `exit()`. [`install_error_handler`] replaces it with one that
//! stores the message in a thread-local, which [`check`] turns into an [`Error`].

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::Location;
use std::sync::Once;

/// An MLX failure: MLX's message and the Rust call site that made the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// MLX's message (or this crate's, for checks made before calling MLX).
    pub message: String,
    /// Where in Rust the failing call was made.
    pub location: &'static Location<'static>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (at {})", self.message, self.location)
    }
}

impl std::error::Error for Error {}

impl Error {
    /// An error raised by this crate rather than by MLX.
    #[track_caller]
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            location: Location::caller(),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

thread_local! {
    static LAST_ERROR: RefCell<Option<String>> = const { RefCell::new(None) };
}

unsafe extern "C" fn store_error(msg: *const c_char, _data: *mut c_void) {
    let text = if msg.is_null() {
        "unknown MLX error".to_string()
    } else {
        // SAFETY: mlx-c passes a NUL-terminated message valid for this call.
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    };
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
}

/// Replaces mlx-c's exiting error handler; idempotent, and called by every constructor here.
pub fn install_error_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handler is a plain function that never unwinds.
        unsafe { mlx_sys::mlx_set_error_handler(Some(store_error), std::ptr::null_mut(), None) };
    });
}

/// Turns an mlx-c return code into a `Result`, taking MLX's message on failure.
#[track_caller]
pub fn check(rc: c_int) -> Result<()> {
    if rc == 0 {
        LAST_ERROR.with(|e| e.borrow_mut().take());
        return Ok(());
    }
    let message = LAST_ERROR
        .with(|e| e.borrow_mut().take())
        .unwrap_or_else(|| format!("MLX call failed with code {rc}"));
    Err(Error {
        message,
        location: Location::caller(),
    })
}
