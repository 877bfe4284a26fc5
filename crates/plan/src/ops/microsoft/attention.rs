//! `com.microsoft` GroupQueryAttention and MultiHeadAttention.
//!
//! GroupQueryAttention follows ORT's CPU kernel (see [`crate::gqa`] for the cache layout):
//! separate or packed QKV, past/present KV cache (growing or a fixed buffer), `seqlens_k`
//! and `total_sequence_length` (read on the host), `do_rotary` with cos/sin caches (halves or
//! interleaved, partial rotary dims, `position_ids`), `local_window_size`, `softcap`,
//! `scale`, `smooth_softmax`, `head_sink` and `attention_bias`. Quantized KV caches,
//! `qk_output`, Q/K norms, the sliding-window cache and non-causal attention are declined.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ShapeSource};

/// Registers the attention ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "GroupQueryAttention", 1, 1, claim_gqa, lower_gqa)
        .notes("float caches only; no `qk_output`, Q/K norm weights, sliding-window cache or `causal=0`; reads `seqlens_k` on the host (computed there from `attention_mask` when the graph derives it from it; decode steps then run as one compiled closure)");
    r.op(MS, "MultiHeadAttention", 1, 1, claim_mha, lower_mha)
        .notes("separate 3-D Q/K/V (+bias), past/present, `attention_bias`, 1-D/2-D `key_padding_mask`; `unidirectional` only with equal query and key lengths");
}

// ---------------------------------------------------------------------------------------------
// GroupQueryAttention.

const GQA_QUERY: usize = 0;
const GQA_KEY: usize = 1;
const GQA_VALUE: usize = 2;
const GQA_PAST_KEY: usize = 3;
const GQA_PAST_VALUE: usize = 4;
const GQA_SEQLENS: usize = 5;
const GQA_TOTAL: usize = 6;
const GQA_COS: usize = 7;
const GQA_SIN: usize = 8;
const GQA_POS: usize = 9;
const GQA_BIAS: usize = 10;
const GQA_SINK: usize = 11;

struct GqaAttrs {
    heads: i64,
    kv_heads: i64,
    scale: f32,
    softcap: f32,
    window: i64,
    rotary: bool,
    interleaved: bool,
    smooth: bool,
}

fn gqa_attrs(node: &Node) -> Result<GqaAttrs, String> {
    let heads = attr_int(node, "num_heads")?.unwrap_or(0);
    let kv_heads = attr_int(node, "kv_num_heads")?.unwrap_or(0);
    Ok(GqaAttrs {
        heads,
        kv_heads,
        scale: attr_float(node, "scale")?.unwrap_or(0.0),
        softcap: attr_float(node, "softcap")?.unwrap_or(0.0),
        window: attr_int(node, "local_window_size")?.unwrap_or(-1),
        rotary: attr_int(node, "do_rotary")?.unwrap_or(0) == 1,
        interleaved: attr_int(node, "rotary_interleaved")?.unwrap_or(0) == 1,
        smooth: attr_int(node, "smooth_softmax")?.unwrap_or(-1) == 1,
    })
}

/// The head size from the query's hidden size, when known.
fn gqa_head_size(hidden: Option<i64>, packed: bool, a: &GqaAttrs) -> Option<i64> {
    let h = hidden?;
    let n = if packed {
        a.heads + 2 * a.kv_heads
    } else {
        a.heads
    };
    (n > 0 && h % n == 0).then(|| h / n)
}

