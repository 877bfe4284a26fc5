//! Resize in linear and cubic modes (opset 11+, dispatched from `nn`), Resize-10 and
//! Upsample (opsets 7-9), with ONNX Runtime's coordinate and weight rules
//! (see [`crate::step::InterpSpec`]).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    AspectPolicy, CoordinateTransform, FloatSource, InterpCoordinates, InterpMode, InterpSpec,
    NearestMode, ResizeSpec, ShapeSource, interpolated_axes, interpolated_axes_for,
};

/// Registers Resize-10 and Upsample (Resize 11+ is registered by `nn`).
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Resize", 10, 10, claim_legacy, lower_legacy);
    r.op("", "Upsample", 7, 9, claim_legacy, lower_legacy);
}

/// Opset 18 `keep_aspect_ratio_policy` (stretch before).
pub(crate) fn aspect_policy(node: &Node, opset: i64) -> Result<AspectPolicy, String> {
    if opset < 18 {
        return Ok(AspectPolicy::Stretch);
    }
    match attr_str(node, "keep_aspect_ratio_policy")?.as_deref() {
        None | Some("stretch") => Ok(AspectPolicy::Stretch),
        Some("not_larger") => Ok(AspectPolicy::NotLarger),
        Some("not_smaller") => Ok(AspectPolicy::NotSmaller),
        Some(p) => Err(format!("Resize: keep_aspect_ratio_policy '{p}' is invalid")),
    }
}

/// True when a Resize-11+ node's mode is one this module lowers.
pub(crate) fn is_interp(node: &Node) -> bool {
    matches!(
        attr_str(node, "mode").ok().flatten().as_deref(),
        Some("linear") | Some("cubic")
    )
}

fn interp_mode(node: &Node) -> Result<InterpMode, String> {
    let exclude = attr_int(node, "exclude_outside")?.unwrap_or(0) != 0;
    match attr_str(node, "mode")?.as_deref() {
        Some("linear") => {
            if exclude {
                return Err(
                    "Resize: exclude_outside=1 needs cubic mode (ONNX Runtime rejects it)".into(),
                );
            }
            Ok(InterpMode::Linear)
        }
        Some("cubic") => Ok(InterpMode::Cubic {
            a: attr_float(node, "cubic_coeff_a")?.unwrap_or(-0.75),
            exclude_outside: exclude,
        }),
        other => Err(format!("Resize: mode {other:?} is not linear or cubic")),
    }
}

fn coordinate_mode(node: &Node) -> Result<Option<CoordinateTransform>, String> {
    Ok(Some(
        match attr_str(node, "coordinate_transformation_mode")?
            .as_deref()
            .unwrap_or("half_pixel")
        {
            "half_pixel" => CoordinateTransform::HalfPixel,
            "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
            "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
            "align_corners" => CoordinateTransform::AlignCorners,
            "asymmetric" => CoordinateTransform::Asymmetric,
            "tf_half_pixel_for_nearest" => CoordinateTransform::TfHalfPixelForNearest,
            "tf_crop_and_resize" => return Ok(None),
            other => {
                return Err(format!(
                    "Resize: coordinate_transformation_mode '{other}' is invalid"
                ));
            }
        },
    ))
}

/// Static full-rank scales of a node whose scales are constant, for the axis checks.
fn static_scales(values: &[f64], rank: usize, axes: Option<&[i64]>) -> Option<Vec<f32>> {
    let mut full = vec![1.0f32; rank];
    match axes {
        None if values.len() == rank => {
            for (i, v) in values.iter().enumerate() {
                full[i] = *v as f32;
            }
        }
        Some(a) if a.len() == values.len() => {
            for (j, &ax) in a.iter().enumerate() {
                let ax = if ax < 0 { ax + rank as i64 } else { ax };
                *full.get_mut(usize::try_from(ax).ok()?)? = values[j] as f32;
            }
        }
        _ => return None,
    }
    Some(full)
}

