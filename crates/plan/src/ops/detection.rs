//! Object detection: NonMaxSuppression (computed on the host, as ONNX Runtime's CPU kernel)
//! and RoiAlign (sample positions on the host, the gather and reduction on the device).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::RoiAlignSpec;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "NonMaxSuppression", 10, MAX, claim_nms, lower_nms);
    // Opset 22 is left out: ORT's CPU EP has no kernel for it to check against.
    r.op("", "RoiAlign", 10, 21, claim_roi_align, lower_roi_align);
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

/// The attributes of a RoiAlign node, with ORT's defaults and checks.
fn roi_align_spec(opset: i64, node: &Node) -> Result<RoiAlignSpec, String> {
    let max_mode = match attr_str(node, "mode")?
        .unwrap_or_else(|| "avg".into())
        .to_ascii_lowercase()
        .as_str()
    {
        "avg" => false,
        "max" => true,
        m => return Err(format!("RoiAlign: mode {m:?} is not avg or max")),
    };
    let output_height = attr_int(node, "output_height")?.unwrap_or(1);
    let output_width = attr_int(node, "output_width")?.unwrap_or(1);
    if output_height < 1 || output_width < 1 {
        return Err("RoiAlign: output_height and output_width must be positive".into());
    }
    let sampling_ratio = attr_int(node, "sampling_ratio")?.unwrap_or(0);
    if sampling_ratio < 0 {
        return Err(format!(
            "RoiAlign: sampling_ratio {sampling_ratio} is negative"
        ));
    }
    // Opset 10 has no attribute and behaves as output_half_pixel; opset 16 defaults to
    // half_pixel (ORT fills in the schema default).
    let default = if opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = attr_str(node, "coordinate_transformation_mode")?
        .as_deref()
        .unwrap_or(default)
        == "half_pixel";
    Ok(RoiAlignSpec {
        max_mode,
        output_height,
        output_width,
        sampling_ratio,
        spatial_scale: attr_float(node, "spatial_scale")?.unwrap_or(1.0),
        half_pixel,
    })
}

fn claim_roi_align(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // float16 / float64: ORT computes in that type; only float32 is matched exactly here.
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    ctx.expect_dtype(node, 2, &[DataType::Int64])?;
    roi_align_spec(ctx.opset, node).or_decline()?;
    Ok(())
}

/// One step: rois and batch indices read on the host, X gathered on the device.
fn lower_roi_align(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let spec = roi_align_spec(ctx.opset(), node).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let rois = ctx.input(node, 1)?;
    let batch_indices = ctx.input(node, 2)?;
    let out = ctx.temp(DataType::Float);
    ctx.push(Step::RoiAlign {
        x,
        rois,
        batch_indices,
        spec,
        out,
    });
    ctx.finish(node, 0, out, DataType::Float)
}