fn claim_gqa(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, GQA_QUERY, FLOATS)?;
    let a = gqa_attrs(node).or_decline()?;
    if a.heads <= 0 || a.kv_heads <= 0 || a.heads % a.kv_heads != 0 {
        decline!("GroupQueryAttention: num_heads must be a positive multiple of kv_num_heads");
    }
    let packed = node.input(GQA_KEY).is_none();
    if packed != node.input(GQA_VALUE).is_none() {
        decline!("GroupQueryAttention: key and value must come together");
    }
    for i in [
        GQA_KEY,
        GQA_VALUE,
        GQA_PAST_KEY,
        GQA_PAST_VALUE,
        GQA_BIAS,
        GQA_SINK,
    ] {
        if node.input(i).is_some() {
            let idt = ctx.input_dtype(node, i)?;
            if idt != dt {
                decline!(
                    "GroupQueryAttention: input {i} is {idt} but the query is {dt} (quantized KV caches are not claimed)"
                );
            }
        }
    }
    if node.input(GQA_PAST_KEY).is_some() != node.input(GQA_PAST_VALUE).is_some() {
        decline!("GroupQueryAttention: past_key and past_value must come together");
    }
    ctx.expect_dtype(node, GQA_SEQLENS, &[DataType::Int32])?;
    ctx.expect_dtype(node, GQA_TOTAL, &[DataType::Int32])?;
    for (i, what) in [
        (12, "k_scale"),
        (13, "v_scale"),
        (14, "q_norm_weight"),
        (15, "k_norm_weight"),
    ] {
        no_input(node, i, what)?;
    }
    no_output(node, 3, "output_qk")?;
    if attr_int(node, "qk_output").or_decline()?.unwrap_or(0) != 0 {
        decline!("GroupQueryAttention: qk_output is not claimed");
    }
    for q in ["k_quant_type", "v_quant_type"] {
        if let Some(v) = attr_str(node, q).or_decline()?
            && v != "NONE"
        {
            decline!("GroupQueryAttention: {q}={v} (quantized KV cache) is not claimed");
        }
    }
    if attr_int(node, "sliding_window_cache")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("GroupQueryAttention: sliding_window_cache is not claimed");
    }
    if attr_int(node, "causal").or_decline()?.unwrap_or(1) != 1 {
        decline!("GroupQueryAttention: causal=0 is not claimed");
    }
    if a.window == 0 || a.window < -1 {
        decline!(
            "GroupQueryAttention: local_window_size={} is not claimed",
            a.window
        );
    }
    if a.softcap < 0.0 {
        decline!("GroupQueryAttention: a negative softcap is invalid");
    }
    let Some(head) = gqa_head_size(last_dim(ctx, node, GQA_QUERY), packed, &a) else {
        decline!(
            "GroupQueryAttention: the head size is unknown (the query's hidden size must be fixed)"
        );
    };
    if !packed && last_dim(ctx, node, GQA_KEY).is_some_and(|k| k != head * a.kv_heads) {
        decline!("GroupQueryAttention: the key's hidden size is not kv_num_heads * head_size");
    }
    for i in [GQA_QUERY, GQA_PAST_KEY] {
        let want = if i == GQA_QUERY { 3 } else { 4 };
        if node.input(i).is_some() && ctx.expect_rank(node, i)? != want {
            decline!("GroupQueryAttention: input {i} must be {want}-D");
        }
    }
    if a.rotary {
        if node.input(GQA_COS).is_none() || node.input(GQA_SIN).is_none() {
            decline!("GroupQueryAttention: do_rotary needs cos_cache and sin_cache");
        }
        for i in [GQA_COS, GQA_SIN] {
            ctx.expect_dtype(node, i, &[dt])?;
        }
        match last_dim(ctx, node, GQA_COS) {
            Some(c) if c > 0 && 2 * c <= head => {}
            _ => decline!(
                "GroupQueryAttention: the rotary dim (cos_cache's last dim) must be known and at most head_size / 2"
            ),
        }
        if node.input(GQA_POS).is_some() {
            ctx.expect_dtype(node, GQA_POS, &[DataType::Int64])?;
        }
    }
    Ok(())
}

