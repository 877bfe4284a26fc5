//! Reductions: ReduceMean/Sum/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp, ArgMax/ArgMin.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{ArgReduceOp, ReduceAxes, ReduceOp, ShapeSource, UnaryOp as U, normalize_axes};

/// Registers the reduction family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    for op in [
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
    ] {
        r.op("", op, 1, MAX, claim_reduce, lower_reduce);
    }
    r.op("", "ArgMax", 1, MAX, claim_arg, lower_arg);
    r.op("", "CumSum", 11, MAX, claim_cumsum, lower_cumsum);
    r.op("", "CumProd", 26, MAX, claim_cumsum, lower_cumsum);
    r.op("", "ArgMin", 1, MAX, claim_arg, lower_arg);
}

/// The opset from which `op` takes its axes as an input.
fn axes_input_since(op: &str) -> i64 {
    if op == "ReduceSum" { 13 } else { 18 }
}

fn claim_reduce(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let allowed: &[DataType] = match node.op_type.as_str() {
        "ReduceMean" | "ReduceLogSumExp" | "ReduceLogSum" | "ReduceL2" => FLOATS,
        "ReduceMax" | "ReduceMin" => DATA,
        _ => NUMERIC,
    };
    let dt = ctx.expect_dtype(node, 0, allowed)?;
    if dt == DataType::Bool && ctx.opset < 20 {
        decline!("{}: bool input needs opset 20", node.op_type);
    }
    if ctx.opset >= axes_input_since(&node.op_type) && node.input(1).is_some() {
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    }
    Ok(())
}

/// The reduction axes of a Reduce* node; `None` means identity (noop_with_empty_axes).
pub(crate) fn reduce_axes(
    ctx: &mut LowerCtx,
    node: &Node,
) -> Result<Option<ReduceAxes>, PlanError> {
    let rank = ctx.input_rank(node, 0);
    let norm = |v: Vec<i64>| -> Result<ReduceAxes, PlanError> {
        Ok(ReduceAxes::Static(match rank {
            Some(r) => normalize_axes(&v, r)
                .or_invalid(node)?
                .into_iter()
                .map(|a| a as i64)
                .collect(),
            None => v,
        }))
    };
    if ctx.opset() < axes_input_since(&node.op_type) {
        return Ok(Some(match attr_ints(node, "axes").or_invalid(node)? {
            Some(v) if !v.is_empty() => norm(v)?,
            _ => ReduceAxes::All,
        }));
    }
    let noop = attr_int(node, "noop_with_empty_axes")
        .or_invalid(node)?
        .unwrap_or(0)
        != 0;
    if node.input(1).is_none() {
        return Ok(if noop { None } else { Some(ReduceAxes::All) });
    }
    if let Some(t) = ctx.const_input(node, 1) {
        let v = t.to_i64_vec().unwrap_or_default();
        return Ok(match (v.is_empty(), noop) {
            (true, true) => None,
            (true, false) => Some(ReduceAxes::All),
            _ => Some(norm(v)?),
        });
    }
    let axes = ctx.input(node, 1)?;
    Ok(Some(ReduceAxes::Dynamic {
        axes,
        noop_with_empty_axes: noop,
    }))
}

fn reduce_step(
    ctx: &mut LowerCtx,
    op: ReduceOp,
    x: Slot,
    axes: ReduceAxes,
    keepdims: bool,
    dtype: DataType,
) -> Slot {
    let out = ctx.temp(dtype);
    ctx.push(Step::Reduce {
        op,
        x,
        axes,
        keepdims,
        out,
    });
    out
}

