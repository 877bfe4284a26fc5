//! The step vocabulary: MLX-level operations over value slots.
//!
//! Every [`Step`] names one MLX primitive (or one small, fixed group of calls documented on the
//! variant) with its static attributes already resolved. What can only be known at run time
//! (input shapes, values of shape tensors) is resolved by the pure functions on the helper types
//! here ([`ReshapeTarget::resolve`], [`SliceSpec::resolve`], [`ConvSpec::resolve`], ...), which the
//! runtime calls with the actual shapes; so ONNX semantics live in this crate and the runtime's
//! interpreter is one flat match.
//!
//! Conventions:
//! - Shapes passed to resolve functions are the runtime array's shape as `i64`.
//! - Axes in steps are non-negative when the rank was known at plan time. Where a step documents
//!   that an axis may be negative, MLX's own negative-axis handling (relative to the input rank)
//!   is the intended meaning.
//! - `dtype` fields are ONNX [`DataType`]s; the runtime maps them to MLX dtypes.

use std::fmt;

use onnx_ir::DataType;

mod col2im;
mod conv_transpose;
mod cumulative;
mod detection;
mod dft;
mod gather_scatter;
mod host_compute;
mod recurrent;
mod resize_interp;
mod roi_align;

pub use col2im::{Col2ImGeometry, Col2ImSpec, check_ort_rank};
pub use conv_transpose::{
    ConvTransposeArgs, ConvTransposePadding, ConvTransposeSpec, distribute_padding,
};
pub use cumulative::{CumOp, cumulative_axis};
pub use detection::{NmsInputs, non_max_suppression};
pub use dft::{DftArgs, DftKind, DftSpec};
pub use gather_scatter::{
    DimRule, ScatterOp, dims_target, gather_slice_sizes, iota_i32, nonzero_coords,
};
pub use host_compute::{HostValue, UniqueResult, WindowKind, cosine_window, unique};
pub use recurrent::{Activation, RecurrentKind, RecurrentSpec};
pub use resize_interp::{
    AspectPolicy, InterpArgs, InterpAxis, InterpCoordinates, InterpMode, InterpSpec,
    antialias_taps, cubic_coeffs, interpolated_axes, interpolated_axes_for, resize_output,
    resize_target, source_coordinate,
};
pub use roi_align::{RoiAlignSpec, RoiSamples};

/// A value slot: the index of one array in the runtime's value table.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Slot(pub u32);

impl Slot {
    /// The slot as an index into a value table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Reads small integer or float tensors back to the host at run time.
///
/// The runtime implements this (evaluating the slot's array and copying it out); resolve
/// functions call it only for the `Dynamic` sources of the step being executed.
pub trait HostReader {
    /// The slot's values as `i64` (integer or bool tensors), flattened.
    fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String>;
    /// The slot's values as `f64` (float or integer tensors), flattened.
    fn floats(&mut self, slot: Slot) -> Result<Vec<f64>, String>;
}

/// A host-side `i64` vector: known at plan time, or read from a slot at run time.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ShapeSource {
    /// Known at plan time (from an initializer, a Constant node or an attribute).
    Static(Vec<i64>),
    /// Read from this slot on the host at run time ([`HostReader::ints`]).
    Dynamic(Slot),
}

impl fmt::Debug for ShapeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShapeSource::Static(v) => write!(f, "{v:?}"),
            ShapeSource::Dynamic(s) => write!(f, "host({s:?})"),
        }
    }
}

impl ShapeSource {
    /// The values, reading a dynamic source through `host`.
    pub fn get(&self, host: &mut dyn HostReader) -> Result<Vec<i64>, String> {
        match self {
            ShapeSource::Static(v) => Ok(v.clone()),
            ShapeSource::Dynamic(s) => host.ints(*s),
        }
    }

    /// The slot read on the host, if dynamic.
    pub fn dynamic_slot(&self) -> Option<Slot> {
        match self {
            ShapeSource::Static(_) => None,
            ShapeSource::Dynamic(s) => Some(*s),
        }
    }
}

/// A host-side `f64` vector: known at plan time, or read from a slot at run time.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FloatSource {
    /// Known at plan time.
    Static(Vec<f64>),
    /// Read from this slot on the host at run time ([`HostReader::floats`]).
    Dynamic(Slot),
}

impl fmt::Debug for FloatSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FloatSource::Static(v) => write!(f, "{v:?}"),
            FloatSource::Dynamic(s) => write!(f, "host({s:?})"),
        }
    }
}

impl FloatSource {
    /// The values, reading a dynamic source through `host`.
    pub fn get(&self, host: &mut dyn HostReader) -> Result<Vec<f64>, String> {
        match self {
            FloatSource::Static(v) => Ok(v.clone()),
            FloatSource::Dynamic(s) => host.floats(*s),
        }
    }

    /// The slot read on the host, if dynamic.
    pub fn dynamic_slot(&self) -> Option<Slot> {
        match self {
            FloatSource::Static(_) => None,
            FloatSource::Dynamic(s) => Some(*s),
        }
    }
}

/// Elementwise one-input MLX ops; the result has the input's dtype (the planner only emits the
/// float-only ops on float inputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum UnaryOp {
    /// `mlx_abs`.
    Abs,
    /// `mlx_negative`.
    Negative,
    /// `mlx_exp`.
    Exp,
    /// `mlx_log`.
    Log,
    /// `mlx_log1p`.
    Log1p,
    /// `mlx_expm1`.
    Expm1,
    /// `mlx_sqrt`.
    Sqrt,
    /// `mlx_rsqrt`.
    Rsqrt,
    /// `mlx_square`.
    Square,
    /// `mlx_reciprocal`.
    Reciprocal,
    /// `mlx_erf`.
    Erf,
    /// `mlx_tanh`.
    Tanh,
    /// `mlx_sigmoid`.
    Sigmoid,
    /// `mlx_sin`.
    Sin,
    /// `mlx_cos`.
    Cos,
    /// `mlx_tan`.
    Tan,
    /// `mlx_arcsin`.
    Asin,
    /// `mlx_arccos`.
    Acos,
    /// `mlx_arctan`.
    Atan,
    /// `mlx_sinh`.
    Sinh,
    /// `mlx_cosh`.
    Cosh,
    /// `mlx_arcsinh`.
    Asinh,
    /// `mlx_arccosh`.
    Acosh,
    /// `mlx_arctanh`.
    Atanh,
    /// `mlx_floor`.
    Floor,
    /// `mlx_ceil`.
    Ceil,
    /// `mlx_round` with `decimals = 0` (round half to even).
    Round,
    /// `mlx_sign`.
    Sign,
    /// `mlx_logical_not` (bool in, bool out).
    LogicalNot,
    /// `mlx_bitwise_invert` (integers).
    BitwiseInvert,
    /// `mlx_isnan` (bool out).
    IsNan,
    /// `mlx_isinf` (bool out).
    IsInf,
    /// `mlx_isposinf` (bool out).
    IsPosInf,
    /// `mlx_isneginf` (bool out).
    IsNegInf,
}

impl UnaryOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        use UnaryOp::*;
        match self {
            Abs => "mlx_abs",
            Negative => "mlx_negative",
            Exp => "mlx_exp",
            Log => "mlx_log",
            Log1p => "mlx_log1p",
            Expm1 => "mlx_expm1",
            Sqrt => "mlx_sqrt",
            Rsqrt => "mlx_rsqrt",
            Square => "mlx_square",
            Reciprocal => "mlx_reciprocal",
            Erf => "mlx_erf",
            Tanh => "mlx_tanh",
            Sigmoid => "mlx_sigmoid",
            Sin => "mlx_sin",
            Cos => "mlx_cos",
            Tan => "mlx_tan",
            Asin => "mlx_arcsin",
            Acos => "mlx_arccos",
            Atan => "mlx_arctan",
            Sinh => "mlx_sinh",
            Cosh => "mlx_cosh",
            Asinh => "mlx_arcsinh",
            Acosh => "mlx_arccosh",
            Atanh => "mlx_arctanh",
            Floor => "mlx_floor",
            Ceil => "mlx_ceil",
            Round => "mlx_round",
            Sign => "mlx_sign",
            LogicalNot => "mlx_logical_not",
            BitwiseInvert => "mlx_bitwise_invert",
            IsNan => "mlx_isnan",
            IsInf => "mlx_isinf",
            IsPosInf => "mlx_isposinf",
            IsNegInf => "mlx_isneginf",
        }
    }
}

/// Elementwise two-input MLX ops with numpy broadcasting (the same as ONNX multidirectional
/// broadcasting). The planner always passes operands of one dtype, so MLX's promotion never
/// applies; comparisons and logical ops return bool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum BinaryOp {
    /// `mlx_add`.
    Add,
    /// `mlx_subtract`.
    Subtract,
    /// `mlx_multiply`.
    Multiply,
    /// `mlx_divide` (emitted for float operands only: MLX divides integers into floats).
    Divide,
    /// `mlx_floor_divide` (integers; see the note on integer division in `STEPS.md`).
    FloorDivide,
    /// `mlx_remainder` (result has the divisor's sign, like Python's `%`).
    Remainder,
    /// `mlx_power`.
    Power,
    /// `mlx_maximum`.
    Maximum,
    /// `mlx_minimum`.
    Minimum,
    /// `mlx_equal` (bool out).
    Equal,
    /// `mlx_not_equal` (bool out).
    NotEqual,
    /// `mlx_less` (bool out).
    Less,
    /// `mlx_less_equal` (bool out).
    LessEqual,
    /// `mlx_greater` (bool out).
    Greater,
    /// `mlx_greater_equal` (bool out).
    GreaterEqual,
    /// `mlx_logical_and` (bool).
    LogicalAnd,
    /// `mlx_logical_or` (bool).
    LogicalOr,
    /// `mlx_bitwise_and`.
    BitwiseAnd,
    /// `mlx_bitwise_or`.
    BitwiseOr,
    /// `mlx_bitwise_xor`.
    BitwiseXor,
    /// `mlx_left_shift`.
    LeftShift,
    /// `mlx_right_shift`.
    RightShift,
    /// `mlx_arctan2`.
    Atan2,
    /// `mlx_logaddexp` (`log(exp(a) + exp(b))`, computed stably).
    LogAddExp,
}

impl BinaryOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Add => "mlx_add",
            Subtract => "mlx_subtract",
            Multiply => "mlx_multiply",
            Divide => "mlx_divide",
            FloorDivide => "mlx_floor_divide",
            Remainder => "mlx_remainder",
            Power => "mlx_power",
            Maximum => "mlx_maximum",
            Minimum => "mlx_minimum",
            Equal => "mlx_equal",
            NotEqual => "mlx_not_equal",
            Less => "mlx_less",
            LessEqual => "mlx_less_equal",
            Greater => "mlx_greater",
            GreaterEqual => "mlx_greater_equal",
            LogicalAnd => "mlx_logical_and",
            LogicalOr => "mlx_logical_or",
            BitwiseAnd => "mlx_bitwise_and",
            BitwiseOr => "mlx_bitwise_or",
            BitwiseXor => "mlx_bitwise_xor",
            LeftShift => "mlx_left_shift",
            RightShift => "mlx_right_shift",
            Atan2 => "mlx_arctan2",
            LogAddExp => "mlx_logaddexp",
        }
    }

    /// True when the result is bool whatever the operand dtype.
    pub fn returns_bool(self) -> bool {
        use BinaryOp::*;
        matches!(
            self,
            Equal | NotEqual | Less | LessEqual | Greater | GreaterEqual | LogicalAnd | LogicalOr
        )
    }
}

/// Reductions over axes (`mlx_<op>_axes(x, axes, keepdims)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReduceOp {
    /// `mlx_sum_axes`.
    Sum,
    /// `mlx_mean_axes` (emitted for float inputs only).
    Mean,
    /// `mlx_max_axes`.
    Max,
    /// `mlx_min_axes`.
    Min,
    /// `mlx_prod_axes`.
    Prod,
    /// `mlx_logsumexp_axes` (float inputs only).
    LogSumExp,
    /// `mlx_all_axes` (bool out).
    All,
    /// `mlx_any_axes` (bool out).
    Any,
}

impl ReduceOp {
    /// The mlx-c function this op calls.
    pub fn mlx_fn(self) -> &'static str {
        match self {
            ReduceOp::Sum => "mlx_sum_axes",
            ReduceOp::Mean => "mlx_mean_axes",
            ReduceOp::Max => "mlx_max_axes",
            ReduceOp::Min => "mlx_min_axes",
            ReduceOp::Prod => "mlx_prod_axes",
            ReduceOp::LogSumExp => "mlx_logsumexp_axes",
            ReduceOp::All => "mlx_all_axes",
            ReduceOp::Any => "mlx_any_axes",
        }
    }
}

/// Index-returning reductions (`mlx_argmax_axis` / `mlx_argmin_axis`); MLX returns uint32, so
/// the planner follows them with an `AsType` to int64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ArgReduceOp {
    /// `mlx_argmax_axis`.
    ArgMax,
    /// `mlx_argmin_axis`.
    ArgMin,
}

// ---------------------------------------------------------------------------------------------
// Small helpers shared by the resolve functions.

fn to_i32(v: i64, what: &str) -> Result<i32, String> {
    i32::try_from(v).map_err(|_| format!("{what} {v} does not fit MLX's 32-bit shape type"))
}

/// Normalises an axis against `rank` (`-rank..rank` accepted).
pub fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Normalises a list of distinct axes against `rank`.
pub fn normalize_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(a, rank)?;
        if out.contains(&n) {
            return Err(format!("axis {a} is repeated in {axes:?}"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Numpy/ONNX multidirectional broadcast of two shapes.
pub fn broadcast_shapes(a: &[i64], b: &[i64]) -> Result<Vec<i64>, String> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(format!("shapes {a:?} and {b:?} do not broadcast"));
        };
    }
    Ok(out)
}

fn shape_to_i32(shape: &[i64]) -> Result<Vec<i32>, String> {
    shape.iter().map(|&d| to_i32(d, "dimension")).collect()
}

// ---------------------------------------------------------------------------------------------
// Reshape family.

