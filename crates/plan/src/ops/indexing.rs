//! Indexing: TopK, GatherND, ScatterND, ScatterElements, Scatter, OneHot, Compress, NonZero,
//! Unique, ReverseSequence, TensorScatter.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    BinaryOp as B, FloatSource, ReshapeTarget, ScatterOp, ShapeSource, SliceSpec, UnaryOp as U,
    normalize_axis,
};

/// Registers the indexing family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "TopK", 1, MAX, claim_topk, lower_topk);
    r.op("", "GatherND", 11, MAX, claim_gather_nd, lower_gather_nd);
    r.op("", "ScatterND", 11, MAX, claim_scatter_nd, lower_scatter_nd);
    r.op("", "ScatterElements", 11, MAX, claim_scatter_elements, lower_scatter_elements);
    r.op("", "Scatter", 9, 10, claim_scatter_elements, lower_scatter_elements);
    r.op("", "OneHot", 9, MAX, claim_one_hot, lower_one_hot);
    r.op("", "Compress", 9, MAX, claim_compress, lower_compress);
    r.op("", "NonZero", 9, MAX, claim_non_zero, lower_non_zero);
    r.op("", "Unique", 11, MAX, claim_unique, lower_unique);
    r.op("", "ReverseSequence", 10, MAX, claim_reverse_sequence, lower_reverse_sequence);
    r.op("", "TensorScatter", 24, MAX, claim_tensor_scatter, lower_tensor_scatter);
    r.kernel(NONZERO_KERNEL, nonzero_kernel);
    r.kernel(UNIQUE_KERNEL, unique_kernel);
}

const NONZERO_KERNEL: &str = "nonzero";
const UNIQUE_KERNEL: &str = "unique";

// ---------------------------------------------------------------------------------------------
// Emission helpers shared by the family.

impl LowerCtx<'_> {
    /// `mlx_reshape` to insert size-1 axes at `axes` (positions in the output).
    pub(crate) fn unsqueeze(&mut self, x: Slot, axes: Vec<i64>, dt: DataType) -> Slot {
        if axes.is_empty() {
            return x;
        }
        let out = self.temp(dt);
        self.push(Step::Reshape {
            x,
            target: ReshapeTarget::Unsqueeze {
                axes: ShapeSource::Static(axes),
            },
            out,
        });
        out
    }

    /// `mlx_reshape` removing the size-1 axes at `axes`.
    pub(crate) fn squeeze(&mut self, x: Slot, axes: Vec<i64>, dt: DataType) -> Slot {
        if axes.is_empty() {
            return x;
        }
        let out = self.temp(dt);
        self.push(Step::Reshape {
            x,
            target: ReshapeTarget::Squeeze {
                axes: Some(ShapeSource::Static(axes)),
            },
            out,
        });
        out
    }

    /// `x[..., j, ...]` along `axis` (an int64 scalar index; the axis is removed).
    pub(crate) fn pick(&mut self, x: Slot, j: i64, axis: i32, dt: DataType) -> Slot {
        let idx = self.constant(TensorData::from_i64(vec![], &[j]));
        let out = self.temp(dt);
        self.push(Step::Take {
            x,
            indices: idx,
            axis,
            out,
        });
        out
    }

    /// `[0, n)` along `axis` of `like` (int64), shaped to broadcast in a rank-`rank` array
    /// whose dim `at` it indexes.
    pub(crate) fn iota_along(&mut self, like: Slot, axis: i32, rank: usize, at: usize) -> Slot {
        let out = self.temp(DataType::Int64);
        self.push(Step::Iota {
            like,
            axis,
            dtype: DataType::Int64,
            out,
        });
        let axes: Vec<i64> = (0..rank as i64).filter(|&d| d != at as i64).collect();
        self.unsqueeze(out, axes, DataType::Int64)
    }

    /// The int64 scalar `x.shape[axis]` (no evaluation of `x`).
    pub(crate) fn dim_of(&mut self, x: Slot, axis: usize) -> Slot {
        let shape = self.temp(DataType::Int64);
        self.push(Step::Shape {
            x,
            start: 0,
            end: None,
            out: shape,
        });
        self.pick(shape, axis as i64, 0, DataType::Int64)
    }

    /// ONNX negative indices made non-negative: `idx + (idx < 0) * dim` (int64 `idx`).
    pub(crate) fn wrap_negative(&mut self, idx: Slot, dim: Slot) -> Result<Slot, PlanError> {
        let zero = self.scalar(DataType::Int64, 0.0)?;
        let neg = self.binary(B::Less, idx, zero, DataType::Int64);
        let shifted = self.binary(B::Add, idx, dim, DataType::Int64);
        let out = self.temp(DataType::Int64);
        self.push(Step::Where {
            cond: neg,
            x: shifted,
            y: idx,
            out,
        });
        Ok(out)
    }
}

