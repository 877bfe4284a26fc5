//! Object detection: NonMaxSuppression, RoiAlign and MaxRoiPool, each one host kernel (as
//! ONNX Runtime's CPU kernels compute them, in float32).

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{self, KernelAttrs};
use crate::registry::ClaimCtx;
use crate::step::{NmsInputs, RoiAlignSpec, non_max_suppression};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "NonMaxSuppression", 10, MAX, claim_nms, lower_nms);
    // Opset 22 only widens the types (float32 is what is claimed); ORT's CPU EP has no
    // RoiAlign(22) kernel, the ONNX reference outputs check it.
    r.op("", "RoiAlign", 10, MAX, claim_roi_align, lower_roi_align);
    r.op("", "MaxRoiPool", 1, MAX, claim_max_roi_pool, lower_max_roi_pool);
    r.kernel(NMS_KERNEL, nms_kernel);
    r.kernel(ROI_ALIGN_KERNEL, roi_align_kernel);
    r.kernel(MAX_ROI_POOL_KERNEL, max_roi_pool_kernel);
}

const NMS_KERNEL: &str = "non_max_suppression";
const ROI_ALIGN_KERNEL: &str = "roi_align";
const MAX_ROI_POOL_KERNEL: &str = "max_roi_pool";

/// The host arguments of a node's inputs (absent optional inputs stay `Absent`).
fn value_args(ctx: &mut LowerCtx, node: &Node, n: usize) -> Result<Vec<HostArg>, PlanError> {
    (0..n)
        .map(|i| {
            Ok(match ctx.opt_input(node, i)? {
                Some(s) => HostArg::Value(s),
                None => HostArg::Absent,
            })
        })
        .collect()
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

/// One host kernel over all inputs (the output length depends on the values).
fn lower_nms(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let center_point_box = center_point_box(node).or_invalid(node)?;
    ctx.input(node, 0)?;
    ctx.input(node, 1)?;
    let inputs = value_args(ctx, node, 5)?;
    let attrs = KernelAttrs::new().bool("center_point_box", center_point_box);
    let out = ctx.host_kernel(node, NMS_KERNEL, inputs, attrs, &[DataType::Int64])?;
    ctx.finish(node, 0, out[0], DataType::Int64)
}

/// `NonMaxSuppression`: boxes, scores (float32), optional max_output (int64), iou and score
/// thresholds (float32) -> int64 `[num_selected, 3]` ([`non_max_suppression`]).
fn nms_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let boxes = kernel::input(inputs, 0)?;
    let scores = kernel::input(inputs, 1)?;
    let opt_f32 = |i| kernel::opt_input(inputs, i).map(kernel::f32s).transpose();
    let max_output = kernel::opt_input(inputs, 2).map(kernel::i64s).transpose()?;
    let iou = opt_f32(3)?;
    let score = opt_f32(4)?;
    let t = non_max_suppression(&NmsInputs {
        boxes_shape: &boxes.dims,
        boxes: &kernel::f32s(boxes)?,
        scores_shape: &scores.dims,
        scores: &kernel::f32s(scores)?,
        max_output: max_output.as_deref(),
        iou_threshold: iou.as_deref(),
        score_threshold: score.as_deref(),
        center_point_box: attrs.get_bool("center_point_box")?,
    })?;
    Ok(vec![t])
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

/// One host kernel over X, rois and batch indices.
fn lower_roi_align(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let spec = roi_align_spec(ctx.opset(), node).or_invalid(node)?;
    let inputs = (0..3)
        .map(|i| ctx.input(node, i).map(HostArg::Value))
        .collect::<Result<Vec<_>, _>>()?;
    let attrs = KernelAttrs::new()
        .bool("max_mode", spec.max_mode)
        .int("output_height", spec.output_height)
        .int("output_width", spec.output_width)
        .int("sampling_ratio", spec.sampling_ratio)
        .float("spatial_scale", spec.spatial_scale as f64)
        .bool("half_pixel", spec.half_pixel);
    let out = ctx.host_kernel(node, ROI_ALIGN_KERNEL, inputs, attrs, &[DataType::Float])?;
    ctx.finish(node, 0, out[0], DataType::Float)
}

/// `RoiAlign`: X float32 `[N, C, H, W]`, rois float32 `[R, 4]`, batch_indices int64 `[R]` ->
/// float32 `[R, C, output_height, output_width]`. The samples of [`RoiAlignSpec::samples`];
/// avg sums each sample's four weighted corners, then the samples, and divides by the count
/// (ORT's order); max takes the largest weighted corner.
fn roi_align_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let spec = RoiAlignSpec {
        max_mode: attrs.get_bool("max_mode")?,
        output_height: attrs.get_int("output_height")?,
        output_width: attrs.get_int("output_width")?,
        sampling_ratio: attrs.get_int("sampling_ratio")?,
        spatial_scale: attrs.get_float("spatial_scale")? as f32,
        half_pixel: attrs.get_bool("half_pixel")?,
    };
    let (x, rois, bi) = (
        kernel::input(inputs, 0)?,
        kernel::input(inputs, 1)?,
        kernel::input(inputs, 2)?,
    );
    if rois.dims.len() != 2 || rois.dims[1] != 4 {
        return Err(format!(
            "RoiAlign: rois {:?} must be [num_rois, 4]",
            rois.dims
        ));
    }
    if bi.dims.len() != 1 || bi.dims[0] != rois.dims[0] {
        return Err(format!(
            "RoiAlign: batch_indices {:?} must be [{}]",
            bi.dims, rois.dims[0]
        ));
    }
    let smp = spec.samples(&x.dims, &kernel::f32s(rois)?, &kernel::i64s(bi)?)?;
    let xv = kernel::f32s(x)?;
    let (c, plane) = (x.dims[1] as usize, (x.dims[2] * x.dims[3]) as usize);
    let (r, k) = (smp.rois, smp.corners);
    let p = (spec.output_height * spec.output_width) as usize;
    let mut y = vec![0f32; r * c * p];
    for ri in 0..r {
        for pi in 0..p {
            let base = (ri * p + pi) * k;
            for ci in 0..c {
                // Corner `e` of this bin, for channel `ci`.
                let value = |e: usize| {
                    let row = smp.rows[e] as usize;
                    let (n, pos) = (row / plane, row % plane);
                    xv[(n * c + ci) * plane + pos] * smp.weights[e]
                };
                let out = if spec.max_mode {
                    let mut m = None::<f32>;
                    for e in base..base + k {
                        let v = if smp.valid[e] { value(e) } else { smp.fill[e] };
                        m = Some(match m {
                            None => v,
                            Some(m) if m < v => v,
                            Some(m) => m,
                        });
                    }
                    m.unwrap_or(0.0)
                } else {
                    let mut sum = 0f32;
                    for s in (base..base + k).step_by(4) {
                        if smp.valid[s] {
                            sum += value(s) + value(s + 1) + value(s + 2) + value(s + 3);
                        }
                    }
                    sum / smp.count[ri]
                };
                y[(ri * c + ci) * p + pi] = out;
            }
        }
    }
    let dims = vec![r as i64, c as i64, spec.output_height, spec.output_width];
    Ok(vec![TensorData::from_f32(dims, &y)])
}