fn lower_gqa(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, GQA_QUERY)?;
    let a = gqa_attrs(node).or_invalid(node)?;
    let packed = node.input(GQA_KEY).is_none();
    let Some(head) = gqa_head_size(lower_last_dim(ctx, node, GQA_QUERY), packed, &a) else {
        crate::plan::invalid!(node, "the head size is unknown");
    };
    let query = ctx.input(node, GQA_QUERY)?;
    let (q, k, v) = if packed {
        let outs = vec![ctx.temp(dt), ctx.temp(dt), ctx.temp(dt)];
        ctx.push(Step::Split {
            x: query,
            axis: -1,
            sizes: Some(ShapeSource::Static(vec![
                a.heads * head,
                a.kv_heads * head,
                a.kv_heads * head,
            ])),
            outs: outs.clone(),
        });
        (outs[0], outs[1], outs[2])
    } else {
        (
            query,
            ctx.input(node, GQA_KEY)?,
            ctx.input(node, GQA_VALUE)?,
        )
    };
    let mut qh = to_heads(ctx, q, a.heads, dt);
    let mut kh = to_heads(ctx, k, a.kv_heads, dt);
    let vh = to_heads(ctx, v, a.kv_heads, dt);
    let seqlens = ctx.input(node, GQA_SEQLENS)?;
    let total = ctx.ints_input(node, GQA_TOTAL)?;
    let past_k = ctx.opt_input(node, GQA_PAST_KEY)?;
    let past_v = ctx.opt_input(node, GQA_PAST_VALUE)?;
    if a.rotary {
        let rd = lower_last_dim(ctx, node, GQA_COS).unwrap_or(head / 2) * 2;
        let position_ids = ctx.opt_input(node, GQA_POS)?;
        let pos = ctx.temp(DataType::Int64);
        ctx.push(Step::GqaPositions {
            seqlens,
            total: total.clone(),
            like: kh,
            past: past_k,
            position_ids,
            out: pos,
        });
        let mut caches = [ctx.input(node, GQA_COS)?, ctx.input(node, GQA_SIN)?];
        for c in &mut caches {
            let g = ctx.temp(dt);
            ctx.push(Step::Take {
                x: *c,
                indices: pos,
                axis: 0,
                out: g,
            });
            // [B, S, rd/2] -> [B, 1, S, rd/2] against [B, H, S, D].
            *c = unsqueeze(ctx, g, 1, dt);
        }
        let width = (rd <= head).then_some(rd);
        let rd = (rd < head).then_some(rd);
        qh = super::rotary::rotate(ctx, qh, caches[0], caches[1], rd, width, a.interleaved, dt);
        kh = super::rotary::rotate(ctx, kh, caches[0], caches[1], rd, width, a.interleaved, dt);
    }
    let present_k = ctx.temp(dt);
    ctx.push(Step::KvCache {
        past: past_k,
        new: kh,
        seqlens,
        total: total.clone(),
        out: present_k,
    });
    let present_v = ctx.temp(dt);
    ctx.push(Step::KvCache {
        past: past_v,
        new: vh,
        seqlens,
        total: total.clone(),
        out: present_v,
    });
    let bias = ctx.opt_input(node, GQA_BIAS)?;
    let mask_dt = if bias.is_some() { dt } else { DataType::Bool };
    // [B, 1, S, P] without a bias; with one, the bias's head dim.
    let mask_heads = match node.input(GQA_BIAS) {
        None => Some(1),
        Some(b) => ctx
            .shape_of(b)
            .and_then(|d| d.get(1).and_then(onnx_ir::Dim::fixed)),
    };
    let mask = ctx.temp(mask_dt);
    ctx.push(Step::GqaMask {
        seqlens,
        total,
        like: kh,
        past: past_k,
        window: a.window,
        bias,
        // The fused attention takes an absent mask as none; the soft-capped one needs an array.
        omit: a.softcap <= 0.0,
        out: mask,
    });
    let sinks = match ctx.opt_input(node, GQA_SINK)? {
        Some(s) => Some(s),
        None if a.smooth => {
            let zeros =
                crate::consts::tensor_from_f64(dt, vec![a.heads], &vec![0.0; a.heads as usize])
                    .ok_or_else(|| PlanError::Invalid {
                        node: node.name.clone(),
                        reason: format!("cannot make {dt} sinks"),
                    })?;
            Some(ctx.constant(zeros))
        }
        None => None,
    };
    let scale = if a.scale == 0.0 {
        1.0 / (head as f32).sqrt()
    } else {
        a.scale
    };
    let y = super::super::sdpa::attention(
        ctx,
        &super::super::sdpa::Sdpa {
            q: qh,
            k: present_k,
            v: present_v,
            mask: Some((mask, mask_dt)),
            mask_heads,
            causal: false,
            sinks,
            scale,
            softcap: a.softcap,
            heads: Some((a.heads, a.kv_heads)),
            dt,
        },
    )?;
    let y = from_heads(ctx, y, dt);
    ctx.finish(node, 0, y, dt)?;
    ctx.finish(node, 1, present_k, dt)?;
    ctx.finish(node, 2, present_v, dt)
}

