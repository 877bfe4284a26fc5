//! Resize in linear and cubic modes (opset 11+, dispatched from `nn`), Resize-10 and
//! Upsample (opsets 7-9), with ONNX Runtime's coordinate and weight rules
//! (see [`crate::step::InterpSpec`]).

use onnx_ir::{DataType, Dim, Node, TensorData};

use super::*;
use crate::decline;
use crate::host::HostArg;
use crate::kernel::{KernelAttrs, f64s, i64s, input, opt_input};
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    AspectPolicy, AxisTables, CoordinateTransform, FloatSource, InterpCoordinates, InterpLayout,
    InterpMode, InterpSpec, LayoutAxis, NearestMode, ResizeSpec, ShapeSource, interpolated_axes,
    interpolated_axes_for,
};

/// Registers Resize-10 and Upsample (Resize 11+ is registered by `nn`), and the host kernel
/// of the interpolation tables.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Resize", 10, 10, claim_legacy, lower_legacy);
    r.op("", "Upsample", 7, 9, claim_legacy, lower_legacy);
    r.kernel(TABLES_KERNEL, tables_kernel);
}

const TABLES_KERNEL: &str = "resize_tables";

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
    let roi = match transform {
        Some(_) => None,
        None => claim_floats(ctx, node, 1),
    };
    let spec = interp_spec(
        node,
        ctx.opset,
        roi,
        claim_floats(ctx, node, 2),
        claim_ints(ctx, node, 3),
    )
    .or_decline()?;
    check_layout(ctx, node, &spec)?;
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
    let Some(known) = known_dims(ctx.shape_of(node.input(0).unwrap_or(""))) else {
        invalid!(node, "Resize: the input rank is unknown");
    };
    let y = interpolate(ctx, node, x, &spec, &known)?;
    let y = ctx.cast(y, DataType::Float, dt);
    ctx.finish(node, 0, y, dt)
}

/// Each dim's size where it is fixed.
fn known_dims(dims: Option<Vec<Dim>>) -> Option<Vec<Option<i64>>> {
    Some(dims?.iter().map(Dim::fixed).collect())
}

/// The claim's check that the resize has a fixed step layout (see [`InterpSpec::layout`]):
/// a known rank, and with antialias a bounded number of taps.
fn check_layout(ctx: &ClaimCtx, node: &Node, spec: &InterpSpec) -> Result<(), Decline> {
    let name = node.input(0).unwrap_or("");
    let dims = match ctx.constant(name) {
        Some(t) => Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect()),
        None => ctx.graph.value(name).and_then(|v| v.shape.clone()),
    };
    let Some(known) = known_dims(dims) else {
        decline!("Resize: linear / cubic needs the input rank known at plan time");
    };
    spec.layout(&known).or_decline()?;
    Ok(())
}

