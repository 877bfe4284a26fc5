//! Layout ops: DepthToSpace, SpaceToDepth (reshape, transpose, reshape).

use onnx_ir::Node;

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{DimRule, ReshapeTarget, dims_target};

/// Registers the layout family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "DepthToSpace", 1, MAX, claim_space_depth, lower_depth_to_space);
    r.op("", "SpaceToDepth", 1, MAX, claim_space_depth, lower_space_to_depth);
}

fn blocksize(node: &Node) -> Result<i64, String> {
    match attr_int(node, "blocksize")? {
        Some(b) if b >= 1 => Ok(b),
        Some(b) => Err(format!("{}: blocksize {b} is invalid", node.op_type)),
        None => Err(format!(
            "{}: the 'blocksize' attribute is missing",
            node.op_type
        )),
    }
}

/// DepthToSpace `mode` (opset 11): true for CRD.
fn crd_mode(ctx_opset: i64, node: &Node) -> Result<bool, String> {
    if ctx_opset < 11 {
        return Ok(false);
    }
    match attr_str(node, "mode")?.as_deref() {
        None | Some("DCR") => Ok(false),
        Some("CRD") => Ok(true),
        Some(m) => Err(format!("DepthToSpace: mode '{m}' is invalid")),
    }
}

fn claim_space_depth(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, 0, DATA)?;
    blocksize(node).or_decline()?;
    if node.op_type == "DepthToSpace" {
        crd_mode(ctx.opset, node).or_decline()?;
    }
    let r = ctx.expect_rank(node, 0)?;
    if r != 4 {
        decline!("{}: input rank {r} is not 4", node.op_type);
    }
    Ok(())
}

/// A reshape by `rules`, folded to a fixed shape when `shape` (the input's) is known.
fn regroup(
    ctx: &mut LowerCtx,
    x: Slot,
    shape: Option<&[i64]>,
    rules: Vec<DimRule>,
    dt: onnx_ir::DataType,
) -> Result<(Slot, Option<Vec<i64>>), String> {
    let (target, out_shape) = match shape {
        Some(s) => {
            let t = dims_target(s, &rules)?;
            (ReshapeTarget::Fixed(t.clone()), Some(t))
        }
        None => (ReshapeTarget::Dims(rules), None),
    };
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape { x, target, out });
    Ok((out, out_shape))
}

fn transpose(
    ctx: &mut LowerCtx,
    x: Slot,
    perm: &[usize],
    shape: Option<Vec<i64>>,
    dt: onnx_ir::DataType,
) -> (Slot, Option<Vec<i64>>) {
    let out = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x,
        perm: Some(perm.iter().map(|&p| p as i32).collect()),
        out,
    });
    (out, shape.map(|s| perm.iter().map(|&p| s[p]).collect()))
}

/// `[N, C, H, W]` -> `[N, C / b^2, H * b, W * b]`: DCR reads the channel as
/// `(b1, b2, c)`, CRD as `(c, b1, b2)`.
fn lower_depth_to_space(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let b = blocksize(node).or_invalid(node)?;
    let crd = crd_mode(ctx.opset(), node).or_invalid(node)?;
    let shape = ctx.input_fixed_shape(node, 0);
    let x = ctx.input(node, 0)?;
    let (split, perm) = if crd {
        (
            vec![
                DimRule::copy(0),
                DimRule::divided(1, b * b),
                DimRule::fixed(b),
                DimRule::fixed(b),
                DimRule::copy(2),
                DimRule::copy(3),
            ],
            [0, 1, 4, 2, 5, 3],
        )
    } else {
        (
            vec![
                DimRule::copy(0),
                DimRule::fixed(b),
                DimRule::fixed(b),
                DimRule::divided(1, b * b),
                DimRule::copy(2),
                DimRule::copy(3),
            ],
            [0, 3, 4, 1, 5, 2],
        )
    };
    let (y, s) = regroup(ctx, x, shape.as_deref(), split, dt).or_invalid(node)?;
    let (y, s) = transpose(ctx, y, &perm, s, dt);
    let merge = vec![
        DimRule::copy(0),
        DimRule::copy(1),
        DimRule::product(&[2, 3]),
        DimRule::product(&[4, 5]),
    ];
    let (y, _) = regroup(ctx, y, s.as_deref(), merge, dt).or_invalid(node)?;
    ctx.finish(node, 0, y, dt)
}

/// `[N, C, H, W]` -> `[N, C * b^2, H / b, W / b]`, the channel read as `(b1, b2, c)`.
fn lower_space_to_depth(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let b = blocksize(node).or_invalid(node)?;
    let shape = ctx.input_fixed_shape(node, 0);
    let x = ctx.input(node, 0)?;
    let split = vec![
        DimRule::copy(0),
        DimRule::copy(1),
        DimRule::divided(2, b),
        DimRule::fixed(b),
        DimRule::divided(3, b),
        DimRule::fixed(b),
    ];
    let (y, s) = regroup(ctx, x, shape.as_deref(), split, dt).or_invalid(node)?;
    let (y, s) = transpose(ctx, y, &[0, 3, 5, 1, 2, 4], s, dt);
    let merge = vec![
        DimRule::copy(0),
        DimRule::product(&[1, 2, 3]),
        DimRule::copy(4),
        DimRule::copy(5),
    ];
    let (y, _) = regroup(ctx, y, s.as_deref(), merge, dt).or_invalid(node)?;
    ctx.finish(node, 0, y, dt)
}
