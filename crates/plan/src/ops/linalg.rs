//! Linear algebra: Det (MLX's CPU-only `linalg` kernels).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Det", 11, MAX, claim_det, lower_det);
}

fn claim_det(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r < 2
    {
        decline!("Det: input rank {r} is below 2");
    }
    Ok(())
}

fn lower_det(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::Det { x, out });
    ctx.finish(node, 0, out, DataType::Float)
}
