//! Normalisations: Softmax, LogSoftmax, LayerNormalization, RMSNormalization,
//! BatchNormalization (inference, and opset-14+ training mode), InstanceNormalization.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{
    BinaryOp as B, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource, UnaryOp as U, normalize_axis,
};

/// Registers the normalisation family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Softmax", 1, MAX, claim_softmax, lower_softmax);
    r.op("", "LogSoftmax", 1, MAX, claim_softmax, lower_softmax);
    r.op("", "LayerNormalization", 17, MAX, claim_layer_norm, lower_layer_norm);
    r.op("", "RMSNormalization", 23, MAX, claim_layer_norm, lower_rms_norm);
    r.op("", "BatchNormalization", 7, MAX, claim_batch_norm, lower_batch_norm);
    r.op("", "InstanceNormalization", 6, MAX, claim_instance_norm, lower_instance_norm);
    r.op("", "GroupNormalization", 18, MAX, claim_group_norm, lower_group_norm);
}

/// Softmax axes: opset < 13 coerces the input to 2-D at `axis` (so the trailing dims are
/// normalised jointly); opset 13+ normalises along `axis` alone.
fn softmax_axes(opset: i64, axis: Option<i64>, rank: Option<usize>) -> Result<Vec<i32>, String> {
    let legacy = opset < 13;
    let axis = axis.unwrap_or(if legacy { 1 } else { -1 });
    match rank {
        Some(r) => {
            let a = if legacy && axis == r as i64 {
                // axis == rank is allowed by the legacy coercion: every dim in the batch, so
                // each "row" has one element.
                r
            } else {
                normalize_axis(axis, r)?
            };
            Ok(if legacy {
                (a..r).map(|v| v as i32).collect()
            } else {
                vec![a as i32]
            })
        }
        None if axis == -1 => Ok(vec![-1]),
        None => Err("the input rank is unknown".into()),
    }
}

fn claim_softmax(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    let axis = attr_int(node, "axis").or_decline()?;
    let rank = ctx.rank(node.input(0).unwrap_or(""));
    softmax_axes(ctx.opset, axis, rank)
        .map_err(|e| Decline::new(format!("{}: {e}", node.op_type)))?;
    Ok(())
}

fn lower_softmax(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let axis = attr_int(node, "axis").or_invalid(node)?;
    let axes = softmax_axes(ctx.opset(), axis, ctx.input_rank(node, 0)).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    if axes.is_empty() {
        // Rows of one element: softmax is 1, log-softmax 0 (NaN/inf inputs aside).
        let v = if node.op_type == "Softmax" { 1.0 } else { 0.0 };
        let c = ctx.scalar(dt, v)?;
        let z = ctx.scalar(dt, 0.0)?;
        let zx = ctx.binary(B::Multiply, x, z, dt);
        let out = ctx.binary(B::Add, zx, c, dt);
        return ctx.finish(node, 0, out, dt);
    }
    let out = if node.op_type == "Softmax" {
        let out = ctx.temp(dt);
        ctx.push(Step::Softmax {
            x,
            axes,
            precise: true,
            out,
        });
        out
    } else {
        let cdt = compute_dtype(dt);
        let xc = ctx.cast(x, dt, cdt);
        let lse = ctx.temp(cdt);
        ctx.push(Step::Reduce {
            op: ReduceOp::LogSumExp,
            x: xc,
            axes: ReduceAxes::Static(axes.iter().map(|&a| a as i64).collect()),
            keepdims: true,
            out: lse,
        });
        let y = ctx.binary(B::Subtract, xc, lse, cdt);
        ctx.cast(y, cdt, dt)
    };
    ctx.finish(node, 0, out, dt)
}

fn claim_layer_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let n = if node.input(2).is_some() { 3 } else { 2 };
    same_dtypes(ctx, node, 0..n, FLOATS)?;
    let stash = attr_int(node, "stash_type").or_decline()?.unwrap_or(1);
    if stash != 1 {
        decline!(
            "{}: stash_type={stash} is not claimed (MLX normalises in float32)",
            node.op_type
        );
    }
    let axis = attr_int(node, "axis").or_decline()?.unwrap_or(-1);
    if axis != -1 {
        ctx.expect_rank(node, 0)?;
    }
    if node.op_type == "RMSNormalization" {
        no_output(node, 1, "inv_std_dev")?;
    }
    Ok(())
}

