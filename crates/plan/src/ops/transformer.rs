//! Transformer building blocks: Attention (opset 23) and RotaryEmbedding (opset 23).

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReshapeTarget, ShapeSource, SliceSpec};

/// Registers the transformer family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Attention", 23, MAX, claim_attention, lower_attention);
    r.op("", "RotaryEmbedding", 23, MAX, claim_rotary, lower_rotary);
}

fn dims(ctx: &ClaimCtx, name: &str) -> Option<Vec<Dim>> {
    if let Some(t) = ctx.constant(name) {
        return Some(t.dims.iter().map(|&d| Dim::Fixed(d)).collect());
    }
    ctx.graph.value(name).and_then(|v| v.shape)
}

/// Same size at run time for sure: equal fixed sizes or the same symbol.
fn same_dim(a: &Dim, b: &Dim) -> bool {
    match (a, b) {
        (Dim::Fixed(x), Dim::Fixed(y)) => x == y,
        (Dim::Symbolic(x), Dim::Symbolic(y)) => x == y,
        _ => false,
    }
}

fn claim_attention(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = same_dtypes(ctx, node, 0..3, FLOATS)?;
    let rank = ctx.expect_rank(node, 0)?;
    for i in 1..3 {
        if ctx.expect_rank(node, i)? != rank {
            decline!("Attention: Q, K and V ranks differ");
        }
    }
    if rank != 3 && rank != 4 {
        decline!("Attention: rank-{rank} inputs are invalid");
    }
    let qh = attr_int(node, "q_num_heads").or_decline()?;
    let kvh = attr_int(node, "kv_num_heads").or_decline()?;
    if rank == 3 && (qh.is_none() || kvh.is_none()) {
        decline!("Attention: 3-D inputs need q_num_heads and kv_num_heads");
    }
    if node.input(6).is_some() {
        decline!("Attention: nonpad_kv_seqlen is not claimed");
    }
    if node.input(4).is_some() != node.input(5).is_some() {
        decline!("Attention: past_key and past_value must come together");
    }
    for i in [4, 5] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
            if ctx.expect_rank(node, i)? != 4 {
                decline!("Attention: past key/value must be 4-D");
            }
        }
    }
    no_output(node, 3, "qk_matmul_output")?;
    if attr_float(node, "softcap").or_decline()?.unwrap_or(0.0) > 0.0 {
        decline!("Attention: softcap is not claimed");
    }
    let mask = node.input(3);
    if mask.is_some() {
        let mdt = ctx.input_dtype(node, 3)?;
        if mdt != DataType::Bool && mdt != dt {
            decline!("Attention: a {mdt} mask with {dt} inputs is not claimed");
        }
    }
    let causal = attr_int(node, "is_causal").or_decline()?.unwrap_or(0) != 0;
    if causal {
        if mask.is_some() {
            decline!("Attention: is_causal together with attn_mask is not claimed");
        }
        if node.input(4).is_none() {
            // ONNX aligns the causal mask to the top-left, MLX to the bottom-right: they agree
            // when the query and key lengths are the same.
            let seq_axis = if rank == 3 { 1 } else { 2 };
            let q = dims(ctx, node.input(0).unwrap_or(""));
            let k = dims(ctx, node.input(1).unwrap_or(""));
            let same = matches!((q, k), (Some(q), Some(k)) if same_dim(&q[seq_axis], &k[seq_axis]));
            if !same {
                decline!(
                    "Attention: is_causal without a KV cache needs query and key lengths known to be equal"
                );
            }
        }
    }
    if attr_float(node, "scale").or_decline()?.is_none() && head_size(ctx, node, rank).is_none() {
        decline!("Attention: the head size (for the default scale) is unknown");
    }
    Ok(())
}

fn head_size(ctx: &ClaimCtx, node: &Node, rank: usize) -> Option<i64> {
    let q = dims(ctx, node.input(0)?)?;
    let last = q.last()?.fixed()?;
    if rank == 3 {
        let h = attr_int(node, "q_num_heads").ok()??;
        (h > 0).then(|| last / h)
    } else {
        Some(last)
    }
}