// ---------------------------------------------------------------------------------------------
// MultiHeadAttention.

const MHA_QUERY: usize = 0;
const MHA_KEY: usize = 1;
const MHA_VALUE: usize = 2;
const MHA_BIAS: usize = 3;
const MHA_KPM: usize = 4;
const MHA_ATTN_BIAS: usize = 5;
const MHA_PAST_KEY: usize = 6;
const MHA_PAST_VALUE: usize = 7;

fn claim_mha(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, MHA_QUERY, FLOATS)?;
    let heads = attr_int(node, "num_heads").or_decline()?.unwrap_or(0);
    if heads <= 0 {
        decline!("MultiHeadAttention: num_heads must be positive");
    }
    if node.input(MHA_KEY).is_none() || node.input(MHA_VALUE).is_none() {
        decline!("MultiHeadAttention: packed QKV (no key/value inputs) is not claimed");
    }
    for i in [MHA_QUERY, MHA_KEY, MHA_VALUE] {
        if ctx.expect_rank(node, i)? != 3 {
            decline!(
                "MultiHeadAttention: input {i} must be 3-D (packed or pre-projected BNSH forms are not claimed)"
            );
        }
    }
    for i in [
        MHA_KEY,
        MHA_VALUE,
        MHA_BIAS,
        MHA_ATTN_BIAS,
        MHA_PAST_KEY,
        MHA_PAST_VALUE,
    ] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    no_input(node, 8, "past_sequence_length")?;
    no_input(node, 9, "cache_indirection")?;
    no_output(node, 3, "qk")?;
    if node.input(MHA_PAST_KEY).is_some() != node.input(MHA_PAST_VALUE).is_some() {
        decline!("MultiHeadAttention: past_key and past_value must come together");
    }
    if node.input(MHA_PAST_KEY).is_some() && ctx.expect_rank(node, MHA_PAST_KEY)? != 4 {
        decline!("MultiHeadAttention: past_key must be 4-D");
    }
    let hidden = last_dim(ctx, node, MHA_QUERY);
    let v_hidden = last_dim(ctx, node, MHA_VALUE);
    match (hidden, v_hidden) {
        (Some(h), Some(v)) if h % heads == 0 && v % heads == 0 => {}
        _ => decline!(
            "MultiHeadAttention: the query and value hidden sizes must be fixed multiples of num_heads"
        ),
    }
    if node.input(MHA_BIAS).is_some() && ctx.expect_rank(node, MHA_BIAS)? != 1 {
        decline!("MultiHeadAttention: bias must be 1-D");
    }
    if node.input(MHA_KPM).is_some() {
        ctx.expect_dtype(node, MHA_KPM, &[DataType::Int32])?;
        let r = ctx.expect_rank(node, MHA_KPM)?;
        if r != 1 && r != 2 {
            decline!("MultiHeadAttention: a rank-{r} key_padding_mask is not claimed");
        }
    }
    if attr_int(node, "unidirectional").or_decline()?.unwrap_or(0) != 0 {
        let q = dims_of(ctx, node.input(MHA_QUERY).unwrap_or(""));
        let k = dims_of(ctx, node.input(MHA_KEY).unwrap_or(""));
        let same = matches!((q, k), (Some(q), Some(k)) if same_dim(&q[1], &k[1]));
        if !same {
            decline!(
                "MultiHeadAttention: unidirectional needs query and key lengths known to be equal"
            );
        }
    }
    Ok(())
}