/// Claim of Resize-11+ in linear / cubic mode.
pub(crate) fn claim_interp(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let mode = interp_mode(node).or_decline()?;
    let transform = coordinate_mode(node).or_decline()?;
    let antialias = antialias(node, ctx.opset).or_decline()?;
    if antialias && transform.is_none() {
        decline!("Resize: antialias=1 with tf_crop_and_resize is not claimed");
    }
    aspect_policy(node, ctx.opset).or_decline()?;
    if transform.is_none() {
        if node.input(1).is_none() {
            decline!("Resize: tf_crop_and_resize without a roi input is not claimed");
        }
        ctx.expect_dtype(node, 1, &[DataType::Float])?;
    }
    if node.input(2).is_some() {
        ctx.expect_dtype(node, 2, &[DataType::Float])?;
    }
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, &[DataType::Int64])?;
    }
    if node.input(2).is_none() && node.input(3).is_none() {
        decline!("Resize: neither scales nor sizes is given");
    }
    let rank = ctx.rank(node.input(0).unwrap_or(""));
    if let Some(r) = rank {
        let ok = match mode {
            InterpMode::Linear => (2..=5).contains(&r),
            InterpMode::Cubic { .. } if antialias => r == 2 || r == 4,
            InterpMode::Cubic { .. } => r == 2 || r == 4,
        };
        if !ok {
            decline!("Resize: {mode:?} mode on a rank-{r} input is not supported by ONNX Runtime");
        }
        let axes = if ctx.opset >= 18 {
            attr_ints(node, "axes").or_decline()?
        } else {
            None
        };
        let scales = node
            .input(2)
            .and_then(|n| ctx.constant(n))
            .and_then(|t| t.to_f64_vec())
            .filter(|v| !v.is_empty());
        if node.input(3).is_none()
            && let Some(v) = scales
            && let Some(full) = static_scales(&v, r, axes.as_deref())
        {
            interpolated_axes_for(mode, &full, antialias).or_decline()?;
        }
    }
    Ok(())
}

/// Opset 18 `antialias`.
fn antialias(node: &Node, opset: i64) -> Result<bool, String> {
    Ok(opset >= 18 && attr_int(node, "antialias")?.unwrap_or(0) != 0)
}

fn float_input(
    ctx: &mut LowerCtx,
    node: &Node,
    i: usize,
) -> Result<Option<FloatSource>, PlanError> {
    if node.input(i).is_none() {
        return Ok(None);
    }
    Ok(match ctx.const_input(node, i) {
        Some(t) => {
            let v = t.to_f64_vec().unwrap_or_default();
            (!v.is_empty()).then_some(FloatSource::Static(v))
        }
        None => Some(FloatSource::Dynamic(ctx.input(node, i)?)),
    })
}

/// Emits the cast to float32, the resize and the cast back.
fn emit(ctx: &mut LowerCtx, node: &Node, spec: InterpSpec) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, DataType::Float);
    let y = ctx.temp(DataType::Float);
    ctx.push(Step::ResizeInterp { x, spec, out: y });
    let y = ctx.cast(y, DataType::Float, dt);
    ctx.finish(node, 0, y, dt)
}