/// `pooled_shape` (two positive ints) and `spatial_scale` (positive, default 1), as ORT checks
/// them.
fn max_roi_pool_attrs(node: &Node) -> Result<(i64, i64, f32), String> {
    let shape = attr_ints(node, "pooled_shape")?.ok_or("MaxRoiPool: pooled_shape is required")?;
    let &[h, w] = shape.as_slice() else {
        return Err(format!(
            "MaxRoiPool: pooled_shape {shape:?} must have 2 values"
        ));
    };
    if h < 1 || w < 1 {
        return Err(format!(
            "MaxRoiPool: pooled_shape {shape:?} must be positive"
        ));
    }
    let scale = attr_float(node, "spatial_scale")?.unwrap_or(1.0);
    // NaN is not positive either.
    if scale.is_nan() || scale <= 0.0 {
        return Err(format!(
            "MaxRoiPool: spatial_scale {scale} must be positive"
        ));
    }
    Ok((h, w, scale))
}

fn claim_max_roi_pool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    // ORT's CPU EP has a float32 kernel only.
    ctx.expect_dtype(node, 0, &[DataType::Float])?;
    ctx.expect_dtype(node, 1, &[DataType::Float])?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or_default())
        && r != 4
    {
        decline!("MaxRoiPool: X has rank {r}, not 4");
    }
    max_roi_pool_attrs(node).or_decline()?;
    Ok(())
}