/// The source of an input as the claim knows it: its constant values, else dynamic (the slot
/// is a placeholder: the claim reads no value).
fn claim_floats(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<FloatSource> {
    let name = node.input(i)?;
    Some(match ctx.constant(name).and_then(|t| t.to_f64_vec()) {
        Some(v) if v.is_empty() => return None,
        Some(v) => FloatSource::Static(v),
        None => FloatSource::Dynamic(Slot(0)),
    })
}

fn claim_ints(ctx: &ClaimCtx, node: &Node, i: usize) -> Option<ShapeSource> {
    let name = node.input(i)?;
    Some(match ctx.constant(name).and_then(|t| t.to_i64_vec()) {
        Some(v) if v.is_empty() => return None,
        Some(v) => ShapeSource::Static(v),
        None => ShapeSource::Dynamic(Slot(0)),
    })
}

/// The spec of a Resize-11+ node from its attributes and these input sources.
fn interp_spec(
    node: &Node,
    opset: i64,
    roi: Option<FloatSource>,
    scales: Option<FloatSource>,
    sizes: Option<ShapeSource>,
) -> Result<InterpSpec, String> {
    let coordinates = match coordinate_mode(node)? {
        Some(t) => InterpCoordinates::Transform(t),
        None => {
            let Some(roi) = roi else {
                return Err("Resize: tf_crop_and_resize needs a roi".into());
            };
            InterpCoordinates::CropAndResize {
                roi,
                extrapolation: attr_float(node, "extrapolation_value")?.unwrap_or(0.0),
            }
        }
    };
    Ok(InterpSpec {
        mode: interp_mode(node)?,
        coordinates,
        scales,
        sizes,
        axes: if opset >= 18 {
            attr_ints(node, "axes")?
        } else {
            None
        },
        policy: aspect_policy(node, opset)?,
        antialias: antialias(node, opset)?,
    })
}

/// The slots of one layout axis's tables.
struct AxisSlots {
    axis: i32,
    /// `(indices [m] int32, weights [1.., m, ..1] float32)` per tap.
    taps: Vec<(Slot, Slot)>,
    divisor: Option<Slot>,
    inside: Option<Slot>,
}

/// A table of `m` values shaped to broadcast along `axis` of a rank-`rank` array.
fn along(rank: usize, axis: usize, m: usize) -> Vec<i64> {
    let mut shape = vec![1i64; rank];
    shape[axis] = m as i64;
    shape
}

/// The float32 resize of `x`: the interpolation tables are constants when the input's dims
/// and the node's scales, sizes and roi are known at plan time, else the host kernel
/// `resize_tables` computes them from the run's shape and values; then gathers, weights and
/// sums (see [`apply`]).
fn interpolate(
    ctx: &mut LowerCtx,
    node: &Node,
    x: Slot,
    spec: &InterpSpec,
    known: &[Option<i64>],
) -> Result<Slot, PlanError> {
    let rank = known.len();
    if let Some(args) = static_args(spec, known) {
        let layout = InterpLayout::of(&args, rank);
        let dims: Vec<i64> = known.iter().map(|d| d.unwrap_or(1)).collect();
        let tables = args.fit(&layout, &dims).or_invalid(node)?;
        let slots = layout
            .axes
            .iter()
            .zip(tables)
            .map(|(l, t)| constant_tables(ctx, rank, l, t))
            .collect();
        return apply(ctx, x, &layout, slots);
    }
    let layout = spec.layout(known).or_invalid(node)?;
    let source = |s: Option<HostArg>| s.unwrap_or(HostArg::Absent);
    let floats = |f: &FloatSource| match f {
        FloatSource::Static(v) => HostArg::Const(TensorData::from_f32(
            vec![v.len() as i64],
            &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
        )),
        FloatSource::Dynamic(slot) => HostArg::Value(*slot),
    };
    let roi = match &spec.coordinates {
        InterpCoordinates::CropAndResize { roi, .. } => Some(floats(roi)),
        InterpCoordinates::Transform(_) => None,
    };
    let inputs = vec![
        HostArg::ShapeOf(x),
        source(spec.scales.as_ref().map(floats)),
        source(spec.sizes.as_ref().map(|s| match s {
            ShapeSource::Static(v) => HostArg::Const(TensorData::from_i64(vec![v.len() as i64], v)),
            ShapeSource::Dynamic(slot) => HostArg::Value(*slot),
        })),
        source(roi),
    ];
    let mut dtypes = Vec::new();
    for l in &layout.axes {
        for _ in 0..l.taps {
            dtypes.extend([DataType::Int32, DataType::Float]);
        }
        if l.divisor {
            dtypes.push(DataType::Float);
        }
        if l.inside {
            dtypes.push(DataType::Bool);
        }
    }
    let outs = ctx.host_kernel(
        node,
        TABLES_KERNEL,
        inputs,
        kernel_attrs(spec, &layout),
        &dtypes,
    )?;
    let mut outs = outs.into_iter();
    let mut slots = Vec::with_capacity(layout.axes.len());
    for l in &layout.axes {
        let mut next = || {
            outs.next().ok_or_else(|| PlanError::Invalid {
                node: node.name.clone(),
                reason: "Resize: too few table outputs".into(),
            })
        };
        let mut taps = Vec::with_capacity(l.taps);
        for _ in 0..l.taps {
            taps.push((next()?, next()?));
        }
        let divisor = if l.divisor { Some(next()?) } else { None };
        let inside = if l.inside { Some(next()?) } else { None };
        slots.push(AxisSlots {
            axis: l.axis as i32,
            taps,
            divisor,
            inside,
        });
    }
    apply(ctx, x, &layout, slots)
}

/// The arguments resolved at plan time, when every value they depend on is known: static
/// scales, sizes and roi, and the dims of the interpolated axes (other unknown dims must have
/// scale 1, standing in as 1).
fn static_args(spec: &InterpSpec, known: &[Option<i64>]) -> Option<crate::step::InterpArgs> {
    let dynamic = matches!(spec.scales, Some(FloatSource::Dynamic(_)))
        || matches!(spec.sizes, Some(ShapeSource::Dynamic(_)))
        || matches!(
            spec.coordinates,
            InterpCoordinates::CropAndResize {
                roi: FloatSource::Dynamic(_),
                ..
            }
        );
    if dynamic {
        return None;
    }
    let scales = spec.known_scales(known).ok()?;
    if known
        .iter()
        .zip(&scales)
        .any(|(d, s)| d.is_none() && *s != Some(1.0))
    {
        return None;
    }
    let dims: Vec<i64> = known.iter().map(|d| d.unwrap_or(1)).collect();
    struct NoHost;
    impl crate::HostReader for NoHost {
        fn ints(&mut self, _: Slot) -> Result<Vec<i64>, String> {
            Err("dynamic".into())
        }
        fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
            Err("dynamic".into())
        }
    }
    let args = spec.resolve(&dims, &mut NoHost).ok()?;
    args.axes
        .iter()
        .all(|a| known[a.axis as usize].is_some())
        .then_some(args)
}