fn axis_attr(node: &Node, default: i64) -> Result<i64, String> {
    Ok(attr_int(node, "axis")?.unwrap_or(default))
}

/// The last dim of input `i` when the input's shape is known up to it: `(rank, last dim)`.
fn last_dim(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<(usize, i64)> {
    let name = node.input(i)?;
    if let Some(t) = ctx.constant(name) {
        return Some((t.dims.len(), *t.dims.last()?));
    }
    let shape = ctx.graph.value(name)?.shape?;
    Some((shape.len(), shape.last()?.fixed()?))
}

fn lower_last_dim(ctx: &LowerCtx, node: &Node, i: usize) -> Option<(usize, i64)> {
    let shape = ctx.shape_of(node.input(i)?)?;
    Some((shape.len(), shape.last()?.fixed()?))
}

// ---------------------------------------------------------------------------------------------
// TopK.

fn claim_topk(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC)?;
    if ctx.opset >= 10 {
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    } else if attr_int(node, "k").or_decline()?.is_none() {
        decline!("TopK: the 'k' attribute is missing");
    }
    if ctx.opset >= 11 && attr_int(node, "sorted").or_decline()?.unwrap_or(1) == 0 {
        decline!(
            "TopK: sorted=0 is not claimed (ONNX Runtime's order for it is implementation-defined)"
        );
    }
    axis_attr(node, -1).or_decline()?;
    Ok(())
}

fn lower_topk(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = axis_attr(node, -1).or_invalid(node)?;
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let largest = ctx.opset() < 11 || attr_int(node, "largest").or_invalid(node)?.unwrap_or(1) != 0;
    let k = if ctx.opset() >= 10 {
        ctx.ints_input(node, 1)?
    } else {
        ShapeSource::Static(vec![attr_int(node, "k").or_invalid(node)?.unwrap_or(0)])
    };
    let x = ctx.input(node, 0)?;
    // ORT refuses k < 0 and k > the axis' dim; a slice would clamp instead.
    match &k {
        ShapeSource::Static(v) => {
            let dim = ctx.input_fixed_shape(node, 0).and_then(|s| {
                s.get(axis.rem_euclid(s.len().max(1) as i64) as usize)
                    .copied()
            });
            if v.len() != 1 || v[0] < 0 || dim.is_some_and(|d| v[0] > d) {
                invalid!(node, "TopK: k {v:?} is out of range for the axis ({dim:?})");
            }
        }
        ShapeSource::Dynamic(ks) => {
            let shape = ctx.temp(DataType::Int64);
            ctx.push(Step::Shape {
                x,
                start: 0,
                end: None,
                out: shape,
            });
            let dim = ctx.pick(shape, axis, 0, DataType::Int64);
            ctx.require_between(*ks, 0, Some(dim), "k must be in [0, the axis' dim]")?;
        }
    }
    // A stable ascending sort of a key that reverses the order (exactly: negation for floats,
    // bitwise not for integers) puts the largest first with ties in index order.
    let key = match (largest, dt.is_float()) {
        (false, _) => x,
        (true, true) => ctx.unary(U::Negative, x, dt),
        (true, false) => ctx.unary(U::BitwiseInvert, x, dt),
    };
    let order = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgSort {
        x: key,
        axis: axis as i32,
        out: order,
    });
    let top = ctx.temp(DataType::Uint32);
    ctx.push(Step::Slice {
        x: order,
        spec: SliceSpec {
            starts: ShapeSource::Static(vec![0]),
            ends: k,
            axes: Some(ShapeSource::Static(vec![axis])),
            steps: None,
        },
        out: top,
    });
    let values = ctx.temp(dt);
    ctx.push(Step::TakeAlongAxis {
        x,
        indices: top,
        axis: axis as i32,
        out: values,
    });
    let indices = ctx.cast(top, DataType::Uint32, DataType::Int64);
    ctx.finish(node, 0, values, dt)?;
    ctx.finish(node, 1, indices, DataType::Int64)
}

