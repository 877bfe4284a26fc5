//! Normalisations beyond `norm`: Hardmax, LpNormalization, MeanVarianceNormalization, LRN.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{
    ArgReduceOp, BinaryOp as B, PadMode, PadSpec, ReduceAxes, ReduceOp, ReshapeTarget,
    UnaryOp as U, WindowSpec, normalize_axes, normalize_axis,
};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Hardmax", 1, MAX, claim_hardmax, lower_hardmax);
    r.op("", "LpNormalization", 1, MAX, claim_lp_norm, lower_lp_norm);
    r.op("", "MeanVarianceNormalization", 9, MAX, claim_mvn, lower_mvn);
    r.op("", "LRN", 1, MAX, claim_lrn, lower_lrn);
}

// ---------------------------------------------------------------------------------------------
// Hardmax.

fn claim_hardmax(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let legacy = ctx.opset < 13;
    let axis = attr_int(node, "axis")
        .or_decline()?
        .unwrap_or(if legacy { 1 } else { -1 });
    if legacy || axis != -1 {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(axis, r).or_decline()?;
    }
    Ok(())
}

/// One-hot of the first maximum along `axis` of `x` (as `dt`).
fn one_hot_argmax(ctx: &mut LowerCtx, x: Slot, axis: i32, rank: usize, dt: DataType) -> Slot {
    let am = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgReduce {
        op: ArgReduceOp::ArgMax,
        x,
        axis,
        keepdims: true,
        out: am,
    });
    let am = ctx.cast(am, DataType::Uint32, DataType::Int64);
    let at = if axis < 0 {
        (rank as i32 + axis) as usize
    } else {
        axis as usize
    };
    let pos = ctx.iota_along(x, axis, rank, at);
    let hot = ctx.binary(B::Equal, pos, am, DataType::Int64);
    ctx.cast(hot, DataType::Bool, dt)
}

fn lower_hardmax(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let out = if ctx.opset() < 13 {
        // The input is coerced to 2-D at `axis`; the rows are the trailing dims jointly.
        let r = ctx.need_rank(node, 0)?;
        let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(1);
        let axis = normalize_axis(axis, r).or_invalid(node)? as i64;
        let flat = ctx.temp(dt);
        ctx.push(Step::Reshape {
            x,
            target: ReshapeTarget::Flatten { axis },
            out: flat,
        });
        let y = one_hot_argmax(ctx, flat, 1, 2, dt);
        let out = ctx.temp(dt);
        ctx.push(Step::Reshape {
            x: y,
            target: ReshapeTarget::Like(x),
            out,
        });
        out
    } else {
        let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(-1);
        match ctx.input_rank(node, 0) {
            Some(r) => {
                let a = normalize_axis(axis, r).or_invalid(node)?;
                one_hot_argmax(ctx, x, a as i32, r, dt)
            }
            None => {
                // axis == -1 with an unknown rank: the iota broadcasts along the last dim.
                let am = ctx.temp(DataType::Uint32);
                ctx.push(Step::ArgReduce {
                    op: ArgReduceOp::ArgMax,
                    x,
                    axis: -1,
                    keepdims: true,
                    out: am,
                });
                let am = ctx.cast(am, DataType::Uint32, DataType::Int64);
                let pos = ctx.temp(DataType::Int64);
                ctx.push(Step::Iota {
                    like: x,
                    axis: -1,
                    dtype: DataType::Int64,
                    out: pos,
                });
                let hot = ctx.binary(B::Equal, pos, am, DataType::Int64);
                ctx.cast(hot, DataType::Bool, dt)
            }
        }
    };
    ctx.finish(node, 0, out, dt)
}

// ---------------------------------------------------------------------------------------------
// LpNormalization.

fn claim_lp_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let p = attr_int(node, "p").or_decline()?.unwrap_or(2);
    if p != 1 && p != 2 {
        decline!("LpNormalization: p={p} is invalid (1 or 2)");
    }
    let axis = attr_int(node, "axis").or_decline()?.unwrap_or(-1);
    if axis != -1 {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(axis, r).or_decline()?;
    }
    Ok(())
}

/// `x / ||x||_p` along `axis` in float32, 0 where the norm is 0 (ONNX Runtime's rule).
fn lower_lp_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let p = attr_int(node, "p").or_invalid(node)?.unwrap_or(2);
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(-1);
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let summed = if p == 1 {
        ctx.unary(U::Abs, x, cdt)
    } else {
        ctx.unary(U::Square, x, cdt)
    };
    let s = ctx.temp(cdt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Sum,
        x: summed,
        axes: ReduceAxes::Static(vec![axis]),
        keepdims: true,
        out: s,
    });
    let norm = if p == 2 {
        ctx.unary(U::Sqrt, s, cdt)
    } else {
        s
    };
    let zero = ctx.scalar(cdt, 0.0)?;
    let is_zero = ctx.binary(B::Equal, norm, zero, cdt);
    let q = ctx.binary(B::Divide, x, norm, cdt);
    let y = ctx.temp(cdt);
    ctx.push(Step::Where {
        cond: is_zero,
        x: zero,
        y: q,
        out: y,
    });
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// MeanVarianceNormalization.