/// Constant slots of one axis's tables.
fn constant_tables(ctx: &mut LowerCtx, rank: usize, l: &LayoutAxis, t: AxisTables) -> AxisSlots {
    let shape = |m: usize| along(rank, l.axis, m);
    let taps = t
        .taps
        .iter()
        .map(|(idx, w)| {
            let i = ctx.const_i32(vec![idx.len() as i64], idx);
            let w = ctx.const_f32(shape(w.len()), w);
            (i, w)
        })
        .collect();
    let divisor = t.divisor.map(|d| ctx.const_f32(shape(d.len()), &d));
    let inside = t.inside.map(|v| {
        let bytes: Vec<u8> = v.iter().map(|&b| u8::from(b)).collect();
        ctx.constant(TensorData {
            dtype: DataType::Bool,
            dims: shape(v.len()),
            bytes: bytes.into(),
        })
    });
    AxisSlots {
        axis: l.axis as i32,
        taps,
        divisor,
        inside,
    }
}

/// The interpolation steps over the tables: no axes, a copy (`AsType`); separable (cubic,
/// antialias): one pass per axis, innermost first, `sum_t(w_t * take(cur, idx_t) [/ divisor])`;
/// linear: the corners (last axis varying fastest) gathered along every axis and
/// `sum(w_last * ... * w_first * corner)` accumulated in that order (ORT's order of
/// operations); with extrapolation, `where(inside_0 && inside_1 ..., y, value)`.
fn apply(
    ctx: &mut LowerCtx,
    x: Slot,
    layout: &InterpLayout,
    axes: Vec<AxisSlots>,
) -> Result<Slot, PlanError> {
    let f = DataType::Float;
    if axes.is_empty() {
        return Ok(ctx.emit(f, |out| Step::AsType { x, dtype: f, out }));
    }
    let take = |ctx: &mut LowerCtx, x: Slot, indices: Slot, axis: i32| {
        ctx.emit(f, |out| Step::Take {
            x,
            indices,
            axis,
            out,
        })
    };
    let add = |ctx: &mut LowerCtx, acc: Option<Slot>, t: Slot| match acc {
        None => t,
        Some(a) => ctx.binary(BinaryOp::Add, a, t, f),
    };
    let y = if layout.separable {
        let mut cur = x;
        for ax in axes.iter().rev() {
            let mut acc = None;
            for &(idx, w) in &ax.taps {
                let g = take(ctx, cur, idx, ax.axis);
                let mut t = ctx.binary(BinaryOp::Multiply, w, g, f);
                if let Some(d) = ax.divisor {
                    t = ctx.binary(BinaryOp::Divide, t, d, f);
                }
                acc = Some(add(ctx, acc, t));
            }
            cur = acc.unwrap_or(cur);
        }
        cur
    } else {
        // Each corner: the gathered values and the tap chosen on each axis so far.
        let mut corners: Vec<(Slot, Vec<usize>)> = vec![(x, Vec::new())];
        for ax in &axes {
            let mut next = Vec::with_capacity(corners.len() * ax.taps.len());
            for (arr, picks) in &corners {
                for (t, &(idx, _)) in ax.taps.iter().enumerate() {
                    let mut p = picks.clone();
                    p.push(t);
                    next.push((take(ctx, *arr, idx, ax.axis), p));
                }
            }
            corners = next;
        }
        let last = axes.len() - 1;
        let mut acc = None;
        for (value, picks) in &corners {
            let mut w = axes[last].taps[picks[last]].1;
            for j in (0..last).rev() {
                w = ctx.binary(BinaryOp::Multiply, w, axes[j].taps[picks[j]].1, f);
            }
            let t = ctx.binary(BinaryOp::Multiply, w, *value, f);
            acc = Some(add(ctx, acc, t));
        }
        acc.unwrap_or(x)
    };
    let Some(value) = layout.extrapolation else {
        return Ok(y);
    };
    let mut mask: Option<Slot> = None;
    for m in axes.iter().filter_map(|a| a.inside) {
        mask = Some(match mask {
            None => m,
            Some(prev) => ctx.binary(BinaryOp::LogicalAnd, prev, m, DataType::Bool),
        });
    }
    let Some(mask) = mask else {
        return Ok(y);
    };
    let v = ctx.scalar(f, value as f64)?;
    Ok(ctx.emit(f, |out| Step::Where {
        cond: mask,
        x: y,
        y: v,
        out,
    }))
}