/// The normalised axes `[axis, rank)`, as MLX axes (`[-1]` when the rank is unknown).
fn norm_axes(ctx: &LowerCtx, node: &Node) -> Result<(Vec<i64>, bool), PlanError> {
    let axis = attr_int(node, "axis").or_invalid(node)?.unwrap_or(-1);
    match ctx.input_rank(node, 0) {
        Some(r) => {
            let a = normalize_axis(axis, r).or_invalid(node)?;
            Ok(((a as i64..r as i64).collect(), a + 1 == r))
        }
        None => Ok((vec![-1], true)),
    }
}

fn is_vector(ctx: &LowerCtx, node: &Node, i: usize) -> bool {
    node.input(i).is_none() || ctx.input_rank(node, i) == Some(1)
}

fn lower_layer_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let eps = epsilon(node)?;
    let (axes, last) = norm_axes(ctx, node)?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    let bias = ctx.opt_input(node, 2)?;
    let extra = node.output(1).is_some() || node.output(2).is_some();
    if last && !extra && is_vector(ctx, node, 1) && is_vector(ctx, node, 2) {
        let out = ctx.temp(dt);
        ctx.push(Step::LayerNorm {
            x,
            weight: Some(scale),
            bias,
            eps: eps as f32,
            out,
        });
        return ctx.finish(node, 0, out, dt);
    }
    // Decomposed, in float32: y = (x - mean) * rsqrt(var + eps) * scale + bias.
    let cdt = compute_dtype(dt);
    let xc = ctx.cast(x, dt, cdt);
    let (mean, d, var) = moments(ctx, xc, &axes, cdt);
    let inv = rsqrt_plus(ctx, var, eps, cdt)?;
    let mut y = ctx.binary(B::Multiply, d, inv, cdt);
    let sc = ctx.cast(scale, dt, cdt);
    y = ctx.binary(B::Multiply, y, sc, cdt);
    if let Some(b) = bias {
        let bc = ctx.cast(b, dt, cdt);
        y = ctx.binary(B::Add, y, bc, cdt);
    }
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)?;
    ctx.finish(node, 1, mean, cdt)?;
    ctx.finish(node, 2, inv, cdt)
}

/// The `epsilon` attribute (default 1e-5) of the normalisation ops.
fn epsilon(node: &Node) -> Result<f64, PlanError> {
    Ok(attr_float(node, "epsilon")
        .or_invalid(node)?
        .unwrap_or(1e-5) as f64)
}

/// `(mean, x - mean, biased variance)` of `x` over `axes`, kept as size-1 axes.
fn moments(ctx: &mut LowerCtx, x: Slot, axes: &[i64], dt: DataType) -> (Slot, Slot, Slot) {
    let mean = reduce(ctx, ReduceOp::Mean, x, axes, dt);
    let d = ctx.binary(B::Subtract, x, mean, dt);
    let d2 = ctx.unary(U::Square, d, dt);
    let var = reduce(ctx, ReduceOp::Mean, d2, axes, dt);
    (mean, d, var)
}

/// `1 / sqrt(v + eps)`.
fn rsqrt_plus(ctx: &mut LowerCtx, v: Slot, eps: f64, dt: DataType) -> Result<Slot, PlanError> {
    let e = ctx.scalar(dt, eps)?;
    let ve = ctx.binary(B::Add, v, e, dt);
    Ok(ctx.unary(U::Rsqrt, ve, dt))
}

fn reduce(ctx: &mut LowerCtx, op: ReduceOp, x: Slot, axes: &[i64], dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op,
        x,
        axes: ReduceAxes::Static(axes.to_vec()),
        keepdims: true,
        out,
    });
    out
}

