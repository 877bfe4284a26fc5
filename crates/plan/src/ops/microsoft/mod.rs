//! ORT's contrib ops of the `com.microsoft` domain that transformer models use (and ORT's
//! `SimplifiedLayerNormalization`, which ORT registers in the ONNX domain). Each lowering
//! mirrors ORT's CPU kernel (1.31): what it cannot reproduce exactly is declined with a reason.

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::registry::ClaimCtx;
use crate::step::{ReshapeTarget, ShapeSource, SliceSpec};

pub mod attention;
pub mod bert;
pub mod fused_conv;
pub mod gelu;
pub mod matmul;
pub mod moe;
pub mod norm;
pub mod qbinary;
pub mod qgemm;
pub mod qlinear;
pub mod qpool;
pub mod qsoftmax;
pub mod quant;
pub mod rotary;
pub mod unet;

/// The `com.microsoft` domain.
pub(crate) const MS: &str = "com.microsoft";

/// Registers the family.
pub fn register(r: &mut Registry) {
    norm::register(r);
    gelu::register(r);
    rotary::register(r);
    attention::register(r);
    bert::register(r);
    matmul::register(r);
    unet::register(r);
    moe::register(r);
    quant::register(r);
    qlinear::register(r);
    fused_conv::register(r);
    qsoftmax::register(r);
    qpool::register(r);
    qgemm::register(r);
    qbinary::register(r);
}

/// The declared dims of a value (or a constant's).
pub(crate) fn dims_of(ctx: &ClaimCtx, name: &str) -> Option<Vec<Dim>> {
    if let Some(t) = ctx.constant(name) {
        return Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect());
    }
    ctx.graph.value(name).and_then(|v| v.shape)
}

/// The fixed last dim of input `i`, if declared.
pub(crate) fn last_dim(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<i64> {
    dims_of(ctx, node.input(i)?)?.last()?.fixed()
}

/// The fixed last dim of input `i` at lowering time.
pub(crate) fn lower_last_dim(ctx: &LowerCtx, node: &Node, i: usize) -> Option<i64> {
    ctx.shape_of(node.input(i)?)?.last()?.fixed()
}

/// Same size at run time for sure: equal fixed sizes or the same symbol.
pub(crate) fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) => x == y,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => x == y,
        _ => false,
    }
}

/// Declines when input `i` is present.
pub(crate) fn no_input(node: &Node, i: usize, what: &str) -> Result<(), Decline> {
    if node.input(i).is_some() {
        return Err(Decline::new(format!(
            "{}: the optional input {i} ({what}) is not supported",
            node.op_type
        )));
    }
    Ok(())
}

/// Emits `Reshape` into a new temporary.
pub(crate) fn reshape(ctx: &mut LowerCtx, x: Slot, target: ReshapeTarget, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape { x, target, out });
    out
}

/// Emits an ONNX-style static reshape (`0` copies, `-1` infers).
pub(crate) fn reshape_to(ctx: &mut LowerCtx, x: Slot, shape: &[i64], dt: DataType) -> Slot {
    reshape(
        ctx,
        x,
        ReshapeTarget::Onnx {
            shape: ShapeSource::Static(shape.to_vec()),
            allowzero: false,
        },
        dt,
    )
}

/// Inserts a size-1 axis.
pub(crate) fn unsqueeze(ctx: &mut LowerCtx, x: Slot, axis: i64, dt: DataType) -> Slot {
    reshape(
        ctx,
        x,
        ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(vec![axis]),
        },
        dt,
    )
}

/// Emits a transpose.
pub(crate) fn transpose(ctx: &mut LowerCtx, x: Slot, perm: &[i32], dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(perm.to_vec()),
        out,
    });
    out
}

/// `x[..., start:end:step]` on the last axis.
pub(crate) fn slice_last(
    ctx: &mut LowerCtx,
    x: Slot,
    start: i64,
    end: i64,
    step: i64,
    dt: DataType,
) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Slice {
        x,
        spec: SliceSpec {
            starts: ShapeSource::Static(vec![start]),
            ends: ShapeSource::Static(vec![end]),
            axes: Some(ShapeSource::Static(vec![-1])),
            steps: (step != 1).then(|| ShapeSource::Static(vec![step])),
        },
        out,
    });
    out
}

/// Concatenation into a new temporary.
pub(crate) fn concat(ctx: &mut LowerCtx, inputs: Vec<Slot>, axis: i32, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Concat { inputs, axis, out });
    out
}

/// `[B, S, H*D]` -> `[B, H, S, D]`.
pub(crate) fn to_heads(ctx: &mut LowerCtx, x: Slot, heads: i64, dt: DataType) -> Slot {
    let r = reshape_to(ctx, x, &[0, 0, heads, -1], dt);
    transpose(ctx, r, &[0, 2, 1, 3], dt)
}

/// `[B, H, S, D]` -> `[B, S, H*D]`.
pub(crate) fn from_heads(ctx: &mut LowerCtx, x: Slot, dt: DataType) -> Slot {
    let t = transpose(ctx, x, &[0, 2, 1, 3], dt);
    reshape_to(ctx, t, &[0, 0, -1], dt)
}

/// A gather of `x` by `indices` along `axis` into a new temporary of type `dt`.
pub(crate) fn take(ctx: &mut LowerCtx, x: Slot, indices: Slot, axis: i32, dt: DataType) -> Slot {
    ctx.emit(dt, |out| Step::Take {
        x,
        indices,
        axis,
        out,
    })
}