fn lower_mha(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, MHA_QUERY)?;
    let heads = attr_int(node, "num_heads").or_invalid(node)?.unwrap_or(1);
    let causal = attr_int(node, "unidirectional")
        .or_invalid(node)?
        .unwrap_or(0)
        != 0;
    let mfv = attr_float(node, "mask_filter_value")
        .or_invalid(node)?
        .unwrap_or(-10000.0);
    let (Some(hidden), Some(v_hidden)) = (
        lower_last_dim(ctx, node, MHA_QUERY),
        lower_last_dim(ctx, node, MHA_VALUE),
    ) else {
        crate::plan::invalid!(node, "hidden sizes are unknown");
    };
    let scale = attr_float(node, "scale")
        .or_invalid(node)?
        .unwrap_or(1.0 / ((hidden / heads) as f32).sqrt());
    let mut q = ctx.input(node, MHA_QUERY)?;
    let mut k = ctx.input(node, MHA_KEY)?;
    let mut v = ctx.input(node, MHA_VALUE)?;
    if let Some(bias) = ctx.opt_input(node, MHA_BIAS)? {
        let parts = vec![ctx.temp(dt), ctx.temp(dt), ctx.temp(dt)];
        ctx.push(Step::Split {
            x: bias,
            axis: 0,
            sizes: Some(ShapeSource::Static(vec![hidden, hidden, v_hidden])),
            outs: parts.clone(),
        });
        q = ctx.binary(B::Add, q, parts[0], dt);
        k = ctx.binary(B::Add, k, parts[1], dt);
        v = ctx.binary(B::Add, v, parts[2], dt);
    }
    let qh = to_heads(ctx, q, heads, dt);
    let mut kh = to_heads(ctx, k, heads, dt);
    let mut vh = to_heads(ctx, v, heads, dt);
    if let (Some(pk), Some(pv)) = (
        ctx.opt_input(node, MHA_PAST_KEY)?,
        ctx.opt_input(node, MHA_PAST_VALUE)?,
    ) {
        kh = concat(ctx, vec![pk, kh], 2, dt);
        vh = concat(ctx, vec![pv, vh], 2, dt);
    }
    // An additive mask: attention_bias [B|1, H|1, S, T] plus mask_filter_value where the key
    // padding mask is 0 (as ORT adds it).
    let mut mask = ctx.opt_input(node, MHA_ATTN_BIAS)?;
    if let Some(kpm) = ctx.opt_input(node, MHA_KPM)? {
        let keep = if ctx.input_rank(node, MHA_KPM) == Some(1) {
            // Lengths [B]: key t is kept when t < len[b].
            let iota = ctx.temp(DataType::Int32);
            ctx.push(Step::Iota {
                like: kh,
                axis: 2,
                dtype: DataType::Int32,
                out: iota,
            });
            let len = unsqueeze(ctx, kpm, 1, DataType::Int32);
            ctx.binary(B::Less, iota, len, DataType::Int32)
        } else {
            let zero = ctx.scalar(DataType::Int32, 0.0)?;
            ctx.binary(B::NotEqual, kpm, zero, DataType::Int32)
        };
        let zero = ctx.scalar(dt, 0.0)?;
        let filt = ctx.scalar(dt, mfv as f64)?;
        let add = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: keep,
            x: zero,
            y: filt,
            out: add,
        });
        // [B, T] -> [B, 1, 1, T]
        let add = reshape(
            ctx,
            add,
            crate::step::ReshapeTarget::Unsqueeze {
                axes: ShapeSource::Static(vec![1, 2]),
            },
            dt,
        );
        mask = Some(match mask {
            Some(m) => ctx.binary(B::Add, m, add, dt),
            None => add,
        });
    }
    let y = super::super::sdpa::attention(
        ctx,
        &super::super::sdpa::Sdpa {
            q: qh,
            k: kh,
            v: vh,
            mask: mask.map(|m| (m, dt)),
            mask_heads: None,
            causal,
            sinks: None,
            scale,
            softcap: 0.0,
            heads: Some((heads, heads)),
            dt,
        },
    )?;
    let y = from_heads(ctx, y, dt);
    ctx.finish(node, 0, y, dt)?;
    ctx.finish(node, 1, kh, dt)?;
    ctx.finish(node, 2, vh, dt)
}