// ---------------------------------------------------------------------------------------------
// GatherND / ScatterND.

fn claim_gather_nd(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    let r = ctx.expect_rank(node, 0)?;
    let Some((q, k)) = last_dim(ctx, node, 1) else {
        decline!("GatherND: the indices' rank and last dim must be known");
    };
    let b = attr_int(node, "batch_dims").or_decline()?.unwrap_or(0);
    if b < 0 || b as usize >= q.min(r) {
        decline!("GatherND: batch_dims {b} is invalid for ranks {r} and {q}");
    }
    if k < 1 || b + k > r as i64 {
        decline!(
            "GatherND: indices' last dim {k} is not claimed for data rank {r}, batch_dims {b}"
        );
    }
    Ok(())
}

fn lower_gather_nd(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let Some((q, k)) = lower_last_dim(ctx, node, 1) else {
        invalid!(node, "the indices' last dim is unknown");
    };
    let b = attr_int(node, "batch_dims").or_invalid(node)?.unwrap_or(0) as usize;
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let mut idx = Vec::new();
    // Batch dims: their own positions, broadcast over the index grid `indices.shape[:-1]`.
    for d in 0..b {
        idx.push(ctx.iota_along(indices, d as i32, q - 1, d));
    }
    for j in 0..k {
        idx.push(ctx.pick(indices, j, (q - 1) as i32, DataType::Int64));
    }
    let n = b + k as usize;
    let g = ctx.temp(dt);
    ctx.push(Step::Gather {
        x,
        indices: idx,
        axes: (0..n as i32).collect(),
        out: g,
    });
    // `grid ++ [1] * n ++ rest` -> `grid ++ rest`.
    let unit: Vec<i64> = (q as i64 - 1..q as i64 - 1 + n as i64).collect();
    let out = ctx.squeeze(g, unit, dt);
    ctx.finish(node, 0, out, dt)
}

fn reduction(ctx: &ClaimCtx, node: &Node) -> Result<ScatterOp, Decline> {
    let r = if ctx.opset >= 16 {
        attr_str(node, "reduction")
            .or_decline()?
            .unwrap_or_else(|| "none".into())
    } else {
        "none".into()
    };
    let op = ScatterOp::from_onnx(&r)
        .ok_or_else(|| Decline::new(format!("{}: reduction '{r}' is invalid", node.op_type)))?;
    if matches!(op, ScatterOp::Max | ScatterOp::Min) && ctx.opset < 18 {
        decline!("{}: reduction '{r}' needs opset 18", node.op_type);
    }
    Ok(op)
}

fn lower_reduction(ctx: &LowerCtx, node: &Node) -> Result<ScatterOp, PlanError> {
    if ctx.opset() < 16 {
        return Ok(ScatterOp::Assign);
    }
    let r = attr_str(node, "reduction")
        .or_invalid(node)?
        .unwrap_or_else(|| "none".into());
    match ScatterOp::from_onnx(&r) {
        Some(op) => Ok(op),
        None => invalid!(node, "reduction '{r}' is invalid"),
    }
}

fn claim_scatter_common(ctx: &ClaimCtx, node: &Node) -> Result<DataType, Decline> {
    let op = reduction(ctx, node)?;
    let allowed = if op == ScatterOp::Assign {
        DATA
    } else {
        NUMERIC
    };
    let dt = ctx.expect_dtype(node, 0, allowed)?;
    ctx.expect_dtype(node, 1, INDEX)?;
    let ut = ctx.input_dtype(node, 2)?;
    if ut != dt {
        decline!("{}: updates are {ut} but data is {dt}", node.op_type);
    }
    Ok(dt)
}

