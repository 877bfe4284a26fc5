//! `QGemm`: ORT's quantized Gemm, `Y = alpha * a_scale * b_scale * (C + (A' - a_zp)(B' - b_zp))`
//! with `A'`, `B'` the optionally transposed 2-D operands, the int32 `C` broadcast to `[M, N]`,
//! `b_scale` / `b_zero_point` per tensor or per column (`[N]`).
//!
//! ORT accumulates in int32 (the same exact product `MatMulInteger` lowers to here, see
//! `ops::integer`) and scales with `scale[n] = alpha * a_scale * b_scale[n]` in float32,
//! divided by `y_scale` when the output is quantized. With `y_zero_point` the output is MLAS'
//! requantization (`round_half_even(clamp(acc * scale, qmin - zp, qmax - zp)) + zp`), without
//! it float32 `acc * scale`.

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::decline;
use crate::ops::integer::{claim_scalar_param, exact_matmul, requantize, scalar_input};
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "QGemm", 1, 1, claim_qgemm, lower_qgemm)
        .notes("uint8 x uint8/int8 and int8 x int8; transA/transB, alpha, optional int32 C; b_scale/b_zero_point per tensor or per column; float32 or quantized output; K fixed");
}

/// `(M, K)` of A and `(K, N)` of B after the transposes, as declared.
fn gemm_dims(node: &Node, a: &[Dim], b: &[Dim]) -> Result<(Dim, i64, Dim), String> {
    let ta = attr_int(node, "transA")?.unwrap_or(0) != 0;
    let tb = attr_int(node, "transB")?.unwrap_or(0) != 0;
    if a.len() != 2 || b.len() != 2 {
        return Err("QGemm: A and B must be 2-D".into());
    }
    let (m, ka) = if ta { (&a[1], &a[0]) } else { (&a[0], &a[1]) };
    let (kb, n) = if tb { (&b[1], &b[0]) } else { (&b[0], &b[1]) };
    let k = ka
        .fixed()
        .or(kb.fixed())
        .filter(|&k| k > 0)
        .ok_or("QGemm: K must be fixed and non-zero")?;
    if kb.fixed().is_some_and(|x| x != k) {
        return Err("QGemm: A and B disagree on K".into());
    }
    Ok((m.clone(), k, n.clone()))
}

fn claim_qgemm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let adt = ctx.expect_dtype(node, 0, &[DataType::Uint8, DataType::Int8])?;
    let bdt = if adt == DataType::Uint8 {
        ctx.expect_dtype(node, 3, &[DataType::Uint8, DataType::Int8])?
    } else {
        ctx.expect_dtype(node, 3, &[DataType::Int8])?
    };
    if let Some(a) = node
        .attributes
        .keys()
        .find(|k| !matches!(k.as_str(), "transA" | "transB" | "alpha"))
    {
        decline!("QGemm: the attribute {a} is not claimed");
    }
    attr_float(node, "alpha").or_decline()?;
    let (Some(a), Some(b)) = (
        dims_of(ctx, node.input(0).unwrap_or("")),
        dims_of(ctx, node.input(3).unwrap_or("")),
    ) else {
        decline!("QGemm: the ranks of A and B must be known");
    };
    let (_, _, n) = gemm_dims(node, &a, &b).or_decline()?;
    for i in [1, 2, 4, 5] {
        if node.input(i).is_none() {
            decline!("QGemm: input {i} (a scale or zero point) is missing");
        }
    }
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    ctx.expect_dtype(node, 4, &[DataType::Float])?;
    ctx.expect_dtype(node, 2, &[adt])?;
    ctx.expect_dtype(node, 5, &[bdt])?;
    claim_scalar_param(ctx, node, 1)?;
    claim_scalar_param(ctx, node, 2)?;
    // b's scale and zero point: scalars, [1] or [N], the same shape
    let bs = dims_of(ctx, node.input(4).unwrap_or(""));
    let bz = dims_of(ctx, node.input(5).unwrap_or(""));
    let per_b_ok = |d: &Option<Vec<Dim>>| match d.as_deref() {
        Some([]) => true,
        Some([x]) => x.fixed() == Some(1) || same_dim(x, &n),
        _ => false,
    };
    if !per_b_ok(&bs) || !per_b_ok(&bz) || bs.as_ref().map(Vec::len) != bz.as_ref().map(Vec::len) {
        decline!("QGemm: b_scale and b_zero_point must both be scalars, [1] or [N]");
    }
    if node.input(6).is_some() {
        ctx.expect_dtype(node, 6, &[DataType::Int32])?;
        if ctx.rank(node.input(6).unwrap_or("")).is_none_or(|r| r > 2) {
            decline!("QGemm: C must be of known rank at most 2");
        }
    }
    match (node.input(7), node.input(8)) {
        (None, None) => {}
        (Some(_), Some(_)) => {
            ctx.expect_dtype(node, 7, &[DataType::Float])?;
            ctx.expect_dtype(node, 8, &[adt])?;
            claim_scalar_param(ctx, node, 7)?;
            claim_scalar_param(ctx, node, 8)?;
        }
        _ => decline!("QGemm: y_scale and y_zero_point must be given together"),
    }
    Ok(())
}

