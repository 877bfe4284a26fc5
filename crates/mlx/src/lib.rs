//! A safe wrapper over mlx-c, the C API of Apple's MLX.
//!
//! Every handle is RAII (`Drop` frees it), every MLX failure is a [`Result`] carrying MLX's
//! message and the Rust call site (the crate installs an error handler in place of mlx-c's
//! default, which exits the process), and every op takes the [`Stream`] it runs on.
//!
//! Thread safety: [`Array`], [`Stream`] and [`Closure`] are `Send` but not `Sync` (MLX
//! builds and evaluates graphs from one thread at a time); [`Device`] is both; a
//! [`FrozenArray`] (evaluated, never written) is `Sync` for sharing constants.
//!
//! ```
//! use mlx::{ops, Array, Stream};
//!
//! let s = Stream::default_cpu();
//! let a = Array::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
//! let b = ops::matmul(&a, &a, &s).unwrap();
//! assert_eq!(b.to_vec::<f32>().unwrap(), vec![7.0, 10.0, 15.0, 22.0]);
//!
//! // A shape mismatch is an error, not a process exit.
//! let c = Array::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3]).unwrap();
//! assert!(ops::matmul(&a, &c, &s).is_err());
//! ```

mod array;
mod closure;
mod dtype;
mod error;
pub mod fast;
pub mod ops;
mod stream;
mod vector;

pub use array::{Array, FrozenArray};
pub use closure::Closure;
pub use dtype::{Dtype, Element};
pub use error::{Error, Result, check, install_error_handler};
pub use stream::{Device, DeviceType, Stream, gpu_available};
pub use vector::VectorArray;

/// The version of the libmlx loaded at run time.
pub fn version() -> String {
    // SAFETY: the string handle is created, read while alive, then freed.
    unsafe {
        let mut s = mlx_sys::mlx_string_new();
        mlx_sys::mlx_version(&mut s);
        let p = mlx_sys::mlx_string_data(s);
        let text = if p.is_null() {
            String::new()
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        };
        mlx_sys::mlx_string_free(s);
        text
    }
}

/// Turns MLX's graph compiler on or off process-wide (for diagnosis).
pub fn set_compile_enabled(enabled: bool) -> Result<()> {
    // SAFETY: plain global switches.
    check(unsafe {
        if enabled {
            mlx_sys::mlx_enable_compile()
        } else {
            mlx_sys::mlx_disable_compile()
        }
    })
}

/// Evaluates several arrays together (one graph walk, shared work computed once).
#[track_caller]
pub fn eval(arrays: &[&Array]) -> Result<()> {
    let v = VectorArray::from_arrays(arrays);
    // SAFETY: valid vector handle.
    check(unsafe { mlx_sys::mlx_eval(v.raw) })
}
