//! `com.microsoft` FusedMatMul: `alpha * op(A) @ op(B)`, where `op` moves the first dim
//! behind the batch dims (`transBatch*`, rank 3 and up) and swaps the last two
//! (`trans*`, ignored for vectors as in ORT).

use onnx_ir::Node;

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "FusedMatMul", 1, 1, claim_fused, lower_fused)
        .notes("`alpha`, `transA`/`transB`, `transBatchA`/`transBatchB`; operand ranks known at plan time; `transBatch*` with equal ranks >= 3 (ORT refuses others)");
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
