//! Convolution, pooling and resize: Conv, MaxPool, AveragePool, GlobalAveragePool,
//! GlobalMaxPool, Resize (nearest).

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    AutoPad, BinaryOp as B, ConvSpec, CoordinateTransform, FloatSource, NearestMode, PadMode,
    PadSpec, PoolSpec, ReduceAxes, ReduceOp, ResizeSpec, ShapeSource, WindowSpec,
};

/// Registers the nn family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Conv", 1, MAX, claim_conv, lower_conv);
    r.op("", "MaxPool", 1, MAX, claim_pool, lower_pool);
    r.op("", "AveragePool", 1, MAX, claim_pool, lower_pool);
    r.op("", "GlobalAveragePool", 1, MAX, claim_global_pool, lower_global_pool);
    r.op("", "GlobalMaxPool", 1, MAX, claim_global_pool, lower_global_pool);
    r.op("", "Resize", 11, MAX, claim_resize, lower_resize);
}

/// `auto_pad` and `pads` of a conv or pool with `d` spatial dims.
pub(crate) fn padding(node: &Node, d: usize) -> Result<AutoPad, String> {
    let auto = attr_str(node, "auto_pad")?.unwrap_or_else(|| "NOTSET".into());
    match auto.as_str() {
        "NOTSET" => {
            let pads = attr_ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * d]);
            if pads.len() != 2 * d {
                return Err(format!(
                    "{}: pads {pads:?} do not match {d} spatial dims",
                    node.op_type
                ));
            }
            if pads.iter().any(|&p| p < 0) {
                return Err(format!("{}: negative pads {pads:?}", node.op_type));
            }
            Ok(AutoPad::Explicit {
                lo: pads[..d].to_vec(),
                hi: pads[d..].to_vec(),
            })
        }
        "VALID" => Ok(AutoPad::Explicit {
            lo: vec![0; d],
            hi: vec![0; d],
        }),
        "SAME_UPPER" => Ok(AutoPad::SameUpper),
        "SAME_LOWER" => Ok(AutoPad::SameLower),
        other => Err(format!("{}: auto_pad '{other}' is invalid", node.op_type)),
    }
}

/// A per-spatial-dim attribute defaulting to ones.
pub(crate) fn spatial_attr(node: &Node, name: &str, d: usize) -> Result<Vec<i64>, String> {
    let v = attr_ints(node, name)?.unwrap_or_else(|| vec![1; d]);
    if v.len() != d || v.iter().any(|&x| x < 1) {
        return Err(format!(
            "{}: {name} {v:?} is invalid for {d} spatial dims",
            node.op_type
        ));
    }
    Ok(v)
}

/// The conv kernel's spatial shape: `kernel_shape`, else the weight's fixed dims.
fn conv_kernel(
    node: &Node,
    weight_shape: Option<Vec<i64>>,
    weight_rank: Option<usize>,
) -> Result<Vec<i64>, String> {
    if let Some(k) = attr_ints(node, "kernel_shape")? {
        if let Some(r) = weight_rank
            && r != k.len() + 2
        {
            return Err(format!(
                "Conv: kernel_shape {k:?} does not match the weight rank {r}"
            ));
        }
        if let Some(w) = &weight_shape
            && w.len() == k.len() + 2
            && w[2..] != k[..]
        {
            return Err(format!(
                "Conv: kernel_shape {k:?} disagrees with the weight's shape {w:?}"
            ));
        }
        return Ok(k);
    }
    match weight_shape {
        Some(s) if s.len() >= 3 => Ok(s[2..].to_vec()),
        _ => Err(
            "Conv: the kernel shape is unknown (no kernel_shape, weight shape not fixed)".into(),
        ),
    }
}

pub(crate) fn conv_spec(
    node: &Node,
    weight_shape: Option<Vec<i64>>,
    weight_rank: Option<usize>,
) -> Result<ConvSpec, String> {
    let kernel = conv_kernel(node, weight_shape, weight_rank)?;
    let d = kernel.len();
    if !(1..=3).contains(&d) {
        return Err(format!(
            "Conv: {d} spatial dims are not claimed (MLX convolves 1-3)"
        ));
    }
    Ok(ConvSpec {
        strides: spatial_attr(node, "strides", d)?,
        dilations: spatial_attr(node, "dilations", d)?,
        padding: padding(node, d)?,
        groups: attr_int(node, "group")?.unwrap_or(1),
        kernel,
        exact_integers: false,
    })
}

