//! MLX operations. Each wrapper is one line in a macro table; every op takes the stream
//! it runs on last and returns the (lazy) result.

use std::ffi::CString;

use mlx_sys as sys;

use crate::error::{Error, Result, check};
use crate::{Array, Dtype, Stream, VectorArray};

/// Calls an mlx-c op that writes one array, returning it.
macro_rules! call {
    ($ffi:ident($($arg:expr),* $(,)?)) => {{
        let mut out = Array::empty();
        // SAFETY: every handle argument is valid for the call and `out` receives the result.
        check(unsafe { sys::$ffi(&mut out.raw, $($arg),*) })?;
        Ok(out)
    }};
}

macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, s: &Stream) -> Result<Array> { call!($ffi(a.raw, s.raw)) }
    )*};
}

macro_rules! binary {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, b: &Array, s: &Stream) -> Result<Array> { call!($ffi(a.raw, b.raw, s.raw)) }
    )*};
}

macro_rules! reduce_axes {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, axes: &[i32], keepdims: bool, s: &Stream) -> Result<Array> {
            call!($ffi(a.raw, axes.as_ptr(), axes.len(), keepdims, s.raw))
        }
    )*};
}

macro_rules! axis_keepdims {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, axis: i32, keepdims: bool, s: &Stream) -> Result<Array> {
            call!($ffi(a.raw, axis, keepdims, s.raw))
        }
    )*};
}

macro_rules! with_ints {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, values: &[i32], s: &Stream) -> Result<Array> {
            call!($ffi(a.raw, values.as_ptr(), values.len(), s.raw))
        }
    )*};
}

macro_rules! with_int {
    ($($(#[$doc:meta])* $name:ident($arg:ident) => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, $arg: i32, s: &Stream) -> Result<Array> { call!($ffi(a.raw, $arg, s.raw)) }
    )*};
}

macro_rules! with_dtype {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, dtype: Dtype, s: &Stream) -> Result<Array> {
            call!($ffi(a.raw, dtype.to_raw(), s.raw))
        }
    )*};
}

unary! {
    /// |a|.
    abs => mlx_abs;
    /// -a.
    negative => mlx_negative;
    /// e^a.
    exp => mlx_exp;
    /// Natural log.
    log => mlx_log;
    /// log(1 + a).
    log1p => mlx_log1p;
    /// e^a - 1.
    expm1 => mlx_expm1;
    /// Square root.
    sqrt => mlx_sqrt;
    /// 1/sqrt(a).
    rsqrt => mlx_rsqrt;
    /// Error function.
    erf => mlx_erf;
    /// Inverse error function.
    erfinv => mlx_erfinv;
    /// Hyperbolic tangent.
    tanh => mlx_tanh;
    /// Logistic sigmoid.
    sigmoid => mlx_sigmoid;
    /// Sine.
    sin => mlx_sin;
    /// Cosine.
    cos => mlx_cos;
    /// Tangent.
    tan => mlx_tan;
    /// Arc sine.
    arcsin => mlx_arcsin;
    /// Arc cosine.
    arccos => mlx_arccos;
    /// Arc tangent.
    arctan => mlx_arctan;
    /// Hyperbolic sine.
    sinh => mlx_sinh;
    /// Hyperbolic cosine.
    cosh => mlx_cosh;
    /// Inverse hyperbolic sine.
    arcsinh => mlx_arcsinh;
    /// Inverse hyperbolic cosine.
    arccosh => mlx_arccosh;
    /// Inverse hyperbolic tangent.
    arctanh => mlx_arctanh;
    /// Round toward -inf.
    floor => mlx_floor;
    /// Round toward +inf.
    ceil => mlx_ceil;
    /// 1/a.
    reciprocal => mlx_reciprocal;
    /// Sign (-1, 0, 1).
    sign => mlx_sign;
    /// a*a.
    square => mlx_square;
    /// Logical not.
    logical_not => mlx_logical_not;
    /// Bitwise not.
    bitwise_invert => mlx_bitwise_invert;
    /// Is NaN.
    isnan => mlx_isnan;
    /// Is +-inf.
    isinf => mlx_isinf;
    /// Is +inf.
    isposinf => mlx_isposinf;
    /// Is -inf.
    isneginf => mlx_isneginf;
    /// Copy.
    copy => mlx_copy;
    /// Blocks gradients (identity in inference).
    stop_gradient => mlx_stop_gradient;
}

