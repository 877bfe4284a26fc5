//! `com.microsoft` RotaryEmbedding and MRotaryEmbedding (M-RoPE: the cos/sin vector of each
//! token assembled from three position streams, in sections or interleaved), and the
//! rotation shared with GroupQueryAttention's `do_rotary`: `x1 * cos - x2 * sin`, `x2 * cos + x1 * sin` over the first `2 * cos.shape[1]`
//! features, halves (or interleaved pairs) of the rotated part, the rest passed through.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::BinaryOp as B;

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "RotaryEmbedding", 1, 1, claim_rotary, lower_rotary)
        .notes("3-D or 4-D input; `position_ids` of shape [1] (offset) or [B, S]; not `is_packed_batching`");
    r.op(MS, "MRotaryEmbedding", 1, 1, claim_mrotary, lower_mrotary)
        .notes("3-D or 4-D input, position ids `[3, B, S]`, `mrope_layout` 0 (sections) and 1 (interleaved); not `is_packed_batching` or a `scale` other than 1");
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

/// Rotates `x` (rank 4, `[..., D]`) by `cos`/`sin` (broadcastable to `[..., rd/2]`) over its
/// first `rd` features (`rd == None`: all of them). `width`, when given, is the number of
/// features rotated for sure (`rd`, or `D`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rotate(
    ctx: &mut LowerCtx,
    x: Slot,
    cos: Slot,
    sin: Slot,
    rd: Option<i64>,
    width: Option<i64>,
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
        let swapped = match width {
            // [x2, x1] as one gather of the last axis by a constant permutation: the same
            // values, and in a shapeless compiled closure one kernel instead of a Split's
            // dynamic slices (offset kernels and copies) and a Concat.
            Some(w) if w > 0 && w % 2 == 0 => {
                let h = w / 2;
                let order: Vec<i64> = (h..w).chain(0..h).collect();
                let indices = ctx.constant(TensorData::from_i64(vec![w], &order));
                take(ctx, x_rot, indices, 3, dt)
            }
            _ => {
                let a = ctx.temp(dt);
                let b = ctx.temp(dt);
                ctx.push(Step::Split {
                    x: x_rot,
                    axis: -1,
                    sizes: None,
                    outs: vec![a, b],
                });
                concat(ctx, vec![b, a], -1, dt)
            }
        };
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
    let x = ctx.input(node, 0)?;
    let pos = ctx.input(node, 1)?;
    let cos_cache = ctx.input(node, 2)?;
    let sin_cache = ctx.input(node, 3)?;
    // Work in [B, S, H, D] (3-D input) or [B, H, S, D] (4-D); the gathered caches are
    // [B, S, rd/2] (or [S, rd/2] for an offset) and get a heads axis.
    let x4 = heads_view(ctx, node, x, dt)?;
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
        *c = g;
    }
    let per_token = ctx.input_rank(node, 1) == Some(2);
    apply(ctx, node, (x, x4), caches, per_token, dt)
}

/// The input viewed as `[B, S, H, D]` (3-D input) or `[B, H, S, D]` (4-D).
fn heads_view(ctx: &mut LowerCtx, node: &Node, x: Slot, dt: DataType) -> Result<Slot, PlanError> {
    let rank = ctx.need_rank(node, 0)?;
    if rank != 3 {
        return Ok(x);
    }
    let rd = attr_int(node, "rotary_embedding_dim")
        .or_invalid(node)?
        .unwrap_or(0);
    let heads = attr_int(node, "num_heads").or_invalid(node)?.unwrap_or(0);
    let head = if rd > 0 {
        None
    } else {
        lower_last_dim(ctx, node, 2).map(|c| c * 2)
    };
    let shape = match head {
        Some(h) => vec![0, 0, -1, h],
        None => vec![0, 0, heads, -1],
    };
    Ok(reshape_to(ctx, x, &shape, dt))
}