fn transform_code(t: Option<CoordinateTransform>) -> i64 {
    use CoordinateTransform::*;
    match t {
        None => -1,
        Some(HalfPixel) => 0,
        Some(HalfPixelSymmetric) => 1,
        Some(PytorchHalfPixel) => 2,
        Some(AlignCorners) => 3,
        Some(Asymmetric) => 4,
        Some(TfHalfPixelForNearest) => 5,
    }
}

fn transform_of(code: i64) -> Result<Option<CoordinateTransform>, String> {
    use CoordinateTransform::*;
    Ok(Some(match code {
        -1 => return Ok(None),
        0 => HalfPixel,
        1 => HalfPixelSymmetric,
        2 => PytorchHalfPixel,
        3 => AlignCorners,
        4 => Asymmetric,
        5 => TfHalfPixelForNearest,
        c => return Err(format!("resize_tables: coordinate code {c} is unknown")),
    }))
}

fn policy_code(p: AspectPolicy) -> i64 {
    match p {
        AspectPolicy::Stretch => 0,
        AspectPolicy::NotLarger => 1,
        AspectPolicy::NotSmaller => 2,
    }
}

/// The spec's static attributes and the layout, for [`tables_kernel`].
fn kernel_attrs(spec: &InterpSpec, layout: &InterpLayout) -> KernelAttrs {
    let (cubic, a, exclude) = match spec.mode {
        InterpMode::Linear => (false, 0.0, false),
        InterpMode::Cubic { a, exclude_outside } => (true, a, exclude_outside),
    };
    let (transform, extrapolation) = match &spec.coordinates {
        InterpCoordinates::Transform(t) => (Some(*t), 0.0),
        InterpCoordinates::CropAndResize { extrapolation, .. } => (None, *extrapolation),
    };
    let mut attrs = KernelAttrs::new()
        .bool("cubic", cubic)
        .float("cubic_coeff_a", a as f64)
        .bool("exclude_outside", exclude)
        .int("transform", transform_code(transform))
        .float("extrapolation", extrapolation as f64)
        .int("policy", policy_code(spec.policy))
        .bool("antialias", spec.antialias)
        .int("rank", layout.rank as i64)
        .bool("separable", layout.separable)
        .ints(
            "layout_axes",
            layout.axes.iter().map(|l| l.axis as i64).collect(),
        )
        .ints(
            "layout_taps",
            layout.axes.iter().map(|l| l.taps as i64).collect(),
        )
        .ints(
            "layout_divisor",
            layout.axes.iter().map(|l| l.divisor as i64).collect(),
        )
        .ints(
            "layout_inside",
            layout.axes.iter().map(|l| l.inside as i64).collect(),
        );
    if let Some(axes) = &spec.axes {
        attrs = attrs.ints("axes", axes.clone());
    }
    attrs
}

