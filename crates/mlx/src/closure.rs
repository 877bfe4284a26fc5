//! Rust functions as MLX closures, and `compile`.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use mlx_sys as sys;

use crate::error::{Error, Result, check, install_error_handler};
use crate::{Array, VectorArray};

type BoxedFn = Box<dyn FnMut(&[Array]) -> Result<Vec<Array>> + Send>;

thread_local! {
    /// The Rust error of the last closure body that failed on this thread.
    static CLOSURE_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

/// An MLX closure: a function from arrays to arrays that MLX can trace and compile.
///
/// `Send` but not `Sync`.
pub struct Closure {
    raw: sys::mlx_closure,
}

// SAFETY: the wrapped Rust function is `Send`; the handle is used from one thread at a time.
unsafe impl Send for Closure {}

impl Drop for Closure {
    fn drop(&mut self) {
        // SAFETY: `raw` is owned by this handle.
        unsafe { sys::mlx_closure_free(self.raw) };
    }
}

unsafe extern "C" fn trampoline(
    res: *mut sys::mlx_vector_array,
    input: sys::mlx_vector_array,
    payload: *mut c_void,
) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
        // SAFETY: payload is the `BoxedFn` installed by `Closure::new`, used by one caller at a time.
        let f = unsafe { &mut *(payload as *mut BoxedFn) };
        // Borrow the input vector: take new references to its arrays, never free it.
        let n = unsafe { sys::mlx_vector_array_size(input) };
        let mut args = Vec::with_capacity(n);
        for i in 0..n {
            let mut a = Array::empty();
            check(unsafe { sys::mlx_vector_array_get(&mut a.raw, input, i) })?;
            args.push(a);
        }
        let outs = f(&args)?;
        let refs: Vec<&Array> = outs.iter().collect();
        let v = VectorArray::from_arrays(&refs);
        // SAFETY: `res` is the caller's out vector.
        check(unsafe { sys::mlx_vector_array_set(res, v.raw) })
    }));
    let err = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => Error::new("a panic in a closure body was stopped at the MLX boundary"),
    };
    CLOSURE_ERROR.with(|c| *c.borrow_mut() = Some(err));
    1
}

unsafe extern "C" fn drop_payload(payload: *mut c_void) {
    // SAFETY: made by `Box::into_raw` in `Closure::new`.
    drop(unsafe { Box::from_raw(payload as *mut BoxedFn) });
}

impl Closure {
    /// Wraps a Rust function. Errors and panics inside it come back from [`Closure::apply`].
    pub fn new<F>(f: F) -> Closure
    where
        F: FnMut(&[Array]) -> Result<Vec<Array>> + Send + 'static,
    {
        install_error_handler();
        let payload = Box::into_raw(Box::new(Box::new(f) as BoxedFn)) as *mut c_void;
        // SAFETY: trampoline and destructor match the payload's type.
        let raw = unsafe {
            sys::mlx_closure_new_func_payload(Some(trampoline), payload, Some(drop_payload))
        };
        Closure { raw }
    }

    /// Calls the closure.
    #[track_caller]
    pub fn apply(&self, inputs: &[&Array]) -> Result<Vec<Array>> {
        let v = VectorArray::from_arrays(inputs);
        let mut out = VectorArray::new();
        CLOSURE_ERROR.with(|c| c.borrow_mut().take());
        // SAFETY: valid handles; `out` receives the result.
        let rc = unsafe { sys::mlx_closure_apply(&mut out.raw, self.raw, v.raw) };
        if let Some(e) = CLOSURE_ERROR.with(|c| c.borrow_mut().take()) {
            let _ = check(rc);
            return Err(e);
        }
        check(rc)?;
        out.to_vec()
    }

    /// A compiled version of this closure. `shapeless` compiles once for all input shapes
    /// (only valid when the function's ops do not depend on shapes).
    #[track_caller]
    pub fn compile(&self, shapeless: bool) -> Result<Closure> {
        // SAFETY: plain constructor; `compile` writes the result into it.
        let mut out = Closure {
            raw: unsafe { sys::mlx_closure_new() },
        };
        check(unsafe { sys::mlx_compile(&mut out.raw, self.raw, shapeless) })?;
        Ok(out)
    }
}
