//! Generated tensors: EyeLike.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "EyeLike", 9, MAX, claim_eye_like, lower_eye_like);
}

fn eye_dtype(node: &Node, input: DataType) -> Result<DataType, String> {
    match attr_int(node, "dtype")? {
        None => Ok(input),
        Some(v) => {
            DataType::from_onnx(v as i32).ok_or_else(|| format!("EyeLike: unknown dtype {v}"))
        }
    }
}

fn claim_eye_like(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, DATA)?;
    let out = eye_dtype(node, dt).or_decline()?;
    if !DATA.contains(&out) {
        decline!(
            "EyeLike: output type {out} is not claimed{}",
            crate::registry::dtype_note(out)
        );
    }
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != 2
    {
        decline!("EyeLike: input rank {r} is not 2");
    }
    attr_int(node, "k").or_decline()?;
    Ok(())
}

/// Ones where `col - row == k`: positions compared, then cast to the output type.
fn lower_eye_like(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let out_dt = eye_dtype(node, dt).or_invalid(node)?;
    let k = attr_int(node, "k").or_invalid(node)?.unwrap_or(0);
    let x = ctx.input(node, 0)?;
    let rows = ctx.iota_along(x, 0, 2, 0);
    let cols = ctx.iota_along(x, 1, 2, 1);
    let diag = ctx.binary(B::Subtract, cols, rows, DataType::Int64);
    let kk = ctx.scalar(DataType::Int64, k as f64)?;
    let hit = ctx.binary(B::Equal, diag, kk, DataType::Int64);
    let out = ctx.cast(hit, DataType::Bool, out_dt);
    ctx.finish(node, 0, out, out_dt)
}