/// How a [`Step::Reshape`] computes its target shape from the input shape.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReshapeTarget {
    /// A shape fully known at plan time.
    Fixed(Vec<i64>),
    /// ONNX `Reshape`: `0` copies the input dim (unless `allowzero`), one `-1` is inferred.
    Onnx {
        /// The shape tensor's values.
        shape: ShapeSource,
        /// ONNX `allowzero` (opset 14): a `0` means an empty dim rather than "copy".
        allowzero: bool,
    },
    /// ONNX `Flatten`: `[prod(dims[..axis]), prod(dims[axis..])]`; `axis` may be negative.
    Flatten {
        /// The split point, `-rank..=rank`.
        axis: i64,
    },
    /// ONNX `Squeeze`: remove the listed size-1 axes, or every size-1 axis when `None`.
    Squeeze {
        /// The axes (may be negative, relative to the input rank).
        axes: Option<ShapeSource>,
    },
    /// ONNX `Unsqueeze`: insert size-1 axes at the listed output positions.
    Unsqueeze {
        /// The axes (may be negative, relative to the output rank).
        axes: ShapeSource,
    },
    /// The shape of another slot's array (restores a shape after a temporary reshape).
    Like(Slot),
    /// Each output dim computed from the input dims ([`dims_target`]): splits and merges of
    /// dims whose sizes are known only at run time.
    Dims(Vec<DimRule>),
}

impl fmt::Debug for ReshapeTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReshapeTarget::Fixed(s) => write!(f, "{s:?}"),
            ReshapeTarget::Onnx { shape, allowzero } => {
                write!(f, "onnx({shape:?}")?;
                if *allowzero {
                    f.write_str(", allowzero")?;
                }
                f.write_str(")")
            }
            ReshapeTarget::Flatten { axis } => write!(f, "flatten(axis={axis})"),
            ReshapeTarget::Squeeze { axes: None } => f.write_str("squeeze(all)"),
            ReshapeTarget::Squeeze { axes: Some(a) } => write!(f, "squeeze({a:?})"),
            ReshapeTarget::Unsqueeze { axes } => write!(f, "unsqueeze({axes:?})"),
            ReshapeTarget::Like(s) => write!(f, "like({s:?})"),
            ReshapeTarget::Dims(r) => write!(f, "dims({r:?})"),
        }
    }
}

impl ReshapeTarget {
    /// The target shape for an input of `input_shape`.
    ///
    /// `like_shape` supplies the shape of the slot named by [`ReshapeTarget::Like`] (the runtime
    /// passes that array's shape; other variants ignore it).
    pub fn resolve(
        &self,
        input_shape: &[i64],
        like_shape: Option<&[i64]>,
        host: &mut dyn HostReader,
    ) -> Result<Vec<i32>, String> {
        let shape = match self {
            ReshapeTarget::Fixed(s) => s.clone(),
            ReshapeTarget::Onnx { shape, allowzero } => {
                reshape_target(input_shape, &shape.get(host)?, *allowzero)?
            }
            ReshapeTarget::Flatten { axis } => flatten_shape(input_shape, *axis)?,
            ReshapeTarget::Squeeze { axes } => {
                let axes = match axes {
                    Some(a) => Some(a.get(host)?),
                    None => None,
                };
                squeeze_shape(input_shape, axes.as_deref())?
            }
            ReshapeTarget::Unsqueeze { axes } => unsqueeze_shape(input_shape, &axes.get(host)?)?,
            ReshapeTarget::Dims(r) => dims_target(input_shape, r)?,
            ReshapeTarget::Like(_) => like_shape
                .ok_or("reshape-like needs the other array's shape")?
                .to_vec(),
        };
        let n_in: i64 = input_shape.iter().product();
        let n_out: i64 = shape.iter().product();
        if n_in != n_out {
            return Err(format!(
                "cannot reshape {input_shape:?} ({n_in} elements) to {shape:?} ({n_out} elements)"
            ));
        }
        shape_to_i32(&shape)
    }

    /// Slots read on the host by [`ReshapeTarget::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        match self {
            ReshapeTarget::Onnx { shape, .. } => shape.dynamic_slot().into_iter().collect(),
            ReshapeTarget::Squeeze { axes: Some(a) } => a.dynamic_slot().into_iter().collect(),
            ReshapeTarget::Unsqueeze { axes } => axes.dynamic_slot().into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// ONNX `Reshape` target: `0` copies the input dim at that index (unless `allowzero`), one
/// `-1` is inferred from the element count.
pub fn reshape_target(
    input_shape: &[i64],
    shape: &[i64],
    allowzero: bool,
) -> Result<Vec<i64>, String> {
    let mut out = Vec::with_capacity(shape.len());
    let mut infer = None;
    for (i, &d) in shape.iter().enumerate() {
        match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(format!("reshape target {shape:?} has more than one -1"));
                }
                out.push(1);
            }
            0 if !allowzero => {
                let copied = *input_shape.get(i).ok_or_else(|| {
                    format!(
                        "reshape target {shape:?} copies dim {i} of rank-{} input",
                        input_shape.len()
                    )
                })?;
                out.push(copied);
            }
            d if d < 0 => return Err(format!("reshape target {shape:?} has invalid dim {d}")),
            d => out.push(d),
        }
    }
    if allowzero && infer.is_some() && shape.contains(&0) {
        return Err(format!(
            "reshape target {shape:?} has both 0 and -1 with allowzero set"
        ));
    }
    let product = |dims: &[i64]| {
        dims.iter()
            .try_fold(1i64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("reshape of {input_shape:?} to {shape:?}: the size overflows"))
    };
    let total = product(input_shape)?;
    let known = product(&out)?;
    match infer {
        Some(i) => {
            if known == 0 || total % known != 0 {
                return Err(format!(
                    "cannot infer -1 in reshape of {input_shape:?} to {shape:?}"
                ));
            }
            out[i] = total / known;
        }
        None if known != total => {
            return Err(format!(
                "cannot reshape {input_shape:?} ({total} elements) to {out:?} ({known} elements)"
            ));
        }
        None => {}
    }
    Ok(out)
}

/// ONNX `Flatten` output shape.
pub fn flatten_shape(input_shape: &[i64], axis: i64) -> Result<Vec<i64>, String> {
    let r = input_shape.len() as i64;
    if axis < -r || axis > r {
        return Err(format!("Flatten axis {axis} is out of range for rank {r}"));
    }
    let a = if axis < 0 { axis + r } else { axis } as usize;
    Ok(vec![
        input_shape[..a].iter().product(),
        input_shape[a..].iter().product(),
    ])
}

/// ONNX `Squeeze` output shape (`axes = None` squeezes every size-1 dim).
pub fn squeeze_shape(input_shape: &[i64], axes: Option<&[i64]>) -> Result<Vec<i64>, String> {
    match axes {
        None => Ok(input_shape.iter().copied().filter(|&d| d != 1).collect()),
        Some(axes) => {
            let axes = normalize_axes(axes, input_shape.len())?;
            for &a in &axes {
                if input_shape[a] != 1 {
                    return Err(format!(
                        "cannot squeeze axis {a} of size {} in {input_shape:?}",
                        input_shape[a]
                    ));
                }
            }
            Ok(input_shape
                .iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, &d)| d)
                .collect())
        }
    }
}

/// ONNX `Unsqueeze` output shape (axes relative to the output rank).
pub fn unsqueeze_shape(input_shape: &[i64], axes: &[i64]) -> Result<Vec<i64>, String> {
    let out_rank = input_shape.len() + axes.len();
    let axes = normalize_axes(axes, out_rank)?;
    let mut rest = input_shape.iter();
    Ok((0..out_rank)
        .map(|i| {
            if axes.contains(&i) {
                1
            } else {
                *rest.next().expect("counted")
            }
        })
        .collect())
}

/// ONNX `Expand` target: the bidirectional broadcast of the input shape and `shape`.
pub fn expand_shape(input_shape: &[i64], shape: &[i64]) -> Result<Vec<i32>, String> {
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("Expand shape {shape:?} has a negative dim"));
    }
    shape_to_i32(&broadcast_shapes(input_shape, shape)?)
}

/// A `ConstantOfShape`/`Full` shape, validated (non-negative, fits i32).
pub fn full_shape(shape: &[i64]) -> Result<Vec<i32>, String> {
    if shape.iter().any(|&d| d < 0) {
        return Err(format!("shape {shape:?} has a negative dim"));
    }
    shape_to_i32(shape)
}

/// ONNX `Shape` (opset 15 `start`/`end`): the range of dims reported for a rank-`rank` input.
pub fn shape_range(rank: usize, start: i64, end: Option<i64>) -> std::ops::Range<usize> {
    let r = rank as i64;
    let clamp = |v: i64| {
        let v = if v < 0 { v + r } else { v };
        v.clamp(0, r) as usize
    };
    let s = clamp(start);
    let e = end.map(clamp).unwrap_or(rank);
    s..e.max(s)
}

// ---------------------------------------------------------------------------------------------
// Slice.

/// ONNX `Slice` (opset 10+ inputs, or opset 1 attributes) over an input of runtime shape.
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SliceSpec {
    /// `starts`.
    pub starts: ShapeSource,
    /// `ends` (may hold `i64::MAX`/`i64::MIN` sentinels).
    pub ends: ShapeSource,
    /// `axes`; `None` means `0..starts.len()`.
    pub axes: Option<ShapeSource>,
    /// `steps`; `None` means all ones.
    pub steps: Option<ShapeSource>,
}

impl fmt::Debug for SliceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "starts={:?} ends={:?}", self.starts, self.ends)?;
        if let Some(a) = &self.axes {
            write!(f, " axes={a:?}")?;
        }
        if let Some(s) = &self.steps {
            write!(f, " steps={s:?}")?;
        }
        Ok(())
    }
}

/// Per-axis arguments for `mlx_slice`, one entry per input dim.
///
/// Values are already in range, in the form MLX's slice normalisation leaves unchanged: for a
/// negative stride, "stop before index 0" is encoded as `-(dim + 1)` (MLX adds `dim` to
/// negative stops, giving `-1`, its "left of 0" position).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SliceBounds {
    /// `start` per axis.
    pub start: Vec<i32>,
    /// `stop` per axis.
    pub stop: Vec<i32>,
    /// `strides` per axis.
    pub strides: Vec<i32>,
    /// The output shape, for checking.
    pub out_shape: Vec<i64>,
}

impl SliceSpec {
    /// Resolves to `mlx_slice` arguments for an input of `input_shape`.
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<SliceBounds, String> {
        let starts = self.starts.get(host)?;
        let ends = self.ends.get(host)?;
        let axes = match &self.axes {
            Some(a) => Some(a.get(host)?),
            None => None,
        };
        let steps = match &self.steps {
            Some(s) => Some(s.get(host)?),
            None => None,
        };
        slice_bounds(
            input_shape,
            &starts,
            &ends,
            axes.as_deref(),
            steps.as_deref(),
        )
    }

    /// Slots read on the host by [`SliceSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        [
            Some(&self.starts),
            Some(&self.ends),
            self.axes.as_ref(),
            self.steps.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter_map(ShapeSource::dynamic_slot)
        .collect()
    }
}

/// ONNX `Slice` semantics: per-axis clamping of starts/ends (negative values count from the
/// end; `INT_MAX`-style ends clamp), negative steps walk backwards.
pub fn slice_bounds(
    input_shape: &[i64],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<SliceBounds, String> {
    let rank = input_shape.len();
    let n = starts.len();
    if ends.len() != n {
        return Err(format!(
            "Slice starts ({n}) and ends ({}) differ in length",
            ends.len()
        ));
    }
    let axes: Vec<i64> = match axes {
        Some(a) if a.len() != n => {
            return Err(format!(
                "Slice axes ({}) and starts ({n}) differ in length",
                a.len()
            ));
        }
        Some(a) => a.to_vec(),
        None => (0..n as i64).collect(),
    };
    let steps: Vec<i64> = match steps {
        Some(s) if s.len() != n => {
            return Err(format!(
                "Slice steps ({}) and starts ({n}) differ in length",
                s.len()
            ));
        }
        Some(s) => s.to_vec(),
        None => vec![1; n],
    };
    let axes = normalize_axes(&axes, rank)?;
    let mut start = vec![0i64; rank];
    let mut stop: Vec<i64> = input_shape.to_vec();
    let mut strides = vec![1i64; rank];
    let mut out_shape = input_shape.to_vec();
    for (i, &ax) in axes.iter().enumerate() {
        let dim = input_shape[ax];
        let step = steps[i];
        if step == 0 {
            return Err("Slice step must not be 0".into());
        }
        // A step longer than the axis takes one element, like a step of the axis' length;
        // clamping keeps the arithmetic below from overflowing (steps of +-i64::MAX).
        let step = step.clamp(-dim.max(1), dim.max(1));
        let norm = |v: i64| if v < 0 { v.saturating_add(dim) } else { v };
        let (s, e) = if step > 0 {
            (norm(starts[i]).clamp(0, dim), norm(ends[i]).clamp(0, dim))
        } else {
            (
                norm(starts[i]).clamp(0, (dim - 1).max(0)),
                norm(ends[i]).clamp(-1, dim - 1),
            )
        };
        let len = if step > 0 {
            if e > s { (e - s + step - 1) / step } else { 0 }
        } else if s > e && dim > 0 {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        out_shape[ax] = len;
        strides[ax] = step;
        if len == 0 {
            // An empty slice; express it the same way for both directions.
            start[ax] = 0;
            stop[ax] = 0;
            strides[ax] = 1;
        } else if step > 0 {
            start[ax] = s;
            stop[ax] = e;
        } else {
            start[ax] = s;
            stop[ax] = if e < 0 { -(dim + 1) } else { e };
        }
    }
    Ok(SliceBounds {
        start: shape_to_i32(&start)?,
        stop: stop
            .iter()
            .map(|&v| to_i32(v, "slice stop"))
            .collect::<Result<_, _>>()?,
        strides: strides
            .iter()
            .map(|&v| to_i32(v, "slice step"))
            .collect::<Result<_, _>>()?,
        out_shape,
    })
}

// ---------------------------------------------------------------------------------------------
// Reductions.

/// The axes of a [`Step::Reduce`].
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ReduceAxes {
    /// Every axis.
    All,
    /// Fixed axes (may be negative when the rank was unknown at plan time).
    Static(Vec<i64>),
    /// ONNX opset-13/18 `axes` input read at run time.
    Dynamic {
        /// The axes tensor.
        axes: Slot,
        /// `noop_with_empty_axes`: an empty list means identity rather than "all".
        noop_with_empty_axes: bool,
    },
}

impl fmt::Debug for ReduceAxes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReduceAxes::All => f.write_str("all"),
            ReduceAxes::Static(a) => write!(f, "{a:?}"),
            ReduceAxes::Dynamic {
                axes,
                noop_with_empty_axes,
            } => write!(f, "host({axes:?}, noop_with_empty={noop_with_empty_axes})"),
        }
    }
}

