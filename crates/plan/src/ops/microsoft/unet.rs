//! The stable-diffusion fusions of ORT's transformer optimizer (implemented by ORT's GPU EPs
//! only): `BiasAdd` (`x + bias + skip`), `BiasSplitGelu` (`left * gelu(right)` of
//! `x + bias` split in halves), `GroupNorm` and `SkipGroupNorm` (NHWC or NCHW, optional
//! SiLU), computed in float32 for half inputs as ORT's kernels do.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, ReshapeTarget, ShapeSource, UnaryOp as U};

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "BiasAdd", 1, 1, claim_bias_add, lower_bias_add).notes("`x + bias + skip`");
    r.op(MS, "BiasSplitGelu", 1, 1, claim_split_gelu, lower_split_gelu)
        .notes("`left * gelu(right)` (erf) of `x + bias` split in halves along the last axis");
    r.op(MS, "GroupNorm", 1, 1, claim_group_norm, lower_group_norm)
        .notes("4-D NHWC (`channels_last=1`) or NCHW input, `activation` 0 or 1 (SiLU); statistics in float32");
    r.op(MS, "SkipGroupNorm", 1, 1, claim_group_norm, lower_group_norm)
        .notes("skip `[N, H, W, C]`, `[N, 1, 1, C]` or `[N, C]`, optional bias and sum output `S`; as GroupNorm");
}

fn claim_bias_add(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..3, FLOATS)?;
    if ctx.expect_rank(node, 1)? != 1 {
        decline!("BiasAdd: bias must be 1-D");
    }
    Ok(())
}

fn lower_bias_add(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let x = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let skip = ctx.input(node, 2)?;
    let s = ctx.binary(B::Add, x, b, dt);
    let y = ctx.binary(B::Add, s, skip, dt);
    ctx.finish(node, 0, y, dt)
}

fn claim_split_gelu(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, FLOATS)?;
    if ctx.expect_rank(node, 1)? != 1 {
        decline!("BiasSplitGelu: bias must be 1-D");
    }
    match last_dim(ctx, node, 0).or_else(|| last_dim(ctx, node, 1)) {
        Some(d) if d > 0 && d % 2 == 0 => Ok(()),
        _ => decline!("BiasSplitGelu: the hidden size must be fixed and even"),
    }
}

fn lower_split_gelu(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let cdt = compute_dtype(dt);
    let Some(d) = lower_last_dim(ctx, node, 0).or_else(|| lower_last_dim(ctx, node, 1)) else {
        crate::plan::invalid!(node, "the hidden size is unknown");
    };
    let x = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let s = ctx.binary(B::Add, x, b, dt);
    let s = ctx.cast(s, dt, cdt);
    let left = slice_last(ctx, s, 0, d / 2, 1, cdt);
    let right = slice_last(ctx, s, d / 2, d, 1, cdt);
    let g = super::gelu::gelu_erf(ctx, right, cdt)?;
    let y = ctx.binary(B::Multiply, left, g, cdt);
    let y = ctx.cast(y, cdt, dt);
    ctx.finish(node, 0, y, dt)
}

/// GroupNorm's and SkipGroupNorm's attributes.
struct GroupAttrs {
    groups: i64,
    eps: f32,
    silu: bool,
    channels_last: bool,
}

fn group_attrs(node: &Node) -> Result<GroupAttrs, String> {
    let groups =
        attr_int(node, "groups")?.ok_or_else(|| format!("{}: groups is required", node.op_type))?;
    let activation = attr_int(node, "activation")?
        .ok_or_else(|| format!("{}: activation is required", node.op_type))?;
    if groups <= 0 {
        return Err(format!("{}: groups must be positive", node.op_type));
    }
    if activation != 0 && activation != 1 {
        return Err(format!(
            "{}: activation={activation} is not 0 (none) or 1 (SiLU)",
            node.op_type
        ));
    }
    Ok(GroupAttrs {
        groups,
        eps: attr_float(node, "epsilon")?.unwrap_or(1e-5),
        silu: activation == 1,
        channels_last: attr_int(node, "channels_last")?.unwrap_or(1) != 0,
    })
}

/// The channel count from the declared shape of X (or gamma).
fn channels(ctx: &ClaimCtx, node: &Node, channels_last: bool) -> Option<i64> {
    let x = dims_of(ctx, node.input(0)?)?;
    let c = if channels_last { x.get(3) } else { x.get(1) };
    c.and_then(|d| d.fixed())
        .or_else(|| dims_of(ctx, node.input(1)?)?.first()?.fixed())
}

