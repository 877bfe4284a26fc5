//! `com.microsoft` matmuls: FusedMatMul (`alpha * op(A) @ op(B)`, where `op` moves the first
//! dim behind the batch dims (`transBatch*`, rank 3 and up) and swaps the last two (`trans*`,
//! ignored for vectors as in ORT)), and the quantizer's MatMulIntegerToFloat and
//! DynamicQuantizeMatMul: the int32 accumulation of `(A - a_zp) @ (B - b_zp)` rebuilt exactly
//! as for ONNX `MatMulInteger` ([`crate::ops::integer`]), then
//! `float(acc) * (a_scale * b_scale) + bias` as ORT's MLAS output processor computes it.
//! DynamicQuantizeMatMul first quantizes A to uint8 as `DynamicQuantizeLinear` does.

use onnx_ir::{DataType, Node};

use crate::ops::integer::{self as int, Side};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "FusedMatMul", 1, 1, claim_fused, lower_fused)
        .notes("`alpha`, `transA`/`transB`, `transBatchA`/`transBatchB`; operand ranks known at plan time; `transBatch*` with equal ranks >= 3 (ORT refuses others)");
    r.op(MS, "MatMulIntegerToFloat", 1, 1, claim_int_to_float, lower_int_to_float)
        .notes("int8/uint8 A and B, float32 scales: A's per tensor, B's per tensor or per column; optional zero points and bias; K known at plan time, accumulated exactly");
    r.op(MS, "DynamicQuantizeMatMul", 1, 1, claim_dynamic_mm, lower_dynamic_mm)
        .notes("float32 A quantized to uint8 per tensor (as DynamicQuantizeLinear); int8/uint8 B with per-tensor or per-column scale and zero point; optional bias; K known at plan time");
}

fn claim_fused(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, FLOATS)?;
    let ranks = [ctx.expect_rank(node, 0)?, ctx.expect_rank(node, 1)?];
    if ranks.contains(&0) {
        decline!("FusedMatMul: scalar operands are invalid");
    }
    let batch = ["transBatchA", "transBatchB"]
        .iter()
        .map(|a| attr_int(node, a).map(|v| v.unwrap_or(0) != 0))
        .collect::<Result<Vec<_>, _>>()
        .or_decline()?;
    if batch.contains(&true) && (ranks[0] != ranks[1] || ranks[0] < 3) {
        decline!(
            "FusedMatMul: transBatch needs operands of one rank, at least 3 (ORT refuses others)"
        );
    }
    attr_float(node, "alpha").or_decline()?;
    Ok(())
}

/// The permutation `op` applies to an operand of rank `r`, if any.
fn operand_perm(r: usize, trans: bool, trans_batch: bool) -> Option<Vec<i32>> {
    if r < 2 {
        return None;
    }
    let mut perm: Vec<i32> = (0..r as i32).collect();
    if trans_batch && r >= 3 {
        // [d0, d1, ..., d(r-2), d(r-1)] -> [d1, ..., d(r-2), d0, d(r-1)]
        perm = (1..r as i32 - 1).chain([0, r as i32 - 1]).collect();
    }
    if trans {
        perm.swap(r - 2, r - 1);
    }
    (perm.iter().enumerate().any(|(i, &p)| p != i as i32)).then_some(perm)
}

fn lower_fused(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let flag = |name: &str| -> Result<bool, PlanError> {
        Ok(attr_int(node, name).or_invalid(node)?.unwrap_or(0) != 0)
    };
    let (ta, tb) = (flag("transA")?, flag("transB")?);
    let (tba, tbb) = (flag("transBatchA")?, flag("transBatchB")?);
    let alpha = attr_float(node, "alpha").or_invalid(node)?.unwrap_or(1.0);
    let mut ops = [ctx.input(node, 0)?, ctx.input(node, 1)?];
    for (i, (t, tb)) in [(ta, tba), (tb, tbb)].into_iter().enumerate() {
        let r = ctx.need_rank(node, i)?;
        if let Some(perm) = operand_perm(r, t, tb) {
            ops[i] = transpose(ctx, ops[i], &perm, dt);
        }
    }
    let mut y = ctx.temp(dt);
    ctx.push(Step::MatMul {
        a: ops[0],
        b: ops[1],
        out: y,
    });
    if alpha != 1.0 {
        let s = ctx.scalar(dt, alpha as f64)?;
        y = ctx.binary(B::Multiply, y, s, dt);
    }
    ctx.finish(node, 0, y, dt)
}