binary! {
    /// a + b (broadcasting).
    add => mlx_add;
    /// a - b.
    subtract => mlx_subtract;
    /// a * b.
    multiply => mlx_multiply;
    /// a / b (float division; integers are promoted to float).
    divide => mlx_divide;
    /// floor(a / b) (integer floor division for integers).
    floor_divide => mlx_floor_divide;
    /// Remainder with the sign of b.
    remainder => mlx_remainder;
    /// a ** b.
    power => mlx_power;
    /// Elementwise max.
    maximum => mlx_maximum;
    /// Elementwise min.
    minimum => mlx_minimum;
    /// a == b.
    equal => mlx_equal;
    /// a != b.
    not_equal => mlx_not_equal;
    /// a < b.
    less => mlx_less;
    /// a <= b.
    less_equal => mlx_less_equal;
    /// a > b.
    greater => mlx_greater;
    /// a >= b.
    greater_equal => mlx_greater_equal;
    /// Logical and.
    logical_and => mlx_logical_and;
    /// Logical or.
    logical_or => mlx_logical_or;
    /// Bitwise and.
    bitwise_and => mlx_bitwise_and;
    /// Bitwise or.
    bitwise_or => mlx_bitwise_or;
    /// Bitwise xor.
    bitwise_xor => mlx_bitwise_xor;
    /// a << b.
    left_shift => mlx_left_shift;
    /// a >> b.
    right_shift => mlx_right_shift;
    /// atan2(a, b).
    arctan2 => mlx_arctan2;
    /// log(e^a + e^b).
    logaddexp => mlx_logaddexp;
    /// Matrix product with NumPy broadcasting of batch dims.
    matmul => mlx_matmul;
}

reduce_axes! {
    /// Sum over axes.
    sum_axes => mlx_sum_axes;
    /// Mean over axes.
    mean_axes => mlx_mean_axes;
    /// Max over axes.
    max_axes => mlx_max_axes;
    /// Min over axes.
    min_axes => mlx_min_axes;
    /// Product over axes.
    prod_axes => mlx_prod_axes;
    /// Logical and over axes.
    all_axes => mlx_all_axes;
    /// Logical or over axes.
    any_axes => mlx_any_axes;
    /// log(sum(exp)) over axes.
    logsumexp_axes => mlx_logsumexp_axes;
}

axis_keepdims! {
    /// Index of the max along an axis (first occurrence).
    argmax_axis => mlx_argmax_axis;
    /// Index of the min along an axis (first occurrence).
    argmin_axis => mlx_argmin_axis;
}

with_ints! {
    /// Reshape (one dim may be -1).
    reshape => mlx_reshape;
    /// Permute axes.
    transpose_axes => mlx_transpose_axes;
    /// Broadcast to a shape.
    broadcast_to => mlx_broadcast_to;
    /// Remove size-1 axes.
    squeeze_axes => mlx_squeeze_axes;
    /// Insert size-1 axes.
    expand_dims_axes => mlx_expand_dims_axes;
    /// Repeat the whole array along each axis.
    tile => mlx_tile;
}

with_int! {
    /// Lower triangle: zeroes elements above diagonal `k` of the last two axes.
    tril(k) => mlx_tril;
    /// Upper triangle: zeroes elements below diagonal `k` of the last two axes.
    triu(k) => mlx_triu;
    /// Sorted along an axis.
    sort(axis) => mlx_sort_axis;
    /// Indices that sort along an axis.
    argsort(axis) => mlx_argsort_axis;
}

with_dtype! {
    /// Converts the element type.
    astype => mlx_astype;
    /// The array's bytes reinterpreted as `dtype` (a bit cast; same element size keeps the shape).
    view => mlx_view;
}

/// A row-contiguous copy (or the array itself when it already is).
#[track_caller]
pub fn contiguous(a: &Array, allow_col_major: bool, s: &Stream) -> Result<Array> {
    call!(mlx_contiguous(a.raw, allow_col_major, s.raw))
}

/// `cond ? x : y` with broadcasting.
#[track_caller]
pub fn where_(cond: &Array, x: &Array, y: &Array, s: &Stream) -> Result<Array> {
    call!(mlx_where(cond.raw, x.raw, y.raw, s.raw))
}

