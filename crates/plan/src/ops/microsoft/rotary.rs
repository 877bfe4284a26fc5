//! `com.microsoft` RotaryEmbedding, and the rotation shared with GroupQueryAttention's
//! `do_rotary`: `x1 * cos - x2 * sin`, `x2 * cos + x1 * sin` over the first `2 * cos.shape[1]`
//! features, halves (or interleaved pairs) of the rotated part, the rest passed through.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "RotaryEmbedding", 1, 1, claim_rotary, lower_rotary)
        .notes("3-D or 4-D input; `position_ids` of shape [1] (offset) or [B, S]; not `is_packed_batching`");
}

fn claim_rotary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    for i in [2, 3] {
        ctx.expect_dtype(node, i, &[dt])?;
        if ctx.expect_rank(node, i)? != 2 {
            decline!("RotaryEmbedding: cos_cache and sin_cache must be 2-D");
        }
    }
    if attr_int(node, "is_packed_batching")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("RotaryEmbedding: is_packed_batching is not claimed");
    }
    let pr = ctx.expect_rank(node, 1)?;
    if pr != 1 && pr != 2 {
        decline!("RotaryEmbedding: position_ids of rank {pr} is invalid");
    }
    let rd = attr_int(node, "rotary_embedding_dim")
        .or_decline()?
        .unwrap_or(0);
    let heads = attr_int(node, "num_heads").or_decline()?.unwrap_or(0);
    if rd > 0 && heads <= 0 {
        decline!("RotaryEmbedding: rotary_embedding_dim needs num_heads");
    }
    match ctx.expect_rank(node, 0)? {
        3 => {
            if rd == 0 && last_dim(ctx, node, 2).is_none() {
                decline!("RotaryEmbedding: the head size (cos_cache's last dim) is unknown");
            }
        }
        4 => {}
        r => decline!("RotaryEmbedding: rank-{r} input is invalid"),
    }
    Ok(())
}

/// Rotates `x` (`[..., D]`) by `cos`/`sin` (broadcastable to `[..., rd/2]`) over its first `rd`
/// features (`rd == None`: all of them).
pub(crate) fn rotate(
    ctx: &mut LowerCtx,
    x: Slot,
    cos: Slot,
    sin: Slot,
    rd: Option<i64>,
    interleaved: bool,
    dt: DataType,
) -> Slot {
    let (x_rot, pass) = match rd {
        Some(rd) => (
            slice_last(ctx, x, 0, rd, 1, dt),
            Some(slice_last(ctx, x, rd, i64::MAX, 1, dt)),
        ),
        None => (x, None),
    };
    let rotated = if interleaved {
        let x1 = slice_last(ctx, x_rot, 0, i64::MAX, 2, dt);
        let x2 = slice_last(ctx, x_rot, 1, i64::MAX, 2, dt);
        let c1 = ctx.binary(B::Multiply, x1, cos, dt);
        let s2 = ctx.binary(B::Multiply, x2, sin, dt);
        let real = ctx.binary(B::Subtract, c1, s2, dt);
        let c2 = ctx.binary(B::Multiply, x2, cos, dt);
        let s1 = ctx.binary(B::Multiply, x1, sin, dt);
        let imag = ctx.binary(B::Add, c2, s1, dt);
        let r = unsqueeze(ctx, real, -1, dt);
        let i = unsqueeze(ctx, imag, -1, dt);
        let cat = concat(ctx, vec![r, i], -1, dt);
        reshape(ctx, cat, ReshapeTarget::Like(x_rot), dt)
    } else {
        // x * [cos, cos] + [x2, x1] * [-sin, sin]: per half the same products and sums as
        // `x1 cos - x2 sin` and `x2 cos + x1 sin`, in fewer steps (the tables are shared by
        // every tensor rotated with them).
        let cos2 = concat(ctx, vec![cos, cos], -1, dt);
        let neg = ctx.unary(crate::step::UnaryOp::Negative, sin, dt);
        let sin2 = concat(ctx, vec![neg, sin], -1, dt);
        let a = ctx.temp(dt);
        let b = ctx.temp(dt);
        ctx.push(Step::Split {
            x: x_rot,
            axis: -1,
            sizes: None,
            outs: vec![a, b],
        });
        let swapped = concat(ctx, vec![b, a], -1, dt);
        let xc = ctx.binary(B::Multiply, x_rot, cos2, dt);
        let xs = ctx.binary(B::Multiply, swapped, sin2, dt);
        ctx.binary(B::Add, xc, xs, dt)
    };
    match pass {
        Some(p) => concat(ctx, vec![rotated, p], -1, dt),
        None => rotated,
    }
}

fn lower_rotary(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let interleaved = attr_int(node, "interleaved").or_invalid(node)?.unwrap_or(0) != 0;
    let rd = attr_int(node, "rotary_embedding_dim")
        .or_invalid(node)?
        .unwrap_or(0);
    let heads = attr_int(node, "num_heads").or_invalid(node)?.unwrap_or(0);
    let x = ctx.input(node, 0)?;
    let pos = ctx.input(node, 1)?;
    let cos_cache = ctx.input(node, 2)?;
    let sin_cache = ctx.input(node, 3)?;
    // Work in [B, S, H, D] (3-D input) or [B, H, S, D] (4-D); the gathered caches are
    // [B, S, rd/2] (or [S, rd/2] for an offset) and get a heads axis.
    let x4 = if rank == 3 {
        let head = if rd > 0 {
            None
        } else {
            lower_last_dim(ctx, node, 2).map(|c| c * 2)
        };
        let shape = match head {
            Some(h) => vec![0, 0, -1, h],
            None => vec![0, 0, heads, -1],
        };
        reshape_to(ctx, x, &shape, dt)
    } else {
        x
    };
    let positions = if ctx.input_rank(node, 1) == Some(1) {
        // [1]: the position of token 0; token s sits at pos[0] + s.
        let seq_axis = if rank == 3 { 1 } else { 2 };
        let iota = ctx.temp(DataType::Int64);
        ctx.push(Step::Iota {
            like: x4,
            axis: seq_axis,
            dtype: DataType::Int64,
            out: iota,
        });
        ctx.binary(B::Add, iota, pos, DataType::Int64)
    } else {
        pos
    };
    let mut caches = [cos_cache, sin_cache];
    for c in &mut caches {
        let g = ctx.temp(dt);
        ctx.push(Step::Take {
            x: *c,
            indices: positions,
            axis: 0,
            out: g,
        });
        // [B, S, r] -> [B, S, 1, r] (3-D) or [B, 1, S, r] (4-D); [S, r] broadcasts as
        // [S, 1, r] / [S, r].
        *c = if rank == 3 {
            unsqueeze(ctx, g, -2, dt)
        } else if ctx.input_rank(node, 1) == Some(2) {
            unsqueeze(ctx, g, 1, dt)
        } else {
            g
        };
    }
    let y4 = rotate(
        ctx,
        x4,
        caches[0],
        caches[1],
        (rd > 0).then_some(rd),
        interleaved,
        dt,
    );
    let y = if rank == 3 {
        reshape(ctx, y4, ReshapeTarget::Like(x), dt)
    } else {
        y4
    };
    ctx.finish(node, 0, y, dt)
}
