//! Shape and data-movement ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
//! Slice, Gather, GatherElements, Shape, Size, Expand, ConstantOfShape, Constant, Tile, Split,
//! Range, Pad, Trilu, CenterCropPad.

use onnx_ir::{Attribute, DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{
    FloatSource, PadMode, PadSpec, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource, SliceSpec,
    normalize_axis,
};

/// Registers the shape family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Reshape", 5, MAX, claim_reshape, lower_reshape);
    r.op("", "Flatten", 1, MAX, claim_data, lower_flatten);
    r.op("", "Squeeze", 1, MAX, claim_data, lower_squeeze);
    r.op("", "Unsqueeze", 1, MAX, claim_unsqueeze, lower_unsqueeze);
    r.op("", "Transpose", 1, MAX, claim_transpose, lower_transpose);
    r.op("", "Concat", 4, MAX, claim_concat, lower_concat);
    r.op("", "Slice", 1, MAX, claim_slice, lower_slice);
    r.op("", "Gather", 1, MAX, claim_gather, lower_gather);
    r.op("", "GatherElements", 11, MAX, claim_gather, lower_gather_elements);
    r.op("", "Shape", 1, MAX, claim_shape, lower_shape);
    r.op("", "Size", 1, MAX, claim_shape, lower_size);
    r.op("", "Expand", 8, MAX, claim_expand, lower_expand);
    r.op("", "ConstantOfShape", 9, MAX, claim_constant_of_shape, lower_constant_of_shape);
    r.op("", "Constant", 1, MAX, claim_constant, lower_constant);
    r.op("", "Tile", 6, MAX, claim_tile, lower_tile);
    r.op("", "Split", 2, MAX, claim_split, lower_split);
    r.op("", "Range", 11, MAX, claim_range, lower_range);
    r.op("", "Pad", 2, MAX, claim_pad, lower_pad);
    r.op("", "Trilu", 14, MAX, claim_trilu, lower_trilu);
    r.op("", "CenterCropPad", 18, MAX, claim_center_crop_pad, lower_center_crop_pad);
}

fn claim_data(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA).map(|_| ())
}

/// Emits a reshape to `target`, or to the output's declared fixed shape when there is one.
fn reshape(ctx: &mut LowerCtx, node: &Node, target: ReshapeTarget) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let target = match ctx.output_fixed_shape(node, 0) {
        Some(s) => ReshapeTarget::Fixed(s),
        None => target,
    };
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape { x, target, out });
    ctx.finish(node, 0, out, dt)
}

/// A target computed at plan time when the input shape and host values are all static.
fn static_target(
    ctx: &LowerCtx,
    node: &Node,
    target: &ReshapeTarget,
) -> Result<Option<ReshapeTarget>, PlanError> {
    let Some(in_shape) = ctx.input_fixed_shape(node, 0) else {
        return Ok(None);
    };
    if !target.host_reads().is_empty() {
        return Ok(None);
    }
    struct NoHost;
    impl crate::HostReader for NoHost {
        fn ints(&mut self, _: Slot) -> Result<Vec<i64>, String> {
            Err("dynamic".into())
        }
        fn floats(&mut self, _: Slot) -> Result<Vec<f64>, String> {
            Err("dynamic".into())
        }
    }
    let shape = target
        .resolve(&in_shape, None, &mut NoHost)
        .or_invalid(node)?;
    Ok(Some(ReshapeTarget::Fixed(
        shape.into_iter().map(i64::from).collect(),
    )))
}

fn reshape_resolved(
    ctx: &mut LowerCtx,
    node: &Node,
    target: ReshapeTarget,
) -> Result<(), PlanError> {
    let target = static_target(ctx, node, &target)?.unwrap_or(target);
    reshape(ctx, node, target)
}

fn claim_reshape(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    Ok(())
}

fn lower_reshape(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let allowzero =
        ctx.opset() >= 14 && attr_int(node, "allowzero").or_invalid(node)?.unwrap_or(0) != 0;
    let shape = ctx.ints_input(node, 1)?;
    reshape_resolved(ctx, node, ReshapeTarget::Onnx { shape, allowzero })
}

fn lower_flatten(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(1);
    reshape_resolved(ctx, node, ReshapeTarget::Flatten { axis })
}