/// `[B, S, H*D]` -> `[B, H, S, D]`.
fn to_heads(ctx: &mut LowerCtx, x: Slot, heads: i64, dt: DataType) -> Slot {
    let r = ctx.temp(dt);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Onnx {
            shape: ShapeSource::Static(vec![0, 0, heads, -1]),
            allowzero: false,
        },
        out: r,
    });
    let t = ctx.temp(dt);
    ctx.push(Step::Transpose {
        x: r,
        perm: Some(vec![0, 2, 1, 3]),
        out: t,
    });
    t
}

fn lower_attention(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let qh = attr_int(node, "q_num_heads").or_invalid(node)?.unwrap_or(0);
    let kvh = attr_int(node, "kv_num_heads")
        .or_invalid(node)?
        .unwrap_or(0);
    let causal = attr_int(node, "is_causal").or_invalid(node)?.unwrap_or(0) != 0;
    let mut q = ctx.input(node, 0)?;
    let mut k = ctx.input(node, 1)?;
    let mut v = ctx.input(node, 2)?;
    let scale = match attr_float(node, "scale").or_invalid(node)? {
        Some(s) => s,
        None => {
            let Some(last) = ctx
                .input_fixed_shape(node, 0)
                .and_then(|s| s.last().copied())
                .or_else(|| {
                    ctx.shape_of(node.input(0).unwrap_or(""))
                        .and_then(|s| s.last().and_then(Dim::fixed))
                })
            else {
                crate::plan::invalid!(node, "the head size is unknown");
            };
            let hs = if rank == 3 { last / qh.max(1) } else { last };
            (1.0 / (hs as f64).sqrt()) as f32
        }
    };
    if rank == 3 {
        q = to_heads(ctx, q, qh, dt);
        k = to_heads(ctx, k, kvh, dt);
        v = to_heads(ctx, v, kvh, dt);
    }
    if let (Some(pk), Some(pv)) = (ctx.opt_input(node, 4)?, ctx.opt_input(node, 5)?) {
        let nk = ctx.temp(dt);
        ctx.push(Step::Concat {
            inputs: vec![pk, k],
            axis: 2,
            out: nk,
        });
        let nv = ctx.temp(dt);
        ctx.push(Step::Concat {
            inputs: vec![pv, v],
            axis: 2,
            out: nv,
        });
        k = nk;
        v = nv;
    }
    let mask = ctx.opt_input(node, 3)?;
    let y = ctx.temp(dt);
    ctx.push(Step::Attention {
        q,
        k,
        v,
        mask,
        causal,
        scale,
        out: y,
    });
    let y = if rank == 3 {
        let t = ctx.temp(dt);
        ctx.push(Step::Transpose {
            x: y,
            perm: Some(vec![0, 2, 1, 3]),
            out: t,
        });
        let r = ctx.temp(dt);
        ctx.push(Step::Reshape {
            x: t,
            target: ReshapeTarget::Onnx {
                shape: ShapeSource::Static(vec![0, 0, -1]),
                allowzero: false,
            },
            out: r,
        });
        r
    } else {
        y
    };
    ctx.finish(node, 0, y, dt)?;
    // present_key / present_value are the (concatenated) 4-D keys and values.
    ctx.finish(node, 1, k, dt)?;
    ctx.finish(node, 2, v, dt)
}

fn claim_rotary(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..3, FLOATS)?;
    if node.input(3).is_some() {
        ctx.expect_dtype(node, 3, &[DataType::Int64])?;
    }
    let rank = ctx.expect_rank(node, 0)?;
    match rank {
        3 => {
            if attr_int(node, "num_heads").or_decline()?.unwrap_or(0) <= 0 {
                decline!("RotaryEmbedding: 3-D input needs num_heads");
            }
        }
        4 => {}
        r => decline!("RotaryEmbedding: rank-{r} input is invalid"),
    }
    Ok(())
}