fn mvn_axes(node: &Node, rank: usize) -> Result<Vec<i64>, String> {
    let axes = attr_ints(node, "axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let mut a: Vec<i64> = normalize_axes(&axes, rank)?
        .into_iter()
        .map(|v| v as i64)
        .collect();
    a.sort_unstable();
    Ok(a)
}

fn claim_mvn(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let r = ctx.expect_rank(node, 0)?;
    mvn_axes(node, r).or_decline()?;
    Ok(())
}

/// ORT's two-pass form in float32: `d = x - mean(x)`, `y = d / sqrt(mean(d^2))` (no epsilon).
fn lower_mvn(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let r = ctx.need_rank(node, 0)?;
    let axes = mvn_axes(node, r).or_invalid(node)?;
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let mean = |ctx: &mut LowerCtx, v: Slot| {
        let out = ctx.temp(cdt);
        ctx.push(Step::Reduce {
            op: ReduceOp::Mean,
            x: v,
            axes: ReduceAxes::Static(axes.clone()),
            keepdims: true,
            out,
        });
        out
    };
    let m = mean(ctx, x);
    let d = ctx.binary(B::Subtract, x, m, cdt);
    let d2 = ctx.unary(U::Square, d, cdt);
    let var = mean(ctx, d2);
    let sd = ctx.unary(U::Sqrt, var, cdt);
    let y = ctx.binary(B::Divide, d, sd, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// LRN.

fn lrn_size(node: &Node) -> Result<i64, String> {
    match attr_int(node, "size")? {
        Some(s) if s >= 1 => Ok(s),
        Some(s) => Err(format!("LRN: size {s} is invalid")),
        None => Err("LRN: the 'size' attribute is missing".into()),
    }
}

fn claim_lrn(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    lrn_size(node).or_decline()?;
    let r = ctx.expect_rank(node, 0)?;
    if r < 3 {
        decline!("LRN: input rank {r} is below 3");
    }
    Ok(())
}

/// `y = x * (bias + alpha / size * sum(x^2 over the channel window))^-beta` in float32 (ORT's
/// form), the window `[c - floor((size-1)/2), c + ceil((size-1)/2)]` zero-padded.
fn lower_lrn(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let r = ctx.need_rank(node, 0)?;
    let size = lrn_size(node).or_invalid(node)?;
    let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(1e-4);
    let beta = attr_float(node, "beta").or_invalid(node)?.unwrap_or(0.75);
    let bias = attr_float(node, "bias").or_invalid(node)?.unwrap_or(1.0);
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let sq = ctx.unary(U::Square, x, cdt);
    let pre = (size - 1) / 2;
    let post = size - 1 - pre;
    let zero = ctx.scalar(cdt, 0.0)?;
    let padded = ctx.temp(cdt);
    ctx.push(Step::Pad {
        x: sq,
        pads: PadSpec::Static {
            axes: vec![1],
            lo: vec![pre as i32],
            hi: vec![post as i32],
        },
        mode: PadMode::Constant,
        value: zero,
        out: padded,
    });
    // Windows over [C, *spatial]: `size` channels by one element of each spatial dim.
    let d = r - 1;
    let mut kernel = vec![1i64; d];
    kernel[0] = size;
    let windows = ctx.temp(cdt);
    ctx.push(Step::Windows {
        x: padded,
        spec: WindowSpec {
            kernel,
            strides: vec![1; d],
            dilations: vec![1; d],
        },
        out: windows,
    });
    let sum = ctx.temp(cdt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Sum,
        x: windows,
        axes: ReduceAxes::Static((r as i64..(r + d) as i64).collect()),
        keepdims: false,
        out: sum,
    });
    let aos = ctx.scalar(cdt, (alpha / size as f32) as f64)?;
    let b = ctx.scalar(cdt, bias as f64)?;
    let scaled = ctx.binary(B::Multiply, sum, aos, cdt);
    let scale = ctx.binary(B::Add, scaled, b, cdt);
    let nb = ctx.scalar(cdt, -(beta as f64))?;
    let p = ctx.binary(B::Power, scale, nb, cdt);
    let y = ctx.binary(B::Multiply, x, p, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}