/// beta * c + alpha * (a @ b).
#[track_caller]
pub fn addmm(c: &Array, a: &Array, b: &Array, alpha: f32, beta: f32, s: &Stream) -> Result<Array> {
    call!(mlx_addmm(c.raw, a.raw, b.raw, alpha, beta, s.raw))
}

/// Joins arrays along an axis.
#[track_caller]
pub fn concatenate(arrays: &[&Array], axis: i32, s: &Stream) -> Result<Array> {
    let v = VectorArray::from_arrays(arrays);
    call!(mlx_concatenate_axis(v.raw, axis, s.raw))
}

/// Stacks arrays along a new axis.
#[track_caller]
pub fn stack(arrays: &[&Array], axis: i32, s: &Stream) -> Result<Array> {
    let v = VectorArray::from_arrays(arrays);
    call!(mlx_stack_axis(v.raw, axis, s.raw))
}

/// Splits at the given indices along an axis.
#[track_caller]
pub fn split_sections(a: &Array, indices: &[i32], axis: i32, s: &Stream) -> Result<Vec<Array>> {
    let mut out = VectorArray::new();
    // SAFETY: valid handles; `out` receives the result vector.
    check(unsafe {
        sys::mlx_split_sections(
            &mut out.raw,
            a.raw,
            indices.as_ptr(),
            indices.len(),
            axis,
            s.raw,
        )
    })?;
    out.to_vec()
}

/// Strided slice `a[start:stop:strides]` per axis (all three as long as the rank).
#[track_caller]
pub fn slice(a: &Array, start: &[i32], stop: &[i32], strides: &[i32], s: &Stream) -> Result<Array> {
    call!(mlx_slice(
        a.raw,
        start.as_ptr(),
        start.len(),
        stop.as_ptr(),
        stop.len(),
        strides.as_ptr(),
        strides.len(),
        s.raw
    ))
}

/// The block of shape `sizes` (one per axis of `a`) that starts at `start` (an integer array
/// of one entry per axis in `axes`; the other axes start at 0). MLX can re-infer its shape in a
/// shapeless compiled closure, which it cannot for a static slice or a split.
#[track_caller]
pub fn slice_dynamic(
    a: &Array,
    start: &Array,
    axes: &[i32],
    sizes: &[i32],
    s: &Stream,
) -> Result<Array> {
    call!(mlx_slice_dynamic(
        a.raw,
        start.raw,
        axes.as_ptr(),
        axes.len(),
        sizes.as_ptr(),
        sizes.len(),
        s.raw
    ))
}

/// Gathers slices along an axis by (non-negative) indices.
#[track_caller]
pub fn take_axis(a: &Array, indices: &Array, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_take_axis(a.raw, indices.raw, axis, s.raw))
}

/// Gathers elements along an axis by an index array of the same rank.
#[track_caller]
pub fn take_along_axis(a: &Array, indices: &Array, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_take_along_axis(a.raw, indices.raw, axis, s.raw))
}

/// Writes `values` at `indices` along an axis.
#[track_caller]
pub fn put_along_axis(
    a: &Array,
    indices: &Array,
    values: &Array,
    axis: i32,
    s: &Stream,
) -> Result<Array> {
    call!(mlx_put_along_axis(
        a.raw,
        indices.raw,
        values.raw,
        axis,
        s.raw
    ))
}

/// Softmax over axes; `precise` accumulates in float32 for half types.
#[track_caller]
pub fn softmax_axes(a: &Array, axes: &[i32], precise: bool, s: &Stream) -> Result<Array> {
    call!(mlx_softmax_axes(
        a.raw,
        axes.as_ptr(),
        axes.len(),
        precise,
        s.raw
    ))
}

fn optional_dtype(dtype: Option<Dtype>) -> sys::mlx_optional_dtype {
    sys::mlx_optional_dtype {
        value: dtype.map_or(sys::MLX_FLOAT32, Dtype::to_raw),
        has_value: dtype.is_some(),
    }
}

macro_rules! cumulative {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(
            a: &Array,
            axis: i32,
            reverse: bool,
            inclusive: bool,
            dtype: Option<Dtype>,
            s: &Stream,
        ) -> Result<Array> {
            let dtype = optional_dtype(dtype);
            call!($ffi(a.raw, axis, reverse, inclusive, dtype, s.raw))
        }
    )*};
}