fn slice_last(ctx: &mut LowerCtx, x: Slot, start: i64, end: i64, step: i64, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Slice {
        x,
        spec: SliceSpec {
            starts: ShapeSource::Static(vec![start]),
            ends: ShapeSource::Static(vec![end]),
            axes: Some(ShapeSource::Static(vec![-1])),
            steps: (step != 1).then(|| ShapeSource::Static(vec![step])),
        },
        out,
    });
    out
}

fn reshape(ctx: &mut LowerCtx, x: Slot, target: ReshapeTarget, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reshape { x, target, out });
    out
}

fn unsqueeze(ctx: &mut LowerCtx, x: Slot, axis: i64, dt: DataType) -> Slot {
    reshape(
        ctx,
        x,
        ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(vec![axis]),
        },
        dt,
    )
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
    let mut cos = ctx.input(node, 1)?;
    let mut sin = ctx.input(node, 2)?;
    if let Some(pos) = ctx.opt_input(node, 3)? {
        for c in [&mut cos, &mut sin] {
            let out = ctx.temp(dt);
            ctx.push(Step::Take {
                x: *c,
                indices: pos,
                axis: 0,
                out,
            });
            *c = out;
        }
    }
    // Work in [B, H, S, D] (4-D input) or [B, S, H, D] (3-D input); caches are [B, S, rd/2].
    let (x4, cache_axis) = if rank == 3 {
        let r = reshape(
            ctx,
            x,
            ReshapeTarget::Onnx {
                shape: ShapeSource::Static(vec![0, 0, heads, -1]),
                allowzero: false,
            },
            dt,
        );
        (r, 2)
    } else {
        (x, 1)
    };
    let cos = unsqueeze(ctx, cos, cache_axis, dt);
    let sin = unsqueeze(ctx, sin, cache_axis, dt);
    let (x_rot, pass) = if rd > 0 {
        (
            slice_last(ctx, x4, 0, rd, 1, dt),
            Some(slice_last(ctx, x4, rd, i64::MAX, 1, dt)),
        )
    } else {
        (x4, None)
    };
    let (x1, x2) = if interleaved {
        (
            slice_last(ctx, x_rot, 0, i64::MAX, 2, dt),
            slice_last(ctx, x_rot, 1, i64::MAX, 2, dt),
        )
    } else {
        let a = ctx.temp(dt);
        let b = ctx.temp(dt);
        ctx.push(Step::Split {
            x: x_rot,
            axis: -1,
            sizes: None,
            outs: vec![a, b],
        });
        (a, b)
    };
    let c1 = ctx.binary(B::Multiply, cos, x1, dt);
    let s2 = ctx.binary(B::Multiply, sin, x2, dt);
    let real = ctx.binary(B::Subtract, c1, s2, dt);
    let s1 = ctx.binary(B::Multiply, sin, x1, dt);
    let c2 = ctx.binary(B::Multiply, cos, x2, dt);
    let imag = ctx.binary(B::Add, s1, c2, dt);
    let rotated = if interleaved {
        let r = unsqueeze(ctx, real, -1, dt);
        let i = unsqueeze(ctx, imag, -1, dt);
        let cat = ctx.temp(dt);
        ctx.push(Step::Concat {
            inputs: vec![r, i],
            axis: -1,
            out: cat,
        });
        reshape(ctx, cat, ReshapeTarget::Like(x_rot), dt)
    } else {
        let cat = ctx.temp(dt);
        ctx.push(Step::Concat {
            inputs: vec![real, imag],
            axis: -1,
            out: cat,
        });
        cat
    };
    let y4 = match pass {
        Some(p) => {
            let cat = ctx.temp(dt);
            ctx.push(Step::Concat {
                inputs: vec![rotated, p],
                axis: -1,
                out: cat,
            });
            cat
        }
        None => rotated,
    };
    let y = if rank == 3 {
        reshape(ctx, y4, ReshapeTarget::Like(x), dt)
    } else {
        y4
    };
    ctx.finish(node, 0, y, dt)
}
