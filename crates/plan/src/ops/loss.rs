//! Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, lowered directly (rather
//! than through their ONNX function bodies).
//!
//! Input `[N, C, d1, ...]`, target `[N, d1, ...]` of class indices. The per-element loss is
//! `-input[n, target[n, d], d] * weight[target[n, d]]` (weight 1 without the weight input),
//! 0 where `target == ignore_index`. `sum` adds the elements; `mean` divides that sum by the
//! sum of the weights of the non-ignored targets (their count without weights), as ORT does:
//! all targets ignored is `0 / 0`, NaN.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource, UnaryOp as U};

/// Registers the loss family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "NegativeLogLikelihoodLoss", 12, MAX, claim_loss, lower_nll);
    r.op("", "SoftmaxCrossEntropyLoss", 12, MAX, claim_loss, lower_sce);
}

/// The `reduction` attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

fn reduction(node: &Node) -> Result<Reduction, String> {
    match attr_str(node, "reduction")?.as_deref() {
        None | Some("mean") => Ok(Reduction::Mean),
        Some("sum") => Ok(Reduction::Sum),
        Some("none") => Ok(Reduction::None),
        Some(other) => Err(format!(
            "{}: reduction '{other}' is invalid (none, sum, mean)",
            node.op_type
        )),
    }
}

fn claim_loss(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    ctx.expect_dtype(node, 1, INDEX)?;
    if node.input(2).is_some() {
        let wdt = ctx.input_dtype(node, 2)?;
        if wdt != dt {
            decline!("{}: weight is {wdt} but input 0 is {dt}", node.op_type);
        }
    }
    reduction(node).or_decline()?;
    attr_int(node, "ignore_index").or_decline()?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r < 2
    {
        decline!("{}: input rank {r} is below 2", node.op_type);
    }
    Ok(())
}

fn lower_nll(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let x = ctx.input(node, 0)?;
    let x = ctx.cast(x, dt, cdt);
    let loss = nll(ctx, node, x, cdt)?;
    let loss = ctx.cast(loss, cdt, dt);
    ctx.finish(node, 0, loss, dt)
}

fn lower_sce(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let x = ctx.input(node, 0)?;
    let x = ctx.cast(x, dt, cdt);
    let axes = ReduceAxes::Static(vec![1]);
    let lse = if cdt == DataType::Double {
        super::float64::log_sum_exp(ctx, x, &axes, true)?
    } else {
        let lse = ctx.temp(cdt);
        ctx.push(Step::Reduce {
            op: ReduceOp::LogSumExp,
            x,
            axes,
            keepdims: true,
            out: lse,
        });
        lse
    };
    let log_prob = ctx.binary(B::Subtract, x, lse, cdt);
    let loss = nll(ctx, node, log_prob, cdt)?;
    let loss = ctx.cast(loss, cdt, dt);
    ctx.finish(node, 0, loss, dt)?;
    if node.output(1).is_some() {
        let lp = ctx.cast(log_prob, cdt, dt);
        ctx.finish(node, 1, lp, dt)?;
    }
    Ok(())
}

/// The reduced loss of log-probabilities `lp` (`[N, C, d...]`, dtype `cdt`) against the
/// node's target (input 1) and optional weight (input 2).
fn nll(ctx: &mut LowerCtx, node: &Node, lp: Slot, cdt: DataType) -> Result<Slot, PlanError> {
    let red = reduction(node).or_invalid(node)?;
    let ignore = attr_int(node, "ignore_index").or_invalid(node)?;
    let tdt = ctx.input_dtype(node, 1)?;
    let target = ctx.input(node, 1)?;
    let zero = ctx.scalar(cdt, 0.0)?;
    // Ignored targets may name no class: gather class 0 there and mask the result.
    let mask = match ignore {
        Some(ii) => {
            let ii = ctx.scalar(tdt, ii as f64)?;
            Some(ctx.binary(B::NotEqual, target, ii, tdt))
        }
        None => None,
    };
    let safe = match mask {
        Some(m) => {
            let z = ctx.scalar(tdt, 0.0)?;
            select(ctx, m, target, z, tdt)
        }
        None => target,
    };
    // ORT refuses a target outside [0, C) that is not ignore_index; MLX's gathers would wrap a
    // negative one and read past the classes with a large one.
    let classes = ctx.dim_of(lp, 1);
    let one = ctx.scalar(DataType::Int64, 1.0)?;
    let last = ctx.binary(B::Subtract, classes, one, DataType::Int64);
    let safe64 = ctx.cast(safe, tdt, DataType::Int64);
    ctx.require_between(
        safe64,
        0,
        Some(last),
        "each target must be in [0, C) or ignore_index",
    )?;
    let idx = ctx.temp(tdt);
    ctx.push(Step::Reshape {
        x: safe,
        target: ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(vec![1]),
        },
        out: idx,
    });
    let picked = ctx.temp(cdt);
    ctx.push(Step::TakeAlongAxis {
        x: lp,
        indices: idx,
        axis: 1,
        out: picked,
    });
    let picked1 = ctx.temp(cdt);
    ctx.push(Step::Reshape {
        x: picked,
        target: ReshapeTarget::Squeeze {
            axes: Some(ShapeSource::Static(vec![1])),
        },
        out: picked1,
    });
    let mut loss = ctx.unary(U::Negative, picked1, cdt);
    let weight = match ctx.opt_input(node, 2)? {
        Some(w) => {
            let wdt = ctx.input_dtype(node, 2)?;
            let w = ctx.cast(w, wdt, cdt);
            let wt = ctx.temp(cdt);
            ctx.push(Step::Take {
                x: w,
                indices: safe,
                axis: 0,
                out: wt,
            });
            loss = ctx.binary(B::Multiply, loss, wt, cdt);
            Some(match mask {
                Some(m) => select(ctx, m, wt, zero, cdt),
                None => wt,
            })
        }
        None => None,
    };
    if let Some(m) = mask {
        loss = select(ctx, m, loss, zero, cdt);
    }
    let total = |ctx: &mut LowerCtx, op: ReduceOp, x: Slot| {
        let out = ctx.temp(cdt);
        ctx.push(Step::Reduce {
            op,
            x,
            axes: ReduceAxes::All,
            keepdims: false,
            out,
        });
        out
    };
    Ok(match (red, weight, mask) {
        (Reduction::None, _, _) => loss,
        (Reduction::Sum, _, _) => total(ctx, ReduceOp::Sum, loss),
        (Reduction::Mean, None, None) => total(ctx, ReduceOp::Mean, loss),
        (Reduction::Mean, Some(w), _) => {
            let s = total(ctx, ReduceOp::Sum, loss);
            let d = total(ctx, ReduceOp::Sum, w);
            ctx.binary(B::Divide, s, d, cdt)
        }
        (Reduction::Mean, None, Some(m)) => {
            let s = total(ctx, ReduceOp::Sum, loss);
            let mf = ctx.cast(m, DataType::Bool, cdt);
            let d = total(ctx, ReduceOp::Sum, mf);
            ctx.binary(B::Divide, s, d, cdt)
        }
    })
}

fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    out
}
