//! MLX errors as `Result`s.
//!
//! mlx-c reports a failure by calling a process-wide error handler and returning non-zero;
//! its default handler calls `exit()`. [`install_error_handler`] replaces it with one that
//! stores the message in a thread-local, which [`check`] turns into an [`Error`].
//!
//! Messages reach users (as ONNX Runtime status text), so they carry no path of the machine
//! that built mlx-c or this crate: mlx-c appends ` at <source file>:<line>` with the absolute
//! path of its build tree, which [`scrub_mlx_message`] shortens to the file name, and an
//! [`Error`] names its Rust call site by [`short_source_path`].

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
        write!(
            f,
            "{} (at {}:{})",
            self.message,
            short_source_path(self.location.file()),
            self.location.line()
        )
    }
}

/// A source path fit for a user-facing message: a relative path (how cargo names the files of
/// workspace crates, e.g. `crates/runtime/src/lib.rs`) is kept; an absolute one, which names
/// a folder of the machine that compiled it, is cut to its file name.
pub fn short_source_path(path: &str) -> &str {
    let absolute =
        path.starts_with('/') || path.starts_with('\\') || path.as_bytes().get(1) == Some(&b':'); // C:\... or C:/...
    if absolute {
        path.rsplit(['/', '\\']).next().unwrap_or(path)
    } else {
        path
    }
}

/// mlx-c's error text with its trailing ` at <file>:<line>` shortened to the file name and line
/// (` at ops.cpp:123`), so that no folder of the machine that built mlx-c shows. Text without
/// that suffix is returned unchanged.
pub fn scrub_mlx_message(message: &str) -> String {
    let Some((text, location)) = message.rsplit_once(" at ") else {
        return message.to_string();
    };
    let Some((file, line)) = location.rsplit_once(':') else {
        return message.to_string();
    };
    let is_line = !line.is_empty() && line.bytes().all(|b| b.is_ascii_digit());
    if !is_line || !file.contains('.') {
        return message.to_string();
    }
    format!("{text} at {}:{line}", short_source_path(file))
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
        scrub_mlx_message(&unsafe { CStr::from_ptr(msg) }.to_string_lossy())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mlx_c_locations_lose_their_folders() {
        assert_eq!(
            scrub_mlx_message(
                "[reshape] Cannot reshape array of size 6 into shape (4). at /root/.cache/x/src/mlx-c/mlx/c/ops.cpp:2154"
            ),
            "[reshape] Cannot reshape array of size 6 into shape (4). at ops.cpp:2154"
        );
        assert_eq!(
            scrub_mlx_message("boom at C:\\build\\mlx\\c\\array.cpp:7"),
            "boom at array.cpp:7"
        );
        // Already short, or no location: unchanged.
        assert_eq!(scrub_mlx_message("x at ops.cpp:1"), "x at ops.cpp:1");
        assert_eq!(
            scrub_mlx_message("look at this: nothing"),
            "look at this: nothing"
        );
        assert_eq!(scrub_mlx_message("no location"), "no location");
        assert_eq!(scrub_mlx_message("at /a/b:12x"), "at /a/b:12x");
        assert_eq!(
            scrub_mlx_message("e at /home/A User/mlx c/ops.cpp:3"),
            "e at ops.cpp:3"
        );
    }

    #[test]
    fn rust_locations_keep_relative_paths_only() {
        assert_eq!(
            short_source_path("crates/runtime/src/lib.rs"),
            "crates/runtime/src/lib.rs"
        );
        assert_eq!(
            short_source_path("/home/builder/.cargo/registry/src/x-1.0/src/lib.rs"),
            "lib.rs"
        );
        assert_eq!(short_source_path("/lib.rs"), "lib.rs");
    }

    #[test]
    fn displayed_errors_name_no_absolute_path() {
        let e = Error {
            message: scrub_mlx_message("bad shape at /root/build/mlx/c/ops.cpp:9"),
            location: Location::caller(),
        };
        let text = e.to_string();
        assert!(text.starts_with("bad shape at ops.cpp:9 (at "), "{text}");
        assert!(text.contains("error.rs:"), "{text}");
        assert!(!text.contains("/root/"), "{text}");
        assert!(!text.contains(" (at /"), "{text}");
    }

    #[test]
    fn check_scrubs_the_stored_message() {
        let msg = std::ffi::CString::new("oops at /home/ci/mlx-c/mlx/c/array.cpp:42").unwrap();
        // SAFETY: a valid NUL-terminated string for the call.
        unsafe { store_error(msg.as_ptr(), std::ptr::null_mut()) };
        let e = check(1).unwrap_err();
        assert_eq!(e.message, "oops at array.cpp:42");
    }
}