fn lower_rms_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let eps = epsilon(node)?;
    let (axes, last) = norm_axes(ctx, node)?;
    let x = ctx.input(node, 0)?;
    let scale = ctx.input(node, 1)?;
    if last && is_vector(ctx, node, 1) {
        let out = ctx.temp(dt);
        ctx.push(Step::RmsNorm {
            x,
            weight: Some(scale),
            eps: eps as f32,
            out,
        });
        return ctx.finish(node, 0, out, dt);
    }
    let cdt = compute_dtype(dt);
    let xc = ctx.cast(x, dt, cdt);
    let x2 = ctx.unary(U::Square, xc, cdt);
    let ms = reduce(ctx, ReduceOp::Mean, x2, &axes, cdt);
    let inv = rsqrt_plus(ctx, ms, eps, cdt)?;
    let y = ctx.binary(B::Multiply, xc, inv, cdt);
    let sc = ctx.cast(scale, dt, cdt);
    let y = ctx.binary(B::Multiply, y, sc, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

fn claim_batch_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, FLOATS)?;
    for i in 1..5 {
        ctx.expect_dtype(node, i, FLOATS)?;
    }
    let rank = ctx.expect_rank(node, 0)?;
    if rank < 2 {
        decline!("BatchNormalization: input rank {rank} is below 2");
    }
    if ctx.opset < 9 && attr_int(node, "spatial").or_decline()?.unwrap_or(1) != 1 {
        decline!("BatchNormalization: spatial=0 is not claimed");
    }
    if training(node, ctx.opset).or_decline()? {
        if node.outputs.len() < 2 {
            // ORT's kernel trains only when the node declares the statistics outputs.
            decline!(
                "BatchNormalization: training_mode=1 without the running statistics outputs is not claimed (ORT's CPU EP then normalises with the input statistics)"
            );
        }
        if node.outputs.len() > 3 {
            decline!("BatchNormalization: training mode has 3 outputs at opset 14+");
        }
        return Ok(());
    }
    for i in 1..5 {
        no_output(node, i, "training statistics")?;
    }
    Ok(())
}

/// Opset 14+ `training_mode=1` (earlier opsets' training outputs are declined).
fn training(node: &Node, opset: i64) -> Result<bool, String> {
    Ok(opset >= 14 && attr_int(node, "training_mode")?.unwrap_or(0) != 0)
}

/// Training mode, as ORT's CPU kernel computes it: the batch statistics over every axis but the
/// channels (`saved_var` the biased variance), `Y = (x - saved_mean) * scale / sqrt(saved_var +
/// epsilon) + B`, and the running statistics `input * momentum + saved * (1 - momentum)`.
/// Computed in float32 for half inputs.
fn lower_batch_norm_training(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let cdt = compute_dtype(dt);
    let eps = epsilon(node)?;
    let momentum = attr_float(node, "momentum")
        .or_invalid(node)?
        .unwrap_or(0.9) as f64;
    let x0 = ctx.input(node, 0)?;
    let x = ctx.cast(x0, dt, cdt);
    let axes: Vec<i64> = std::iter::once(0).chain(2..rank as i64).collect();
    let (mean, d, var) = moments(ctx, x, &axes, cdt);
    let mut p = Vec::new();
    for i in 1..3 {
        let pdt = ctx.input_dtype(node, i)?;
        let v = ctx.input(node, i)?;
        let v = ctx.cast(v, pdt, cdt);
        p.push(per_channel(ctx, v, cdt, rank));
    }
    let inv = rsqrt_plus(ctx, var, eps, cdt)?;
    let s = ctx.binary(B::Multiply, inv, p[0], cdt);
    let ys = ctx.binary(B::Multiply, d, s, cdt);
    let y = ctx.binary(B::Add, ys, p[1], cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)?;
    let m = ctx.scalar(cdt, momentum)?;
    let m1 = ctx.scalar(cdt, 1.0 - momentum)?;
    for (o, saved) in [(1, mean), (2, var)] {
        if node.output(o).is_none() {
            continue;
        }
        // [1, C, 1, ...] -> [C]
        let flat = ctx.temp(cdt);
        ctx.push(Step::Reshape {
            x: saved,
            target: ReshapeTarget::Onnx {
                shape: ShapeSource::Static(vec![-1]),
                allowzero: false,
            },
            out: flat,
        });
        let odt = ctx.input_dtype(node, o + 2)?;
        let input = ctx.input(node, o + 2)?;
        let input = ctx.cast(input, odt, cdt);
        let a = ctx.binary(B::Multiply, input, m, cdt);
        let b = ctx.binary(B::Multiply, flat, m1, cdt);
        let r = ctx.binary(B::Add, a, b, cdt);
        let r = ctx.cast(r, cdt, odt);
        ctx.finish(node, o, r, odt)?;
    }
    Ok(())
}