fn claim_scatter_nd(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_scatter_common(ctx, node)?;
    let r = ctx.expect_rank(node, 0)?;
    let Some((_, k)) = last_dim(ctx, node, 1) else {
        decline!("ScatterND: the indices' rank and last dim must be known");
    };
    if k < 1 || k > r as i64 {
        decline!("ScatterND: indices' last dim {k} is not claimed for data rank {r}");
    }
    Ok(())
}

fn lower_scatter_nd(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let op = lower_reduction(ctx, node)?;
    let Some((q, k)) = lower_last_dim(ctx, node, 1) else {
        invalid!(node, "the indices' last dim is unknown");
    };
    let it = ctx.input_dtype(node, 1)?;
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let indices = ctx.cast(indices, it, DataType::Int64);
    let updates = ctx.input(node, 2)?;
    let mut idx = Vec::new();
    for j in 0..k {
        let i = ctx.pick(indices, j, (q - 1) as i32, DataType::Int64);
        let dim = ctx.dim_of(x, j as usize);
        idx.push(ctx.wrap_negative(i, dim)?);
    }
    // updates `grid ++ rest` -> `grid ++ [1] * k ++ rest`.
    let unit: Vec<i64> = (q as i64 - 1..q as i64 - 1 + k).collect();
    let updates = ctx.unsqueeze(updates, unit, dt);
    finish_scatter(ctx, node, op, x, idx, updates, dt)
}

/// Scatters `updates` into `x` at `indices` (one index array per leading axis of `x`) as output
/// 0 of `node`.
fn finish_scatter(
    ctx: &mut LowerCtx,
    node: &Node,
    op: ScatterOp,
    x: Slot,
    indices: Vec<Slot>,
    updates: Slot,
    dt: DataType,
) -> Result<(), PlanError> {
    let out = ctx.temp(dt);
    let axes = (0..indices.len() as i32).collect();
    ctx.push(Step::Scatter {
        op,
        x,
        indices,
        updates,
        axes,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_scatter_elements(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_scatter_common(ctx, node)?;
    let r = ctx.expect_rank(node, 0)?;
    if let Some(q) = ctx.rank(node.input(1).unwrap_or(""))
        && q != r
    {
        decline!(
            "{}: indices rank {q} differs from data rank {r}",
            node.op_type
        );
    }
    normalize_axis(axis_attr(node, 0).or_decline()?, r).or_decline()?;
    Ok(())
}

fn lower_scatter_elements(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let op = lower_reduction(ctx, node)?;
    let r = ctx.need_rank(node, 0)?;
    let axis = normalize_axis(axis_attr(node, 0).or_invalid(node)?, r).or_invalid(node)?;
    let it = ctx.input_dtype(node, 1)?;
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let indices = ctx.cast(indices, it, DataType::Int64);
    let updates = ctx.input(node, 2)?;
    // One index array per axis: the given indices along `axis`, positions elsewhere.
    let mut idx = Vec::with_capacity(r);
    for d in 0..r {
        if d == axis {
            let dim = ctx.dim_of(x, axis);
            idx.push(ctx.wrap_negative(indices, dim)?);
        } else {
            idx.push(ctx.iota_along(indices, d as i32, r, d));
        }
    }
    let updates = ctx.unsqueeze(updates, (r as i64..2 * r as i64).collect(), dt);
    finish_scatter(ctx, node, op, x, idx, updates, dt)
}

// ---------------------------------------------------------------------------------------------
// OneHot.

fn claim_one_hot(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC)?;
    ctx.expect_dtype(node, 1, NUMERIC)?;
    ctx.expect_dtype(node, 2, DATA)?;
    let axis = axis_attr(node, -1).or_decline()?;
    if axis != -1 {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(axis, r + 1).or_decline()?;
    }
    Ok(())
}

fn lower_one_hot(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let it = ctx.input_dtype(node, 0)?;
    let dept = ctx.input_dtype(node, 1)?;
    let vt = ctx.input_dtype(node, 2)?;
    let axis = axis_attr(node, -1).or_invalid(node)?;
    let (axis, trailing) = if axis == -1 {
        (-1, 0)
    } else {
        let r = ctx.need_rank(node, 0)?;
        let a = normalize_axis(axis, r + 1).or_invalid(node)?;
        (a as i64, (r - a) as i64)
    };
    // ORT compares the index values with the class numbers in the indices' own type (a float
    // index that is not a whole number matches no class), after adding `depth` to negative
    // ones; a float depth is truncated.
    let ct = if it.is_float() { it } else { DataType::Int64 };
    let depth0 = ctx.input(node, 1)?;
    let depth_int = ctx.cast(depth0, dept, DataType::Int64);
    // ORT refuses a depth below 1 ("Depth is negative").
    ctx.require_between(depth_int, 1, None, "depth must be at least 1")?;
    let depth_src = match ctx.const_input(node, 1).and_then(|t| t.to_f64_vec()) {
        Some(v) => FloatSource::Static(v.iter().map(|d| d.trunc()).collect()),
        None => FloatSource::Dynamic(depth_int),
    };
    let depth = ctx.cast(depth_int, DataType::Int64, ct);
    let depth = {
        let out = ctx.temp(ct);
        ctx.push(Step::Reshape {
            x: depth,
            target: ReshapeTarget::Fixed(vec![]),
            out,
        });
        out
    };
    let indices = ctx.input(node, 0)?;
    let indices = ctx.cast(indices, it, ct);
    let zero = ctx.scalar(ct, 0.0)?;
    let neg = ctx.binary(B::Less, indices, zero, ct);
    let shifted = ctx.binary(B::Add, indices, depth, ct);
    let idx = ctx.temp(ct);
    ctx.push(Step::Where {
        cond: neg,
        x: shifted,
        y: indices,
        out: idx,
    });
    let idx = ctx.unsqueeze(idx, vec![axis], ct);
    let classes = ctx.temp(ct);
    ctx.push(Step::Arange {
        start: FloatSource::Static(vec![0.0]),
        limit: depth_src,
        delta: FloatSource::Static(vec![1.0]),
        dtype: ct,
        out: classes,
    });
    let classes = ctx.unsqueeze(classes, (1..=trailing).collect(), ct);
    let hot = ctx.binary(B::Equal, idx, classes, ct);
    let values = ctx.input(node, 2)?;
    let off = ctx.pick(values, 0, 0, vt);
    let on = ctx.pick(values, 1, 0, vt);
    let out = ctx.temp(vt);
    ctx.push(Step::Where {
        cond: hot,
        x: on,
        y: off,
        out,
    });
    ctx.finish(node, 0, out, vt)
}

// ---------------------------------------------------------------------------------------------
// Compress, NonZero.

fn claim_compress(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Bool])?;
    if let Some(a) = attr_int(node, "axis").or_decline()? {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(a, r).or_decline()?;
    }
    Ok(())
}