fn axes_source(
    ctx: &mut LowerCtx,
    node: &Node,
    input_form: bool,
) -> Result<Option<ShapeSource>, PlanError> {
    if input_form {
        if node.input(1).is_none() {
            return Ok(None);
        }
        Ok(Some(ctx.ints_input(node, 1)?))
    } else {
        Ok(attr_ints(node, "axes")
            .or_invalid(node)?
            .map(ShapeSource::Static))
    }
}

fn lower_squeeze(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let axes = axes_source(ctx, node, ctx.opset() >= 13)?;
    reshape_resolved(ctx, node, ReshapeTarget::Squeeze { axes })
}

fn claim_unsqueeze(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    if ctx.opset >= 13 {
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    } else if attr_ints(node, "axes").or_decline()?.is_none() {
        decline!("Unsqueeze: the 'axes' attribute is missing");
    }
    Ok(())
}

fn lower_unsqueeze(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let Some(axes) = axes_source(ctx, node, ctx.opset() >= 13)? else {
        invalid!(node, "Unsqueeze needs axes");
    };
    reshape_resolved(ctx, node, ReshapeTarget::Unsqueeze { axes })
}

fn claim_transpose(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    if let Some(perm) = attr_ints(node, "perm").or_decline()? {
        let mut sorted = perm.clone();
        sorted.sort_unstable();
        if sorted.iter().enumerate().any(|(i, &p)| p != i as i64) {
            decline!("Transpose: perm {perm:?} is not a permutation");
        }
        if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
            && r != perm.len()
        {
            decline!("Transpose: perm {perm:?} does not match rank {r}");
        }
    }
    Ok(())
}