/// Reshapes a per-channel `[C]` parameter to `[C, 1, ...]` for a rank-`rank` NC... input.
fn per_channel(ctx: &mut LowerCtx, p: Slot, dt: DataType, rank: usize) -> Slot {
    if rank <= 2 {
        return p;
    }
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x: p,
        target: ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static((1..rank as i64 - 1).collect()),
        },
        out,
    });
    out
}

fn lower_batch_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    if training(node, ctx.opset()).or_invalid(node)? {
        return lower_batch_norm_training(ctx, node);
    }
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let eps = epsilon(node)?;
    let x = ctx.input(node, 0)?;
    let consts: Option<Vec<Vec<f64>>> = (1..5)
        .map(|i| ctx.const_input(node, i).and_then(TensorData::to_f64_vec))
        .collect();
    let (s, t) = if let Some(c) = consts {
        // Fold: s = scale / sqrt(var + eps), t = bias - mean * s.
        let (scale, bias, mean, var) = (&c[0], &c[1], &c[2], &c[3]);
        let n = scale.len();
        if bias.len() != n || mean.len() != n || var.len() != n {
            crate::plan::invalid!(node, "parameter lengths differ");
        }
        let s: Vec<f64> = (0..n).map(|i| scale[i] / (var[i] + eps).sqrt()).collect();
        let t: Vec<f64> = (0..n).map(|i| bias[i] - mean[i] * s[i]).collect();
        let mut dims = vec![n as i64];
        dims.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
        let mk = |v: &[f64]| crate::consts::tensor_from_f64(dt, dims.clone(), v);
        let (Some(st), Some(tt)) = (mk(&s), mk(&t)) else {
            crate::plan::invalid!(node, "cannot encode folded parameters as {dt}");
        };
        (ctx.constant(st), ctx.constant(tt))
    } else {
        let mut p = Vec::new();
        for i in 1..5 {
            let pdt = ctx.input_dtype(node, i)?;
            let v = ctx.input(node, i)?;
            let v = ctx.cast(v, pdt, dt);
            p.push(per_channel(ctx, v, dt, rank));
        }
        let inv = rsqrt_plus(ctx, p[3], eps, dt)?;
        let s = ctx.binary(B::Multiply, p[0], inv, dt);
        let ms = ctx.binary(B::Multiply, p[2], s, dt);
        let t = ctx.binary(B::Subtract, p[1], ms, dt);
        (s, t)
    };
    let xs = ctx.binary(B::Multiply, x, s, dt);
    let y = ctx.binary(B::Add, xs, t, dt);
    ctx.finish(node, 0, y, dt)
}

/// InstanceNormalization's claim, also the first check of GroupNormalization's: X, scale and B
/// share a float type and X is `[N, C, spatial...]` (rank 3 or more).
fn claim_instance_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..3, FLOATS)?;
    let rank = ctx.expect_rank(node, 0)?;
    if rank < 3 {
        decline!("{}: input rank {rank} is below 3", node.op_type);
    }
    Ok(())
}