/// Input `x` (2-D) as float32, transposed when `trans`.
fn operand(ctx: &mut LowerCtx, node: &Node, x: usize, trans: bool) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let dt = ctx.input_dtype(node, x)?;
    let v = ctx.input(node, x)?;
    let v = ctx.cast(v, dt, f);
    Ok(if trans {
        transpose(ctx, v, &[1, 0], f)
    } else {
        v
    })
}

/// Parameter `i` as float32 (a scalar when `scalar`).
fn param(ctx: &mut LowerCtx, node: &Node, i: usize, scalar: bool) -> Result<Slot, PlanError> {
    let dt = ctx.input_dtype(node, i)?;
    let p = if scalar {
        scalar_input(ctx, node, i)?
    } else {
        ctx.input(node, i)?
    };
    Ok(ctx.cast(p, dt, DataType::Float))
}

fn lower_qgemm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let (Some(ad), Some(bd)) = (
        ctx.shape_of(node.input(0).unwrap_or("")),
        ctx.shape_of(node.input(3).unwrap_or("")),
    ) else {
        crate::plan::invalid!(node, "the ranks of A and B are unknown");
    };
    let (_, k, _) = gemm_dims(node, &ad, &bd).or_invalid(node)?;
    let ta = attr_int(node, "transA").or_invalid(node)?.unwrap_or(0) != 0;
    let tb = attr_int(node, "transB").or_invalid(node)?.unwrap_or(0) != 0;
    let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(1.0);
    let azp = param(ctx, node, 2, true)?;
    let bzp = param(ctx, node, 5, false)?;
    let a = operand(ctx, node, 0, ta)?;
    let a = ctx.binary(B::Subtract, a, azp, f);
    let b = operand(ctx, node, 3, tb)?;
    let b = ctx.binary(B::Subtract, b, bzp, f);
    let mut acc = exact_matmul(ctx, a, b, 2, k);
    if let Some(c) = ctx.opt_input(node, 6)? {
        acc = ctx.binary(B::Add, c, acc, DataType::Int32);
    }
    // scale[n] = alpha * a_scale * b_scale[n] (/ y_scale), in float32 and in that order
    let al = ctx.scalar(f, alpha as f64)?;
    let asc = param(ctx, node, 1, true)?;
    let bsc = param(ctx, node, 4, false)?;
    let m = ctx.binary(B::Multiply, al, asc, f);
    let mut m = ctx.binary(B::Multiply, m, bsc, f);
    if node.input(8).is_some() {
        let ysc = param(ctx, node, 7, true)?;
        m = ctx.binary(B::Divide, m, ysc, f);
        let ydt = ctx.input_dtype(node, 8)?;
        let yzp = scalar_input(ctx, node, 8)?;
        let y = requantize(ctx, acc, m, yzp, ydt)?;
        return ctx.finish(node, 0, y, ydt);
    }
    let accf = ctx.cast(acc, DataType::Int32, f);
    let y = ctx.binary(B::Multiply, accf, m, f);
    ctx.finish(node, 0, y, f)
}