fn lower_compress(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let cond = ctx.input(node, 1)?;
    let (data, axis) = match attr_int(node, "axis").or_invalid(node)? {
        Some(a) => {
            let r = ctx.need_rank(node, 0)?;
            (x, normalize_axis(a, r).or_invalid(node)?)
        }
        None => {
            let flat = ctx.temp(dt);
            ctx.push(Step::Reshape {
                x,
                target: ReshapeTarget::Onnx {
                    shape: ShapeSource::Static(vec![-1]),
                    allowzero: false,
                },
                out: flat,
            });
            (flat, 0)
        }
    };
    // Only the first min(len(condition), dim) entries count (as ORT does).
    let dim = ctx.dim_of(data, axis);
    let cond = {
        let out = ctx.temp(DataType::Bool);
        ctx.push(Step::Slice {
            x: cond,
            spec: SliceSpec {
                starts: ShapeSource::Static(vec![0]),
                ends: ShapeSource::Dynamic(dim),
                axes: None,
                steps: None,
            },
            out,
        });
        out
    };
    let coords = ctx.host_kernel(
        node,
        NONZERO_KERNEL,
        vec![HostArg::Value(cond)],
        KernelAttrs::new(),
        &[DataType::Int64],
    )?[0];
    let positions = ctx.squeeze(coords, vec![0], DataType::Int64);
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x: data,
        indices: positions,
        axis: axis as i32,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_non_zero(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA).map(|_| ())
}