fn lower_reduce(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let keepdims = attr_int(node, "keepdims").or_invalid(node)?.unwrap_or(1) != 0;
    let x = ctx.input(node, 0)?;
    let Some(axes) = reduce_axes(ctx, node)? else {
        // noop_with_empty_axes with no axes: the input unchanged (sum-square etc. still apply
        // their elementwise part, as the reference does).
        let out = match node.op_type.as_str() {
            "ReduceSumSquare" => ctx.unary(U::Square, x, dt),
            "ReduceL1" => ctx.unary(U::Abs, x, dt),
            "ReduceL2" => {
                let sq = ctx.unary(U::Square, x, dt);
                ctx.unary(U::Sqrt, sq, dt)
            }
            "ReduceLogSum" => ctx.unary(U::Log, x, dt),
            _ => {
                ctx.alias(node, 0, x);
                return Ok(());
            }
        };
        return ctx.finish(node, 0, out, dt);
    };
    // MLX sums and products of small integer types may widen; cast back to the ONNX type.
    let acc_dt = match dt {
        DataType::Int8 | DataType::Int16 | DataType::Uint8 | DataType::Uint16 => DataType::Int32,
        d => d,
    };
    let widen = |ctx: &mut LowerCtx, s: Slot| ctx.cast(s, dt, acc_dt);
    let out = match node.op_type.as_str() {
        "ReduceMean" => reduce_step(ctx, ReduceOp::Mean, x, axes, keepdims, dt),
        // MLX's float64 logsumexp uses its float32-accurate exp (see `float64`).
        "ReduceLogSumExp" if dt == DataType::Double => {
            super::float64::log_sum_exp(ctx, x, &axes, keepdims)?
        }
        "ReduceLogSumExp" => reduce_step(ctx, ReduceOp::LogSumExp, x, axes, keepdims, dt),
        "ReduceMax" if dt == DataType::Bool => {
            reduce_step(ctx, ReduceOp::Any, x, axes, keepdims, dt)
        }
        "ReduceMin" if dt == DataType::Bool => {
            reduce_step(ctx, ReduceOp::All, x, axes, keepdims, dt)
        }
        "ReduceMax" => reduce_step(ctx, ReduceOp::Max, x, axes, keepdims, dt),
        "ReduceMin" => reduce_step(ctx, ReduceOp::Min, x, axes, keepdims, dt),
        "ReduceSum" => {
            let w = widen(ctx, x);
            let s = reduce_step(ctx, ReduceOp::Sum, w, axes, keepdims, acc_dt);
            ctx.cast(s, acc_dt, dt)
        }
        "ReduceProd" => {
            let w = widen(ctx, x);
            let s = reduce_step(ctx, ReduceOp::Prod, w, axes, keepdims, acc_dt);
            ctx.cast(s, acc_dt, dt)
        }
        "ReduceSumSquare" => {
            let sq = ctx.unary(U::Square, x, dt);
            let w = widen(ctx, sq);
            let s = reduce_step(ctx, ReduceOp::Sum, w, axes, keepdims, acc_dt);
            ctx.cast(s, acc_dt, dt)
        }
        "ReduceL1" => {
            let a = ctx.unary(U::Abs, x, dt);
            let w = widen(ctx, a);
            let s = reduce_step(ctx, ReduceOp::Sum, w, axes, keepdims, acc_dt);
            ctx.cast(s, acc_dt, dt)
        }
        "ReduceL2" => {
            let sq = ctx.unary(U::Square, x, dt);
            let s = reduce_step(ctx, ReduceOp::Sum, sq, axes, keepdims, dt);
            ctx.unary(U::Sqrt, s, dt)
        }
        "ReduceLogSum" => {
            let s = reduce_step(ctx, ReduceOp::Sum, x, axes, keepdims, dt);
            ctx.unary(U::Log, s, dt)
        }
        other => invalid!(node, "no reduction lowering for {other}"),
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_arg(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, NUMERIC)?;
    if attr_int(node, "select_last_index")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        // lowered on the reversed input, which needs a non-negative axis
        ctx.expect_rank(node, 0)?;
    }
    Ok(())
}

fn lower_arg(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => crate::step::normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let keepdims = attr_int(node, "keepdims").or_invalid(node)?.unwrap_or(1) != 0;
    let op = if node.op_type == "ArgMax" {
        ArgReduceOp::ArgMax
    } else {
        ArgReduceOp::ArgMin
    };
    let last = attr_int(node, "select_last_index")
        .or_invalid(node)?
        .unwrap_or(0)
        != 0;
    let x0 = ctx.input(node, 0)?;
    let x = if last {
        // MLX returns the first extreme index: search the input reversed along the axis,
        // then map the index back (n - 1 - i).
        if axis < 0 {
            invalid!(node, "select_last_index needs a known rank");
        }
        let rev = ctx.temp(ctx.input_dtype(node, 0)?);
        ctx.push(Step::Slice {
            x: x0,
            spec: crate::step::SliceSpec {
                starts: ShapeSource::Static(vec![-1]),
                ends: ShapeSource::Static(vec![i64::MIN]),
                axes: Some(ShapeSource::Static(vec![axis])),
                steps: Some(ShapeSource::Static(vec![-1])),
            },
            out: rev,
        });
        rev
    } else {
        x0
    };
    let dt = ctx.input_dtype(node, 0)?;
    let floats = matches!(
        dt,
        DataType::Float | DataType::Float16 | DataType::BFloat16 | DataType::Double
    );
    let idx = if floats && !last {
        lower_nan_rule(ctx, op, x, dt, axis, keepdims)?
    } else {
        let idx = ctx.temp(DataType::Uint32);
        ctx.push(Step::ArgReduce {
            op,
            x,
            axis: axis as i32,
            keepdims,
            out: idx,
        });
        idx
    };
    let mut out = ctx.cast(idx, DataType::Uint32, DataType::Int64);
    if last {
        let n = ctx.temp(DataType::Int64);
        ctx.push(Step::Shape {
            x: x0,
            start: axis,
            end: Some(axis + 1),
            out: n,
        });
        let one = ctx.scalar(DataType::Int64, 1.0)?;
        let n1 = ctx.binary(crate::step::BinaryOp::Subtract, n, one, DataType::Int64);
        out = ctx.binary(crate::step::BinaryOp::Subtract, n1, out, DataType::Int64);
    }
    ctx.finish(node, 0, out, DataType::Int64)
}