/// Lowering of Resize-11+ in linear / cubic mode.
pub(crate) fn lower_interp(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let mode = interp_mode(node).or_invalid(node)?;
    let coordinates = match coordinate_mode(node).or_invalid(node)? {
        Some(t) => InterpCoordinates::Transform(t),
        None => {
            let Some(roi) = float_input(ctx, node, 1)? else {
                invalid!(node, "tf_crop_and_resize needs a roi");
            };
            InterpCoordinates::CropAndResize {
                roi,
                extrapolation: attr_float(node, "extrapolation_value")
                    .or_invalid(node)?
                    .unwrap_or(0.0),
            }
        }
    };
    let scales = float_input(ctx, node, 2)?;
    let sizes = match node.input(3) {
        None => None,
        Some(_) => match ctx.ints_input(node, 3)? {
            ShapeSource::Static(v) if v.is_empty() => None,
            s => Some(s),
        },
    };
    let axes = if ctx.opset() >= 18 {
        attr_ints(node, "axes").or_invalid(node)?
    } else {
        None
    };
    let policy = aspect_policy(node, ctx.opset()).or_invalid(node)?;
    let antialias = antialias(node, ctx.opset()).or_invalid(node)?;
    emit(
        ctx,
        node,
        InterpSpec {
            mode,
            coordinates,
            scales,
            sizes,
            axes,
            policy,
            antialias,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Resize-10 and Upsample: asymmetric coordinates; nearest truncates (ceil when shrinking).

/// The scales of a Resize-10 / Upsample node: the attribute (Upsample < 9), else input 1.
fn legacy_scales(
    node: &Node,
    constant: Option<Vec<f64>>,
    opset: i64,
) -> Result<Option<Vec<f64>>, String> {
    if node.op_type == "Upsample" && opset < 9 {
        return match node.attributes.get("scales") {
            Some(onnx_ir::Attribute::Floats(v)) => Ok(Some(v.iter().map(|&f| f as f64).collect())),
            _ => Err("Upsample: the 'scales' attribute is missing".into()),
        };
    }
    Ok(constant)
}

fn legacy_mode(node: &Node) -> Result<bool, String> {
    match attr_str(node, "mode")?.as_deref().unwrap_or("nearest") {
        "nearest" => Ok(false),
        "linear" => Ok(true),
        m => Err(format!("{}: mode '{m}' is not claimed", node.op_type)),
    }
}

fn claim_legacy(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let linear = legacy_mode(node).or_decline()?;
    ctx.expect_dtype(node, 0, if linear { FLOATS } else { DATA })?;
    let dynamic = node.op_type == "Resize" || ctx.opset >= 9;
    if dynamic {
        ctx.expect_dtype(node, 1, &[DataType::Float])?;
    }
    let constant = node
        .input(1)
        .and_then(|n| ctx.constant(n))
        .and_then(|t| t.to_f64_vec());
    let Some(scales) = legacy_scales(node, constant, ctx.opset).or_decline()? else {
        // Upsample only grows (ORT rejects scales below 1), so nearest always truncates;
        // Resize-10 rounds shrinking axes up, which needs the scales.
        if node.op_type == "Resize" && !linear {
            decline!("Resize: opset-10 nearest needs scales known at plan time");
        }
        return Ok(());
    };
    if scales.iter().any(|&s| s <= 0.0) {
        decline!("{}: scales {scales:?} must be positive", node.op_type);
    }
    if node.op_type == "Upsample" && scales.iter().any(|&s| (s as f32) < 1.0) {
        decline!("Upsample: scales {scales:?} below 1 are rejected by ONNX Runtime");
    }
    if !linear {
        let down = scales.iter().any(|&s| (s as f32) < 1.0);
        let up = scales.iter().any(|&s| (s as f32) > 1.0);
        if down && up {
            decline!(
                "{}: scales {scales:?} both shrink and grow (nearest rounds them differently)",
                node.op_type
            );
        }
    } else {
        let full: Vec<f32> = scales.iter().map(|&s| s as f32).collect();
        interpolated_axes(InterpMode::Linear, &full).or_decline()?;
    }
    Ok(())
}

fn lower_legacy(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let linear = legacy_mode(node).or_invalid(node)?;
    let constant = ctx.const_input(node, 1).and_then(|t| t.to_f64_vec());
    let (scales, down) = match legacy_scales(node, constant, ctx.opset()).or_invalid(node)? {
        Some(v) => {
            let down = v.iter().any(|&s| (s as f32) < 1.0);
            (FloatSource::Static(v), down)
        }
        None => (FloatSource::Dynamic(ctx.input(node, 1)?), false),
    };
    if linear {
        return emit(
            ctx,
            node,
            InterpSpec {
                mode: InterpMode::Linear,
                coordinates: InterpCoordinates::Transform(CoordinateTransform::Asymmetric),
                scales: Some(scales),
                sizes: None,
                axes: None,
                policy: AspectPolicy::Stretch,
                antialias: false,
            },
        );
    }
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::ResizeNearest {
        x,
        spec: ResizeSpec {
            coordinate_transform: CoordinateTransform::Asymmetric,
            // Coordinates are non-negative here: truncation is floor.
            nearest_mode: if down {
                NearestMode::Ceil
            } else {
                NearestMode::Floor
            },
            scales: Some(scales),
            sizes: None,
            axes: None,
            policy: AspectPolicy::Stretch,
        },
        out,
    });
    ctx.finish(node, 0, out, dt)
}
