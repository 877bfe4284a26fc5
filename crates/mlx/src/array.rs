//! The MLX array handle.

use std::ffi::c_void;

use mlx_sys as sys;

use crate::error::{Error, Result, check, install_error_handler};
use crate::{Dtype, Element};

/// A reference-counted MLX array (lazy until evaluated).
///
/// `Send` but not `Sync`: MLX graphs are built and evaluated from one thread at a time.
/// Cloning adds a reference to the same array; it copies no data.
pub struct Array {
    pub(crate) raw: sys::mlx_array,
}

// SAFETY: the handle owns a C++ shared reference, which may move between threads.
unsafe impl Send for Array {}

impl Drop for Array {
    fn drop(&mut self) {
        // SAFETY: `raw` is owned by this handle.
        unsafe { sys::mlx_array_free(self.raw) };
    }
}

impl Clone for Array {
    fn clone(&self) -> Self {
        let mut a = Array::empty();
        // SAFETY: both handles are valid; set shares the underlying array.
        unsafe { sys::mlx_array_set(&mut a.raw, self.raw) };
        a
    }
}

impl std::fmt::Debug for Array {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Array({:?}, {:?})", self.dtype(), self.shape())
    }
}

fn numel(shape: &[i32]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| {
        if d < 0 {
            return Err(Error::new(format!("negative dimension in shape {shape:?}")));
        }
        acc.checked_mul(d as usize)
            .ok_or_else(|| Error::new(format!("shape {shape:?} overflows")))
    })
}

unsafe extern "C" fn drop_boxed_owner(payload: *mut c_void) {
    // SAFETY: payload was made by `Box::into_raw` in `from_external_bytes`.
    drop(unsafe { Box::from_raw(payload as *mut Box<dyn Send>) });
}

impl Array {
    /// An empty handle, to receive an op's result.
    pub(crate) fn empty() -> Array {
        install_error_handler();
        // SAFETY: plain constructor.
        Array {
            raw: unsafe { sys::mlx_array_new() },
        }
    }

    /// The raw mlx-c handle (borrowed).
    pub fn as_raw(&self) -> sys::mlx_array {
        self.raw
    }

    /// A scalar float32 array.
    pub fn scalar_f32(value: f32) -> Array {
        install_error_handler();
        // SAFETY: plain constructor.
        Array {
            raw: unsafe { sys::mlx_array_new_float32(value) },
        }
    }

    /// A scalar of any element type.
    pub fn scalar<T: Element>(value: T) -> Result<Array> {
        Array::from_slice(&[value], &[])
    }