fn lower_transpose(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let perm = attr_ints(node, "perm").or_invalid(node)?;
    if let Some(t) = ctx.const_input(node, 0) {
        let p: Vec<usize> = match &perm {
            Some(p) => p.iter().map(|&v| v as usize).collect(),
            None => (0..t.dims.len()).rev().collect(),
        };
        if let Some(folded) = crate::consts::transpose(t, &p) {
            ctx.fold(node, 0, folded);
            return Ok(());
        }
    }
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: perm.map(|p| p.into_iter().map(|v| v as i32).collect()),
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_concat(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    if attr_int(node, "axis").or_decline()?.is_none() {
        decline!("Concat: the 'axis' attribute is missing");
    }
    same_dtypes(ctx, node, 0..node.inputs.len(), DATA).map(|_| ())
}

fn lower_concat(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let mut inputs = Vec::new();
    for i in 0..node.inputs.len() {
        if let Some(s) = ctx.opt_input(node, i)? {
            inputs.push(s);
        }
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Concat {
        inputs,
        axis: axis as i32,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_slice(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    if ctx.opset < 10 {
        for a in ["starts", "ends"] {
            if attr_ints(node, a).or_decline()?.is_none() {
                decline!("Slice: the '{a}' attribute is missing");
            }
        }
    } else {
        for i in 1..5 {
            if node.input(i).is_some() {
                ctx.expect_dtype(node, i, INDEX)?;
            }
        }
    }
    Ok(())
}

fn lower_slice(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let spec = if ctx.opset() < 10 {
        let get = |a: &str| attr_ints(node, a).or_invalid(node);
        SliceSpec {
            starts: ShapeSource::Static(get("starts")?.unwrap_or_default()),
            ends: ShapeSource::Static(get("ends")?.unwrap_or_default()),
            axes: get("axes")?.map(ShapeSource::Static),
            steps: None,
        }
    } else {
        let opt = |ctx: &mut LowerCtx, i: usize| -> Result<Option<ShapeSource>, PlanError> {
            if node.input(i).is_some() {
                ctx.ints_input(node, i).map(Some)
            } else {
                Ok(None)
            }
        };
        SliceSpec {
            starts: ctx.ints_input(node, 1)?,
            ends: ctx.ints_input(node, 2)?,
            axes: opt(ctx, 3)?,
            steps: opt(ctx, 4)?,
        }
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Slice { x, spec, out });
    ctx.finish(node, 0, out, dt)
}

fn claim_gather(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, INDEX)?;
    Ok(())
}

fn gather_axis(ctx: &LowerCtx, node: &Node) -> Result<i32, PlanError> {
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    Ok(match ctx.input_rank(node, 0) {
        Some(r) => normalize_axis(axis, r).or_invalid(node)? as i32,
        None => axis as i32,
    })
}

fn lower_gather(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = gather_axis(ctx, node)?;
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x,
        indices,
        axis,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn lower_gather_elements(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = gather_axis(ctx, node)?;
    let x = ctx.input(node, 0)?;
    let indices = ctx.input(node, 1)?;
    let out = ctx.temp(dt);
    ctx.push(Step::TakeAlongAxis {
        x,
        indices,
        axis,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_shape(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA).map(|_| ())
}

fn shape_attrs(ctx: &LowerCtx, node: &Node) -> Result<(i64, Option<i64>), PlanError> {
    if ctx.opset() < 15 {
        return Ok((0, None));
    }
    Ok((
        attr_int(node, "start").or_invalid(node)?.unwrap_or(0),
        attr_int(node, "end").or_invalid(node)?,
    ))
}

fn lower_shape(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (start, end) = shape_attrs(ctx, node)?;
    if let Some(dims) = ctx.shape_of(node.input(0).unwrap_or("")) {
        let r = crate::step::shape_range(dims.len(), start, end);
        let part: Option<Vec<i64>> = dims[r].iter().map(|d| d.fixed()).collect();
        if let Some(v) = part {
            ctx.fold(node, 0, TensorData::from_i64(vec![v.len() as i64], &v));
            return Ok(());
        }
    }
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(DataType::Int64);
    ctx.push(Step::Shape { x, start, end, out });
    ctx.finish(node, 0, out, DataType::Int64)
}

fn lower_size(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if let Some(s) = ctx.input_fixed_shape(node, 0) {
        ctx.fold(node, 0, TensorData::from_i64(vec![], &[s.iter().product()]));
        return Ok(());
    }
    let x = ctx.input(node, 0)?;
    let shape = ctx.temp(DataType::Int64);
    ctx.push(Step::Shape {
        x,
        start: 0,
        end: None,
        out: shape,
    });
    let out = ctx.temp(DataType::Int64);
    ctx.push(Step::Reduce {
        op: ReduceOp::Prod,
        x: shape,
        axes: ReduceAxes::All,
        keepdims: false,
        out,
    });
    ctx.finish(node, 0, out, DataType::Int64)
}

fn claim_expand(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    Ok(())
}

fn lower_expand(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let shape = match ctx.output_fixed_shape(node, 0) {
        Some(s) => ShapeSource::Static(s),
        None => ctx.ints_input(node, 1)?,
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Expand { x, shape, out });
    ctx.finish(node, 0, out, dt)
}

fn constant_of_shape_value(node: &Node) -> Result<TensorData, String> {
    match node.attributes.get("value") {
        None => Ok(TensorData::from_f32(vec![], &[0.0])),
        Some(Attribute::Tensor(t)) => {
            if t.numel() != 1 {
                return Err(format!(
                    "ConstantOfShape: value has {} elements, expected 1",
                    t.numel()
                ));
            }
            crate::consts::reshaped(t, vec![])
                .ok_or_else(|| format!("ConstantOfShape: unreadable {} value", t.dtype))
        }
        Some(a) => Err(format!(
            "ConstantOfShape: attribute 'value' is {}, expected TENSOR",
            a.kind()
        )),
    }
}

fn claim_constant_of_shape(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, &[DataType::Int64])?;
    let v = constant_of_shape_value(node).or_decline()?;
    let f64_ok = v.dtype == DataType::Double && crate::registry::float64_claimed(node);
    if !DATA.contains(&v.dtype) && !f64_ok {
        decline!(
            "ConstantOfShape: a {} value is not claimed{}",
            v.dtype,
            crate::registry::dtype_note(v.dtype)
        );
    }
    Ok(())
}

/// Largest constant (in elements) folded at plan time rather than filled at run time.
const FOLD_LIMIT: u64 = 4096;

fn lower_constant_of_shape(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let value = constant_of_shape_value(node).or_invalid(node)?;
    let dt = value.dtype;
    let shape = ctx.ints_input(node, 0)?;
    if let ShapeSource::Static(dims) = &shape {
        crate::step::full_shape(dims).or_invalid(node)?;
        let n: u64 = dims.iter().map(|&d| d as u64).product();
        if n <= FOLD_LIMIT {
            let size = dt.size_in_bytes().unwrap_or(1);
            let bytes: Vec<u8> = value
                .bytes
                .iter()
                .copied()
                .cycle()
                .take(n as usize * size)
                .collect();
            if let Ok(t) = TensorData::new(dt, dims.clone(), bytes) {
                ctx.fold(node, 0, t);
                return Ok(());
            }
        }
    }
    let v = ctx.constant(value);
    let out = ctx.temp(dt);
    ctx.push(Step::Full {
        shape,
        value: v,
        dtype: dt,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_constant(_ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    match crate::fold::constant_node_value(node) {
        Some(t) if DATA.contains(&t.dtype) => Ok(()),
        Some(t) if t.dtype == DataType::Double && crate::registry::float64_claimed(node) => Ok(()),
        Some(t) => decline!(
            "Constant: a {} tensor is not claimed{}",
            t.dtype,
            crate::registry::dtype_note(t.dtype)
        ),
        None => decline!(
            "Constant: only value / value_float(s) / value_int(s) are claimed (got {:?})",
            node.attributes.keys().collect::<Vec<_>>()
        ),
    }
}

fn lower_constant(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let Some(t) = crate::fold::constant_node_value(node) else {
        invalid!(node, "unsupported Constant attribute");
    };
    ctx.fold(node, 0, t);
    Ok(())
}

fn claim_tile(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    Ok(())
}

fn lower_tile(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let reps = ctx.ints_input(node, 1)?;
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Tile { x, reps, out });
    ctx.finish(node, 0, out, dt)
}

fn claim_split(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    if ctx.opset >= 13 && node.input(1).is_some() {
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    }
    if node.outputs.is_empty() {
        decline!("Split: no outputs");
    }
    Ok(())
}

fn lower_split(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(0);
    let axis = match ctx.input_rank(node, 0) {
        Some(r) => normalize_axis(axis, r).or_invalid(node)? as i64,
        None => axis,
    };
    let sizes = if ctx.opset() >= 13 {
        if node.input(1).is_some() {
            Some(ctx.ints_input(node, 1)?)
        } else {
            None
        }
    } else {
        attr_ints(node, "split")
            .or_invalid(node)?
            .map(ShapeSource::Static)
    };
    let x = ctx.input(node, 0)?;
    let mut outs = Vec::new();
    for _ in 0..node.outputs.len() {
        outs.push(ctx.temp(dt));
    }
    ctx.push(Step::Split {
        x,
        axis: axis as i32,
        sizes,
        outs: outs.clone(),
    });
    for (i, o) in outs.into_iter().enumerate() {
        ctx.finish(node, i, o, dt)?;
    }
    Ok(())
}

fn claim_range(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(
        ctx,
        node,
        0..3,
        &[DataType::Float, DataType::Int32, DataType::Int64],
    )
    .map(|_| ())
}

fn lower_range(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let mut src = |i: usize| -> Result<FloatSource, PlanError> {
        if let Some(t) = ctx.const_input(node, i) {
            return Ok(FloatSource::Static(t.to_f64_vec().unwrap_or_default()));
        }
        Ok(FloatSource::Dynamic(ctx.input(node, i)?))
    };
    let (start, limit, delta) = (src(0)?, src(1)?, src(2)?);
    if let (FloatSource::Static(s), FloatSource::Static(l), FloatSource::Static(d)) =
        (&start, &limit, &delta)
        && let (Some(&s), Some(&l), Some(&d)) = (s.first(), l.first(), d.first())
    {
        if d == 0.0 {
            invalid!(node, "Range delta is 0");
        }
        let n = ((l - s) / d).ceil().max(0.0) as usize;
        if n as u64 <= FOLD_LIMIT && !dt.is_float() {
            let values: Vec<f64> = (0..n).map(|i| s + i as f64 * d).collect();
            if let Some(t) = crate::consts::tensor_from_f64(dt, vec![n as i64], &values) {
                ctx.fold(node, 0, t);
                return Ok(());
            }
        }
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Arange {
        start,
        limit,
        delta,
        dtype: dt,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_pad(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, DATA)?;
    let mode = attr_str(node, "mode").or_decline()?;
    match mode.as_deref() {
        None | Some("constant") | Some("edge") | Some("reflect") | Some("wrap") => {}
        Some(m) => decline!("Pad: unknown mode '{m}'"),
    }
    if ctx.opset >= 11 {
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
        if node.input(2).is_some() && ctx.input_dtype(node, 2)? != dt {
            decline!("Pad: constant_value type differs from the data type");
        }
        if node.input(3).is_some() {
            ctx.expect_dtype(node, 3, INDEX)?;
        }
        if let Some(t) = node.input(1).and_then(|n| ctx.constant(n))
            && t.to_i64_vec().is_some_and(|v| v.iter().any(|&p| p < 0))
        {
            decline!("Pad: negative pads are not claimed");
        }
    } else if attr_ints(node, "pads")
        .or_decline()?
        .is_some_and(|v| v.iter().any(|&p| p < 0))
    {
        decline!("Pad: negative pads are not claimed");
    }
    Ok(())
}

fn lower_pad(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let mode = match attr_str(node, "mode").or_invalid(node)?.as_deref() {
        Some("edge") => PadMode::Edge,
        Some("reflect") => PadMode::Reflect,
        Some("wrap") => PadMode::Wrap,
        _ => PadMode::Constant,
    };
    let (pads, value) = if ctx.opset() >= 11 {
        let pads = ctx.ints_input(node, 1)?;
        let axes = if node.input(3).is_some() {
            Some(ctx.ints_input(node, 3)?)
        } else {
            None
        };
        let value = match ctx.opt_input(node, 2)? {
            Some(v) => v,
            None => ctx.scalar(dt, 0.0)?,
        };
        (PadSpec::Onnx { pads, axes }, value)
    } else {
        let pads = attr_ints(node, "pads")
            .or_invalid(node)?
            .unwrap_or_default();
        let v = attr_float(node, "value").or_invalid(node)?.unwrap_or(0.0);
        (
            PadSpec::Onnx {
                pads: ShapeSource::Static(pads),
                axes: None,
            },
            ctx.scalar(dt, v as f64)?,
        )
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Pad {
        x,
        pads,
        mode,
        value,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

/// CenterCropPad's axes, normalised and checked for duplicates.
fn center_crop_axes(node: &Node, rank: usize) -> Result<Vec<i64>, String> {
    let axes = match attr_ints(node, "axes")? {
        Some(a) => a
            .iter()
            .map(|&a| normalize_axis(a, rank).map(|a| a as i64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("CenterCropPad: {e}"))?,
        None => (0..rank as i64).collect(),
    };
    let mut sorted = axes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != axes.len() {
        return Err(format!("CenterCropPad: axes {axes:?} repeat an axis"));
    }
    Ok(axes)
}

fn claim_center_crop_pad(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    ctx.expect_dtype(node, 1, INDEX)?;
    let rank = ctx.expect_rank(node, 0)?;
    center_crop_axes(node, rank).or_decline()?;
    Ok(())
}

/// CenterCropPad: per listed axis, a dim larger than the target is cropped from
/// `(dim - s) / 2` (floor), a smaller one zero-padded by `(s - dim) / 2` (floor) before and
/// the rest after. With a constant shape input and a fixed input shape the bounds are fixed
/// at plan time; otherwise they are computed from `shape(x)` and the shape input and read on
/// the host by the Slice and Pad steps.
fn lower_center_crop_pad(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    use crate::step::BinaryOp as B;
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let axes = center_crop_axes(node, rank).or_invalid(node)?;
    let i64t = DataType::Int64;
    let x = ctx.input(node, 0)?;
    let target = ctx.const_input(node, 1).and_then(|t| t.to_i64_vec());
    // (starts, ends, pads) of the centred crop and of the centred zero padding
    let (starts, ends, pads) = if let (Some(target), Some(shape)) =
        (target, ctx.input_fixed_shape(node, 0))
        && target.len() == axes.len()
    {
        // Everything known at plan time: fixed slice bounds and pads.
        let (mut starts, mut ends, mut lo, mut hi) = (vec![], vec![], vec![], vec![]);
        for (&a, &s) in axes.iter().zip(&target) {
            let dim = shape[a as usize];
            let crop = (dim - s).max(0);
            let pad = (s - dim).max(0);
            starts.push(crop / 2);
            ends.push(crop / 2 + dim.min(s));
            lo.push(pad / 2);
            hi.push(pad - pad / 2);
        }
        (
            ShapeSource::Static(starts),
            ShapeSource::Static(ends),
            ShapeSource::Static([lo, hi].concat()),
        )
    } else {
        let sdt = ctx.input_dtype(node, 1)?;
        let s = ctx.input(node, 1)?;
        let s = ctx.cast(s, sdt, i64t);
        let shape = ctx.shape_vec(x);
        let ax = ctx.constant(TensorData::from_i64(vec![axes.len() as i64], &axes));
        let dims = ctx.temp(i64t);
        ctx.push(Step::Take {
            x: shape,
            indices: ax,
            axis: 0,
            out: dims,
        });
        let zero = ctx.scalar(i64t, 0.0)?;
        let two = ctx.scalar(i64t, 2.0)?;
        let over = ctx.binary(B::Subtract, dims, s, i64t);
        let crop = ctx.binary(B::Maximum, over, zero, i64t);
        let start = ctx.binary(B::FloorDivide, crop, two, i64t);
        let kept = ctx.binary(B::Minimum, dims, s, i64t);
        let end = ctx.binary(B::Add, start, kept, i64t);
        let under = ctx.binary(B::Subtract, s, dims, i64t);
        let pad = ctx.binary(B::Maximum, under, zero, i64t);
        let lo = ctx.binary(B::FloorDivide, pad, two, i64t);
        let hi = ctx.binary(B::Subtract, pad, lo, i64t);
        let pads = ctx.temp(i64t);
        ctx.push(Step::Concat {
            inputs: vec![lo, hi],
            axis: 0,
            out: pads,
        });
        (
            ShapeSource::Dynamic(start),
            ShapeSource::Dynamic(end),
            ShapeSource::Dynamic(pads),
        )
    };
    let cropped = ctx.temp(dt);
    ctx.push(Step::Slice {
        x,
        spec: SliceSpec {
            starts,
            ends,
            axes: Some(ShapeSource::Static(axes.clone())),
            steps: None,
        },
        out: cropped,
    });
    let value = ctx.scalar(dt, 0.0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Pad {
        x: cropped,
        pads: PadSpec::Onnx {
            pads,
            axes: Some(ShapeSource::Static(axes)),
        },
        mode: PadMode::Constant,
        value,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

fn claim_trilu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    if let Some(r) = ctx.rank(node.input(0).unwrap_or(""))
        && r < 2
    {
        decline!("Trilu: input rank {r} is below 2");
    }
    if node.input(1).is_some() {
        // A k known only at run time is compared against row/column positions instead.
        ctx.expect_dtype(node, 1, &[DataType::Int64])?;
        if ctx.rank(node.input(0).unwrap_or("")).is_none() {
            decline!("Trilu: a k input needs the input's rank");
        }
    }
    Ok(())
}

fn lower_trilu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let k = match node.input(1) {
        None => 0,
        Some(_) => match ctx
            .const_input(node, 1)
            .and_then(|t| t.to_i64_vec())
            .and_then(|v| v.first().copied())
        {
            Some(k) => k,
            None => return lower_trilu_dynamic(ctx, node),
        },
    };
    let x = ctx.input(node, 0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Triangle {
        x,
        upper: attr_int(node, "upper").or_invalid(node)?.unwrap_or(1) != 0,
        k: k.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

/// Trilu with a run-time `k`: keep `x` where `col - row >= k` (upper) or `<= k` (lower).
fn lower_trilu_dynamic(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    use crate::step::BinaryOp as B;
    let dt = ctx.input_dtype(node, 0)?;
    let r = ctx.need_rank(node, 0)?;
    let upper = attr_int(node, "upper").or_invalid(node)?.unwrap_or(1) != 0;
    let x = ctx.input(node, 0)?;
    let k = ctx.input(node, 1)?;
    let k = {
        let out = ctx.temp(DataType::Int64);
        ctx.push(Step::Reshape {
            x: k,
            target: ReshapeTarget::Fixed(vec![]),
            out,
        });
        out
    };
    let rows = ctx.iota_along(x, (r - 2) as i32, 2, 0);
    let cols = ctx.iota_along(x, (r - 1) as i32, 2, 1);
    let diag = ctx.binary(B::Subtract, cols, rows, DataType::Int64);
    let op = if upper { B::GreaterEqual } else { B::LessEqual };
    let keep = ctx.binary(op, diag, k, DataType::Int64);
    let zero = ctx.scalar(dt, 0.0)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Where {
        cond: keep,
        x,
        y: zero,
        out,
    });
    ctx.finish(node, 0, out, dt)
}