/// The interpolation tables of a linear / cubic Resize for one run: inputs the input's shape
/// (int64), then `scales`, `sizes` and `roi` (each may be absent); attributes the node's
/// (see [`kernel_attrs`]) and the plan's layout. Outputs, per layout axis: per tap the indices
/// (int32 `[m]`) and weights (float32, `m` along the axis), then the divisor (float32) and
/// the inside mask (bool) where the layout has them ([`crate::step::InterpArgs::fit`]).
fn tables_kernel(
    inputs: &[Option<TensorData>],
    attrs: &KernelAttrs,
) -> Result<Vec<TensorData>, String> {
    let shape = i64s(input(inputs, 0)?)?;
    let floats = |i: usize| -> Result<Option<Vec<f64>>, String> {
        opt_input(inputs, i).map(f64s).transpose()
    };
    let mode = if attrs.get_bool("cubic")? {
        InterpMode::Cubic {
            a: attrs.get_float("cubic_coeff_a")? as f32,
            exclude_outside: attrs.get_bool("exclude_outside")?,
        }
    } else {
        InterpMode::Linear
    };
    let coordinates = match transform_of(attrs.get_int("transform")?)? {
        Some(t) => InterpCoordinates::Transform(t),
        None => InterpCoordinates::CropAndResize {
            roi: FloatSource::Static(floats(3)?.unwrap_or_default()),
            extrapolation: attrs.get_float("extrapolation")? as f32,
        },
    };
    let policy = match attrs.get_int("policy")? {
        0 => AspectPolicy::Stretch,
        1 => AspectPolicy::NotLarger,
        _ => AspectPolicy::NotSmaller,
    };
    let spec = InterpSpec {
        mode,
        coordinates,
        scales: floats(1)?
            .filter(|v| !v.is_empty())
            .map(FloatSource::Static),
        sizes: opt_input(inputs, 2)
            .map(i64s)
            .transpose()?
            .filter(|v| !v.is_empty())
            .map(ShapeSource::Static),
        axes: attrs.get_ints("axes").ok().map(<[i64]>::to_vec),
        policy,
        antialias: attrs.get_bool("antialias")?,
    };
    let ints = |name: &str| attrs.get_ints(name);
    let (axes, taps, divisor, inside) = (
        ints("layout_axes")?,
        ints("layout_taps")?,
        ints("layout_divisor")?,
        ints("layout_inside")?,
    );
    let rank = attrs.get_int("rank")? as usize;
    if shape.len() != rank
        || [taps.len(), divisor.len(), inside.len()]
            .iter()
            .any(|&n| n != axes.len())
    {
        return Err(format!(
            "resize_tables: an input of shape {shape:?} for a rank-{rank} layout"
        ));
    }
    let layout = InterpLayout {
        rank,
        separable: attrs.get_bool("separable")?,
        axes: (0..axes.len())
            .map(|i| LayoutAxis {
                axis: axes[i] as usize,
                taps: taps[i] as usize,
                divisor: divisor[i] != 0,
                inside: inside[i] != 0,
            })
            .collect(),
        extrapolation: match &spec.coordinates {
            InterpCoordinates::CropAndResize { extrapolation, .. } => Some(*extrapolation),
            InterpCoordinates::Transform(_) => None,
        },
    };
    struct NoHost;
    impl crate::HostReader for NoHost {
        fn ints(&mut self, s: Slot) -> Result<Vec<i64>, String> {
            Err(format!("resize_tables: no host value of {s:?}"))
        }
        fn floats(&mut self, s: Slot) -> Result<Vec<f64>, String> {
            Err(format!("resize_tables: no host value of {s:?}"))
        }
    }
    let args = spec.resolve(&shape, &mut NoHost)?;
    let tables = args.fit(&layout, &shape)?;
    let mut out = Vec::new();
    for (l, t) in layout.axes.iter().zip(tables) {
        let dims = |m: usize| along(rank, l.axis, m);
        for (idx, w) in &t.taps {
            let bytes: Vec<u8> = idx.iter().flat_map(|v| v.to_le_bytes()).collect();
            out.push(TensorData::new(
                DataType::Int32,
                vec![idx.len() as i64],
                bytes,
            )?);
            out.push(TensorData::from_f32(dims(w.len()), w));
        }
        if let Some(d) = &t.divisor {
            out.push(TensorData::from_f32(dims(d.len()), d));
        }
        if let Some(v) = &t.inside {
            let bytes: Vec<u8> = v.iter().map(|&b| u8::from(b)).collect();
            out.push(TensorData::new(DataType::Bool, dims(v.len()), bytes)?);
        }
    }
    Ok(out)
}

/// Lowering of Resize-11+ in linear / cubic mode.
pub(crate) fn lower_interp(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let roi = match coordinate_mode(node).or_invalid(node)? {
        Some(_) => None,
        None => float_input(ctx, node, 1)?,
    };
    let scales = float_input(ctx, node, 2)?;
    let sizes = match node.input(3) {
        None => None,
        Some(_) => match ctx.ints_input(node, 3)? {
            ShapeSource::Static(v) if v.is_empty() => None,
            s => Some(s),
        },
    };
    let spec = interp_spec(node, ctx.opset(), roi, scales, sizes).or_invalid(node)?;
    emit(ctx, node, spec)
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
        if linear {
            check_layout(ctx, node, &legacy_linear(FloatSource::Dynamic(Slot(0))))?;
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
        check_layout(ctx, node, &legacy_linear(FloatSource::Static(scales)))?;
    }
    Ok(())
}

/// The spec of a Resize-10 / Upsample in linear mode.
fn legacy_linear(scales: FloatSource) -> InterpSpec {
    InterpSpec {
        mode: InterpMode::Linear,
        coordinates: InterpCoordinates::Transform(CoordinateTransform::Asymmetric),
        scales: Some(scales),
        sizes: None,
        axes: None,
        policy: AspectPolicy::Stretch,
        antialias: false,
    }
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
        return emit(ctx, node, legacy_linear(scales));
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