/// One host kernel over X and the rois.
fn lower_max_roi_pool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (h, w, scale) = max_roi_pool_attrs(node).or_invalid(node)?;
    let inputs = vec![
        HostArg::Value(ctx.input(node, 0)?),
        HostArg::Value(ctx.input(node, 1)?),
    ];
    let attrs = KernelAttrs::new()
        .ints("pooled_shape", vec![h, w])
        .float("spatial_scale", scale as f64);
    let out = ctx.host_kernel(node, MAX_ROI_POOL_KERNEL, inputs, attrs, &[DataType::Float])?;
    ctx.finish(node, 0, out[0], DataType::Float)
}

/// `MaxRoiPool`: X float32 `[N, C, H, W]`, rois float32 `[R, 5]` (`batch, x1, y1, x2, y2`) ->
/// float32 `[R, C, pooled_h, pooled_w]`, as ORT's CPU kernel: roi corners rounded after
/// scaling, malformed rois forced to 1x1, empty bins 0, and a bin's maximum starting from the
/// lowest float (`std::max(v, m)` order: a NaN element counts only when it is the last).
fn max_roi_pool_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let (x, rois) = (kernel::input(inputs, 0)?, kernel::input(inputs, 1)?);
    let &[ph_n, pw_n] = attrs.get_ints("pooled_shape")? else {
        return Err("MaxRoiPool: pooled_shape must have 2 values".into());
    };
    let scale = attrs.get_float("spatial_scale")? as f32;
    let &[n, c, height, width] = x.dims.as_slice() else {
        return Err(format!("MaxRoiPool: X {:?} must be 4-D", x.dims));
    };
    if rois.dims.len() != 2 || rois.dims[1] != 5 {
        return Err(format!(
            "MaxRoiPool: rois {:?} must be [num_rois, 5]",
            rois.dims
        ));
    }
    let total = rois.dims[0]
        .checked_mul(c)
        .and_then(|t| t.checked_mul(ph_n))
        .and_then(|t| t.checked_mul(pw_n))
        .filter(|&t| t <= 1 << 31)
        .ok_or("MaxRoiPool: the output is too large")?;
    let xv = kernel::f32s(x)?;
    let rv = kernel::f32s(rois)?;
    let (h_i, w_i) = (height as i32, width as i32);
    let plane = (height * width) as usize;
    let mut y = Vec::with_capacity(total as usize);
    for roi in rv.chunks_exact(5) {
        let batch = roi[0] as i32;
        if batch < 0 || batch as i64 >= n {
            return Err(format!(
                "MaxRoiPool: roi batch index {batch} is out of range [0, {n})"
            ));
        }
        let [start_w, start_h, end_w, end_h] =
            [roi[1], roi[2], roi[3], roi[4]].map(|v| (v * scale).round() as i32);
        let roi_h = (end_h - start_h + 1).max(1);
        let roi_w = (end_w - start_w + 1).max(1);
        let bin_h = roi_h as f32 / ph_n as f32;
        let bin_w = roi_w as f32 / pw_n as f32;
        for ci in 0..c as usize {
            let data = &xv[(batch as usize * c as usize + ci) * plane..][..plane];
            for ph in 0..ph_n {
                for pw in 0..pw_n {
                    let clip = |v: i32, start: i32, hi: i32| (v + start).max(0).min(hi);
                    let hs = clip((ph as f32 * bin_h).floor() as i32, start_h, h_i);
                    let he = clip(((ph + 1) as f32 * bin_h).ceil() as i32, start_h, h_i);
                    let ws = clip((pw as f32 * bin_w).floor() as i32, start_w, w_i);
                    let we = clip(((pw + 1) as f32 * bin_w).ceil() as i32, start_w, w_i);
                    if he <= hs || we <= ws {
                        y.push(0.0);
                        continue;
                    }
                    let mut m = f32::MIN;
                    for h in hs..he {
                        for w in ws..we {
                            // std::max(v, m): m when v < m, else v.
                            let v = data[(h * w_i + w) as usize];
                            m = if v < m { m } else { v };
                        }
                    }
                    y.push(m);
                }
            }
        }
    }
    let dims = vec![rois.dims[0], c, ph_n, pw_n];
    Ok(vec![TensorData::from_f32(dims, &y)])
}