impl ReduceAxes {
    /// Normalised axes for a rank-`rank` input; `None` means "identity" (no reduction).
    pub fn resolve(
        &self,
        rank: usize,
        host: &mut dyn HostReader,
    ) -> Result<Option<Vec<i32>>, String> {
        let axes = match self {
            ReduceAxes::All => (0..rank as i64).collect(),
            ReduceAxes::Static(a) => a.clone(),
            ReduceAxes::Dynamic {
                axes,
                noop_with_empty_axes,
            } => {
                let a = host.ints(*axes)?;
                if a.is_empty() {
                    if *noop_with_empty_axes {
                        return Ok(None);
                    }
                    (0..rank as i64).collect()
                } else {
                    a
                }
            }
        };
        let mut axes = normalize_axes(&axes, rank)?;
        axes.sort_unstable();
        Ok(Some(axes.into_iter().map(|a| a as i32).collect()))
    }
}

// ---------------------------------------------------------------------------------------------
// Convolution and pooling.

/// How spatial padding is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AutoPad {
    /// Explicit `pads` (low and high per spatial dim).
    Explicit {
        /// Padding before each spatial dim.
        lo: Vec<i64>,
        /// Padding after each spatial dim.
        hi: Vec<i64>,
    },
    /// `SAME_UPPER`: output = ceil(input / stride), extra padding at the end.
    SameUpper,
    /// `SAME_LOWER`: as `SAME_UPPER`, extra padding at the start.
    SameLower,
}

/// Spatial padding of SAME auto-pad for one dim.
pub fn same_pads(input: i64, kernel: i64, stride: i64, dilation: i64, upper: bool) -> (i64, i64) {
    let out = (input + stride - 1) / stride;
    let eff_k = (kernel - 1) * dilation + 1;
    let total = ((out - 1) * stride + eff_k - input).max(0);
    let small = total / 2;
    if upper {
        (small, total - small)
    } else {
        (total - small, small)
    }
}

impl AutoPad {
    /// Low and high pads per spatial dim for the given spatial input dims.
    pub fn resolve(
        &self,
        input_spatial: &[i64],
        kernel: &[i64],
        strides: &[i64],
        dilations: &[i64],
    ) -> (Vec<i64>, Vec<i64>) {
        match self {
            AutoPad::Explicit { lo, hi } => (lo.clone(), hi.clone()),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let upper = matches!(self, AutoPad::SameUpper);
                input_spatial
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| same_pads(d, kernel[i], strides[i], dilations[i], upper))
                    .unzip()
            }
        }
    }
}

/// Static attributes of a [`Step::Conv`] (channels-last: input `[N, *spatial, C]`, weight
/// `[O, *kernel, C/groups]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvSpec {
    /// Kernel spatial size (from the weight's shape).
    pub kernel: Vec<i64>,
    /// Strides per spatial dim.
    pub strides: Vec<i64>,
    /// Kernel dilations per spatial dim.
    pub dilations: Vec<i64>,
    /// Padding.
    pub padding: AutoPad,
    /// Groups.
    pub groups: i64,
    /// Integer-valued operands whose float32 result must be exact (ConvInteger and
    /// QLinearConv): the runtime convolves these on MLX's CPU stream, since GPU convolution
    /// libraries may pick transform-based algorithms (Winograd, FFT) that round.
    pub exact_integers: bool,
}

/// Resolved `mlx_conv_general` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConvArgs {
    /// `stride`.
    pub stride: Vec<i32>,
    /// `padding_lo`.
    pub padding_lo: Vec<i32>,
    /// `padding_hi`.
    pub padding_hi: Vec<i32>,
    /// `kernel_dilation`.
    pub kernel_dilation: Vec<i32>,
    /// `input_dilation` (all ones).
    pub input_dilation: Vec<i32>,
    /// `groups`.
    pub groups: i32,
}

impl ConvSpec {
    /// `mlx_conv_general` arguments for a channels-last input of `input_shape`
    /// (`[N, *spatial, C]`).
    pub fn resolve(&self, input_shape: &[i64]) -> Result<ConvArgs, String> {
        let d = self.kernel.len();
        if input_shape.len() != d + 2 {
            return Err(format!(
                "Conv with {d} spatial dims got an input of shape {input_shape:?}"
            ));
        }
        let spatial = &input_shape[1..1 + d];
        let (lo, hi) = self
            .padding
            .resolve(spatial, &self.kernel, &self.strides, &self.dilations);
        Ok(ConvArgs {
            stride: shape_to_i32(&self.strides)?,
            padding_lo: shape_to_i32(&lo)?,
            padding_hi: shape_to_i32(&hi)?,
            kernel_dilation: shape_to_i32(&self.dilations)?,
            input_dilation: vec![1; d],
            groups: to_i32(self.groups, "groups")?,
        })
    }
}

/// Static attributes of ONNX `MaxPool`/`AveragePool` over an NC* (channels-first) input.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PoolSpec {
    /// `kernel_shape`.
    pub kernel: Vec<i64>,
    /// `strides`.
    pub strides: Vec<i64>,
    /// `dilations`.
    pub dilations: Vec<i64>,
    /// `pads` / `auto_pad`.
    pub padding: AutoPad,
    /// `ceil_mode`.
    pub ceil_mode: bool,
    /// AveragePool `count_include_pad` (counts explicit/auto pads, never the ceil-mode tail).
    pub count_include_pad: bool,
}

/// Per-spatial-dim geometry of a pool for one input shape.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PoolGeometry {
    /// Output spatial dims.
    pub out: Vec<i64>,
    /// Padding before each spatial dim.
    pub pad_lo: Vec<i64>,
    /// Padding after each spatial dim, including the ceil-mode tail.
    pub pad_hi: Vec<i64>,
    /// The part of `pad_hi` that only ceil mode added (never counted by AveragePool).
    pub ceil_tail: Vec<i64>,
}

impl PoolSpec {
    /// Output size and padding for the given spatial input dims.
    pub fn geometry(&self, input_spatial: &[i64]) -> Result<PoolGeometry, String> {
        let d = self.kernel.len();
        if input_spatial.len() != d {
            return Err(format!(
                "pool with {d} spatial dims got spatial input {input_spatial:?}"
            ));
        }
        let (lo, hi) =
            self.padding
                .resolve(input_spatial, &self.kernel, &self.strides, &self.dilations);
        let mut g = PoolGeometry {
            out: Vec::with_capacity(d),
            pad_lo: lo.clone(),
            pad_hi: Vec::with_capacity(d),
            ceil_tail: Vec::with_capacity(d),
        };
        for i in 0..d {
            let (n, k, s, dil) = (
                input_spatial[i],
                self.kernel[i],
                self.strides[i],
                self.dilations[i],
            );
            let eff_k = (k - 1) * dil + 1;
            let padded = n + lo[i] + hi[i];
            if padded < eff_k {
                return Err(format!(
                    "pool window {eff_k} is larger than the padded input {padded}"
                ));
            }
            let span = padded - eff_k;
            let mut out = if self.ceil_mode
                && !matches!(self.padding, AutoPad::SameUpper | AutoPad::SameLower)
            {
                (span + s - 1) / s + 1
            } else {
                span / s + 1
            };
            if self.ceil_mode && out > 1 && (out - 1) * s >= n + lo[i] {
                out -= 1;
            }
            let needed = (out - 1) * s + eff_k;
            let tail = (needed - padded).max(0);
            g.out.push(out);
            g.pad_hi.push(hi[i] + tail);
            g.ceil_tail.push(tail);
        }
        Ok(g)
    }

    /// AveragePool divisors for a channels-first input of `input_shape`: the output's spatial
    /// shape (as `[1, 1, *out]`, broadcasting over N and C) and the number of counted elements
    /// of every window, row-major.
    pub fn divisor(&self, input_shape: &[i64]) -> Result<(Vec<i32>, Vec<f32>), String> {
        let d = self.kernel.len();
        if input_shape.len() != d + 2 {
            return Err(format!("pool input {input_shape:?} is not rank {}", d + 2));
        }
        let spatial = &input_shape[2..];
        let g = self.geometry(spatial)?;
        // Per dim: the count of each output position's window, then an outer product.
        let per_dim: Vec<Vec<i64>> = (0..d)
            .map(|i| {
                let (n, k, s, dil) = (
                    spatial[i],
                    self.kernel[i],
                    self.strides[i],
                    self.dilations[i],
                );
                let lo = g.pad_lo[i];
                let hi = g.pad_hi[i] - g.ceil_tail[i];
                let (lower, upper) = if self.count_include_pad {
                    (-lo, n + hi)
                } else {
                    (0, n)
                };
                (0..g.out[i])
                    .map(|o| {
                        let first = o * s - lo;
                        (0..k)
                            .map(|j| first + j * dil)
                            .filter(|&p| p >= lower && p < upper)
                            .count() as i64
                    })
                    .collect()
            })
            .collect();
        let total: usize = g.out.iter().map(|&o| o as usize).product();
        let mut values = Vec::with_capacity(total);
        let mut idx = vec![0usize; d];
        for _ in 0..total {
            let c: i64 = (0..d).map(|i| per_dim[i][idx[i]]).product();
            values.push(c as f32);
            for i in (0..d).rev() {
                idx[i] += 1;
                if (idx[i] as i64) < g.out[i] {
                    break;
                }
                idx[i] = 0;
            }
        }
        let mut shape = vec![1i32, 1];
        shape.extend(shape_to_i32(&g.out)?);
        Ok((shape, values))
    }
}

/// Padding of a [`Step::Pad`].
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PadSpec {
    /// Fixed pads per axis.
    Static {
        /// Axes padded.
        axes: Vec<i32>,
        /// Padding before.
        lo: Vec<i32>,
        /// Padding after.
        hi: Vec<i32>,
    },
    /// The spatial padding of a pool (channels-first input), ceil-mode tail included.
    Pool(PoolSpec),
    /// ONNX `Pad` `pads` input (`[lo..., hi...]`), with optional `axes`.
    Onnx {
        /// The `pads` values.
        pads: ShapeSource,
        /// The `axes` values, when given (opset 18).
        axes: Option<ShapeSource>,
    },
}

impl fmt::Debug for PadSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadSpec::Static { axes, lo, hi } => write!(f, "axes={axes:?} lo={lo:?} hi={hi:?}"),
            PadSpec::Pool(p) => write!(
                f,
                "pool(kernel={:?} strides={:?} dilations={:?} {:?} ceil={})",
                p.kernel, p.strides, p.dilations, p.padding, p.ceil_mode
            ),
            PadSpec::Onnx { pads, axes } => write!(f, "onnx(pads={pads:?}, axes={axes:?})"),
        }
    }
}

/// How a pad fills the new positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum PadMode {
    /// `"constant"`: fill with the value.
    Constant,
    /// `"edge"`: repeat the border element (ONNX `edge`).
    Edge,
    /// ONNX `reflect`: mirror the elements next to the border, the border excluded.
    Reflect,
    /// ONNX `wrap`: continue periodically from the opposite side.
    Wrap,
}

impl PadMode {
    /// The mode string `mlx_pad` takes, or `None` for modes done by gathering
    /// ([`PadMode::source_indices`]).
    pub fn mlx_mode(self) -> Option<&'static str> {
        match self {
            PadMode::Constant => Some("constant"),
            PadMode::Edge => Some("edge"),
            PadMode::Reflect | PadMode::Wrap => None,
        }
    }

    /// For a gathering mode, the source index of each position along an axis of length `n`
    /// padded by `lo` before and `hi` after. As in ONNX Runtime, a reflect pad must be below
    /// `n`, while wrap repeats the axis as often as the pads need.
    pub fn source_indices(self, n: i64, lo: i64, hi: i64) -> Result<Vec<i32>, String> {
        let name = match self {
            PadMode::Reflect => "reflect",
            PadMode::Wrap => "wrap",
            PadMode::Constant | PadMode::Edge => {
                return Err(format!("{self:?} pads are not gathered"));
            }
        };
        let too_wide = self == PadMode::Reflect && (lo > n - 1 || hi > n - 1);
        if lo < 0 || hi < 0 || too_wide || (n == 0 && lo + hi > 0) || n > i64::from(i32::MAX) {
            return Err(format!(
                "Pad {name}: pads {lo} and {hi} are out of range for a dimension of {n}{}",
                if self == PadMode::Reflect {
                    " (at most the dimension minus 1)"
                } else {
                    ""
                }
            ));
        }
        Ok((-lo..n + hi)
            .map(|i| {
                let j = match self {
                    PadMode::Reflect if i < 0 => -i,
                    PadMode::Reflect if i >= n => 2 * (n - 1) - i,
                    PadMode::Reflect => i,
                    _ => i.rem_euclid(n),
                };
                j as i32
            })
            .collect())
    }
}

/// Resolved `mlx_pad` arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PadArgs {
    /// `axes`.
    pub axes: Vec<i32>,
    /// `low_pad_size`.
    pub lo: Vec<i32>,
    /// `high_pad_size`.
    pub hi: Vec<i32>,
}

impl PadSpec {
    /// `mlx_pad` arguments for an input of `input_shape`.
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<PadArgs, String> {
        match self {
            PadSpec::Static { axes, lo, hi } => Ok(PadArgs {
                axes: axes.clone(),
                lo: lo.clone(),
                hi: hi.clone(),
            }),
            PadSpec::Pool(p) => {
                let d = p.kernel.len();
                if input_shape.len() != d + 2 {
                    return Err(format!("pool input {input_shape:?} is not rank {}", d + 2));
                }
                let g = p.geometry(&input_shape[2..])?;
                Ok(PadArgs {
                    axes: (2..2 + d as i32).collect(),
                    lo: shape_to_i32(&g.pad_lo)?,
                    hi: shape_to_i32(&g.pad_hi)?,
                })
            }
            PadSpec::Onnx { pads, axes } => {
                let pads = pads.get(host)?;
                let rank = input_shape.len();
                let axes: Vec<i64> = match axes {
                    Some(a) => a.get(host)?,
                    None => (0..rank as i64).collect(),
                };
                let axes = normalize_axes(&axes, rank)?;
                if pads.len() != 2 * axes.len() {
                    return Err(format!(
                        "Pad has {} pads for {} axes",
                        pads.len(),
                        axes.len()
                    ));
                }
                let n = axes.len();
                for i in 0..n {
                    if pads[i] < 0 || pads[n + i] < 0 {
                        return Err("negative pads are not supported".into());
                    }
                }
                Ok(PadArgs {
                    axes: axes.iter().map(|&a| a as i32).collect(),
                    lo: shape_to_i32(&pads[..n])?,
                    hi: shape_to_i32(&pads[n..])?,
                })
            }
        }
    }