pub(crate) fn claim_conv(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.input(2).is_some() { 3 } else { 2 };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    let w = node.input(1).unwrap_or("");
    let wshape = ctx
        .constant(w)
        .map(|t| t.dims.clone())
        .or_else(|| ctx.graph.value(w).and_then(|v| v.fixed_shape()));
    let spec = conv_spec(node, wshape, ctx.rank(w)).or_decline()?;
    if spec.groups < 1 {
        decline!("Conv: group {} is invalid", spec.groups);
    }
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != spec.kernel.len() + 2
    {
        decline!("Conv: input rank {r} does not match the kernel");
    }
    Ok(())
}

pub(crate) fn channels_last_perm(rank: usize) -> Vec<usize> {
    let mut p = vec![0];
    p.extend(2..rank);
    p.push(1);
    p
}

pub(crate) fn channels_first_perm(rank: usize) -> Vec<usize> {
    let mut p = vec![0, rank - 1];
    p.extend(1..rank - 1);
    p
}

/// `(to channels-last, back to channels-first)` transpose permutations for rank `rank`.
pub(crate) fn channel_perms(rank: usize) -> (Vec<i32>, Vec<i32>) {
    let i32s = |p: Vec<usize>| p.into_iter().map(|v| v as i32).collect();
    (
        i32s(channels_last_perm(rank)),
        i32s(channels_first_perm(rank)),
    )
}

fn lower_conv(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let y = conv_channels_first(ctx, node)?;
    ctx.finish(node, 0, y, dt)
}

/// Conv of inputs 0 (X), 1 (W) and the optional bias 2, channels-first as ONNX lays it out.
pub(crate) fn conv_channels_first(ctx: &mut LowerCtx, node: &Node) -> Result<Slot, PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let wname = node.input(1).unwrap_or("").to_string();
    let wshape = ctx.fixed_shape(&wname);
    let spec = conv_spec(node, wshape, ctx.input_rank(node, 1)).or_invalid(node)?;
    let rank = spec.kernel.len() + 2;
    let (to_cl, to_cf) = channel_perms(rank);

    let x = ctx.input(node, 0)?;
    let xcl = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(to_cl.clone()),
        out: xcl,
    });
    let wcl = match ctx
        .const_input(node, 1)
        .and_then(|t| crate::consts::transpose(t, &channels_last_perm(rank)))
    {
        Some(t) => ctx.constant_from(&wname, t),
        None => {
            let w = ctx.input(node, 1)?;
            let out = ctx.temp(dt);
            ctx.push(Step::Transpose {
                x: w,
                perm: Some(to_cl),
                out,
            });
            out
        }
    };
    let y = ctx.temp(dt);
    ctx.push(Step::Conv {
        x: xcl,
        w: wcl,
        spec,
        out: y,
    });
    channels_last_out(ctx, node, y, to_cf, dt)
}

/// The last steps of Conv and ConvTranspose: adds the optional bias (input 2) to the
/// channels-last result `y`, where it broadcasts along the last axis, and transposes it back to
/// channels-first by `to_cf` as output 0.
pub(crate) fn finish_channels_last(
    ctx: &mut LowerCtx,
    node: &Node,
    y: Slot,
    to_cf: Vec<i32>,
    dt: DataType,
) -> Result<(), PlanError> {
    let out = channels_last_out(ctx, node, y, to_cf, dt)?;
    ctx.finish(node, 0, out, dt)
}

/// The channels-last result `y` plus the optional bias (input 2), transposed back by `to_cf`.
fn channels_last_out(
    ctx: &mut LowerCtx,
    node: &Node,
    mut y: Slot,
    to_cf: Vec<i32>,
    dt: DataType,
) -> Result<Slot, PlanError> {
    if let Some(b) = ctx.opt_input(node, 2)? {
        y = ctx.binary(B::Add, y, b, dt);
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x: y,
        perm: Some(to_cf),
        out,
    });
    Ok(out)
}

pub(crate) fn pool_spec(ctx_opset: i64, node: &Node) -> Result<PoolSpec, String> {
    let kernel = attr_ints(node, "kernel_shape")?
        .ok_or_else(|| format!("{}: kernel_shape is missing", node.op_type))?;
    let d = kernel.len();
    if d == 0 || kernel.iter().any(|&k| k < 1) {
        return Err(format!(
            "{}: kernel_shape {kernel:?} is invalid",
            node.op_type
        ));
    }
    let dilations_allowed = match node.op_type.as_str() {
        "MaxPool" => ctx_opset >= 10,
        _ => ctx_opset >= 19,
    };
    Ok(PoolSpec {
        strides: spatial_attr(node, "strides", d)?,
        dilations: if dilations_allowed {
            spatial_attr(node, "dilations", d)?
        } else {
            vec![1; d]
        },
        padding: padding(node, d)?,
        ceil_mode: ctx_opset >= 10 && attr_int(node, "ceil_mode")?.unwrap_or(0) != 0,
        count_include_pad: node.op_type == "AveragePool"
            && attr_int(node, "count_include_pad")?.unwrap_or(0) != 0,
        kernel,
    })
}