// ---------------------------------------------------------------------------------------------
// Integer matmuls with a float result.

const F32: &[DataType] = &[DataType::Float];

/// B's scale and zero point (`scale`, `zp`) and the bias: per tensor or per column.
fn claim_b_params(
    ctx: &ClaimCtx,
    node: &Node,
    rb: usize,
    (scale, zp, bias): (usize, usize, usize),
) -> Result<(), Decline> {
    ctx.expect_dtype(node, scale, F32)?;
    int::claim_zero_point_type(ctx, node, 1, zp)?;
    for i in [scale, zp] {
        if ctx.rank(node.input(i).unwrap_or("")).is_some_and(|r| r > 1) {
            decline!(
                "{}: input {i} must be a scalar or 1-D (per column)",
                node.op_type
            );
        }
        int::claim_matmul_param(ctx, node, i, rb)?;
    }
    if node.input(bias).is_some() {
        ctx.expect_dtype(node, bias, F32)?;
        if ctx.expect_rank(node, bias)? != 1 {
            decline!("{}: bias must be 1-D", node.op_type);
        }
    }
    Ok(())
}

fn claim_int_to_float(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let (_, rb) = int::claim_matmul_operands(ctx, node, 0, 1)?;
    ctx.expect_dtype(node, 2, F32)?;
    int::claim_scalar_param(ctx, node, 2)?;
    int::claim_zero_point_type(ctx, node, 0, 4)?;
    int::claim_scalar_param(ctx, node, 4)?;
    claim_b_params(ctx, node, rb, (3, 5, 6))
}

/// `float(acc) * (a_scale * b_scale) + bias`.
fn scale_bias(
    ctx: &mut LowerCtx,
    node: &Node,
    acc: Slot,
    a_scale: Slot,
    (b_scale, bias): (usize, usize),
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    let rb = ctx.need_rank(node, 1)?;
    let bs = int::param_f32(ctx, node, b_scale, rb, Side::B)?.expect("b_scale is required");
    let m = ctx.binary(B::Multiply, a_scale, bs, f);
    let accf = ctx.cast(acc, DataType::Int32, f);
    let mut y = ctx.binary(B::Multiply, accf, m, f);
    if let Some(b) = ctx.opt_input(node, bias)? {
        y = ctx.binary(B::Add, y, b, f);
    }
    Ok(y)
}

fn lower_int_to_float(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let acc = int::matmul_acc(ctx, node, (0, 4), (1, 5))?;
    let ra = ctx.need_rank(node, 0)?;
    let a_scale = int::param_f32(ctx, node, 2, ra, Side::Scalar)?.expect("a_scale is required");
    let y = scale_bias(ctx, node, acc, a_scale, (3, 6))?;
    ctx.finish(node, 0, y, DataType::Float)
}

fn claim_dynamic_mm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, F32)?;
    ctx.expect_dtype(node, 1, &[DataType::Int8, DataType::Uint8])?;
    let ra = ctx.expect_rank(node, 0)?;
    let rb = ctx.expect_rank(node, 1)?;
    if ra == 0 || rb == 0 {
        decline!("DynamicQuantizeMatMul: scalar operands are invalid");
    }
    let sa = int::claim_shape(ctx, node.input(0).unwrap_or(""));
    let sb = int::claim_shape(ctx, node.input(1).unwrap_or(""));
    if int::matmul_k(sa, sb).is_none() {
        decline!("DynamicQuantizeMatMul: the reduction length K is unknown at plan time");
    }
    claim_b_params(ctx, node, rb, (2, 3, 4))
}

fn lower_dynamic_mm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let f = DataType::Float;
    let sa = ctx.shape_of(node.input(0).unwrap_or(""));
    let sb = ctx.shape_of(node.input(1).unwrap_or(""));
    let Some(k) = int::matmul_k(sa, sb) else {
        crate::plan::invalid!(node, "K is unknown");
    };
    let rb = ctx.need_rank(node, 1)?;
    let a = ctx.input(node, 0)?;
    let (qa, a_scale, a_zp) = crate::ops::quantize::dynamic_quantize(ctx, a)?;
    let qa = ctx.cast(qa, DataType::Uint8, f);
    let av = ctx.binary(B::Subtract, qa, a_zp, f);
    let bv = int::centered(ctx, node, 1, 3, Side::B)?;
    let acc = int::exact_matmul(ctx, av, bv, rb, k);
    let y = scale_bias(ctx, node, acc, a_scale, (2, 4))?;
    ctx.finish(node, 0, y, f)
}