    /// Slots read on the host by [`PadSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        match self {
            PadSpec::Onnx { pads, axes } => pads
                .dynamic_slot()
                .into_iter()
                .chain(axes.as_ref().and_then(ShapeSource::dynamic_slot))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// Sliding windows over the trailing spatial dims of a channels-first input, for pooling.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowSpec {
    /// Window size per spatial dim.
    pub kernel: Vec<i64>,
    /// Window step per spatial dim.
    pub strides: Vec<i64>,
    /// Element spacing inside a window per spatial dim.
    pub dilations: Vec<i64>,
}

/// Resolved `mlx_as_strided` arguments (element strides of a row-contiguous input).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WindowArgs {
    /// `shape`: `[N, C, *out, *kernel]`.
    pub shape: Vec<i32>,
    /// `strides`, in elements.
    pub strides: Vec<i64>,
    /// `offset` (always 0).
    pub offset: usize,
}

impl WindowSpec {
    /// `mlx_as_strided` arguments for an (already padded) input of `input_shape`.
    pub fn resolve(&self, input_shape: &[i64]) -> Result<WindowArgs, String> {
        let d = self.kernel.len();
        let rank = input_shape.len();
        if rank < d {
            return Err(format!("windows of rank {d} over input {input_shape:?}"));
        }
        let lead = rank - d;
        let mut contiguous = vec![1i64; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            contiguous[i] = contiguous[i + 1] * input_shape[i + 1];
        }
        let mut shape: Vec<i64> = input_shape[..lead].to_vec();
        let mut strides: Vec<i64> = contiguous[..lead].to_vec();
        for i in 0..d {
            let eff_k = (self.kernel[i] - 1) * self.dilations[i] + 1;
            let n = input_shape[lead + i];
            if n < eff_k {
                return Err(format!("window {eff_k} is larger than dim {n}"));
            }
            shape.push((n - eff_k) / self.strides[i] + 1);
            strides.push(contiguous[lead + i] * self.strides[i]);
        }
        for i in 0..d {
            shape.push(self.kernel[i]);
            strides.push(contiguous[lead + i] * self.dilations[i]);
        }
        Ok(WindowArgs {
            shape: shape_to_i32(&shape)?,
            strides,
            offset: 0,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Resize.

/// ONNX `Resize` coordinate transformation modes (nearest only uses them to map output to
/// input positions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum CoordinateTransform {
    /// `half_pixel`.
    HalfPixel,
    /// `half_pixel_symmetric`.
    HalfPixelSymmetric,
    /// `pytorch_half_pixel`.
    PytorchHalfPixel,
    /// `align_corners`.
    AlignCorners,
    /// `asymmetric`.
    Asymmetric,
    /// `tf_half_pixel_for_nearest`.
    TfHalfPixelForNearest,
}

/// ONNX `Resize` `nearest_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum NearestMode {
    /// `round_prefer_floor`.
    RoundPreferFloor,
    /// `round_prefer_ceil`.
    RoundPreferCeil,
    /// `floor`.
    Floor,
    /// `ceil`.
    Ceil,
}

/// ONNX `Resize` in nearest mode.
#[derive(Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ResizeSpec {
    /// Coordinate mapping.
    pub coordinate_transform: CoordinateTransform,
    /// Rounding of the mapped coordinate.
    pub nearest_mode: NearestMode,
    /// `scales` input (one per axis, or per listed axis), when given.
    pub scales: Option<FloatSource>,
    /// `sizes` input, when given (takes precedence when both are).
    pub sizes: Option<ShapeSource>,
    /// Opset 18 `axes` (normalised when the rank was known); `None` means every axis.
    pub axes: Option<Vec<i64>>,
    /// Opset 18 `keep_aspect_ratio_policy` (applies to `sizes`).
    pub policy: AspectPolicy,
}

impl fmt::Debug for ResizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}/{:?}", self.coordinate_transform, self.nearest_mode)?;
        if let Some(s) = &self.scales {
            write!(f, " scales={s:?}")?;
        }
        if let Some(s) = &self.sizes {
            write!(f, " sizes={s:?}")?;
        }
        if let Some(a) = &self.axes {
            write!(f, " axes={a:?}")?;
        }
        Ok(())
    }
}

