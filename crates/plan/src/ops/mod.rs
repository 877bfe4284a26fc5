//! Op families. Each module registers its ops with one line per (op, opset range):
//! `r.op(domain, op_type, since, until, claim, lower)`.

use onnx_ir::{Attribute, DataType, Node};

use crate::plan::{LowerCtx, PlanError};
use crate::registry::{Decline, Registry};
use crate::step::{BinaryOp, Slot, Step, UnaryOp};

pub mod bits;
pub mod col2im;
pub mod control;
pub mod conv_transpose;
pub mod deform_conv;
pub mod detection;
pub mod einsum;
pub mod elementwise;
pub mod float64;
pub mod generators;
pub mod grid_sample;
pub mod indexing;
pub mod integer;
pub mod layout;
pub mod linalg;
pub mod loss;
pub mod matmul;
pub mod microsoft;
pub mod ml;
pub mod nn;
pub mod norm;
pub mod normalize;
pub mod pool_more;
pub mod quantize;
pub mod random;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub(crate) mod sdpa;
pub mod sequence;
pub mod shape;
pub mod signal;
pub mod text;
pub mod transformer;

/// The newest opset every open-ended registration covers.
pub(crate) const MAX: i64 = crate::registry::MAX_KNOWN_OPSET;

/// Registers every op family.
pub fn register_all(r: &mut Registry) {
    elementwise::register(r);
    shape::register(r);
    matmul::register(r);
    reduce::register(r);
    norm::register(r);
    quantize::register(r);
    bits::register(r);
    nn::register(r);
    conv_transpose::register(r);
    deform_conv::register(r);
    col2im::register(r);
    detection::register(r);
    indexing::register(r);
    integer::register(r);
    layout::register(r);
    normalize::register(r);
    generators::register(r);
    random::register(r);
    resize::register(r);
    einsum::register(r);
    pool_more::register(r);
    linalg::register(r);
    loss::register(r);
    grid_sample::register(r);
    signal::register(r);
    text::register(r);
    transformer::register(r);
    microsoft::register(r);
    ml::register(r);
    recurrent::register(r);
    control::register(r);
    sequence::register(r);
}

/// Every type MLX stores exactly: the floats, the signed then the unsigned integers, and bool,
/// in that order, so that the narrower lists below are slices of it.
pub(crate) const DATA: &[DataType] = &[
    DataType::Float,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
    DataType::Bool,
];
/// DataType::Float types MLX computes on every device.
pub(crate) const FLOATS: &[DataType] = DATA.split_at(3).0;
/// Numeric types: floats and all integers.
pub(crate) const NUMERIC: &[DataType] = DATA.split_at(11).0;
/// Floats and signed integers.
pub(crate) const SIGNED_NUMERIC: &[DataType] = DATA.split_at(7).0;
/// Signed and unsigned integers.
pub(crate) const INTEGERS: &[DataType] = NUMERIC.split_at(3).1;
/// Integer types for indices.
pub(crate) const INDEX: &[DataType] = &[DataType::Int32, DataType::Int64];

// ---------------------------------------------------------------------------------------------
// Attribute access.

/// The attribute `name` of `node` when it is of ONNX kind `expected`: `pick` returns the value
/// of that kind and `None` for any other, which is an error naming both kinds.
fn typed_attr<'a, T>(
    node: &'a Node,
    name: &str,
    expected: &str,
    pick: impl FnOnce(&'a Attribute) -> Option<T>,
) -> Result<Option<T>, String> {
    let Some(a) = node.attributes.get(name) else {
        return Ok(None);
    };
    pick(a).map(Some).ok_or_else(|| {
        format!(
            "{}: attribute '{name}' is {}, expected {expected}",
            node.op_type,
            a.kind()
        )
    })
}

/// An `INT` attribute.
pub(crate) fn attr_int(node: &Node, name: &str) -> Result<Option<i64>, String> {
    typed_attr(node, name, "INT", |a| match a {
        Attribute::Int(v) => Some(*v),
        _ => None,
    })
}

/// A `FLOAT` attribute.
pub(crate) fn attr_float(node: &Node, name: &str) -> Result<Option<f32>, String> {
    typed_attr(node, name, "FLOAT", |a| match a {
        Attribute::Float(v) => Some(*v),
        _ => None,
    })
}

/// A `FLOATS` attribute.
pub(crate) fn attr_floats(node: &Node, name: &str) -> Result<Option<Vec<f32>>, String> {
    typed_attr(node, name, "FLOATS", |a| match a {
        Attribute::Floats(v) => Some(v.clone()),
        _ => None,
    })
}

/// A `STRINGS` attribute (lossily decoded as UTF-8).
pub(crate) fn attr_strings(node: &Node, name: &str) -> Result<Option<Vec<String>>, String> {
    typed_attr(node, name, "STRINGS", |a| match a {
        Attribute::Strings(v) => Some(v.iter().map(|s| utf8_lossy(s)).collect()),
        _ => None,
    })
}

/// An `INTS` attribute.
pub(crate) fn attr_ints(node: &Node, name: &str) -> Result<Option<Vec<i64>>, String> {
    typed_attr(node, name, "INTS", |a| match a {
        Attribute::Ints(v) => Some(v.clone()),
        _ => None,
    })
}

/// A `STRING` attribute as UTF-8.
pub(crate) fn attr_str(node: &Node, name: &str) -> Result<Option<String>, String> {
    typed_attr(node, name, "STRING", |a| match a {
        Attribute::String(v) => Some(utf8_lossy(v)),
        _ => None,
    })
}