/// ArgMax/ArgMin over floats with ORT's CPU rule for NaN, which scans each row keeping the
/// first element and replacing it only on a strictly greater (smaller) value: a NaN never
/// wins, except a NaN in the first position, which nothing replaces. MLX's kernels differ by
/// device (its CUDA argmax lets a later value replace a leading NaN), so the rule is spelled
/// out: NaNs become -inf (+inf for ArgMin) before the reduction, then rows whose first
/// element is NaN give 0.
fn lower_nan_rule(
    ctx: &mut LowerCtx,
    op: ArgReduceOp,
    x: Slot,
    dt: DataType,
    axis: i64,
    keepdims: bool,
) -> Result<Slot, PlanError> {
    let isnan = ctx.unary(U::IsNan, x, DataType::Bool);
    let fill = match op {
        ArgReduceOp::ArgMax => f64::NEG_INFINITY,
        ArgReduceOp::ArgMin => f64::INFINITY,
    };
    let fill = ctx.scalar(dt, fill)?;
    let cleaned = ctx.temp(dt);
    ctx.push(Step::Where {
        cond: isnan,
        x: fill,
        y: x,
        out: cleaned,
    });
    let idx = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgReduce {
        op,
        x: cleaned,
        axis: axis as i32,
        keepdims,
        out: idx,
    });
    // isnan(x) at position 0 of the axis, taken with a constant index (a scalar drops the axis,
    // a one-element index keeps it): `Take` keeps the plan shapeless.
    let dims = if keepdims { vec![1] } else { Vec::new() };
    let position = ctx.constant(onnx_ir::TensorData::from_i64(dims, &[0]));
    let first = ctx.temp(DataType::Bool);
    ctx.push(Step::Take {
        x: isnan,
        indices: position,
        axis: axis as i32,
        out: first,
    });
    let zero = ctx.scalar(DataType::Uint32, 0.0)?;
    let out = ctx.temp(DataType::Uint32);
    ctx.push(Step::Where {
        cond: first,
        x: zero,
        y: idx,
        out,
    });
    Ok(out)
}

fn claim_cumsum(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(
        node,
        0,
        &[
            DataType::Float,
            DataType::Float16,
            DataType::BFloat16,
            DataType::Int32,
            DataType::Int64,
            DataType::Uint32,
            DataType::Uint64,
        ],
    )?;
    ctx.expect_dtype(node, 1, &[DataType::Int32, DataType::Int64])?;
    match node.input(1).and_then(|n| ctx.constant(n)) {
        Some(t) if t.numel() != 1 => decline!("{}: the axis must be a scalar", node.op_type),
        // a constant axis, or one read on the host at run time
        _ => Ok(()),
    }
}

/// CumSum and CumProd. A constant CumSum axis becomes [`Step::CumSum`]; otherwise
/// [`Step::Cumulative`] (its axis may be read on the host at run time).
fn lower_cumsum(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let reverse = attr_int(node, "reverse").or_invalid(node)?.unwrap_or(0) != 0;
    let inclusive = attr_int(node, "exclusive").or_invalid(node)?.unwrap_or(0) == 0;
    let const_axis = ctx
        .const_input(node, 1)
        .and_then(|t| t.to_i64_vec())
        .and_then(|v| v.first().copied());
    let (op, axis) = match (node.op_type.as_str(), const_axis) {
        ("CumSum", Some(axis)) => (None, axis),
        (op, _) => (
            Some(if op == "CumProd" {
                crate::step::CumOp::Prod
            } else {
                crate::step::CumOp::Sum
            }),
            0,
        ),
    };
    if let Some(op) = op {
        let axis = ctx.ints_input(node, 1)?;
        let x = ctx.input(node, 0)?;
        let out = ctx.temp(dt);
        ctx.push(Step::Cumulative {
            op,
            x,
            axis,
            reverse,
            inclusive,
            out,
        });
        return ctx.finish(node, 0, out, dt);
    }
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => crate::step::normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::CumSum {
        x,
        axis: axis as i32,
        reverse,
        inclusive,
        dtype: dt,
        out,
    });
    ctx.finish(node, 0, out, dt)
}