fn lower_instance_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let eps = epsilon(node)?;
    let cdt = compute_dtype(dt);
    let x = ctx.input(node, 0)?;
    let xc = ctx.cast(x, dt, cdt);
    let axes: Vec<i64> = (2..rank as i64).collect();
    let (_, d, var) = moments(ctx, xc, &axes, cdt);
    let inv = rsqrt_plus(ctx, var, eps, cdt)?;
    let y = ctx.binary(B::Multiply, d, inv, cdt);
    let scale = ctx.input(node, 1)?;
    let scale = ctx.cast(scale, dt, cdt);
    let scale = per_channel(ctx, scale, cdt, rank);
    let bias = ctx.input(node, 2)?;
    let bias = ctx.cast(bias, dt, cdt);
    let bias = per_channel(ctx, bias, cdt, rank);
    let y = ctx.binary(B::Multiply, y, scale, cdt);
    let y = ctx.binary(B::Add, y, bias, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

fn claim_group_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim_instance_norm(ctx, node)?;
    match attr_int(node, "num_groups").or_decline()? {
        Some(g) if g > 0 => {}
        _ => decline!("GroupNormalization: num_groups is missing or invalid"),
    }
    if attr_int(node, "stash_type").or_decline()?.unwrap_or(1) != 1 {
        decline!("GroupNormalization: stash_type other than float is not claimed");
    }
    Ok(())
}

/// x `[N, C, *]` -> `[N, G, C/G * spatial]`, normalised per group in float32; scale and bias
/// are per group (opset 18) or per channel (opset 21).
fn lower_group_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let groups = attr_int(node, "num_groups").or_invalid(node)?.unwrap_or(1);
    let eps = epsilon(node)?;
    let cdt = compute_dtype(dt);
    let x = ctx.input(node, 0)?;
    let xc = ctx.cast(x, dt, cdt);
    let xg = ctx.temp(cdt);
    ctx.push(Step::Reshape {
        x: xc,
        target: ReshapeTarget::Onnx {
            shape: ShapeSource::Static(vec![0, groups, -1]),
            allowzero: false,
        },
        out: xg,
    });
    let (_, d, var) = moments(ctx, xg, &[2], cdt);
    let inv = rsqrt_plus(ctx, var, eps, cdt)?;
    let mut y = ctx.binary(B::Multiply, d, inv, cdt);
    let scale = ctx.input(node, 1)?;
    let scale = ctx.cast(scale, dt, cdt);
    let bias = ctx.input(node, 2)?;
    let bias = ctx.cast(bias, dt, cdt);
    if ctx.opset() < 21 {
        // Per-group parameters [G] -> [G, 1] against [N, G, L].
        let s = per_channel(ctx, scale, cdt, 3);
        let b = per_channel(ctx, bias, cdt, 3);
        y = ctx.binary(B::Multiply, y, s, cdt);
        y = ctx.binary(B::Add, y, b, cdt);
        y = reshape_like(ctx, y, x, cdt);
    } else {
        let back = reshape_like(ctx, y, x, cdt);
        let s = per_channel(ctx, scale, cdt, rank);
        let b = per_channel(ctx, bias, cdt, rank);
        y = ctx.binary(B::Multiply, back, s, cdt);
        y = ctx.binary(B::Add, y, b, cdt);
    }
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

/// `y` reshaped to the shape of `like`.
fn reshape_like(ctx: &mut LowerCtx, y: Slot, like: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x: y,
        target: ReshapeTarget::Like(like),
        out,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::softmax_axes;

    #[test]
    fn softmax_axes_by_opset() {
        assert_eq!(softmax_axes(11, None, Some(4)).unwrap(), vec![1, 2, 3]);
        assert_eq!(softmax_axes(11, Some(-1), Some(4)).unwrap(), vec![3]);
        assert_eq!(softmax_axes(11, Some(-1), None).unwrap(), vec![-1]);
        assert!(softmax_axes(11, None, None).is_err());
        assert_eq!(softmax_axes(13, None, None).unwrap(), vec![-1]);
        assert_eq!(softmax_axes(13, Some(1), Some(4)).unwrap(), vec![1]);
        assert_eq!(
            softmax_axes(11, Some(4), Some(4)).unwrap(),
            Vec::<i32>::new()
        );
        assert!(softmax_axes(13, Some(4), Some(4)).is_err());
    }
}
