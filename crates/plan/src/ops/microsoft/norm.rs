//! RMS and layer normalisations of ORT's transformer fusions: `SimplifiedLayerNormalization`
//! (ONNX domain, as ORT registers it), `SkipLayerNormalization` and
//! `SkipSimplifiedLayerNormalization` (`com.microsoft`), with all their optional outputs.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, UnaryOp as U, normalize_axis};

/// Registers the normalisations.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "SimplifiedLayerNormalization", 1, MAX, claim_simplified, lower_simplified)
        .notes("ORT's RMS norm; `stash_type` 1 only; `inv_std_var` output supported");
    r.op(MS, "SkipLayerNormalization", 1, 1, claim_skip, lower_skip)
        .notes("all optional outputs (`mean`, `inv_std_var`, `input_skip_bias_sum`)");
    r.op(MS, "SkipSimplifiedLayerNormalization", 1, 1, claim_skip, lower_skip)
        .notes("all optional outputs (`mean` is zeros, as in ORT)");
}

fn claim_simplified(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, FLOATS)?;
    if attr_int(node, "stash_type").or_decline()?.unwrap_or(1) != 1 {
        decline!("SimplifiedLayerNormalization: stash_type other than 1 (float) is not claimed");
    }
    let axis = attr_int(node, "axis").or_decline()?.unwrap_or(-1);
    if axis != -1 || node.output(1).is_some() {
        let r = ctx.expect_rank(node, 0)?;
        normalize_axis(axis, r).or_decline()?;
    }
    Ok(())
}

fn reduce_mean(ctx: &mut LowerCtx, x: Slot, axes: &[i64], dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Mean,
        x,
        axes: ReduceAxes::Static(axes.to_vec()),
        keepdims: true,
        out,
    });
    out
}

/// `x * rsqrt(mean(x^2, axes) + eps)` in float32; returns (normalised, inv_std).
fn rms(
    ctx: &mut LowerCtx,
    xc: Slot,
    axes: &[i64],
    eps: f32,
    cdt: DataType,
) -> Result<(Slot, Slot), PlanError> {
    let x2 = ctx.unary(U::Square, xc, cdt);
    let ms = reduce_mean(ctx, x2, axes, cdt);
    let e = ctx.scalar(cdt, eps as f64)?;
    let mse = ctx.binary(B::Add, ms, e, cdt);
    let inv = ctx.unary(U::Rsqrt, mse, cdt);
    Ok((ctx.binary(B::Multiply, xc, inv, cdt), inv))
}

fn lower_simplified(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let eps = attr_float(node, "epsilon")
        .or_invalid(node)?
        .unwrap_or(1e-5);
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(-1);
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let rank = ctx.input_rank(node, 0);
    let last = axis == -1 || rank.is_some_and(|r| axis == r as i64 - 1);
    let vector_scale = ctx.input_rank(node, 1) == Some(1);
    if last && vector_scale && node.output(1).is_none() {
        let out = ctx.temp(dt);
        ctx.push(Step::RmsNorm {
            x,
            weight: Some(scale),
            eps,
            out,
        });
        return ctx.finish(node, 0, out, dt);
    }
    let axes: Vec<i64> = match rank {
        Some(r) => {
            let a = normalize_axis(axis, r).or_invalid(node)?;
            (a as i64..r as i64).collect()
        }
        None => vec![-1],
    };
    let cdt = compute_dtype(dt);
    let xc = ctx.cast(x, dt, cdt);
    let (y, inv) = rms(ctx, xc, &axes, eps, cdt)?;
    let sc = ctx.cast(scale, dt, cdt);
    let y = ctx.binary(B::Multiply, y, sc, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)?;
    ctx.finish(node, 1, inv, DataType::Float)
}

fn claim_skip(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let simplified = node.op_type == "SkipSimplifiedLayerNormalization";
    let n = if simplified { 4 } else { 5 };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    // gamma, beta and bias are vectors over the hidden size.
    for i in 2..n {
        if let Some(name) = node.input(i)
            && ctx.rank(name).is_some_and(|r| r != 1)
        {
            decline!("{}: input {i} must be 1-D", node.op_type);
        }
    }
    Ok(())
}

fn lower_skip(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let simplified = node.op_type == "SkipSimplifiedLayerNormalization";
    let dt = ctx.input_dtype(node, 0)?;
    let eps = attr_float(node, "epsilon")
        .or_invalid(node)?
        .unwrap_or(1e-12);
    let x = ctx.input(node, 0)?;
    let skip = ctx.input(node, 1)?;
    let gamma = ctx.input(node, 2)?;
    let (beta, bias) = if simplified {
        (None, ctx.opt_input(node, 3)?)
    } else {
        (ctx.opt_input(node, 3)?, ctx.opt_input(node, 4)?)
    };
    // input + skip (+ bias), in that order, as ORT adds them.
    let mut sum = ctx.binary(B::Add, x, skip, dt);
    if let Some(b) = bias {
        sum = ctx.binary(B::Add, sum, b, dt);
    }
    let stats = node.output(1).is_some() || node.output(2).is_some();
    let y = if !stats {
        let out = ctx.temp(dt);
        ctx.push(if simplified {
            Step::RmsNorm {
                x: sum,
                weight: Some(gamma),
                eps,
                out,
            }
        } else {
            Step::LayerNorm {
                x: sum,
                weight: Some(gamma),
                bias: beta,
                eps,
                out,
            }
        });
        out
    } else {
        let cdt = compute_dtype(dt);
        let sc = ctx.cast(sum, dt, cdt);
        let (y, mean, inv) = if simplified {
            let (y, inv) = rms(ctx, sc, &[-1], eps, cdt)?;
            // ORT leaves the mean of the simplified norm at zero.
            let zero = ctx.scalar(cdt, 0.0)?;
            let mean = ctx.binary(B::Multiply, inv, zero, cdt);
            (y, mean, inv)
        } else {
            let mean = reduce_mean(ctx, sc, &[-1], cdt);
            let d = ctx.binary(B::Subtract, sc, mean, cdt);
            let d2 = ctx.unary(U::Square, d, cdt);
            let var = reduce_mean(ctx, d2, &[-1], cdt);
            let e = ctx.scalar(cdt, eps as f64)?;
            let ve = ctx.binary(B::Add, var, e, cdt);
            let inv = ctx.unary(U::Rsqrt, ve, cdt);
            (ctx.binary(B::Multiply, d, inv, cdt), mean, inv)
        };
        let g = ctx.cast(gamma, dt, cdt);
        let mut y = ctx.binary(B::Multiply, y, g, cdt);
        if let Some(b) = beta {
            let bc = ctx.cast(b, dt, cdt);
            y = ctx.binary(B::Add, y, bc, cdt);
        }
        let mean = ctx.cast(mean, cdt, DataType::Float);
        let inv = ctx.cast(inv, cdt, DataType::Float);
        ctx.finish(node, 1, mean, DataType::Float)?;
        ctx.finish(node, 2, inv, DataType::Float)?;
        ctx.cast(y, cdt, dt)
    };
    ctx.finish(node, 0, y, dt)?;
    ctx.finish(node, 3, sum, dt)
}