fn claim_group_norm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let skip = node.op_type == "SkipGroupNorm";
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    let a = group_attrs(node).or_decline()?;
    for i in [1, 2] {
        ctx.expect_dtype(node, i, &[DataType::Float, DataType::Float16])?;
        if ctx.expect_rank(node, i)? != 1 {
            decline!("{}: input {i} must be 1-D", node.op_type);
        }
    }
    if skip {
        ctx.expect_dtype(node, 3, &[dt])?;
        let r = ctx.expect_rank(node, 3)?;
        if r != 4 && r != 2 {
            decline!("SkipGroupNorm: skip must be 4-D or 2-D");
        }
        if node.input(4).is_some() {
            ctx.expect_dtype(node, 4, &[dt])?;
            if ctx.expect_rank(node, 4)? != 1 {
                decline!("SkipGroupNorm: bias must be 1-D");
            }
        }
    }
    if ctx.expect_rank(node, 0)? != 4 {
        decline!("{}: X must be 4-D", node.op_type);
    }
    match channels(ctx, node, a.channels_last) {
        Some(c) if c % a.groups == 0 => Ok(()),
        Some(c) => decline!(
            "{}: {c} channels are not a multiple of {} groups",
            node.op_type,
            a.groups
        ),
        None => decline!("{}: the channel count is unknown", node.op_type),
    }
}

fn lower_group_norm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let skip = node.op_type == "SkipGroupNorm";
    let dt = ctx.input_dtype(node, 0)?;
    let f = DataType::Float;
    let a = group_attrs(node).or_invalid(node)?;
    let c_axis = if a.channels_last { 3 } else { 1 };
    let c = ctx
        .shape_of(node.input(0).unwrap_or(""))
        .and_then(|s| s.get(c_axis).and_then(|d| d.fixed()))
        .or_else(|| {
            ctx.shape_of(node.input(1).unwrap_or(""))
                .and_then(|s| s.first().and_then(|d| d.fixed()))
        });
    let Some(c) = c else {
        crate::plan::invalid!(node, "the channel count is unknown");
    };
    let mut x = ctx.input(node, 0)?;
    if skip {
        let mut s = ctx.input(node, 3)?;
        if ctx.input_rank(node, 3) == Some(2) {
            // [N, C] -> [N, 1, 1, C] (NHWC) or [N, C, 1, 1] (NCHW).
            let axes = if a.channels_last {
                vec![1, 2]
            } else {
                vec![2, 3]
            };
            s = reshape(
                ctx,
                s,
                ReshapeTarget::Unsqueeze {
                    axes: ShapeSource::Static(axes),
                },
                dt,
            );
        }
        x = ctx.binary(B::Add, x, s, dt);
        if let Some(b) = ctx.opt_input(node, 4)? {
            let b = if a.channels_last {
                b
            } else {
                reshape_to(ctx, b, &[-1, 1, 1], dt)
            };
            x = ctx.binary(B::Add, x, b, dt);
        }
        ctx.finish(node, 1, x, dt)?;
    }
    let xf = ctx.cast(x, dt, f);
    let g = a.groups;
    // NHWC: [N, H, W, C] -> [N, H*W, G, C/G], statistics over axes 1 and 3;
    // NCHW: [N, C, H, W] -> [N, G, C/G, H*W], statistics over axes 2 and 3.
    let (shape, axes) = if a.channels_last {
        (vec![0, -1, g, c / g], vec![1, 3])
    } else {
        (vec![0, g, c / g, -1], vec![2, 3])
    };
    let xg = reshape_to(ctx, xf, &shape, f);
    let mean = reduce(ctx, xg, &axes, f);
    let d = ctx.binary(B::Subtract, xg, mean, f);
    let d2 = ctx.unary(U::Square, d, f);
    let var = reduce(ctx, d2, &axes, f);
    let e = ctx.scalar(f, a.eps as f64)?;
    let ve = ctx.binary(B::Add, var, e, f);
    let inv = ctx.unary(U::Rsqrt, ve, f);
    let n = ctx.binary(B::Multiply, d, inv, f);
    let n = reshape(ctx, n, ReshapeTarget::Like(x), f);
    let mut params = [ctx.input(node, 1)?, ctx.input(node, 2)?];
    for (i, p) in params.iter_mut().enumerate() {
        let pdt = ctx.input_dtype(node, 1 + i)?;
        *p = ctx.cast(*p, pdt, f);
        if !a.channels_last {
            *p = reshape_to(ctx, *p, &[-1, 1, 1], f);
        }
    }
    let y = ctx.binary(B::Multiply, n, params[0], f);
    let mut y = ctx.binary(B::Add, y, params[1], f);
    if a.silu {
        let s = ctx.unary(U::Sigmoid, y, f);
        y = ctx.binary(B::Multiply, y, s, f);
    }
    let y = ctx.cast(y, f, dt);
    ctx.finish(node, 0, y, dt)
}

/// Mean over `axes`, kept.
fn reduce(ctx: &mut LowerCtx, x: Slot, axes: &[i64], dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Mean,
        x,
        axes: ReduceAxes::Static(axes.to_vec()),
        keepdims: true,
        out,
    });
    out
}