/// Rotates `x4` (the heads view of `x`) by the gathered caches (`[B, S, r]`, or `[S, r]` when
/// not `per_token`) and binds the node's output.
fn apply(
    ctx: &mut LowerCtx,
    node: &Node,
    (x, x4): (Slot, Slot),
    mut caches: [Slot; 2],
    per_token: bool,
    dt: DataType,
) -> Result<(), PlanError> {
    let rank = ctx.need_rank(node, 0)?;
    let interleaved = attr_int(node, "interleaved").or_invalid(node)?.unwrap_or(0) != 0;
    let rd = attr_int(node, "rotary_embedding_dim")
        .or_invalid(node)?
        .unwrap_or(0);
    for c in &mut caches {
        // [B, S, r] -> [B, S, 1, r] (3-D) or [B, 1, S, r] (4-D); [S, r] broadcasts as
        // [S, 1, r] / [S, r].
        *c = if rank == 3 {
            unsqueeze(ctx, *c, -2, dt)
        } else if per_token {
            unsqueeze(ctx, *c, 1, dt)
        } else {
            *c
        };
    }
    // the rotated width, when the input's head size is known (4-D input)
    let head = (rank == 4)
        .then(|| super::lower_last_dim(ctx, node, 0))
        .flatten();
    let width = match (rd, head) {
        (0, Some(d)) => super::lower_last_dim(ctx, node, 2)
            .map(|c| 2 * c)
            .filter(|&w| w == d),
        (rd, Some(d)) if rd <= d => Some(rd),
        _ => None,
    };
    let y4 = rotate(
        ctx,
        x4,
        caches[0],
        caches[1],
        (rd > 0).then_some(rd),
        width,
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

// ---------------------------------------------------------------------------------------------
// MRotaryEmbedding.

/// Which of the three position streams (temporal, height, width) fills each of the `half`
/// entries of a token's cos/sin vector.
fn mrope_streams(node: &Node, half: i64) -> Result<Vec<u8>, String> {
    let sec =
        attr_ints(node, "mrope_section")?.ok_or("MRotaryEmbedding: mrope_section is required")?;
    if sec.len() != 3 || sec.iter().any(|&v| v < 0) || sec.iter().sum::<i64>() != half {
        return Err(format!(
            "MRotaryEmbedding: mrope_section {sec:?} must be 3 non-negative sizes summing to {half}"
        ));
    }
    Ok(match attr_int(node, "mrope_layout")?.unwrap_or(0) {
        0 => (0..3u8)
            .flat_map(|i| std::iter::repeat_n(i, sec[i as usize] as usize))
            .collect(),
        1 => (0..half)
            .map(|j| match j % 3 {
                1 if j < 3 * sec[1] => 1,
                2 if j < 3 * sec[2] => 2,
                _ => 0,
            })
            .collect(),
        l => return Err(format!("MRotaryEmbedding: mrope_layout={l} is not 0 or 1")),
    })
}

fn claim_mrotary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    ctx.expect_dtype(node, 1, &[DataType::Int64])?;
    for i in [2, 3] {
        ctx.expect_dtype(node, i, &[dt])?;
        if ctx.expect_rank(node, i)? != 2 {
            decline!("MRotaryEmbedding: cos_cache and sin_cache must be 2-D");
        }
    }
    if attr_int(node, "is_packed_batching")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("MRotaryEmbedding: is_packed_batching is not claimed");
    }
    if attr_float(node, "scale").or_decline()?.unwrap_or(1.0) != 1.0 {
        decline!("MRotaryEmbedding: a scale other than 1 is not claimed");
    }
    if ctx.expect_rank(node, 1)? != 3 {
        decline!("MRotaryEmbedding: position_ids must be [3, B, S]");
    }
    let rd = attr_int(node, "rotary_embedding_dim")
        .or_decline()?
        .unwrap_or(0);
    if rd > 0 && attr_int(node, "num_heads").or_decline()?.unwrap_or(0) <= 0 {
        decline!("MRotaryEmbedding: rotary_embedding_dim needs num_heads");
    }
    let r = ctx.expect_rank(node, 0)?;
    if r != 3 && r != 4 {
        decline!("MRotaryEmbedding: rank-{r} input is invalid");
    }
    if r == 3 && attr_int(node, "num_heads").or_decline()?.unwrap_or(0) <= 0 {
        decline!("MRotaryEmbedding: a 3-D input needs num_heads (ORT refuses it without)");
    }
    let Some(half) = last_dim(ctx, node, 2) else {
        decline!("MRotaryEmbedding: cos_cache's last dim is unknown");
    };
    mrope_streams(node, half).or_decline()?;
    Ok(())
}

fn lower_mrotary(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let Some(half) = lower_last_dim(ctx, node, 2) else {
        crate::plan::invalid!(node, "cos_cache's last dim is unknown");
    };
    let streams = mrope_streams(node, half).or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let pos = ctx.input(node, 1)?;
    let x4 = heads_view(ctx, node, x, dt)?;
    // positions of each stream [B, S]
    let mut per_stream = Vec::with_capacity(3);
    for i in 0..3 {
        let idx = ctx.scalar(DataType::Int64, i as f64)?;
        let p = ctx.temp(DataType::Int64);
        ctx.push(Step::Take {
            x: pos,
            indices: idx,
            axis: 0,
            out: p,
        });
        per_stream.push(p);
    }
    // entry j of a token's vector from stream streams[j]
    let mask = |ctx: &mut LowerCtx, k: u8| -> Result<Slot, PlanError> {
        let v: Vec<i64> = streams.iter().map(|&s| (s == k) as i64).collect();
        let t =
            crate::consts::tensor_from_i64(DataType::Bool, vec![half], &v).ok_or_else(|| {
                PlanError::Invalid {
                    node: node.name.clone(),
                    reason: "cannot make the stream mask".into(),
                }
            })?;
        Ok(ctx.constant(t))
    };
    let m1 = mask(ctx, 1)?;
    let m2 = mask(ctx, 2)?;
    let mut caches = [ctx.input(node, 2)?, ctx.input(node, 3)?];
    for c in &mut caches {
        let g: Vec<Slot> = per_stream
            .iter()
            .map(|&p| {
                let out = ctx.temp(dt);
                ctx.push(Step::Take {
                    x: *c,
                    indices: p,
                    axis: 0,
                    out,
                });
                out
            })
            .collect();
        let hw = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: m2,
            x: g[2],
            y: g[0],
            out: hw,
        });
        let out = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: m1,
            x: g[1],
            y: hw,
            out,
        });
        *c = out;
    }
    apply(ctx, node, (x, x4), caches, true, dt)
}