impl ResizeSpec {
    /// For an input of `input_shape`: the gathers to perform, as `(axis, indices)` pairs
    /// (axes whose size and scale leave them unchanged are omitted).
    pub fn resolve(
        &self,
        input_shape: &[i64],
        host: &mut dyn HostReader,
    ) -> Result<Vec<(i32, Vec<i32>)>, String> {
        let rank = input_shape.len();
        // ORT's output sizes (float32 products, the aspect-ratio policy) and scales.
        let (_, out_shape, scales) = resize_target(
            input_shape,
            self.axes.as_deref(),
            self.sizes.as_ref(),
            self.scales.as_ref(),
            self.policy,
            host,
        )?;
        // ORT copies the input when no dim changes size, whatever the scales.
        if out_shape == input_shape {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for ax in 0..rank {
            let (in_dim, out_dim, scale) = (input_shape[ax], out_shape[ax], scales[ax]);
            // A scale of 1 maps each position to itself.
            if scale == 1.0 && out_dim == in_dim {
                continue;
            }
            let idx = nearest_indices(
                in_dim,
                out_dim,
                scale,
                self.coordinate_transform,
                self.nearest_mode,
            );
            out.push((ax as i32, idx));
        }
        Ok(out)
    }

    /// Slots read on the host by [`ResizeSpec::resolve`].
    pub fn host_reads(&self) -> Vec<Slot> {
        self.scales
            .as_ref()
            .and_then(FloatSource::dynamic_slot)
            .into_iter()
            .chain(self.sizes.as_ref().and_then(ShapeSource::dynamic_slot))
            .collect()
    }
}

/// Source indices of ONNX nearest-neighbour resize along one axis.
pub fn nearest_indices(
    in_dim: i64,
    out_dim: i64,
    scale: f32,
    ct: CoordinateTransform,
    mode: NearestMode,
) -> Vec<i32> {
    // Float32 arithmetic throughout, as ONNX Runtime's CPU kernel does: boundary cases
    // (a source coordinate that is exactly an integer in real arithmetic) then round alike.
    let (in_f, out_f) = (in_dim as f32, out_dim as f32);
    (0..out_dim)
        .map(|o| {
            let o = o as f32;
            // ORT's formulas (half_pixel_symmetric partly in double precision).
            let x = source_coordinate(Some(ct), o, scale, out_f, in_f, 0.0, 1.0);
            let half = x.fract().abs() == 0.5;
            let r = match mode {
                NearestMode::RoundPreferFloor if half => x.floor(),
                NearestMode::RoundPreferCeil if half => x.ceil(),
                NearestMode::RoundPreferFloor | NearestMode::RoundPreferCeil => x.round(),
                NearestMode::Floor => x.floor(),
                NearestMode::Ceil => x.ceil(),
            };
            (r as i64).clamp(0, (in_dim - 1).max(0)) as i32
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The steps.

/// One MLX-level operation of a plan. See `STEPS.md` for the exact mlx-c calls of each variant.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Step {
    /// `out = mlx_<op>(x)`.
    Unary {
        /// The op.
        op: UnaryOp,
        /// Input.
        x: Slot,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_<op>(a, b)` with broadcasting.
    Binary {
        /// The op.
        op: BinaryOp,
        /// Left operand.
        a: Slot,
        /// Right operand.
        b: Slot,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_where(cond, x, y)`.
    Where {
        /// Bool condition.
        cond: Slot,
        /// Taken where `cond` is true.
        x: Slot,
        /// Taken where `cond` is false.
        y: Slot,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_astype(x, dtype)`.
    AsType {
        /// Input.
        x: Slot,
        /// Target dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_matmul(a, b)` (numpy semantics, 1-D operands included).
    MatMul {
        /// Left operand.
        a: Slot,
        /// Right operand.
        b: Slot,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_addmm(c, a, b, alpha, beta)` = `alpha * a@b + beta * c`.
    Addmm {
        /// Added term (broadcast to the product's shape).
        c: Slot,
        /// Left operand (2-D).
        a: Slot,
        /// Right operand (2-D).
        b: Slot,
        /// Product scale.
        alpha: f32,
        /// `c` scale.
        beta: f32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_reshape(x, target.resolve(x.shape, ...))`.
    Reshape {
        /// Input.
        x: Slot,
        /// Target shape rule.
        target: ReshapeTarget,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_transpose_axes(x, perm)`, or `mlx_transpose(x)` (reverse) when `perm` is
    /// `None`.
    Transpose {
        /// Input.
        x: Slot,
        /// Permutation.
        perm: Option<Vec<i32>>,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_broadcast_to(x, expand_shape(x.shape, shape))` (ONNX `Expand`).
    Expand {
        /// Input.
        x: Slot,
        /// The `shape` input.
        shape: ShapeSource,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_concatenate_axis(inputs, axis)`.
    Concat {
        /// Inputs, in order.
        inputs: Vec<Slot>,
        /// Axis (negative only when the rank was unknown; MLX accepts it).
        axis: i32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_slice(x, start, stop, strides)` with `spec.resolve(x.shape, host)`.
    Slice {
        /// Input.
        x: Slot,
        /// ONNX slice parameters.
        spec: SliceSpec,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_take_axis(x, indices, axis)`. MLX wraps negative indices of signed index
    /// types (`idx + dim`), which is ONNX `Gather`'s rule.
    Take {
        /// Data.
        x: Slot,
        /// Integer indices (any shape).
        indices: Slot,
        /// Axis (negative only when the rank was unknown).
        axis: i32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_take_along_axis(x, indices, axis)` (ONNX `GatherElements`).
    TakeAlongAxis {
        /// Data.
        x: Slot,
        /// Integer indices of the output's shape.
        indices: Slot,
        /// Axis.
        axis: i32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_softmax_axes(x, axes, precise)`.
    Softmax {
        /// Input.
        x: Slot,
        /// Axes softmaxed jointly.
        axes: Vec<i32>,
        /// Accumulate half-precision inputs in float32.
        precise: bool,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_fast_layer_norm(x, weight, bias, eps)` over the last axis.
    LayerNorm {
        /// Input.
        x: Slot,
        /// 1-D scale of the last dim's size (null when absent).
        weight: Option<Slot>,
        /// 1-D bias of the last dim's size (null when absent).
        bias: Option<Slot>,
        /// Epsilon.
        eps: f32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_fast_rms_norm(x, weight, eps)` over the last axis.
    RmsNorm {
        /// Input.
        x: Slot,
        /// 1-D scale of the last dim's size (null when absent).
        weight: Option<Slot>,
        /// Epsilon.
        eps: f32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_fast_scaled_dot_product_attention(q, k, v, scale, mode, mask, sinks=null)`
    /// with `mode = "causal"` (mask null) when `causal`, else `""` (mask or null). q is
    /// `[B, Hq, S, D]`, k `[B, Hkv, T, D]`, v `[B, Hkv, T, Dv]` (Hq a multiple of Hkv); a bool
    /// mask means "attend where true", a float mask is added to the scores.
    Attention {
        /// Queries.
        q: Slot,
        /// Keys.
        k: Slot,
        /// Values.
        v: Slot,
        /// Optional mask broadcastable to `[B, Hq, S, T]`.
        mask: Option<Slot>,
        /// MLX's causal mask (aligned to the bottom-right; the planner only sets it where that
        /// agrees with ONNX).
        causal: bool,
        /// Score scale.
        scale: f32,
        /// Output `[B, Hq, S, Dv]`.
        out: Slot,
    },
    /// `out = mlx_<op>_axes(x, axes.resolve(rank, host), keepdims)`; when the axes resolve to
    /// `None` (ONNX `noop_with_empty_axes`) `out = x`.
    Reduce {
        /// The reduction.
        op: ReduceOp,
        /// Input.
        x: Slot,
        /// Axes.
        axes: ReduceAxes,
        /// Keep reduced dims as size 1.
        keepdims: bool,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_arg{max,min}_axis(x, axis, keepdims)` (uint32 result).
    ArgReduce {
        /// The reduction.
        op: ArgReduceOp,
        /// Input.
        x: Slot,
        /// Axis.
        axis: i32,
        /// Keep the reduced dim as size 1.
        keepdims: bool,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_conv_general(x, w, spec.resolve(x.shape)..., flip=false)`; channels-last
    /// input `[N, *spatial, C]` and weight `[O, *kernel, C/groups]`.
    Conv {
        /// Channels-last input.
        x: Slot,
        /// Channels-last weight.
        w: Slot,
        /// Attributes.
        spec: ConvSpec,
        /// Output (channels-last).
        out: Slot,
    },
    /// `out = mlx_pad(x, axes, lo, hi, value, mode)` with `pads.resolve(x.shape, host)`.
    Pad {
        /// Input.
        x: Slot,
        /// Padding rule.
        pads: PadSpec,
        /// `"constant"` or `"edge"`.
        mode: PadMode,
        /// Scalar pad value (a constant of x's dtype).
        value: Slot,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_as_strided(x, shape, strides, 0)` with `spec.resolve(x.shape)`: sliding
    /// windows `[N, C, *out, *kernel]` of a channels-first input.
    Windows {
        /// Input (padded already).
        x: Slot,
        /// Window geometry.
        spec: WindowSpec,
        /// Output.
        out: Slot,
    },
    /// AveragePool divisors: `(shape, data) = spec.divisor(x.shape)`, then
    /// `out = mlx_astype(array(data, shape, float32), dtype)`.
    PoolDivisor {
        /// The pool's (unpadded) input, read for its shape only.
        x: Slot,
        /// Pool attributes.
        spec: PoolSpec,
        /// Output dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `out = take_axis(...)` repeated: for each `(axis, idx)` of `spec.resolve(x.shape,
    /// host)`, `x = mlx_take_axis(x, array(idx, int32), axis)`; then `out = x`.
    ResizeNearest {
        /// Input.
        x: Slot,
        /// Resize parameters.
        spec: ResizeSpec,
        /// Output.
        out: Slot,
    },
    /// `out` = the 1-D int64 array `x.shape[shape_range(rank, start, end)]` (no evaluation of
    /// `x` needed).
    Shape {
        /// Input, read for its shape only.
        x: Slot,
        /// ONNX `start`.
        start: i64,
        /// ONNX `end`.
        end: Option<i64>,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_full(full_shape(shape), value, dtype)` (ONNX `ConstantOfShape`).
    Full {
        /// Output shape.
        shape: ShapeSource,
        /// Scalar fill value (a constant of `dtype`).
        value: Slot,
        /// Output dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_arange(start, limit, delta, dtype)` with the three scalars read on the host
    /// (ONNX `Range`).
    Arange {
        /// Start scalar.
        start: FloatSource,
        /// Limit scalar.
        limit: FloatSource,
        /// Delta scalar.
        delta: FloatSource,
        /// Output dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `outs = mlx_split_sections(x, indices, axis)` where `indices` are the cumulative split
    /// points from `split_points(x.shape[axis], ...)`.
    Split {
        /// Input.
        x: Slot,
        /// Axis.
        axis: i32,
        /// Sizes of the parts; `None` means equal parts (`outs.len()` of them, the last one
        /// smaller when the dim does not divide, as ONNX opset 18 allows).
        sizes: Option<ShapeSource>,
        /// Outputs.
        outs: Vec<Slot>,
    },
    /// `out = mlx_cumsum_axis(x, axis, reverse, inclusive, dtype)` (ONNX `CumSum`).
    CumSum {
        /// Input.
        x: Slot,
        /// Axis.
        axis: i32,
        /// Accumulate from the end.
        reverse: bool,
        /// Include the current element (ONNX `exclusive == 0`).
        inclusive: bool,
        /// Accumulation and output dtype (x's dtype).
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_cum{sum,prod}_axis(x, axis, reverse, inclusive)` in x's dtype (ONNX `CumProd`,
    /// and `CumSum` whose axis is an input known only at run time).
    Cumulative {
        /// Sum or product.
        op: CumOp,
        /// Input.
        x: Slot,
        /// The axis: one value, negative counting from the end ([`cumulative_axis`]).
        axis: ShapeSource,
        /// Accumulate from the end.
        reverse: bool,
        /// Include the current element (ONNX `exclusive == 0`).
        inclusive: bool,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_view(x, dtype)`: x's bytes reinterpreted as `dtype` of the same width
    /// (ONNX `BitCast`; float bit manipulation).
    View {
        /// Input.
        x: Slot,
        /// The element type to read the bytes as (same size as x's).
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_triu(x, k)` when `upper`, else `mlx_tril(x, k)` (ONNX `Trilu`).
    Triangle {
        /// Input (rank >= 2; the last two dims are the matrix).
        x: Slot,
        /// Keep the upper triangle.
        upper: bool,
        /// Diagonal offset.
        k: i32,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_tile(x, reps)` (ONNX `Tile`).
    Tile {
        /// Input.
        x: Slot,
        /// Repeats per axis.
        reps: ShapeSource,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_quantized_matmul(x, w, scales, biases, transpose=true, group_size, bits,
    /// "affine")`: `x @ w_hat.T` with `w_hat = scales * q + biases` per group (com.microsoft
    /// MatMulNBits).
    QuantizedMatmul {
        /// Activations `[..., K]`.
        x: Slot,
        /// Packed weights `[N, K * bits / 32]` (uint32).
        w: Slot,
        /// Scales `[N, K / group_size]` (x's dtype).
        scales: Slot,
        /// Biases `[N, K / group_size]` (x's dtype).
        biases: Slot,
        /// Elements per group (32, 64 or 128).
        group_size: i32,
        /// Bits per element (4 or 8).
        bits: i32,
        /// Output `[..., N]`.
        out: Slot,
    },
    /// The present key or value cache of com.microsoft GroupQueryAttention: with
    /// `l = gqa_layout(B, S, past.shape[2], host(seqlens), host(total)[0])`, sequence `b` of
    /// `out` (`[B, H, l.present_len, D]`) is `past[b, :, :l.offsets[b]]`, then `new[b]`, then
    /// zeros (`mlx_slice`, `mlx_concatenate_axis`, `mlx_zeros`).
    KvCache {
        /// Past cache `[B, H, M, D]`, if any.
        past: Option<Slot>,
        /// New keys or values `[B, H, S, D]`.
        new: Slot,
        /// `seqlens_k` (`[B]`, read on the host).
        seqlens: Slot,
        /// `total_sequence_length`.
        total: ShapeSource,
        /// Output.
        out: Slot,
    },
    /// The attention mask of com.microsoft GroupQueryAttention: `l.mask(window)` as a bool
    /// array `[B, 1, S, P]` (`l` as for [`Step::KvCache`], `B`, `S` from `like`, which is
    /// `[B, H, S, D]`); with `bias` (`[B|1, H|1, S, T]`), the additive float mask
    /// `mlx_where(keep, pad(bias, T -> P), -inf)`.
    GqaMask {
        /// `seqlens_k` (read on the host).
        seqlens: Slot,
        /// `total_sequence_length`.
        total: ShapeSource,
        /// New keys `[B, H, S, D]` (read for their shape only).
        like: Slot,
        /// Past cache (read for its shape only), if any.
        past: Option<Slot>,
        /// Local window (`<= 0`: none).
        window: i64,
        /// Attention bias added to the scores, if any.
        bias: Option<Slot>,
        /// Output.
        out: Slot,
    },
    /// Rotary positions of com.microsoft GroupQueryAttention: `l.positions(position_ids)` as an
    /// int64 array `[B, S]` (`position_ids` read on the host when given).
    GqaPositions {
        /// `seqlens_k` (read on the host).
        seqlens: Slot,
        /// `total_sequence_length`.
        total: ShapeSource,
        /// New keys `[B, H, S, D]` (read for their shape only).
        like: Slot,
        /// Past cache (read for its shape only), if any.
        past: Option<Slot>,
        /// Explicit position ids `[B, S]` (int64), if any.
        position_ids: Option<Slot>,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_arange(0, like.shape[axis], 1, dtype)` (`like` is read for its shape only).
    Iota {
        /// The array whose dim gives the length.
        like: Slot,
        /// The dim (may be negative: MLX's rule).
        axis: i32,
        /// Output dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// Attention with extras: when `softcap == 0`,
    /// `mlx_fast_scaled_dot_product_attention(q, k, v, scale, mode, mask, sinks)` as for
    /// [`Step::Attention`] (with `causal` and a mask both set, the causal keep-mask, aligned to
    /// the bottom-right, is combined into the array mask); with `softcap > 0` the same
    /// computed step by step: `scores = softcap * tanh(q k^T * scale / softcap)`, masked,
    /// softmax (with the sink logits in the denominator), times `v`. `sinks` is `[Hq]`.
    AttentionEx {
        /// Queries `[B, Hq, S, D]`.
        q: Slot,
        /// Keys `[B, Hkv, T, D]`.
        k: Slot,
        /// Values `[B, Hkv, T, Dv]`.
        v: Slot,
        /// Bool keep-mask or additive float mask broadcastable to `[B, Hq, S, T]`.
        mask: Option<Slot>,
        /// Causal (bottom-right aligned).
        causal: bool,
        /// Per-head sink logits `[Hq]`.
        sinks: Option<Slot>,
        /// Score scale.
        scale: f32,
        /// Logit soft cap (`0`: none).
        softcap: f32,
        /// Output `[B, Hq, S, Dv]`.
        out: Slot,
    },
    /// `out = mlx_conv_general(x, w, a.conv..., flip = true)` with `a = spec.resolve(x.shape)`,
    /// then, when `a.needs_crop()`, `mlx_slice` dropping `a.crop_lo` / `a.crop_hi` elements of
    /// each spatial dim (ONNX `ConvTranspose`; channels-last input `[N, *spatial, C]`, weight
    /// `[O, *kernel, C/groups]`; `input_dilation` carries the ONNX strides).
    ConvTranspose {
        /// Channels-last input.
        x: Slot,
        /// Weight in `mlx_conv_general`'s layout.
        w: Slot,
        /// Attributes.
        spec: ConvTransposeSpec,
        /// Output (channels-last).
        out: Slot,
    },
    /// `out = mlx_argsort_axis(x, axis)`: uint32 indices that sort `x` ascending along `axis`;
    /// equal elements keep their order (MLX sorts stably).
    ArgSort {
        /// Input.
        x: Slot,
        /// Axis.
        axis: i32,
        /// Output (uint32).
        out: Slot,
    },
    /// `out = <op.mlx_fn()>(x, vector(indices), updates, axes)`: MLX's scatter with one index
    /// array per axis in `axes` (broadcast together to shape `I`); `updates` has shape
    /// `I ++ slice`, the slice being 1 on `axes` and `x`'s dim elsewhere.
    Scatter {
        /// `none` / `add` / `mul` / `max` / `min`.
        op: ScatterOp,
        /// Data.
        x: Slot,
        /// Integer index arrays (non-negative), one per axis.
        indices: Vec<Slot>,
        /// Updates.
        updates: Slot,
        /// Indexed axes.
        axes: Vec<i32>,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_gather(x, vector(indices), axes, gather_slice_sizes(x.shape, axes))`: shape
    /// `I ++ slice` (the slice is 1 on `axes`, `x`'s dim elsewhere); MLX wraps negative
    /// indices of signed types.
    Gather {
        /// Data.
        x: Slot,
        /// Integer index arrays, one per axis, broadcast together.
        indices: Vec<Slot>,
        /// Indexed axes.
        axes: Vec<i32>,
        /// Output.
        out: Slot,
    },
    /// Linear / cubic `Resize` of a float32 `x` with `a = spec.resolve(x.shape, host)`: no
    /// axes -> `mlx_astype(x, float32)` (a copy); otherwise, per tap, `mlx_take_axis` with an
    /// int32 index array and `mlx_multiply` by a float32 weight array shaped to broadcast
    /// along its axis. Linear (`!a.separable`): the corners (last axis varying fastest) are
    /// gathered along every axis and `sum(w_last * ... * w_first * corner)` is accumulated
    /// with `mlx_add` in order. Cubic: one pass per axis, innermost first, each
    /// `sum(take * w [/ divisor])`. With `a.extrapolation`, `mlx_where(inside, y, value)`.
    ResizeInterp {
        /// Input (float32).
        x: Slot,
        /// Resize parameters.
        spec: InterpSpec,
        /// Output (float32).
        out: Slot,
    },
    /// ONNX `Col2Im` of a float32 `x` `[N, C*K, L]` with `g = spec.resolve(host)`:
    /// `mlx_reshape` to `[N, C, K*L]`, `mlx_pad` of one trailing zero, then for each kernel
    /// offset `mlx_take_axis` of `g.sources[k]` (int32) summed in order with `mlx_add`, and
    /// `mlx_reshape` to `[N, C, *image]`.
    Col2Im {
        /// Input (float32).
        x: Slot,
        /// Shapes and attributes.
        spec: Col2ImSpec,
        /// Output (float32).
        out: Slot,
    },
    /// ONNX `NonZero`: reads `x` on the host ([`HostReader::floats`]) and creates the int64
    /// array `[rank, count]` of `nonzero_coords(x.shape, values != 0)` (data-dependent shape).
    NonZero {
        /// Input.
        x: Slot,
        /// Output (int64).
        out: Slot,
    },
    /// ONNX `HannWindow` / `HammingWindow` / `BlackmanWindow` of a size read on the host: an
    /// array made from `cosine_window(kind, size.get(host)[0], periodic, dtype)`.
    Window {
        /// Which window.
        kind: WindowKind,
        /// The window length.
        size: ShapeSource,
        /// Periodic (`N` in the denominator) or symmetric (`N - 1`).
        periodic: bool,
        /// Output dtype.
        dtype: DataType,
        /// Output.
        out: Slot,
    },
    /// ONNX `DFT` of a float32 `x` (`[..., 1 | 2]`) with `a = spec.resolve(x.shape, host)`:
    /// complex input `mlx_view(contiguous(x), complex64)` squeezed, real input squeezed and
    /// `mlx_astype(.., complex64)`; then `mlx_fft_fft` / `mlx_fft_ifft` / `mlx_fft_irfft` of
    /// length `a.n` along `a.axis`; one-sided forward output sliced to `a.keep` bins
    /// (`mlx_slice`); complex results `mlx_view(.., float32)` of the expanded last dim (real
    /// results expanded): float32 `[..., 2 | 1]`.
    Dft {
        /// Input.
        x: Slot,
        /// Parameters.
        spec: DftSpec,
        /// Output.
        out: Slot,
    },
    /// `out = mlx_linalg_det(x)` on the CPU stream (MLX's linear algebra runs on the CPU only);
    /// `x` is float32 `[..., n, n]`.
    Det {
        /// Square matrices.
        x: Slot,
        /// Determinants.
        out: Slot,
    },
    /// ONNX `Unique`, on the host: reads `x` (`HostReader::ints` for integer and bool types,
    /// `floats` for floats), computes `unique(dtype, x.shape, values, axis, sorted)` and makes
    /// arrays of its four results for `outs` (Y, indices, inverse_indices, counts).
    Unique {
        /// Input.
        x: Slot,
        /// Its dtype (Y's).
        dtype: DataType,
        /// Slices along this axis, or the flattened elements.
        axis: Option<usize>,
        /// Sorted ascending, or in order of first occurrence.
        sorted: bool,
        /// The four outputs.
        outs: Vec<Slot>,
    },
    /// ONNX `RoiAlign` over float32 X `[N, C, H, W]`: host reads of `rois` and `batch_indices`,
    /// [`RoiAlignSpec::samples`] gives gather rows and weights; on the device X becomes
    /// `[N*H*W, C]` (`mlx_transpose_axes`, `mlx_reshape`), `mlx_take_axis` of the rows,
    /// `mlx_multiply` by the weights, `mlx_where` for padding, `mlx_sum_axes` / `mlx_divide`
    /// (avg) or `mlx_max_axes` (max), back to `[R, C, output_height, output_width]`.
    RoiAlign {
        /// Input X, float32 `[N, C, H, W]`.
        x: Slot,
        /// Rois, float32 `[R, 4]` (read on the host).
        rois: Slot,
        /// Batch indices, int64 `[R]` (read on the host).
        batch_indices: Slot,
        /// The attributes.
        spec: RoiAlignSpec,
        /// Output.
        out: Slot,
    },
    /// ONNX `NonMaxSuppression`, on the host: reads every input (`HostReader::floats`, `ints`
    /// for `max_output`) and makes an int64 array `[num_selected, 3]` of
    /// `non_max_suppression(..)` (ONNX Runtime's CPU kernel; data-dependent shape).
    NonMaxSuppression {
        /// Boxes, float32 `[B, N, 4]`.
        boxes: Slot,
        /// Scores, float32 `[B, C, N]`.
        scores: Slot,
        /// `max_output_boxes_per_class` (int64), absent: no boxes.
        max_output: Option<Slot>,
        /// `iou_threshold` (float32), absent: 0.
        iou_threshold: Option<Slot>,
        /// `score_threshold` (float32), absent: no score filter.
        score_threshold: Option<Slot>,
        /// Boxes are `[x_center, y_center, width, height]` (else `[y1, x1, y2, x2]`).
        center_point_box: bool,
        /// Output (int64).
        out: Slot,
    },
    /// ONNX RNN / GRU / LSTM (layout 0) over float32 arrays, the time loop run by the runtime
    /// over `x`'s dim 0 (known only at run time). Per direction `d`: `mlx_matmul(x, W[d]^T)`
    /// plus the biases outside the recurrence once for all steps; then per step `mlx_slice` of
    /// that projection, `mlx_matmul` of the state by `R[d]^T` (the slices of it), `mlx_add` /
    /// `mlx_multiply` / `mlx_subtract`, clip as `mlx_maximum` / `mlx_minimum`, the activations of
    /// `spec` (ORT's formulas), and with `lens` an `mlx_where` by the mask `t < lens[b]` that
    /// keeps the previous state and writes zeros to Y. Y is `mlx_stack`ed over time and
    /// `mlx_concatenate`d over directions; an empty sequence (`lens[b] = 0`, or a zero-length
    /// `x`) ends with zero states. Outputs: Y `[T, D, B, H]`, Y_h `[D, B, H]`, Y_c `[D, B, H]`.
    Recurrent {
        /// The layer's static attributes.
        spec: RecurrentSpec,
        /// X `[T, B, I]`.
        x: Slot,
        /// W `[D, G*H, I]`.
        w: Slot,
        /// R `[D, G*H, H]`.
        r: Slot,
        /// B `[D, 2*G*H]`.
        b: Option<Slot>,
        /// sequence_lens (int32 `[B]`).
        lens: Option<Slot>,
        /// initial_h `[D, B, H]`.
        h0: Option<Slot>,
        /// initial_c `[D, B, H]` (LSTM).
        c0: Option<Slot>,
        /// Peepholes `[D, 3*H]` (LSTM, order i, o, f).
        p: Option<Slot>,
        /// Y, Y_h, Y_c (each when wanted).
        outs: [Option<Slot>; 3],
    },
    /// A run-time requirement on values (ORT's kernels check them; MLX doesn't): the run fails
    /// with `node '<node>' (<op>): <what>` unless every element of `ok` (bool) is true. `out`
    /// is `all(ok)` (bool scalar); the runtime folds it into the run's status, evaluated with
    /// the outputs, so the check costs no extra synchronisation.
    Require {
        /// The condition (bool, any shape; empty is true).
        ok: Slot,
        /// What is wrong when it fails.
        what: String,
        /// `all(ok)`.
        out: Slot,
    },
    /// Integer shape arithmetic on the host during the trace (no MLX call, no device read):
    /// `crate::host::eval_host_node(node, args)`, bound to `out` as a host value and as an
    /// array. Exported decoders compute reshape targets and slice bounds from `Shape` of
    /// activations whose dims the planner can't know; MLX knows every array's shape while
    /// building the graph, so the whole chain runs here.
    HostEval {
        /// The ONNX node (a host-program op, or `Shape`).
        node: Box<crate::host::HostNode>,
        /// Where each input's host value comes from.
        args: Vec<crate::host::HostArg>,
        /// The result.
        out: Slot,
    },
}

/// Cumulative split points (for `mlx_split_sections`) of a dim of size `dim` into `parts`
/// parts of the given `sizes` (or equal parts, ceil-sized, when `sizes` is `None`).
pub fn split_points(dim: i64, parts: usize, sizes: Option<&[i64]>) -> Result<Vec<i32>, String> {
    if parts == 0 || dim < 0 {
        return Err(format!("cannot split {dim} into {parts} parts"));
    }
    let sizes: Vec<i64> = match sizes {
        Some(s) => {
            if s.len() != parts {
                return Err(format!("Split has {} sizes for {parts} outputs", s.len()));
            }
            let total = s.iter().try_fold(
                0i64,
                |acc, &v| if v < 0 { None } else { acc.checked_add(v) },
            );
            if total != Some(dim) {
                return Err(format!("Split sizes {s:?} do not sum to {dim}"));
            }
            s.to_vec()
        }
        None => {
            let chunk = dim
                .checked_add(parts as i64 - 1)
                .ok_or_else(|| format!("cannot split {dim} into {parts} parts"))?
                / parts as i64;
            let mut v = vec![chunk; parts];
            let last = dim - chunk * (parts as i64 - 1);
            if last < 0 {
                return Err(format!("cannot split {dim} into {parts} parts"));
            }
            v[parts - 1] = last;
            v
        }
    };
    let mut acc = 0;
    let mut pts = Vec::with_capacity(parts.saturating_sub(1));
    for s in &sizes[..sizes.len().saturating_sub(1)] {
        acc += s;
        pts.push(to_i32(acc, "split point")?);
    }
    Ok(pts)
}

impl Step {
    /// Applies `f` to every slot this step reads (the ones [`Step::inputs`] lists), in place.
    pub fn map_inputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        use Step::*;
        fn src(s: &mut ShapeSource, f: &mut dyn FnMut(&mut Slot)) {
            if let ShapeSource::Dynamic(x) = s {
                f(x);
            }
        }
        fn fsrc(s: &mut FloatSource, f: &mut dyn FnMut(&mut Slot)) {
            if let FloatSource::Dynamic(x) = s {
                f(x);
            }
        }
        match self {
            Unary { x, .. }
            | AsType { x, .. }
            | Transpose { x, .. }
            | Softmax { x, .. }
            | ArgReduce { x, .. }
            | Windows { x, .. }
            | PoolDivisor { x, .. }
            | Shape { x, .. }
            | CumSum { x, .. }
            | View { x, .. }
            | Triangle { x, .. } => f(x),
            Cumulative { x, axis, .. } => {
                f(x);
                src(axis, f);
            }
            Binary { a, b, .. } | MatMul { a, b, .. } => {
                f(a);
                f(b);
            }
            Where { cond, x, y, .. } => {
                f(cond);
                f(x);
                f(y);
            }
            Addmm { c, a, b, .. } => {
                f(c);
                f(a);
                f(b);
            }
            Attention { q, k, v, mask, .. } => {
                f(q);
                f(k);
                f(v);
                if let Some(m) = mask {
                    f(m);
                }
            }
            Reshape { x, target, .. } => {
                f(x);
                match target {
                    ReshapeTarget::Onnx { shape, .. } => src(shape, f),
                    ReshapeTarget::Squeeze { axes: Some(a) } => src(a, f),
                    ReshapeTarget::Unsqueeze { axes } => src(axes, f),
                    ReshapeTarget::Like(s) => f(s),
                    _ => {}
                }
            }
            Expand { x, shape, .. } => {
                f(x);
                src(shape, f);
            }
            Concat { inputs, .. } => inputs.iter_mut().for_each(f),
            Slice { x, spec, .. } => {
                f(x);
                src(&mut spec.starts, f);
                src(&mut spec.ends, f);
                if let Some(a) = &mut spec.axes {
                    src(a, f);
                }
                if let Some(st) = &mut spec.steps {
                    src(st, f);
                }
            }
            Take { x, indices, .. } | TakeAlongAxis { x, indices, .. } => {
                f(x);
                f(indices);
            }
            LayerNorm {
                x, weight, bias, ..
            } => {
                f(x);
                if let Some(w) = weight {
                    f(w);
                }
                if let Some(b) = bias {
                    f(b);
                }
            }
            RmsNorm { x, weight, .. } => {
                f(x);
                if let Some(w) = weight {
                    f(w);
                }
            }
            Reduce { x, axes, .. } => {
                f(x);
                if let ReduceAxes::Dynamic { axes, .. } = axes {
                    f(axes);
                }
            }
            Conv { x, w, .. } => {
                f(x);
                f(w);
            }
            Pad { x, pads, value, .. } => {
                f(x);
                f(value);
                if let PadSpec::Onnx { pads, axes } = pads {
                    src(pads, f);
                    if let Some(a) = axes {
                        src(a, f);
                    }
                }
            }
            ResizeNearest { x, spec, .. } => {
                f(x);
                if let Some(s) = &mut spec.scales {
                    fsrc(s, f);
                }
                if let Some(s) = &mut spec.sizes {
                    src(s, f);
                }
            }
            Full { shape, value, .. } => {
                src(shape, f);
                f(value);
            }
            Arange {
                start,
                limit,
                delta,
                ..
            } => {
                fsrc(start, f);
                fsrc(limit, f);
                fsrc(delta, f);
            }
            Split { x, sizes, .. } => {
                f(x);
                if let Some(s) = sizes {
                    src(s, f);
                }
            }
            Tile { x, reps, .. } => {
                f(x);
                src(reps, f);
            }
            QuantizedMatmul {
                x,
                w,
                scales,
                biases,
                ..
            } => {
                f(x);
                f(w);
                f(scales);
                f(biases);
            }
            KvCache {
                past,
                new,
                seqlens,
                total,
                ..
            } => {
                if let Some(p) = past {
                    f(p);
                }
                f(new);
                f(seqlens);
                src(total, f);
            }
            GqaMask {
                seqlens,
                total,
                like,
                past,
                bias,
                ..
            } => {
                f(seqlens);
                src(total, f);
                f(like);
                if let Some(p) = past {
                    f(p);
                }
                if let Some(b) = bias {
                    f(b);
                }
            }
            GqaPositions {
                seqlens,
                total,
                like,
                past,
                position_ids,
                ..
            } => {
                f(seqlens);
                src(total, f);
                f(like);
                if let Some(p) = past {
                    f(p);
                }
                if let Some(p) = position_ids {
                    f(p);
                }
            }
            Iota { like, .. } => f(like),
            ConvTranspose { x, w, .. } => {
                f(x);
                f(w);
            }
            ArgSort { x, .. } | NonZero { x, .. } => f(x),
            Require { ok, .. } => f(ok),
            HostEval { args, .. } => args.iter_mut().filter_map(|a| a.slot_mut()).for_each(f),
            Scatter {
                x,
                indices,
                updates,
                ..
            } => {
                f(x);
                indices.iter_mut().for_each(&mut *f);
                f(updates);
            }
            Gather { x, indices, .. } => {
                f(x);
                indices.iter_mut().for_each(f);
            }
            ResizeInterp { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Col2Im { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Window { size, .. } => src(size, f),
            Dft { x, spec, .. } => {
                f(x);
                spec.map_slots(f);
            }
            Det { x, .. } | Unique { x, .. } => f(x),
            RoiAlign {
                x,
                rois,
                batch_indices,
                ..
            } => {
                f(x);
                f(rois);
                f(batch_indices);
            }
            NonMaxSuppression {
                boxes,
                scores,
                max_output,
                iou_threshold,
                score_threshold,
                ..
            } => {
                f(boxes);
                f(scores);
                [max_output, iou_threshold, score_threshold]
                    .into_iter()
                    .flatten()
                    .for_each(f);
            }
            Recurrent {
                x,
                w,
                r,
                b,
                lens,
                h0,
                c0,
                p,
                ..
            } => {
                for s in [x, w, r] {
                    f(s);
                }
                for s in [b, lens, h0, c0, p].into_iter().flatten() {
                    f(s);
                }
            }
            AttentionEx {
                q,
                k,
                v,
                mask,
                sinks,
                ..
            } => {
                f(q);
                f(k);
                f(v);
                if let Some(m) = mask {
                    f(m);
                }
                if let Some(s) = sinks {
                    f(s);
                }
            }
        }
    }

    /// Applies `f` to every slot this step writes, in place.
    pub fn map_outputs(&mut self, f: &mut dyn FnMut(&mut Slot)) {
        use Step::*;
        match self {
            Split { outs, .. } => outs.iter_mut().for_each(f),
            Unary { out, .. }
            | Binary { out, .. }
            | Where { out, .. }
            | AsType { out, .. }
            | MatMul { out, .. }
            | Addmm { out, .. }
            | Attention { out, .. }
            | Reshape { out, .. }
            | Transpose { out, .. }
            | Expand { out, .. }
            | Concat { out, .. }
            | Slice { out, .. }
            | Take { out, .. }
            | TakeAlongAxis { out, .. }
            | Softmax { out, .. }
            | LayerNorm { out, .. }
            | RmsNorm { out, .. }
            | Reduce { out, .. }
            | ArgReduce { out, .. }
            | Conv { out, .. }
            | Pad { out, .. }
            | Windows { out, .. }
            | PoolDivisor { out, .. }
            | ResizeNearest { out, .. }
            | Shape { out, .. }
            | Full { out, .. }
            | Arange { out, .. }
            | CumSum { out, .. }
            | Cumulative { out, .. }
            | View { out, .. }
            | Triangle { out, .. }
            | Tile { out, .. }
            | QuantizedMatmul { out, .. }
            | KvCache { out, .. }
            | GqaMask { out, .. }
            | GqaPositions { out, .. }
            | Iota { out, .. }
            | AttentionEx { out, .. }
            | ConvTranspose { out, .. }
            | ArgSort { out, .. }
            | Scatter { out, .. }
            | Gather { out, .. }
            | ResizeInterp { out, .. }
            | Col2Im { out, .. }
            | Require { out, .. }
            | HostEval { out, .. }
            | NonZero { out, .. }
            | Window { out, .. }
            | Dft { out, .. }
            | Det { out, .. }
            | RoiAlign { out, .. }
            | NonMaxSuppression { out, .. } => f(out),
            Unique { outs, .. } => outs.iter_mut().for_each(f),
            Recurrent { outs, .. } => outs.iter_mut().flatten().for_each(f),
        }
    }

    /// Slots whose arrays this step reads (including host reads and shape-only reads).
    pub fn inputs(&self) -> Vec<Slot> {
        use Step::*;
        let mut v = match self {
            Unary { x, .. }
            | AsType { x, .. }
            | Reshape { x, .. }
            | Transpose { x, .. }
            | Expand { x, .. }
            | Slice { x, .. }
            | Softmax { x, .. }
            | Reduce { x, .. }
            | ArgReduce { x, .. }
            | Windows { x, .. }
            | PoolDivisor { x, .. }
            | ResizeNearest { x, .. }
            | Shape { x, .. }
            | Split { x, .. }
            | CumSum { x, .. }
            | Cumulative { x, .. }
            | View { x, .. }
            | Triangle { x, .. }
            | Tile { x, .. } => vec![*x],
            Binary { a, b, .. } | MatMul { a, b, .. } => vec![*a, *b],
            Where { cond, x, y, .. } => vec![*cond, *x, *y],
            Addmm { c, a, b, .. } => vec![*c, *a, *b],
            Attention { q, k, v, mask, .. } => {
                let mut s = vec![*q, *k, *v];
                s.extend(mask.iter());
                s
            }
            Concat { inputs, .. } => inputs.clone(),
            Take { x, indices, .. } | TakeAlongAxis { x, indices, .. } => vec![*x, *indices],
            LayerNorm {
                x, weight, bias, ..
            } => {
                let mut v = vec![*x];
                v.extend(weight.iter().chain(bias.iter()));
                v
            }
            RmsNorm { x, weight, .. } => {
                let mut v = vec![*x];
                v.extend(weight.iter());
                v
            }
            Conv { x, w, .. } => vec![*x, *w],
            Pad { x, value, .. } => vec![*x, *value],
            Full { value, .. } => vec![*value],
            Arange { .. } => vec![],
            QuantizedMatmul {
                x,
                w,
                scales,
                biases,
                ..
            } => vec![*x, *w, *scales, *biases],
            KvCache {
                past, new, seqlens, ..
            } => {
                let mut v: Vec<Slot> = past.iter().copied().collect();
                v.extend([*new, *seqlens]);
                v
            }
            GqaMask {
                seqlens,
                like,
                past,
                bias,
                ..
            } => {
                let mut v = vec![*seqlens, *like];
                v.extend(past.iter().chain(bias.iter()));
                v
            }
            GqaPositions {
                seqlens,
                like,
                past,
                position_ids,
                ..
            } => {
                let mut v = vec![*seqlens, *like];
                v.extend(past.iter().chain(position_ids.iter()));
                v
            }
            Iota { like, .. } => vec![*like],
            ConvTranspose { x, w, .. } => vec![*x, *w],
            ArgSort { x, .. }
            | ResizeInterp { x, .. }
            | Col2Im { x, .. }
            | NonZero { x, .. }
            | Det { x, .. }
            | Dft { x, .. }
            | Unique { x, .. } => vec![*x],
            NonMaxSuppression { .. } => self.nms_inputs(),
            // rois and batch_indices come with the host reads below.
            RoiAlign { x, .. } => vec![*x],
            Window { .. } => vec![],
            Recurrent {
                x,
                w,
                r,
                b,
                lens,
                h0,
                c0,
                p,
                ..
            } => {
                let mut v = vec![*x, *w, *r];
                v.extend([b, lens, h0, c0, p].into_iter().flatten());
                v
            }
            Require { ok, .. } => vec![*ok],
            HostEval { args, .. } => args.iter().filter_map(|a| a.slot()).collect(),
            Scatter {
                x,
                indices,
                updates,
                ..
            } => {
                let mut v = vec![*x];
                v.extend(indices.iter().copied());
                v.push(*updates);
                v
            }
            Gather { x, indices, .. } => {
                let mut v = vec![*x];
                v.extend(indices.iter().copied());
                v
            }
            AttentionEx {
                q,
                k,
                v,
                mask,
                sinks,
                ..
            } => {
                let mut s = vec![*q, *k, *v];
                s.extend(mask.iter().chain(sinks.iter()));
                s
            }
        };
        if let Reshape {
            target: ReshapeTarget::Like(s),
            ..
        } = self
        {
            v.push(*s);
        }
        v.extend(self.host_reads());
        v
    }

    /// Slots this step writes.
    pub fn outputs(&self) -> Vec<Slot> {
        use Step::*;
        match self {
            Split { outs, .. } => outs.clone(),
            Unary { out, .. }
            | Binary { out, .. }
            | Where { out, .. }
            | AsType { out, .. }
            | MatMul { out, .. }
            | Addmm { out, .. }
            | Attention { out, .. }
            | Reshape { out, .. }
            | Transpose { out, .. }
            | Expand { out, .. }
            | Concat { out, .. }
            | Slice { out, .. }
            | Take { out, .. }
            | TakeAlongAxis { out, .. }
            | Softmax { out, .. }
            | LayerNorm { out, .. }
            | RmsNorm { out, .. }
            | Reduce { out, .. }
            | ArgReduce { out, .. }
            | Conv { out, .. }
            | Pad { out, .. }
            | Windows { out, .. }
            | PoolDivisor { out, .. }
            | ResizeNearest { out, .. }
            | Shape { out, .. }
            | Full { out, .. }
            | Arange { out, .. }
            | CumSum { out, .. }
            | Cumulative { out, .. }
            | View { out, .. }
            | Triangle { out, .. }
            | Tile { out, .. }
            | QuantizedMatmul { out, .. }
            | KvCache { out, .. }
            | GqaMask { out, .. }
            | GqaPositions { out, .. }
            | Iota { out, .. }
            | AttentionEx { out, .. }
            | ConvTranspose { out, .. }
            | ArgSort { out, .. }
            | Scatter { out, .. }
            | Gather { out, .. }
            | ResizeInterp { out, .. }
            | Col2Im { out, .. }
            | Require { out, .. }
            | HostEval { out, .. }
            | NonZero { out, .. }
            | Window { out, .. }
            | Dft { out, .. }
            | Det { out, .. }
            | RoiAlign { out, .. }
            | NonMaxSuppression { out, .. } => vec![*out],
            Unique { outs, .. } => outs.clone(),
            Recurrent { outs, .. } => outs.iter().flatten().copied().collect(),
        }
    }

    /// Slots whose values this step reads back to the host at run time (each forces an
    /// evaluation, so a plan with any cannot be compiled as one closure).
    pub fn host_reads(&self) -> Vec<Slot> {
        use Step::*;
        match self {
            Reshape { target, .. } => target.host_reads(),
            Expand { shape, .. } | Full { shape, .. } => shape.dynamic_slot().into_iter().collect(),
            Slice { spec, .. } => spec.host_reads(),
            Reduce {
                axes: ReduceAxes::Dynamic { axes, .. },
                ..
            } => vec![*axes],
            Pad { pads, .. } => pads.host_reads(),
            ResizeNearest { spec, .. } => spec.host_reads(),
            Arange {
                start,
                limit,
                delta,
                ..
            } => [start, limit, delta]
                .into_iter()
                .filter_map(FloatSource::dynamic_slot)
                .collect(),
            Split { sizes, .. } => sizes
                .as_ref()
                .and_then(ShapeSource::dynamic_slot)
                .into_iter()
                .collect(),
            Tile { reps, .. } => reps.dynamic_slot().into_iter().collect(),
            HostEval { args, .. } => args
                .iter()
                .filter_map(|a| match a {
                    crate::host::HostArg::Value(s) => Some(*s),
                    _ => None,
                })
                .collect(),
            Cumulative { axis, .. } => axis.dynamic_slot().into_iter().collect(),
            KvCache { seqlens, total, .. } | GqaMask { seqlens, total, .. } => {
                let mut v = vec![*seqlens];
                v.extend(total.dynamic_slot());
                v
            }
            GqaPositions {
                seqlens,
                total,
                position_ids,
                ..
            } => {
                let mut v = vec![*seqlens];
                v.extend(total.dynamic_slot());
                v.extend(position_ids.iter());
                v
            }
            ResizeInterp { spec, .. } => spec.host_reads(),
            Col2Im { spec, .. } => spec.host_reads(),
            NonZero { x, .. } | Unique { x, .. } => vec![*x],
            NonMaxSuppression { .. } => self.nms_inputs(),
            RoiAlign {
                rois,
                batch_indices,
                ..
            } => vec![*rois, *batch_indices],
            Window { size, .. } => size.dynamic_slot().into_iter().collect(),
            Dft { spec, .. } => spec.host_reads(),
            _ => Vec::new(),
        }
    }

    /// The inputs of a `NonMaxSuppression` step (all read on the host); empty for others.
    fn nms_inputs(&self) -> Vec<Slot> {
        match self {
            Step::NonMaxSuppression {
                boxes,
                scores,
                max_output,
                iou_threshold,
                score_threshold,
                ..
            } => [
                Some(*boxes),
                Some(*scores),
                *max_output,
                *iou_threshold,
                *score_threshold,
            ]
            .into_iter()
            .flatten()
            .collect(),
            _ => Vec::new(),
        }
    }

    /// True when the step's MLX calls depend on input shapes only through MLX itself, so a
    /// shapeless compiled closure stays valid when input shapes change.
    pub fn is_shapeless(&self) -> bool {
        use Step::*;
        match self {
            Unary { .. }
            | Binary { .. }
            | Where { .. }
            | AsType { .. }
            | MatMul { .. }
            | Addmm { .. }
            | Attention { .. }
            | Transpose { .. }
            | Concat { .. }
            | Take { .. }
            | TakeAlongAxis { .. }
            | Softmax { .. }
            | LayerNorm { .. }
            | RmsNorm { .. }
            | CumSum { .. }
            | View { .. }
            | Triangle { .. }
            | ArgReduce { .. }
            | QuantizedMatmul { .. }
            | ArgSort { .. }
            | Require { .. }
            | Scatter { .. } => true,
            ConvTranspose { spec, .. } => spec.is_shapeless(),
            AttentionEx { causal, mask, .. } => !(*causal && mask.is_some()),
            Reduce { axes, .. } => !matches!(axes, ReduceAxes::Dynamic { .. }),
            Cumulative { axis, .. } => matches!(axis, ShapeSource::Static(_)),
            Reshape {
                target: ReshapeTarget::Fixed(_),
                ..
            } => true,
            Pad {
                pads: PadSpec::Static { .. },
                mode: PadMode::Constant | PadMode::Edge,
                ..
            } => true,
            Conv { spec, .. } => matches!(spec.padding, AutoPad::Explicit { .. }),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHost;
    impl HostReader for NoHost {
        fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String> {
            Err(format!("unexpected host read of {slot:?}"))
        }
        fn floats(&mut self, slot: Slot) -> Result<Vec<f64>, String> {
            Err(format!("unexpected host read of {slot:?}"))
        }
    }

    #[test]
    fn reflect_and_wrap_pad_gather_like_numpy() {
        // np.pad([0, 1, 2, 3], (2, 3), mode="reflect") / mode="wrap"
        assert_eq!(
            PadMode::Reflect.source_indices(4, 2, 3).unwrap(),
            vec![2, 1, 0, 1, 2, 3, 2, 1, 0]
        );
        assert_eq!(
            PadMode::Wrap.source_indices(4, 2, 4).unwrap(),
            vec![2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
        );
        // Wrap pads wider than the axis repeat it, as ORT's CPU EP does.
        assert_eq!(
            PadMode::Wrap.source_indices(3, 4, 0).unwrap(),
            vec![2, 0, 1, 2, 0, 1, 2]
        );
        assert_eq!(PadMode::Reflect.source_indices(1, 0, 0).unwrap(), vec![0]);
        for (mode, n, lo, hi) in [
            (PadMode::Reflect, 4, 4, 0),
            (PadMode::Reflect, 1, 0, 1),
            (PadMode::Wrap, 0, 0, 1),
            (PadMode::Wrap, 3, -1, 0),
            (PadMode::Constant, 3, 1, 1),
        ] {
            assert!(
                mode.source_indices(n, lo, hi).is_err(),
                "{mode:?} {n} {lo} {hi}"
            );
        }
    }

    #[test]
    fn reshape_zero_minus_one_allowzero() {
        assert_eq!(
            reshape_target(&[2, 3, 4], &[0, -1], false).unwrap(),
            vec![2, 12]
        );
        assert_eq!(reshape_target(&[2, 3, 4], &[-1], false).unwrap(), vec![24]);
        assert_eq!(
            reshape_target(&[2, 3, 4], &[4, 0, 2], false).unwrap(),
            vec![4, 3, 2]
        );
        assert_eq!(reshape_target(&[0, 3], &[0, 3], true).unwrap(), vec![0, 3]);
        assert_eq!(reshape_target(&[0, 3], &[3, 0], true).unwrap(), vec![3, 0]);
        assert!(reshape_target(&[2, 3], &[-1, -1], false).is_err());
        assert!(reshape_target(&[2, 3], &[0, -1], true).is_err());
        assert!(reshape_target(&[2, 3], &[5, -1], false).is_err());
        assert!(reshape_target(&[2, 3], &[-2, 3], false).is_err());
        // Element count mismatch is caught by resolve.
        let t = ReshapeTarget::Onnx {
            shape: ShapeSource::Static(vec![7]),
            allowzero: false,
        };
        assert!(t.resolve(&[2, 3], None, &mut NoHost).is_err());
    }

    #[test]
    fn reshape_reads_dynamic_shape() {
        struct H;
        impl HostReader for H {
            fn ints(&mut self, slot: Slot) -> Result<Vec<i64>, String> {
                assert_eq!(slot, Slot(5));
                Ok(vec![0, -1])
            }
            fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
                unreachable!()
            }
        }
        let t = ReshapeTarget::Onnx {
            shape: ShapeSource::Dynamic(Slot(5)),
            allowzero: false,
        };
        assert_eq!(t.resolve(&[2, 3, 4], None, &mut H).unwrap(), vec![2, 12]);
        assert_eq!(t.host_reads(), vec![Slot(5)]);
    }

    #[test]
    fn flatten_squeeze_unsqueeze() {
        assert_eq!(flatten_shape(&[2, 3, 4], 1).unwrap(), vec![2, 12]);
        assert_eq!(flatten_shape(&[2, 3, 4], 0).unwrap(), vec![1, 24]);
        assert_eq!(flatten_shape(&[2, 3, 4], 3).unwrap(), vec![24, 1]);
        assert_eq!(flatten_shape(&[2, 3, 4], -1).unwrap(), vec![6, 4]);
        assert!(flatten_shape(&[2, 3, 4], 4).is_err());
        assert_eq!(squeeze_shape(&[1, 3, 1], None).unwrap(), vec![3]);
        assert_eq!(squeeze_shape(&[1, 3, 1], Some(&[-1])).unwrap(), vec![1, 3]);
        assert!(squeeze_shape(&[1, 3, 1], Some(&[1])).is_err());
        assert_eq!(unsqueeze_shape(&[3, 4], &[0, 3]).unwrap(), vec![1, 3, 4, 1]);
        assert_eq!(unsqueeze_shape(&[3, 4], &[-1]).unwrap(), vec![3, 4, 1]);
        assert_eq!(unsqueeze_shape(&[], &[0]).unwrap(), vec![1]);
        assert!(unsqueeze_shape(&[3], &[0, 0]).is_err());
    }

    #[test]
    fn broadcasting() {
        assert_eq!(
            broadcast_shapes(&[2, 1, 4], &[3, 1]).unwrap(),
            vec![2, 3, 4]
        );
        assert_eq!(broadcast_shapes(&[], &[5]).unwrap(), vec![5]);
        assert_eq!(broadcast_shapes(&[0, 1], &[1, 3]).unwrap(), vec![0, 3]);
        assert!(broadcast_shapes(&[2], &[3]).is_err());
        assert_eq!(expand_shape(&[3, 1], &[2, 1, 6]).unwrap(), vec![2, 3, 6]);
        assert_eq!(expand_shape(&[3, 4], &[1]).unwrap(), vec![3, 4]);
        assert!(expand_shape(&[3], &[-1]).is_err());
    }

    fn sl(
        shape: &[i64],
        s: &[i64],
        e: &[i64],
        a: Option<&[i64]>,
        st: Option<&[i64]>,
    ) -> SliceBounds {
        slice_bounds(shape, s, e, a, st).unwrap()
    }

    /// What numpy would produce for one axis, to check MLX-convention outputs against.
    fn mlx_len(n: i64, start: i32, stop: i32, stride: i32) -> i64 {
        // Mirror of MLX's documented normalisation (negative stop += n; clamp).
        let (s, mut e) = (start as i64, stop as i64);
        if e < 0 {
            e += n;
        }
        let str = stride as i64;
        if str < 0 {
            let st = s.min(n - 1);
            let ed = if e > -1 { e } else { -1 };
            let ed = ed.min(st);
            (st - ed + (-str) - 1) / (-str)
        } else {
            let st = s.clamp(0, n);
            let ed = e.clamp(0, n).max(st);
            (ed - st + str - 1) / str
        }
    }

    #[test]
    fn slice_clamps_and_negative_steps() {
        let b = sl(&[10], &[2], &[i64::MAX], None, None);
        assert_eq!(
            (b.start.clone(), b.stop.clone(), b.out_shape.clone()),
            (vec![2], vec![10], vec![8])
        );
        let b = sl(&[10], &[-3], &[-1], None, None);
        assert_eq!(
            (b.start.clone(), b.stop.clone(), b.out_shape.clone()),
            (vec![7], vec![9], vec![2])
        );
        // Full reverse: start INT_MAX clamps to 9, end INT_MIN means before 0.
        let b = sl(&[10], &[i64::MAX], &[i64::MIN], None, Some(&[-1]));
        assert_eq!(b.out_shape, vec![10]);
        assert_eq!(b.start, vec![9]);
        assert_eq!(b.stop, vec![-11]);
        assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 10);
        // Reverse with step -2 from 8 down to (excluding) 1.
        let b = sl(&[10], &[8], &[1], None, Some(&[-2]));
        assert_eq!(b.out_shape, vec![4]); // 8, 6, 4, 2
        assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 4);
        // Empty slices.
        let b = sl(&[10], &[5], &[2], None, None);
        assert_eq!(b.out_shape, vec![0]);
        assert_eq!(mlx_len(10, b.start[0], b.stop[0], b.strides[0]), 0);
        let b = sl(&[10], &[2], &[5], None, Some(&[-1]));
        assert_eq!(b.out_shape, vec![0]);
        // Axes, negative axis, untouched axes keep the whole dim.
        let b = sl(&[4, 5, 6], &[1], &[3], Some(&[-2]), None);
        assert_eq!(b.out_shape, vec![4, 2, 6]);
        assert_eq!(b.start, vec![0, 1, 0]);
        assert_eq!(b.stop, vec![4, 3, 6]);
        // Step 3 with clamped end.
        let b = sl(&[10], &[1], &[100], None, Some(&[3]));
        assert_eq!(b.out_shape, vec![3]); // 1, 4, 7
        // Errors.
        assert!(slice_bounds(&[10], &[0], &[1], None, Some(&[0])).is_err());
        assert!(slice_bounds(&[10], &[0], &[1], Some(&[1]), None).is_err());
        assert!(slice_bounds(&[10], &[0, 1], &[1], None, None).is_err());
        // Cross-check against a brute-force reference for many cases.
        for n in 0..6i64 {
            for s in -8..8 {
                for e in -8..8 {
                    for st in [-3, -2, -1, 1, 2, 3] {
                        let b = sl(&[n], &[s], &[e], None, Some(&[st]));
                        let expect = reference_slice_len(n, s, e, st);
                        assert_eq!(b.out_shape[0], expect, "n={n} s={s} e={e} st={st}");
                        assert_eq!(
                            mlx_len(n, b.start[0], b.stop[0], b.strides[0]),
                            expect,
                            "mlx n={n} s={s} e={e} st={st}"
                        );
                    }
                }
            }
        }
    }

    /// ONNX reference: enumerate indices.
    fn reference_slice_len(n: i64, s: i64, e: i64, st: i64) -> i64 {
        let norm = |v: i64| if v < 0 { v + n } else { v };
        let (s, e) = if st > 0 {
            (norm(s).clamp(0, n), norm(e).clamp(0, n))
        } else {
            (norm(s).min(n - 1).max(0), norm(e).min(n - 1).max(-1))
        };
        if n == 0 {
            return 0;
        }
        let mut count = 0;
        let mut i = s;
        while (st > 0 && i < e) || (st < 0 && i > e) {
            count += 1;
            i += st;
        }
        count
    }

    #[test]
    fn reduce_axes_resolution() {
        struct H(Vec<i64>);
        impl HostReader for H {
            fn ints(&mut self, _: Slot) -> Result<Vec<i64>, String> {
                Ok(self.0.clone())
            }
            fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
                unreachable!()
            }
        }
        assert_eq!(
            ReduceAxes::All.resolve(3, &mut NoHost).unwrap(),
            Some(vec![0, 1, 2])
        );
        assert_eq!(
            ReduceAxes::Static(vec![-1, 0])
                .resolve(3, &mut NoHost)
                .unwrap(),
            Some(vec![0, 2])
        );
        let d = |noop| ReduceAxes::Dynamic {
            axes: Slot(1),
            noop_with_empty_axes: noop,
        };
        assert_eq!(d(true).resolve(2, &mut H(vec![])).unwrap(), None);
        assert_eq!(
            d(false).resolve(2, &mut H(vec![])).unwrap(),
            Some(vec![0, 1])
        );
        assert_eq!(
            d(false).resolve(2, &mut H(vec![-1])).unwrap(),
            Some(vec![1])
        );
        assert!(d(false).resolve(2, &mut H(vec![2])).is_err());
    }

    #[test]
    fn conv_same_padding() {
        // in 5, k 3, s 1: total 2 -> (1, 1).
        assert_eq!(same_pads(5, 3, 1, 1, true), (1, 1));
        // in 5, k 2, s 1: total 1 -> upper (0, 1), lower (1, 0).
        assert_eq!(same_pads(5, 2, 1, 1, true), (0, 1));
        assert_eq!(same_pads(5, 2, 1, 1, false), (1, 0));
        // in 7, k 3, s 2: out 4, total = 3*2+3-7 = 2.
        assert_eq!(same_pads(7, 3, 2, 1, true), (1, 1));
        // in 6, k 3, s 2: out 3, total = 2*2+3-6 = 1.
        assert_eq!(same_pads(6, 3, 2, 1, true), (0, 1));
        assert_eq!(same_pads(6, 3, 2, 1, false), (1, 0));
        // dilation 2: eff k 5, in 5, s 1: total 4.
        assert_eq!(same_pads(5, 3, 1, 2, true), (2, 2));
        let spec = ConvSpec {
            kernel: vec![3, 2],
            strides: vec![1, 1],
            dilations: vec![1, 1],
            padding: AutoPad::SameLower,
            groups: 1,
            exact_integers: false,
        };
        let a = spec.resolve(&[1, 5, 5, 8]).unwrap();
        assert_eq!(a.padding_lo, vec![1, 1]);
        assert_eq!(a.padding_hi, vec![1, 0]);
        assert!(spec.resolve(&[5, 5, 8]).is_err());
    }

    fn pool(k: i64, s: i64, lo: i64, hi: i64, ceil: bool, include: bool) -> PoolSpec {
        PoolSpec {
            kernel: vec![k],
            strides: vec![s],
            dilations: vec![1],
            padding: AutoPad::Explicit {
                lo: vec![lo],
                hi: vec![hi],
            },
            ceil_mode: ceil,
            count_include_pad: include,
        }
    }

    #[test]
    fn pool_geometry_and_divisors() {
        // in 5, k 2, s 2: floor -> 2, ceil -> 3 (tail 1).
        let g = pool(2, 2, 0, 0, false, false).geometry(&[5]).unwrap();
        assert_eq!((g.out, g.pad_hi), (vec![2], vec![0]));
        let p = pool(2, 2, 0, 0, true, false);
        let g = p.geometry(&[5]).unwrap();
        assert_eq!(
            (g.out.clone(), g.pad_hi.clone(), g.ceil_tail.clone()),
            (vec![3], vec![1], vec![1])
        );
        assert_eq!(
            p.divisor(&[1, 1, 5]).unwrap(),
            (vec![1, 1, 3], vec![2.0, 2.0, 1.0])
        );
        // The last window must start inside the input (+ left pad): in 4, k 2, s 2, pad 1/1,
        // ceil: span=4 -> ceil(4/2)+1 = 3; (3-1)*2 = 4 >= 4+1? no -> 3 windows.
        let g = pool(2, 2, 1, 1, true, true).geometry(&[4]).unwrap();
        assert_eq!(g.out, vec![3]);
        // in 3, k 2, s 2, pad 0/1 ceil: span = 2 -> 2 windows; (2-1)*2=2 >= 3? no.
        // count_include_pad: windows [0,1], [2,3(pad)] -> 2, 2.
        let p = pool(2, 2, 0, 1, true, true);
        assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 2.0]);
        let p = pool(2, 2, 0, 1, true, false);
        assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 1.0]);
        // Padding 1/1, k 3, s 1 over 3, exclude pad: [2, 3, 2].
        let p = pool(3, 1, 1, 1, false, false);
        assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![2.0, 3.0, 2.0]);
        let p = pool(3, 1, 1, 1, false, true);
        assert_eq!(p.divisor(&[1, 1, 3]).unwrap().1, vec![3.0, 3.0, 3.0]);
        // ceil-mode window dropped when it would start in the right padding.
        // in 4, k 2, s 3, pad 0/1: padded 5, span 3 -> ceil(3/3)+1 = 2; (2-1)*3=3 >= 4? no.
        assert_eq!(
            pool(2, 3, 0, 1, true, true).geometry(&[4]).unwrap().out,
            vec![2]
        );
        // in 3, k 1, s 2, pad 0/1: padded 4, span 3 -> ceil(3/2)+1=3; (3-1)*2=4 >= 3 -> 2.
        assert_eq!(
            pool(1, 2, 0, 1, true, true).geometry(&[3]).unwrap().out,
            vec![2]
        );
    }

    #[test]
    fn windows_as_strided() {
        let w = WindowSpec {
            kernel: vec![2, 2],
            strides: vec![2, 2],
            dilations: vec![1, 1],
        };
        let a = w.resolve(&[1, 3, 4, 6]).unwrap();
        assert_eq!(a.shape, vec![1, 3, 2, 3, 2, 2]);
        assert_eq!(a.strides, vec![72, 24, 12, 2, 6, 1]);
    }

    #[test]
    fn nearest_resize_indices() {
        use CoordinateTransform::*;
        use NearestMode::*;
        // 2x upsample, asymmetric/floor: 0 0 1 1 2 2.
        assert_eq!(
            nearest_indices(3, 6, 2.0, Asymmetric, Floor),
            vec![0, 0, 1, 1, 2, 2]
        );
        // half_pixel + round_prefer_floor, 2x: x = (o+0.5)/2-0.5 -> -0.25, 0.25, 0.75, 1.25...
        assert_eq!(
            nearest_indices(2, 4, 2.0, HalfPixel, RoundPreferFloor),
            vec![0, 0, 1, 1]
        );
        // downsample by 2, asymmetric: 0 2.
        assert_eq!(
            nearest_indices(4, 2, 0.5, Asymmetric, RoundPreferFloor),
            vec![0, 2]
        );
        // align_corners 3 -> 5: 0, 0.5, 1, 1.5, 2 -> prefer ceil: 0 1 1 2 2.
        assert_eq!(
            nearest_indices(3, 5, 5.0 / 3.0, AlignCorners, RoundPreferCeil),
            vec![0, 1, 1, 2, 2]
        );
    }

    #[test]
    fn split_and_shape_ranges() {
        assert_eq!(split_points(10, 3, None).unwrap(), vec![4, 8]);
        assert_eq!(split_points(9, 3, None).unwrap(), vec![3, 6]);
        assert_eq!(split_points(10, 2, Some(&[3, 7])).unwrap(), vec![3]);
        assert!(split_points(10, 2, Some(&[3, 6])).is_err());
        assert_eq!(shape_range(4, 0, None), 0..4);
        assert_eq!(shape_range(4, -1, None), 3..4);
        assert_eq!(shape_range(4, 1, Some(-1)), 1..3);
        assert_eq!(shape_range(4, 10, None), 4..4);
        assert_eq!(shape_range(4, 3, Some(1)), 3..3);
    }
}