fn lower_non_zero(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let x = ctx.input(node, 0)?;
    let out = ctx.host_kernel(
        node,
        NONZERO_KERNEL,
        vec![HostArg::Value(x)],
        KernelAttrs::new(),
        &[DataType::Int64],
    )?;
    ctx.finish(node, 0, out[0], DataType::Int64)
}

/// `NonZero`: the int64 `[rank, count]` coordinates of the non-zero elements of input 0 (any
/// dtype; `-0.0` is zero) ([`nonzero_coords`](crate::step::nonzero_coords)).
fn nonzero_kernel(
    inputs: &[Option<TensorData>],
    _attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let x = kernel::input(inputs, 0)?;
    let nonzero: Vec<bool> = if x.dtype.is_float() {
        kernel::f64s(x)?.iter().map(|v| *v != 0.0).collect()
    } else {
        let size = x.dtype.size_in_bytes().ok_or("NonZero of a packed type")?;
        x.bytes
            .chunks_exact(size)
            .map(|c| c.iter().any(|&b| b != 0))
            .collect()
    };
    let (dims, data) = crate::step::nonzero_coords(&x.dims, &nonzero)?;
    Ok(vec![TensorData::from_i64(dims, &data)])
}

fn claim_unique(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC)?;
    if let Some(a) = attr_int(node, "axis").or_decline()? {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(a, r).or_decline()?;
    }
    Ok(())
}

/// Computed on the host (data-dependent output shapes).
fn lower_unique(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = match attr_int(node, "axis").or_invalid(node)? {
        Some(a) => {
            let r = ctx.need_rank(node, 0)?;
            Some(normalize_axis(a, r).or_invalid(node)?)
        }
        None => None,
    };
    let sorted = attr_int(node, "sorted").or_invalid(node)?.unwrap_or(1) != 0;
    let x = ctx.input(node, 0)?;
    let mut attrs = KernelAttrs::new()
        .bool("sorted", sorted)
        .int("dtype", dt.to_onnx() as i64);
    if let Some(a) = axis {
        attrs = attrs.int("axis", a as i64);
    }
    let i64 = DataType::Int64;
    let outs = ctx.host_kernel(
        node,
        UNIQUE_KERNEL,
        vec![HostArg::Value(x)],
        attrs,
        &[dt, i64, i64, i64],
    )?;
    for (i, o) in outs.into_iter().enumerate() {
        let t = if i == 0 { dt } else { DataType::Int64 };
        ctx.finish(node, i, o, t)?;
    }
    Ok(())
}

/// `Unique` of input 0 (floats compared as `f64`, integers and bools as `i64`); attrs `dtype`
/// (Y's), `sorted` and an optional `axis`: Y, indices, inverse_indices, counts
/// ([`unique`](crate::step::unique)).
fn unique_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    use crate::step::HostValue;
    let x = kernel::input(inputs, 0)?;
    let values: Vec<HostValue> = if x.dtype.is_float() {
        kernel::f64s(x)?.into_iter().map(HostValue::Float).collect()
    } else {
        kernel::i64s(x)?.into_iter().map(HostValue::Int).collect()
    };
    let axis = match attrs.get_int("axis") {
        Ok(a) => Some(usize::try_from(a).map_err(|_| format!("Unique axis {a} is negative"))?),
        Err(_) => None,
    };
    let sorted = attrs.get_bool("sorted")?;
    let dtype = attrs.get_dtype("dtype")?;
    let r = crate::step::unique(dtype, &x.dims, &values, axis, sorted)?;
    Ok(vec![r.y, r.indices, r.inverse, r.counts])
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence.

fn sequence_axes(node: &Node) -> Result<(usize, usize), String> {
    let t = attr_int(node, "time_axis")?.unwrap_or(0);
    let b = attr_int(node, "batch_axis")?.unwrap_or(1);
    match (t, b) {
        (0, 1) => Ok((0, 1)),
        (1, 0) => Ok((1, 0)),
        _ => Err(format!(
            "ReverseSequence: time_axis {t} / batch_axis {b} must be 0 and 1"
        )),
    }
}

fn claim_reverse_sequence(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    let r = ctx.expect_rank(node, 0)?;
    if r < 2 {
        decline!("ReverseSequence: input rank {r} is below 2");
    }
    sequence_axes(node).or_decline()?;
    Ok(())
}