fn claim_pool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if node.op_type == "MaxPool" && ctx.opset >= 12 {
        // int8 and uint8 since opset 12
        ctx.expect_dtype(
            node,
            0,
            &[
                DataType::Float,
                DataType::Float16,
                DataType::BFloat16,
                DataType::Int8,
                DataType::Uint8,
            ],
        )?;
    } else {
        ctx.expect_dtype(node, 0, FLOATS)?;
    }
    let spec = pool_spec(ctx.opset, node).or_decline()?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r != spec.kernel.len() + 2
    {
        decline!(
            "{}: input rank {r} does not match kernel_shape {:?}",
            node.op_type,
            spec.kernel
        );
    }
    if let AutoPad::Explicit { lo, hi } = &spec.padding {
        for i in 0..spec.kernel.len() {
            let eff = (spec.kernel[i] - 1) * spec.dilations[i] + 1;
            if lo[i] >= eff || hi[i] >= eff {
                decline!(
                    "{}: pads {lo:?}/{hi:?} reach a whole window (kernel {:?})",
                    node.op_type,
                    spec.kernel
                );
            }
        }
    }
    if node.op_type == "MaxPool" && node.output(1).is_some() {
        super::pool_more::claim_max_pool_indices(ctx, node, &spec)?;
    }
    Ok(())
}

