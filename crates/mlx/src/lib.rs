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
pub mod random;
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

/// MLX's memory counters, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Held by live arrays.
    pub active: usize,
    /// Freed by arrays but kept by MLX's allocator for reuse.
    pub cache: usize,
    /// The most ever active since the last reset.
    pub peak: usize,
}

/// Reads MLX's memory counters (process-wide, all devices).
pub fn memory_stats() -> Result<MemoryStats> {
    let mut stats = MemoryStats::default();
    // SAFETY: plain getters writing into the out-pointers.
    unsafe {
        check(mlx_sys::mlx_get_active_memory(&mut stats.active))?;
        check(mlx_sys::mlx_get_cache_memory(&mut stats.cache))?;
        check(mlx_sys::mlx_get_peak_memory(&mut stats.peak))?;
    }
    Ok(stats)
}

/// MLX's memory limit in bytes (process-wide; see [`set_memory_limit`]).
pub fn memory_limit() -> Result<usize> {
    let mut limit = 0;
    // SAFETY: plain getter writing into the out-pointer.
    check(unsafe { mlx_sys::mlx_get_memory_limit(&mut limit) })?;
    Ok(limit)
}

/// Sets MLX's memory limit (process-wide): past it, the allocator frees its cache before it
/// allocates more. Returns the previous limit.
pub fn set_memory_limit(bytes: usize) -> Result<usize> {
    let mut previous = 0;
    // SAFETY: plain setter writing the old value into the out-pointer.
    check(unsafe { mlx_sys::mlx_set_memory_limit(&mut previous, bytes) })?;
    Ok(previous)
}

/// Sets how many bytes of freed buffers MLX's allocator keeps for reuse (process-wide; 0
/// keeps none). Returns the previous limit.
pub fn set_cache_limit(bytes: usize) -> Result<usize> {
    let mut previous = 0;
    // SAFETY: plain setter writing the old value into the out-pointer.
    check(unsafe { mlx_sys::mlx_set_cache_limit(&mut previous, bytes) })?;
    Ok(previous)
}

/// Returns the buffers MLX's allocator keeps for reuse to the system.
pub fn clear_cache() -> Result<()> {
    // SAFETY: plain global call.
    check(unsafe { mlx_sys::mlx_clear_cache() })
}

/// Evaluates several arrays together (one graph walk, shared work computed once).
#[track_caller]
pub fn eval(arrays: &[&Array]) -> Result<()> {
    let v = VectorArray::from_arrays(arrays);
    // SAFETY: valid vector handle.
    check(unsafe { mlx_sys::mlx_eval(v.raw) })
}