cumulative! {
    /// Cumulative product along an axis, accumulated and returned as `dtype` (or the input's type).
    cumprod => mlx_cumprod_axis;
    /// Cumulative sum along an axis, accumulated and returned as `dtype` (or the input's type).
    cumsum => mlx_cumsum_axis;
}

/// Round to `decimals` places (half to even).
#[track_caller]
pub fn round(a: &Array, decimals: i32, s: &Stream) -> Result<Array> {
    call!(mlx_round(a.raw, decimals, s.raw))
}

/// Clamps into [min, max]; either bound may be absent.
#[track_caller]
pub fn clip(a: &Array, min: Option<&Array>, max: Option<&Array>, s: &Stream) -> Result<Array> {
    let null = sys::mlx_array {
        ctx: std::ptr::null_mut(),
    };
    call!(mlx_clip(
        a.raw,
        min.map_or(null, |m| m.raw),
        max.map_or(null, |m| m.raw),
        s.raw
    ))
}

/// Flattens axes `start..=end` into one.
#[track_caller]
pub fn flatten(a: &Array, start_axis: i32, end_axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_flatten(a.raw, start_axis, end_axis, s.raw))
}

/// An array of `shape` filled with `value` (broadcast), of type `dtype`.
#[track_caller]
pub fn full(shape: &[i32], value: &Array, dtype: Dtype, s: &Stream) -> Result<Array> {
    call!(mlx_full(
        shape.as_ptr(),
        shape.len(),
        value.raw,
        dtype.to_raw(),
        s.raw
    ))
}

/// Zeros of `shape`.
#[track_caller]
pub fn zeros(shape: &[i32], dtype: Dtype, s: &Stream) -> Result<Array> {
    call!(mlx_zeros(
        shape.as_ptr(),
        shape.len(),
        dtype.to_raw(),
        s.raw
    ))
}

/// `start, start+step, ...` below `stop`.
#[track_caller]
pub fn arange(start: f64, stop: f64, step: f64, dtype: Dtype, s: &Stream) -> Result<Array> {
    call!(mlx_arange(start, stop, step, dtype.to_raw(), s.raw))
}

/// A strided view (strides in elements).
#[track_caller]
pub fn as_strided(
    a: &Array,
    shape: &[i32],
    strides: &[i64],
    offset: usize,
    s: &Stream,
) -> Result<Array> {
    call!(mlx_as_strided(
        a.raw,
        shape.as_ptr(),
        shape.len(),
        strides.as_ptr(),
        strides.len(),
        offset,
        s.raw
    ))
}

/// Pads `axes` by `low`/`high` with a constant (`mode` "constant") or edge values ("edge").
#[track_caller]
pub fn pad(
    a: &Array,
    axes: &[i32],
    low: &[i32],
    high: &[i32],
    value: &Array,
    mode: &str,
    s: &Stream,
) -> Result<Array> {
    let mode = CString::new(mode).map_err(|_| Error::new("pad mode contains NUL"))?;
    call!(mlx_pad(
        a.raw,
        axes.as_ptr(),
        axes.len(),
        low.as_ptr(),
        low.len(),
        high.as_ptr(),
        high.len(),
        value.raw,
        mode.as_ptr(),
        s.raw
    ))
}

/// Parameters of [`conv_general`] besides input and weight (channels-last layout).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConvParams {
    /// Stride per spatial dim.
    pub stride: Vec<i32>,
    /// Low padding per spatial dim.
    pub padding_lo: Vec<i32>,
    /// High padding per spatial dim.
    pub padding_hi: Vec<i32>,
    /// Kernel dilation per spatial dim.
    pub kernel_dilation: Vec<i32>,
    /// Input dilation per spatial dim (transposed convolution).
    pub input_dilation: Vec<i32>,
    /// Channel groups.
    pub groups: i32,
    /// Flip the kernel (true convolution rather than cross-correlation).
    pub flip: bool,
}