    /// An array copied from a typed host slice.
    pub fn from_slice<T: Element>(data: &[T], shape: &[i32]) -> Result<Array> {
        // SAFETY: `T` is a plain element type with no padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data))
        };
        Array::from_bytes(bytes, shape, T::DTYPE)
    }

    /// An array copied from little-endian element bytes.
    pub fn from_bytes(bytes: &[u8], shape: &[i32], dtype: Dtype) -> Result<Array> {
        install_error_handler();
        let expected = numel(shape)? * dtype.size();
        if bytes.len() != expected {
            return Err(Error::new(format!(
                "{} bytes given for a {dtype:?} array of shape {shape:?} ({expected} needed)",
                bytes.len()
            )));
        }
        // SAFETY: sizes checked; mlx-c copies the buffer.
        let raw = unsafe {
            sys::mlx_array_new_data(
                bytes.as_ptr() as *const c_void,
                shape.as_ptr(),
                shape.len() as i32,
                dtype.to_raw(),
            )
        };
        Ok(Array { raw })
    }

    /// An array over external bytes without copying them; `owner` keeps them alive and is
    /// dropped when MLX releases the buffer.
    ///
    /// # Safety
    /// `data` must point to `numel * dtype.size()` readable bytes that stay valid and unchanged
    /// while `owner` lives. MLX may reuse ("donate") the buffer of an array it holds the only
    /// reference to as an op's output: the caller must keep a clone of the returned array alive
    /// until every computation that reads it has been evaluated, unless writing into the
    /// bytes is acceptable.
    pub unsafe fn from_external_bytes(
        data: *const u8,
        shape: &[i32],
        dtype: Dtype,
        owner: Box<dyn Send>,
    ) -> Result<Array> {
        install_error_handler();
        numel(shape)?;
        let payload = Box::into_raw(Box::new(owner)) as *mut c_void;
        // SAFETY: the contract above; the payload is freed by `drop_boxed_owner`.
        let raw = unsafe {
            sys::mlx_array_new_data_managed_payload(
                data as *mut c_void,
                shape.as_ptr(),
                shape.len() as i32,
                dtype.to_raw(),
                payload,
                Some(drop_boxed_owner),
            )
        };
        Ok(Array { raw })
    }

    /// Element type.
    pub fn dtype(&self) -> Dtype {
        // SAFETY: valid handle.
        Dtype::from_raw(unsafe { sys::mlx_array_dtype(self.raw) }).unwrap_or(Dtype::Float32)
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::mlx_array_ndim(self.raw) }
    }

    /// Shape.
    pub fn shape(&self) -> Vec<i32> {
        let n = self.ndim();
        if n == 0 {
            return Vec::new();
        }
        // SAFETY: mlx-c returns `ndim` ints valid while the array lives.
        unsafe { std::slice::from_raw_parts(sys::mlx_array_shape(self.raw), n) }.to_vec()
    }

    /// Number of elements.
    pub fn size(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::mlx_array_size(self.raw) }
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        // SAFETY: valid handle.
        unsafe { sys::mlx_array_nbytes(self.raw) }
    }

    /// Computes the array (and what it depends on).
    #[track_caller]
    pub fn eval(&self) -> Result<()> {
        // SAFETY: valid handle.
        check(unsafe { sys::mlx_array_eval(self.raw) })
    }

    /// True when the (evaluated) array's elements are laid out row-major without gaps.
    pub fn is_row_contiguous(&self) -> Result<bool> {
        let mut r = false;
        // SAFETY: valid handle and out pointer.
        check(unsafe { sys::_mlx_array_is_row_contiguous(&mut r, self.raw) })?;
        Ok(r)
    }

    fn data_ptr(&self) -> *const u8 {
        // SAFETY: valid, evaluated handle. MLX's typed data accessors only cast the same
        // pointer, so the byte view serves every dtype (the f16/bf16 ones are not built on x86).
        unsafe { sys::mlx_array_data_uint8(self.raw) }
    }

    /// A row-contiguous, evaluated array with the same values (itself when it already is).
    #[track_caller]
    pub fn to_contiguous(&self, stream: &crate::Stream) -> Result<Array> {
        self.eval()?;
        if self.is_row_contiguous()? {
            return Ok(self.clone());
        }
        let c = crate::ops::contiguous(self, false, stream)?;
        c.eval()?;
        Ok(c)
    }

    /// The element bytes of an evaluated, row-contiguous array (see [`Array::to_contiguous`]).
    pub fn as_bytes(&self) -> Result<&[u8]> {
        if !self.is_row_contiguous()? {
            return Err(Error::new(
                "as_bytes needs an evaluated row-contiguous array",
            ));
        }
        let n = self.size() * self.dtype().size();
        if n == 0 {
            return Ok(&[]);
        }
        let ptr = self.data_ptr();
        if ptr.is_null() {
            return Err(Error::new("array has no data; evaluate it first"));
        }
        // SAFETY: an evaluated row-contiguous array holds `n` bytes from its data pointer,
        // alive while `self` is.
        Ok(unsafe { std::slice::from_raw_parts(ptr, n) })
    }

    /// Evaluates and copies the values to the host as `T` (which must match the dtype).
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.dtype() != T::DTYPE {
            return Err(Error::new(format!(
                "array is {:?}, asked for {:?}",
                self.dtype(),
                T::DTYPE
            )));
        }
        let c = self.to_contiguous(&crate::Stream::default_cpu())?;
        let bytes = c.as_bytes()?;
        let mut out = vec![T::default(); c.size()];
        // SAFETY: `out` has exactly `bytes.len()` bytes of plain elements.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr() as *mut u8, bytes.len())
        };
        Ok(out)
    }
}

/// An evaluated array that is never written again, so it can be shared across threads
/// (initializers shared between sessions). Hands out clones of the array.
pub struct FrozenArray(Array);

// SAFETY: the array is evaluated before freezing, so no thread evaluates or mutates it again;
// cloning the handle only touches atomic reference counts.
unsafe impl Sync for FrozenArray {}

impl FrozenArray {
    /// Evaluates `array` and freezes it.
    pub fn new(array: Array) -> Result<FrozenArray> {
        array.eval()?;
        Ok(FrozenArray(array))
    }

    /// A new handle to the frozen array.
    pub fn get(&self) -> Array {
        self.0.clone()
    }
}
