//! MLX's fused "fast" ops.

use std::ffi::CString;

use mlx_sys as sys;

use crate::error::{Error, Result, check};
use crate::{Array, Stream};

fn raw_or_null(a: Option<&Array>) -> sys::mlx_array {
    a.map_or(
        sys::mlx_array {
            ctx: std::ptr::null_mut(),
        },
        |a| a.raw,
    )
}

/// Layer normalisation over the last axis, with optional scale and bias.
#[track_caller]
pub fn layer_norm(
    x: &Array,
    weight: Option<&Array>,
    bias: Option<&Array>,
    eps: f32,
    s: &Stream,
) -> Result<Array> {
    let mut out = Array::empty();
    // SAFETY: valid handles (or null where optional).
    check(unsafe {
        sys::mlx_fast_layer_norm(
            &mut out.raw,
            x.raw,
            raw_or_null(weight),
            raw_or_null(bias),
            eps,
            s.raw,
        )
    })?;
    Ok(out)
}

/// RMS normalisation over the last axis, with optional scale.
#[track_caller]
pub fn rms_norm(x: &Array, weight: Option<&Array>, eps: f32, s: &Stream) -> Result<Array> {
    let mut out = Array::empty();
    // SAFETY: valid handles (or null where optional).
    check(unsafe { sys::mlx_fast_rms_norm(&mut out.raw, x.raw, raw_or_null(weight), eps, s.raw) })?;
    Ok(out)
}

/// Mask of [`scaled_dot_product_attention`].
#[derive(Debug, Clone, Copy)]
pub enum AttentionMask<'a> {
    /// No mask.
    None,
    /// Causal (lower-triangular, aligned to the end of the keys).
    Causal,
    /// An additive float mask or a boolean keep-mask, broadcastable to the scores.
    Array(&'a Array),
}

/// Attention `softmax(q k^T * scale + mask) v` on `[B, H, L, D]` tensors (keys and values may
/// have fewer heads, for grouped-query attention).
#[track_caller]
pub fn scaled_dot_product_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: AttentionMask<'_>,
    s: &Stream,
) -> Result<Array> {
    scaled_dot_product_attention_sinks(q, k, v, scale, mask, None, s)
}

/// Rotary position embedding over the first `dims` features of the last axis.
#[allow(clippy::too_many_arguments)]
#[track_caller]
pub fn rope(
    x: &Array,
    dims: i32,
    traditional: bool,
    base: Option<f32>,
    scale: f32,
    offset: i32,
    freqs: Option<&Array>,
    s: &Stream,
) -> Result<Array> {
    let base = sys::mlx_optional_float {
        value: base.unwrap_or(0.0),
        has_value: base.is_some(),
    };
    let mut out = Array::empty();
    // SAFETY: valid handles (or null where optional).
    check(unsafe {
        sys::mlx_fast_rope(
            &mut out.raw,
            x.raw,
            dims,
            traditional,
            base,
            scale,
            offset,
            raw_or_null(freqs),
            s.raw,
        )
    })?;
    Ok(out)
}

/// [`scaled_dot_product_attention`] with optional attention sinks: one logit per query head
/// (`[Hq]`) that joins every softmax row's denominator (`exp(sink - max)`) and is dropped from
/// the output.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention_sinks(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: AttentionMask<'_>,
    sinks: Option<&Array>,
    s: &Stream,
) -> Result<Array> {
    let (mode, arr) = match mask {
        AttentionMask::None => ("", None),
        AttentionMask::Causal => ("causal", None),
        AttentionMask::Array(a) => ("array", Some(a)),
    };
    let mode = CString::new(mode).map_err(|_| Error::new("mask mode"))?;
    let mut out = Array::empty();
    // SAFETY: valid handles (or null where optional); the mode string outlives the call.
    check(unsafe {
        sys::mlx_fast_scaled_dot_product_attention(
            &mut out.raw,
            q.raw,
            k.raw,
            v.raw,
            scale,
            mode.as_ptr(),
            raw_or_null(arr),
            raw_or_null(sinks),
            false,
            s.raw,
        )
    })?;
    Ok(out)
}