fn lower_pool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let spec = pool_spec(ctx.opset(), node).or_invalid(node)?;
    let d = spec.kernel.len();
    let is_max = node.op_type == "MaxPool";
    let x = ctx.input(node, 0)?;
    let spatial: Option<Vec<i64>> = ctx
        .input_fixed_shape(node, 0)
        .map(|s| s[s.len().saturating_sub(d)..].to_vec());
    let geometry = match &spatial {
        Some(s) => Some(spec.geometry(s).or_invalid(node)?),
        None => None,
    };
    let no_pad = match &geometry {
        Some(g) => g.pad_lo.iter().chain(&g.pad_hi).all(|&p| p == 0),
        None => {
            !spec.ceil_mode
                && matches!(&spec.padding, AutoPad::Explicit { lo, hi }
                    if lo.iter().chain(hi).all(|&p| p == 0))
        }
    };
    let padded = if no_pad {
        x
    } else {
        let pads = match &geometry {
            Some(g) => PadSpec::Static {
                axes: (2..2 + d as i32).collect(),
                lo: g.pad_lo.iter().map(|&v| v as i32).collect(),
                hi: g.pad_hi.iter().map(|&v| v as i32).collect(),
            },
            None => PadSpec::Pool(spec.clone()),
        };
        let lowest = match dt {
            DataType::Int8 => -128.0,
            DataType::Uint8 => 0.0,
            _ => f64::NEG_INFINITY,
        };
        let value = ctx.scalar(dt, if is_max { lowest } else { 0.0 })?;
        let out = ctx.temp(dt);
        ctx.push(Step::Pad {
            x,
            pads,
            mode: PadMode::Constant,
            value,
            out,
        });
        out
    };
    let windows = ctx.temp(dt);
    ctx.push(Step::Windows {
        x: padded,
        spec: WindowSpec {
            kernel: spec.kernel.clone(),
            strides: spec.strides.clone(),
            dilations: spec.dilations.clone(),
        },
        out: windows,
    });
    let axes = ReduceAxes::Static((2 + d as i64..2 + 2 * d as i64).collect());
    let reduce = |ctx: &mut LowerCtx, op: ReduceOp| {
        let out = ctx.temp(dt);
        ctx.push(Step::Reduce {
            op,
            x: windows,
            axes: axes.clone(),
            keepdims: false,
            out,
        });
        out
    };
    if is_max {
        let out = reduce(ctx, ReduceOp::Max);
        if node.output(1).is_some() {
            let pad_lo = geometry.as_ref().map(|g| g.pad_lo.clone());
            super::pool_more::lower_max_pool_indices(ctx, node, &spec, x, windows, pad_lo)?;
        }
        return ctx.finish(node, 0, out, dt);
    }
    // Average: a plain mean when every window counts the full kernel.
    let uniform_dynamic = !spec.ceil_mode && (spec.count_include_pad || no_pad);
    let divisor = match &spatial {
        Some(s) => {
            let mut shape = vec![1, 1];
            shape.extend_from_slice(s);
            let (dims, values) = spec.divisor(&shape).or_invalid(node)?;
            if values.windows(2).all(|w| w[0] == w[1]) {
                None
            } else {
                let dims: Vec<i64> = dims.iter().map(|&v| v as i64).collect();
                let vals: Vec<f64> = values.iter().map(|&v| v as f64).collect();
                let Some(t) = crate::consts::tensor_from_f64(dt, dims, &vals) else {
                    invalid!(node, "cannot encode pool divisors as {dt}");
                };
                Some(ctx.constant(t))
            }
        }
        None if uniform_dynamic => None,
        None => {
            let out = ctx.temp(dt);
            ctx.push(Step::PoolDivisor {
                x,
                spec: spec.clone(),
                dtype: dt,
                out,
            });
            Some(out)
        }
    };
    let out = match divisor {
        None => reduce(ctx, ReduceOp::Mean),
        Some(div) => {
            let sum = reduce(ctx, ReduceOp::Sum);
            ctx.binary(B::Divide, sum, div, dt)
        }
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_global_pool(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let r = ctx.expect_rank(node, 0)?;
    if r < 3 {
        decline!("{}: input rank {r} is below 3", node.op_type);
    }
    Ok(())
}

fn lower_global_pool(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let r = ctx.need_rank(node, 0)?;
    let x = ctx.input(node, 0)?;
    let op = if node.op_type == "GlobalMaxPool" {
        ReduceOp::Max
    } else {
        ReduceOp::Mean
    };
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op,
        x,
        axes: ReduceAxes::Static((2..r as i64).collect()),
        keepdims: true,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn resize_modes(node: &Node) -> Result<(CoordinateTransform, NearestMode), String> {
    let mode = attr_str(node, "mode")?.unwrap_or_else(|| "nearest".into());
    if mode != "nearest" {
        return Err(format!(
            "Resize: mode '{mode}' is not claimed (only nearest is lowered)"
        ));
    }
    let ct = match attr_str(node, "coordinate_transformation_mode")?
        .as_deref()
        .unwrap_or("half_pixel")
    {
        "half_pixel" => CoordinateTransform::HalfPixel,
        "half_pixel_symmetric" => CoordinateTransform::HalfPixelSymmetric,
        "pytorch_half_pixel" => CoordinateTransform::PytorchHalfPixel,
        "align_corners" => CoordinateTransform::AlignCorners,
        "asymmetric" => CoordinateTransform::Asymmetric,
        "tf_half_pixel_for_nearest" => CoordinateTransform::TfHalfPixelForNearest,
        other => {
            return Err(format!(
                "Resize: coordinate_transformation_mode '{other}' is not claimed"
            ));
        }
    };
    let nm = match attr_str(node, "nearest_mode")?
        .as_deref()
        .unwrap_or("round_prefer_floor")
    {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(format!("Resize: nearest_mode '{other}' is invalid")),
    };
    Ok((ct, nm))
}

fn claim_resize(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if super::resize::is_interp(node) {
        return super::resize::claim_interp(ctx, node);
    }
    ctx.expect_dtype(node, 0, DATA)?;
    resize_modes(node).or_decline()?;
    super::resize::aspect_policy(node, ctx.opset).or_decline()?;
    if node.input(2).is_some() {
        ctx.expect_dtype(node, 2, &[DataType::Float])?;
    }
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, &[DataType::Int64])?;
    }
    if node.input(2).is_none() && node.input(3).is_none() {
        decline!("Resize: neither scales nor sizes is given");
    }
    super::resize::check_nearest(ctx, node)
}

fn lower_resize(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if super::resize::is_interp(node) {
        return super::resize::lower_interp(ctx, node);
    }
    let (ct, nm) = resize_modes(node).or_invalid(node)?;
    let scales = match node.input(2) {
        None => None,
        Some(_) => match ctx.const_input(node, 2) {
            Some(t) => {
                let v = t.to_f64_vec().unwrap_or_default();
                (!v.is_empty()).then_some(FloatSource::Static(v))
            }
            None => Some(FloatSource::Dynamic(ctx.input(node, 2)?)),
        },
    };
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
    let spec = ResizeSpec {
        coordinate_transform: ct,
        nearest_mode: nm,
        scales,
        sizes,
        axes,
        policy: super::resize::aspect_policy(node, ctx.opset()).or_invalid(node)?,
    };
    super::resize::lower_nearest(ctx, node, &spec)
}
