//! String tensors through ORT's C API.
//!
//! ORT holds a string tensor as `std::string` elements, which the C API reads as one buffer
//! plus element offsets (`GetStringTensorDataLength`, `GetStringTensorContent`) and writes one
//! element at a time (`GetResizedStringTensorElementBuffer`, which takes any bytes, NULs
//! included). The plan and runtime see strings as [`TensorData`] in the IR's length-prefixed
//! form ([`TensorData::strings`]); they never become MLX arrays.

use std::ffi::{c_char, c_void};
use std::ptr;

use onnx_ir::TensorData;
use ort_sys::OrtValue;

use crate::api::Api;
use crate::error::EpError;

/// The string elements of ORT value `v` of shape `dims` as IR tensor data.
///
/// # Safety
/// `v` must be a live string tensor `OrtValue` of shape `dims`.
pub(crate) unsafe fn read_strings(
    api: &Api,
    v: *const OrtValue,
    dims: &[i64],
) -> Result<TensorData, EpError> {
    let numel = dims.iter().try_fold(1usize, |acc, &d| {
        usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
    });
    let numel = numel.ok_or_else(|| EpError::new(format!("string tensor dims {dims:?}")))?;
    if numel == 0 {
        return TensorData::from_strings::<&[u8]>(dims.to_vec(), &[]).map_err(EpError::new);
    }
    let o = api.ort;
    // SAFETY: live string tensor.
    let len = api.out("GetStringTensorDataLength", 0usize, |out| unsafe {
        (o.GetStringTensorDataLength)(v, out)
    })?;
    let mut content = vec![0u8; len];
    let mut offsets = vec![0usize; numel];
    // SAFETY: buffers of the sizes passed; ORT writes `len` bytes and `numel` offsets.
    api.check(
        unsafe {
            (o.GetStringTensorContent)(
                v,
                content.as_mut_ptr() as *mut c_void,
                len,
                offsets.as_mut_ptr(),
                numel,
            )
        },
        "GetStringTensorContent",
    )?;
    let mut elements = Vec::with_capacity(numel);
    for i in 0..numel {
        let start = offsets[i];
        let end = offsets.get(i + 1).copied().unwrap_or(len);
        if start > end || end > len {
            return Err(EpError::new(format!(
                "string tensor offsets out of order at element {i} ({start}..{end} of {len})"
            )));
        }
        elements.push(&content[start..end]);
    }
    TensorData::from_strings(dims.to_vec(), &elements).map_err(EpError::new)
}

/// Writes `elements` into the string tensor ORT allocated as `v` (one element each).
///
/// # Safety
/// `v` must be a live string tensor `OrtValue` of `elements.len()` elements.
pub(crate) unsafe fn write_strings(
    api: &Api,
    v: *mut OrtValue,
    elements: &[&[u8]],
) -> Result<(), EpError> {
    let o = api.ort;
    for (i, s) in elements.iter().enumerate() {
        // SAFETY: live string tensor; `i` is below its element count (the caller's contract).
        let buf: *mut c_char = api.out(
            "GetResizedStringTensorElementBuffer",
            ptr::null_mut(),
            |out| unsafe { (o.GetResizedStringTensorElementBuffer)(v, i, s.len(), out) },
        )?;
        if s.is_empty() {
            continue;
        }
        if buf.is_null() {
            return Err(EpError::new(format!(
                "ORT gave no buffer for string element {i}"
            )));
        }
        // SAFETY: ORT resized the element to `s.len()` bytes at `buf`.
        unsafe { ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, s.len()) };
    }
    Ok(())
}