fn lower_reverse_sequence(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let r = ctx.need_rank(node, 0)?;
    let (time, batch) = sequence_axes(node).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let lens = ctx.input(node, 1)?;
    // ORT refuses lengths outside [0, T]; MLX would index out of range or pass them through.
    let steps = ctx.dim_of(x, time);
    ctx.require_between(
        lens,
        0,
        Some(steps),
        "sequence_lens must be in [0, the time axis' dim]",
    )?;
    // In the [T, B] (or [B, T]) plane: source time = len - 1 - t for t < len, else t.
    let t = ctx.iota_along(x, time as i32, 2, time);
    let lens = ctx.unsqueeze(lens, vec![time as i64], DataType::Int64);
    let one = ctx.scalar(DataType::Int64, 1.0)?;
    let inside = ctx.binary(B::Less, t, lens, DataType::Int64);
    let last = ctx.binary(B::Subtract, lens, one, DataType::Int64);
    let rev = ctx.binary(B::Subtract, last, t, DataType::Int64);
    let src = ctx.temp(DataType::Int64);
    ctx.push(Step::Where {
        cond: inside,
        x: rev,
        y: t,
        out: src,
    });
    let src = ctx.unsqueeze(src, (2..r as i64).collect(), DataType::Int64);
    let _ = batch;
    // Broadcast to the full index shape along every axis but `time`.
    let like = ctx.temp(DataType::Int64);
    ctx.push(Step::Shape {
        x,
        start: 0,
        end: None,
        out: like,
    });
    let full = ctx.temp(DataType::Int64);
    ctx.push(Step::Expand {
        x: src,
        shape: ShapeSource::Dynamic(like),
        out: full,
    });
    let out = ctx.temp(dt);
    ctx.push(Step::TakeAlongAxis {
        x,
        indices: full,
        axis: time as i32,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

// ---------------------------------------------------------------------------------------------
// TensorScatter.

fn tensor_scatter_attrs(node: &Node, rank: usize) -> Result<(usize, bool), String> {
    let axis = normalize_axis(axis_attr(node, -2)?, rank)?;
    if axis == 0 {
        return Err("TensorScatter: the sequence axis cannot be the batch axis".into());
    }
    let circular = match attr_str(node, "mode")?.as_deref() {
        None | Some("linear") => false,
        Some("circular") => true,
        Some(m) => return Err(format!("TensorScatter: mode '{m}' is invalid")),
    };
    Ok((axis, circular))
}

fn claim_tensor_scatter(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, DATA)?;
    if node.input(2).is_some() {
        ctx.expect_dtype(node, 2, &[DataType::Int64])?;
    }
    let r = ctx.expect_rank(node, 0)?;
    tensor_scatter_attrs(node, r).or_decline()?;
    Ok(())
}

/// `update` written into `past_cache` along `axis` from `write_indices[b]` (mod the cache
/// length in circular mode): one MLX scatter with a position array per axis.
fn lower_tensor_scatter(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let r = ctx.need_rank(node, 0)?;
    let (axis, circular) = tensor_scatter_attrs(node, r).or_invalid(node)?;
    let past = ctx.input(node, 0)?;
    let update = ctx.input(node, 1)?;
    let mut pos = ctx.iota_along(update, axis as i32, r, axis);
    if let Some(w) = ctx.opt_input(node, 2)? {
        let w = ctx.unsqueeze(w, (1..r as i64).collect(), DataType::Int64);
        pos = ctx.binary(B::Add, pos, w, DataType::Int64);
    }
    if circular {
        let len = ctx.dim_of(past, axis);
        pos = ctx.binary(B::Remainder, pos, len, DataType::Int64);
    }
    let mut idx = Vec::with_capacity(r);
    for d in 0..r {
        idx.push(if d == axis {
            pos
        } else {
            ctx.iota_along(update, d as i32, r, d)
        });
    }
    let updates = ctx.unsqueeze(update, (r as i64..2 * r as i64).collect(), dt);
    finish_scatter(ctx, node, ScatterOp::Assign, past, idx, updates, dt)
}
