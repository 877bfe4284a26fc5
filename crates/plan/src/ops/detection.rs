//! Object detection: NonMaxSuppression (computed on the host, as ONNX Runtime's CPU kernel).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "NonMaxSuppression", 10, MAX, claim_nms, lower_nms);
}

/// `center_point_box` (0 or 1; ORT rejects other values).
fn center_point_box(node: &Node) -> Result<bool, String> {
    match attr_int(node, "center_point_box")?.unwrap_or(0) {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(format!(
            "NonMaxSuppression: center_point_box {v} is not 0 or 1"
        )),
    }
}

fn claim_nms(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    for (i, dt) in [
        (2, DataType::Int64),
        (3, DataType::Float),
        (4, DataType::Float),
    ] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    if node.inputs.len() > 5 {
        decline!("NonMaxSuppression: more than 5 inputs");
    }
    center_point_box(node).or_decline()?;
    Ok(())
}

/// One host step over all inputs (the output length depends on the values).
fn lower_nms(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let center_point_box = center_point_box(node).or_invalid(node)?;
    let boxes = ctx.input(node, 0)?;
    let scores = ctx.input(node, 1)?;
    let max_output = ctx.opt_input(node, 2)?;
    let iou_threshold = ctx.opt_input(node, 3)?;
    let score_threshold = ctx.opt_input(node, 4)?;
    let out = ctx.temp(DataType::Int64);
    ctx.push(Step::NonMaxSuppression {
        boxes,
        scores,
        max_output,
        iou_threshold,
        score_threshold,
        center_point_box,
        out,
    });
    ctx.finish(node, 0, out, DataType::Int64)
}