/// A `STRING` attribute's raw bytes.
pub(crate) fn attr_bytes(node: &Node, name: &str) -> Result<Option<Vec<u8>>, String> {
    typed_attr(node, name, "STRING", |a| match a {
        Attribute::String(v) => Some(v.clone()),
        _ => None,
    })
}

/// A `STRINGS` attribute's raw bytes, one entry per string.
pub(crate) fn attr_bytes_list(node: &Node, name: &str) -> Result<Option<Vec<Vec<u8>>>, String> {
    typed_attr(node, name, "STRINGS", |a| match a {
        Attribute::Strings(v) => Some(v.clone()),
        _ => None,
    })
}

/// Bytes as UTF-8, invalid sequences replaced.
fn utf8_lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Turns `Result<T, String>` into a decline or a plan error.
pub(crate) trait OrFail<T> {
    /// As a [`Decline`].
    fn or_decline(self) -> Result<T, Decline>;
    /// As [`PlanError::Invalid`] for `node`.
    fn or_invalid(self, node: &Node) -> Result<T, PlanError>;
}

impl<T> OrFail<T> for Result<T, String> {
    fn or_decline(self) -> Result<T, Decline> {
        self.map_err(Decline::new)
    }
    fn or_invalid(self, node: &Node) -> Result<T, PlanError> {
        self.map_err(|reason| PlanError::Invalid {
            node: node.name.clone(),
            reason,
        })
    }
}

/// Declines when output `i` is requested (an optional output the lowering does not produce).
pub(crate) fn no_output(node: &Node, i: usize, what: &str) -> Result<(), Decline> {
    if node.output(i).is_some() {
        return Err(Decline::new(format!(
            "{}: the optional output {i} ({what}) is not supported",
            node.op_type
        )));
    }
    Ok(())
}

/// Declines unless every listed input has the same dtype as input 0, in `allowed`.
pub(crate) fn same_dtypes(
    ctx: &crate::ClaimCtx,
    node: &Node,
    inputs: std::ops::Range<usize>,
    allowed: &[DataType],
) -> Result<DataType, Decline> {
    let first = ctx.expect_dtype(node, inputs.start, allowed)?;
    for i in inputs.skip(1) {
        if node.input(i).is_none() {
            continue;
        }
        let dt = ctx.input_dtype(node, i)?;
        if dt != first {
            return Err(Decline::new(format!(
                "{}: input {i} is {dt} but input 0 is {first}",
                node.op_type
            )));
        }
    }
    Ok(first)
}

// ---------------------------------------------------------------------------------------------
// Emission helpers.

impl LowerCtx<'_> {
    /// Emits `mlx_<op>(x)` into a new temporary.
    pub(crate) fn unary(&mut self, op: UnaryOp, x: Slot, dtype: DataType) -> Slot {
        let out = self.temp(dtype);
        self.push(Step::Unary { op, x, out });
        out
    }

    /// `0..like.shape[axis]` as int64 (`like` is read for its shape only).
    pub(crate) fn iota(&mut self, like: Slot, axis: i32) -> Slot {
        self.iota_as(like, axis, DataType::Int64)
    }

    /// `0..like.shape[axis]` as `dtype` (`like` is read for its shape only).
    pub(crate) fn iota_as(&mut self, like: Slot, axis: i32, dtype: DataType) -> Slot {
        let out = self.temp(dtype);
        self.push(Step::Iota {
            like,
            axis,
            dtype,
            out,
        });
        out
    }

    /// `x.shape` as an int64 vector (no evaluation of `x`).
    pub(crate) fn shape_vec(&mut self, x: Slot) -> Slot {
        let out = self.temp(DataType::Int64);
        self.push(Step::Shape {
            x,
            start: 0,
            end: None,
            out,
        });
        out
    }

    /// `x.shape[axis]` as a one-element int64 array (no evaluation of `x`).
    pub(crate) fn dim_1d(&mut self, x: Slot, axis: i64) -> Slot {
        let out = self.temp(DataType::Int64);
        self.push(Step::Shape {
            x,
            start: axis,
            end: Some(axis + 1),
            out,
        });
        out
    }

    /// Emits `mlx_<op>(a, b)` into a new temporary.
    pub(crate) fn binary(&mut self, op: BinaryOp, a: Slot, b: Slot, dtype: DataType) -> Slot {
        let out = self.temp(if op.returns_bool() {
            DataType::Bool
        } else {
            dtype
        });
        self.push(Step::Binary { op, a, b, out });
        out
    }

    /// A constant int32 tensor of `dims` (index tables computed at plan time).
    pub(crate) fn const_i32(&mut self, dims: Vec<i64>, values: &[i32]) -> Slot {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(onnx_ir::TensorData {
            dtype: DataType::Int32,
            dims,
            bytes: bytes.into(),
        })
    }

    /// A constant float32 tensor of `dims` (weight tables computed at plan time).
    pub(crate) fn const_f32(&mut self, dims: Vec<i64>, values: &[f32]) -> Slot {
        self.constant(onnx_ir::TensorData::from_f32(dims, values))
    }

    /// Emits `mlx_astype` unless `x` already has `dtype`.
    pub(crate) fn cast(&mut self, x: Slot, from: DataType, to: DataType) -> Slot {
        if from == to {
            return x;
        }
        let out = self.temp(to);
        self.push(Step::AsType { x, dtype: to, out });
        out
    }
}

/// For composites computed in float32 on half inputs: the compute dtype.
pub(crate) fn compute_dtype(dt: DataType) -> DataType {
    match dt {
        DataType::Float16 | DataType::BFloat16 => DataType::Float,
        d => d,
    }
}