/// N-d convolution: input `[N, *spatial, C_in]`, weight `[C_out, *kernel, C_in / groups]`.
#[track_caller]
pub fn conv_general(input: &Array, weight: &Array, p: &ConvParams, s: &Stream) -> Result<Array> {
    call!(mlx_conv_general(
        input.raw,
        weight.raw,
        p.stride.as_ptr(),
        p.stride.len(),
        p.padding_lo.as_ptr(),
        p.padding_lo.len(),
        p.padding_hi.as_ptr(),
        p.padding_hi.len(),
        p.kernel_dilation.as_ptr(),
        p.kernel_dilation.len(),
        p.input_dilation.as_ptr(),
        p.input_dilation.len(),
        p.groups,
        p.flip,
        s.raw
    ))
}

/// The `k` largest values along an axis (unordered).
#[track_caller]
pub fn topk(a: &Array, k: i32, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_topk_axis(a.raw, k, axis, s.raw))
}

/// `x @ dequantize(w).T` (or `x @ dequantize(w)` when `transpose` is false) with MLX's affine
/// quantization: `w_hat = scales * q + biases` per group of `group_size` elements along the
/// last axis, `q` packed little-endian into uint32 words (`32 / bits` per word).
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn quantized_matmul(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    transpose: bool,
    group_size: i32,
    bits: i32,
    s: &Stream,
) -> Result<Array> {
    let mode = CString::new("affine").map_err(|_| Error::new("mode"))?;
    let opt = |v: i32| sys::mlx_optional_int {
        value: v,
        has_value: true,
    };
    call!(mlx_quantized_matmul(
        x.raw,
        w.raw,
        scales.raw,
        biases.raw,
        transpose,
        opt(group_size),
        opt(bits),
        mode.as_ptr(),
        s.raw
    ))
}

/// Gathers `slice_sizes`-shaped slices of `a` at the positions given by one index array per
/// axis in `axes` (broadcast together); the result is `index_shape ++ slice_sizes`.
#[track_caller]
pub fn gather(
    a: &Array,
    indices: &[&Array],
    axes: &[i32],
    slice_sizes: &[i32],
    s: &Stream,
) -> Result<Array> {
    let v = VectorArray::from_arrays(indices);
    call!(mlx_gather(
        a.raw,
        v.raw,
        axes.as_ptr(),
        axes.len(),
        slice_sizes.as_ptr(),
        slice_sizes.len(),
        s.raw
    ))
}

macro_rules! scatter {
    ($($(#[$doc:meta])* $name:ident => $ffi:ident;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name(a: &Array, indices: &[&Array], updates: &Array, axes: &[i32], s: &Stream) -> Result<Array> {
            let v = VectorArray::from_arrays(indices);
            call!($ffi(a.raw, v.raw, updates.raw, axes.as_ptr(), axes.len(), s.raw))
        }
    )*};
}

scatter! {
    /// Writes `updates` (shape `index_shape ++ slice`) into `a` at the indexed positions.
    scatter => mlx_scatter;
    /// As [`scatter`], adding into `a`.
    scatter_add => mlx_scatter_add;
    /// As [`scatter`], multiplying into `a`.
    scatter_prod => mlx_scatter_prod;
    /// As [`scatter`], keeping the maximum.
    scatter_max => mlx_scatter_max;
    /// As [`scatter`], keeping the minimum.
    scatter_min => mlx_scatter_min;
}

/// Determinants of the square matrices in the last two axes (MLX runs it on the CPU only).
#[track_caller]
pub fn linalg_det(a: &Array, s: &Stream) -> Result<Array> {
    call!(mlx_linalg_det(a.raw, s.raw))
}

/// Discrete Fourier transform of length `n` (zero-padded or truncated) along `axis`.
#[track_caller]
pub fn fft(a: &Array, n: i32, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_fft_fft(
        a.raw,
        n,
        axis,
        sys::MLX_FFT_NORM_BACKWARD,
        s.raw
    ))
}

/// Inverse discrete Fourier transform of length `n` along `axis` (scaled by `1 / n`).
#[track_caller]
pub fn ifft(a: &Array, n: i32, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_fft_ifft(
        a.raw,
        n,
        axis,
        sys::MLX_FFT_NORM_BACKWARD,
        s.raw
    ))
}

/// The real signal of length `n` whose one-sided spectrum along `axis` is `a` (scaled by
/// `1 / n`).
#[track_caller]
pub fn irfft(a: &Array, n: i32, axis: i32, s: &Stream) -> Result<Array> {
    call!(mlx_fft_irfft(
        a.raw,
        n,
        axis,
        sys::MLX_FFT_NORM_BACKWARD,
        s.raw
    ))
}
