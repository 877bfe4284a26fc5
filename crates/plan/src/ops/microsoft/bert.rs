//! The BERT fusions of ORT's transformer optimizer: `Attention` (packed QKV projection,
//! `mask_index` in every form ORT's CPU kernel reads, past/present, `unidirectional`,
//! `qkv_hidden_sizes`, `attention_bias`), `EmbedLayerNormalization` and `BiasSoftmax`
//! (`softmax(scores + bias)` over the dims from `axis` on) and `PackedMultiHeadAttention`
//! (tokens of right-padded sequences packed without padding); ORT's GPU EPs implement
//! the last two.
//!
//! Attention's additive mask follows ORT 1.31's CPU kernel: a key masked by `mask_index` gets
//! `mask_filter_value` (default -10000) added to its score, a key after the query (with
//! `unidirectional`, aligned to the end of the past) gets the dtype's lowest value instead,
//! then `attention_bias` is added; a fully masked row therefore still softmaxes its scores.

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReshapeTarget, ShapeSource};

/// Registers the ops.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "Attention", 1, 1, claim_attention, lower_attention)
        .notes("`mask_index` 1-D end (`[B]`) or end/start (`[2B]`) positions (told apart at run time when the shapes don't say), 2-D `[B, T]` and 3-D `[B, S, T]` raw masks; past/present, `unidirectional`, `qkv_hidden_sizes`, `attention_bias`, `scale`, `mask_filter_value`; no 4-D mask, `do_rotary` or shared past/present buffer (as ORT's CPU kernel)");
    r.op(MS, "EmbedLayerNormalization", 1, 1, claim_embed, lower_embed)
        .notes("optional segment, mask and `position_ids` (`[B, S]` or `[1, S]`); `mask_index` counts the ones of the mask; ids out of range fail the run, as in ORT");
    r.op(MS, "PackedMultiHeadAttention", 1, 1, claim_packed_mha, lower_packed_mha)
        .notes("separate Q/K/V `[tokens, hidden]` (+bias) or packed QKV `[tokens, N, 3, H]`; `token_offset`, `cumulative_sequence_length`, `attention_bias`; tokens unpacked by a gather, attention per sequence, packed again");
    r.op(MS, "BiasSoftmax", 1, 1, claim_bias_softmax, lower_bias_softmax)
        .notes("bias of the input's rank (or, broadcast over the outer dims, lower rank); softmax over the dims from `axis` on, accumulated in float32");
}

// ---------------------------------------------------------------------------------------------
// Attention.

const ATT_INPUT: usize = 0;
const ATT_WEIGHTS: usize = 1;
const ATT_BIAS: usize = 2;
const ATT_MASK: usize = 3;
const ATT_PAST: usize = 4;
const ATT_ATTN_BIAS: usize = 5;

/// The form of Attention's `mask_index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MaskForm {
    /// `[B]`: keys at or after the end position are masked.
    End,
    /// `[2B]`: end positions, then start positions.
    EndStart,
    /// `[B]` or `[2B]`, known only at run time.
    EndMaybeStart,
    /// `[B, T]`: 0 masks a key.
    Raw2,
    /// `[B, S, T]`: 0 masks a key for one query.
    Raw3,
}

/// Attention's static description.
struct AttentionAttrs {
    heads: i64,
    /// Q, K and V hidden sizes.
    sizes: [i64; 3],
    causal: bool,
    scale: Option<f32>,
    mask_filter: f32,
}

fn attention_attrs(
    node: &Node,
    weights: Option<Vec<Dim>>,
    bias: Option<Vec<Dim>>,
) -> Result<AttentionAttrs, String> {
    let heads = attr_int(node, "num_heads")?.unwrap_or(0);
    if heads <= 0 {
        return Err("Attention: num_heads must be positive".into());
    }
    let total = weights
        .and_then(|w| w.get(1).and_then(Dim::fixed))
        .or_else(|| bias.and_then(|b| b.first().and_then(Dim::fixed)));
    let sizes = match attr_ints(node, "qkv_hidden_sizes")? {
        Some(v) => {
            if v.len() != 3 {
                return Err("Attention: qkv_hidden_sizes must have 3 values".into());
            }
            [v[0], v[1], v[2]]
        }
        None => match total {
            Some(t) if t % 3 == 0 => [t / 3; 3],
            _ => {
                return Err(
                    "Attention: the hidden sizes are unknown (the weights' second dim must be fixed)"
                        .into(),
                );
            }
        },
    };
    if sizes[0] != sizes[1] {
        return Err("Attention: Q and K hidden sizes must be equal".into());
    }
    if sizes.iter().any(|&s| s <= 0 || s % heads != 0) {
        return Err("Attention: every hidden size must be a positive multiple of num_heads".into());
    }
    if total.is_some_and(|t| t != sizes.iter().sum::<i64>()) {
        return Err("Attention: qkv_hidden_sizes do not sum to the weights' second dim".into());
    }
    Ok(AttentionAttrs {
        heads,
        sizes,
        causal: attr_int(node, "unidirectional")?.unwrap_or(0) != 0,
        scale: attr_float(node, "scale")?.filter(|&s| s != 0.0),
        mask_filter: attr_float(node, "mask_filter_value")?.unwrap_or(-10000.0),
    })
}

/// The mask form from the mask's and the input's declared shapes.
fn mask_form(mask: &[Dim], input: Option<&[Dim]>) -> Result<MaskForm, String> {
    let batch = input.and_then(|s| s.first());
    match mask.len() {
        1 => {
            let len = &mask[0];
            if let Some(b) = batch {
                if same_dim(len, b) {
                    return Ok(MaskForm::End);
                }
                if let (Some(l), Some(b)) = (len.fixed(), b.fixed())
                    && l == 2 * b
                {
                    return Ok(MaskForm::EndStart);
                }
            }
            Ok(MaskForm::EndMaybeStart)
        }
        2 => Ok(MaskForm::Raw2),
        3 => Ok(MaskForm::Raw3),
        r => Err(format!(
            "Attention: a rank-{r} mask_index is not claimed (ORT's CPU kernel has no 4-D mask)"
        )),
    }
}

fn claim_attention(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, ATT_INPUT, FLOATS)?;
    for i in [ATT_WEIGHTS, ATT_BIAS, ATT_PAST, ATT_ATTN_BIAS] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    no_input(node, 6, "past_sequence_length")?;
    for (a, what) in [
        ("do_rotary", "rotary embedding"),
        ("past_present_share_buffer", "a shared past/present buffer"),
    ] {
        if attr_int(node, a).or_decline()?.unwrap_or(0) != 0 {
            decline!("Attention: {a} ({what}) is not claimed (ORT's CPU kernel has none)");
        }
    }
    let weights = dims_of(ctx, node.input(ATT_WEIGHTS).unwrap_or(""));
    let bias = node.input(ATT_BIAS).and_then(|b| dims_of(ctx, b));
    let a = attention_attrs(node, weights.clone(), bias.clone()).or_decline()?;
    if ctx.expect_rank(node, ATT_INPUT)? != 3 {
        decline!("Attention: the input must be 3-D");
    }
    if weights.as_ref().is_some_and(|w| w.len() != 2) {
        decline!("Attention: the weights must be 2-D");
    }
    if bias.as_ref().is_some_and(|b| b.len() != 1) {
        decline!("Attention: the bias must be 1-D");
    }
    if node.input(ATT_MASK).is_some() {
        ctx.expect_dtype(node, ATT_MASK, &[DataType::Int32])?;
        let Some(mask) = dims_of(ctx, node.input(ATT_MASK).unwrap_or("")) else {
            decline!("Attention: the mask_index rank is unknown");
        };
        let input = dims_of(ctx, node.input(ATT_INPUT).unwrap_or(""));
        mask_form(&mask, input.as_deref()).or_decline()?;
    }
    if node.input(ATT_PAST).is_some() {
        if ctx.expect_rank(node, ATT_PAST)? != 5 {
            decline!("Attention: past must be 5-D");
        }
        if a.sizes[1] != a.sizes[2] {
            decline!("Attention: past needs equal K and V hidden sizes");
        }
        if node.output(1).is_none() {
            decline!("Attention: past without the present output is refused by ORT's CPU kernel");
        }
    }
    if node.output(1).is_some() && a.sizes[1] != a.sizes[2] {
        decline!("Attention: present needs equal K and V hidden sizes");
    }
    if node.input(ATT_ATTN_BIAS).is_some() && node.input(ATT_PAST).is_some() {
        decline!("Attention: past and attention_bias together are refused by ORT's CPU kernel");
    }
    if node.input(ATT_ATTN_BIAS).is_some() && ctx.expect_rank(node, ATT_ATTN_BIAS)? != 4 {
        decline!("Attention: attention_bias must be 4-D");
    }
    Ok(())
}

/// The lowest finite value of a float dtype (ORT's causal mask value).
fn lowest(dt: DataType) -> f64 {
    match dt {
        DataType::Float16 => -65504.0,
        DataType::BFloat16 => -3.3895313892515355e38,
        _ => f32::MIN as f64,
    }
}

/// Where `keep`, 0, else `masked` (dtype `dt`).
fn additive(ctx: &mut LowerCtx, keep: Slot, masked: f64, dt: DataType) -> Result<Slot, PlanError> {
    let zero = ctx.scalar(dt, 0.0)?;
    let filt = ctx.scalar(dt, masked)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Where {
        cond: keep,
        x: zero,
        y: filt,
        out,
    });
    Ok(out)
}

/// The keep-mask of `mask_index` in `form`, broadcastable to `[B, 1, S, T]` (`x` is the
/// `[B, S, _]` input, `kh` is `[B, N, T, H]`).
fn mask_keep(
    ctx: &mut LowerCtx,
    mask: Slot,
    form: MaskForm,
    x: Slot,
    kh: Slot,
) -> Result<Slot, PlanError> {
    let i32_ = DataType::Int32;
    let i64_ = DataType::Int64;
    let keep = match form {
        MaskForm::End | MaskForm::EndStart | MaskForm::EndMaybeStart => {
            let m = ctx.cast(mask, i32_, i64_);
            let (end, start) = if form == MaskForm::End {
                (m, None)
            } else if form == MaskForm::EndMaybeStart {
                // Ends are the first B values; starts the next B of `[mask, 0 * mask]`, which
                // are zeros when the mask has only B values.
                let b = ctx.iota(x, 0);
                let end = ctx.temp(i64_);
                ctx.push(Step::Take {
                    x: m,
                    indices: b,
                    axis: 0,
                    out: end,
                });
                let zero = ctx.scalar(i64_, 0.0)?;
                let zeros = ctx.binary(B::Multiply, m, zero, i64_);
                let padded = concat(ctx, vec![m, zeros], 0, i64_);
                let nb = ctx.dim_1d(x, 0);
                let len = ctx.dim_1d(m, 0);
                let two = ctx.scalar(i64_, 2.0)?;
                let nb2 = ctx.binary(B::Multiply, nb, two, i64_);
                let is_b = ctx.binary(B::Equal, len, nb, i64_);
                let is_2b = ctx.binary(B::Equal, len, nb2, i64_);
                let ok = ctx.binary(B::LogicalOr, is_b, is_2b, DataType::Bool);
                ctx.require(ok, "a 1-D mask_index must have B or 2B elements");
                let idx = ctx.binary(B::Add, b, nb, i64_);
                let start = ctx.temp(i64_);
                ctx.push(Step::Take {
                    x: padded,
                    indices: idx,
                    axis: 0,
                    out: start,
                });
                (end, Some(start))
            } else {
                let parts = vec![ctx.temp(DataType::Int64), ctx.temp(DataType::Int64)];
                ctx.push(Step::Split {
                    x: m,
                    axis: 0,
                    sizes: None,
                    outs: parts.clone(),
                });
                (parts[0], Some(parts[1]))
            };
            let t = ctx.iota(kh, 2);
            let end = unsqueeze(ctx, end, 1, DataType::Int64);
            let mut keep = ctx.binary(B::Less, t, end, DataType::Int64);
            if let Some(start) = start {
                let start = unsqueeze(ctx, start, 1, DataType::Int64);
                let after = ctx.binary(B::GreaterEqual, t, start, DataType::Int64);
                keep = ctx.binary(B::LogicalAnd, keep, after, DataType::Bool);
            }
            keep
        }
        MaskForm::Raw2 | MaskForm::Raw3 => {
            let zero = ctx.scalar(i32_, 0.0)?;
            ctx.binary(B::Greater, mask, zero, i32_)
        }
    };
    // [B, T] -> [B, 1, 1, T]; [B, S, T] -> [B, 1, S, T].
    let axes = if form == MaskForm::Raw3 {
        vec![1]
    } else {
        vec![1, 2]
    };
    Ok(reshape(
        ctx,
        keep,
        ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(axes),
        },
        DataType::Bool,
    ))
}

fn lower_attention(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, ATT_INPUT)?;
    let weights = ctx.shape_of(node.input(ATT_WEIGHTS).unwrap_or(""));
    let bias_shape = node.input(ATT_BIAS).and_then(|b| ctx.shape_of(b));
    let a = attention_attrs(node, weights, bias_shape).or_invalid(node)?;
    let [hq, hk, hv] = a.sizes;
    let x = ctx.input(node, ATT_INPUT)?;
    let w = ctx.input(node, ATT_WEIGHTS)?;
    let mut qkv = ctx.temp(dt);
    ctx.push(Step::MatMul {
        a: x,
        b: w,
        out: qkv,
    });
    if let Some(b) = ctx.opt_input(node, ATT_BIAS)? {
        qkv = ctx.binary(B::Add, qkv, b, dt);
    }
    let parts = vec![ctx.temp(dt), ctx.temp(dt), ctx.temp(dt)];
    ctx.push(Step::Split {
        x: qkv,
        axis: -1,
        sizes: Some(ShapeSource::Static(vec![hq, hk, hv])),
        outs: parts.clone(),
    });
    let qh = to_heads(ctx, parts[0], a.heads, dt);
    let mut kh = to_heads(ctx, parts[1], a.heads, dt);
    let mut vh = to_heads(ctx, parts[2], a.heads, dt);
    if let Some(past) = ctx.opt_input(node, ATT_PAST)? {
        // past [2, B, N, P, H]: keys and values of earlier steps.
        let mut halves = [kh, vh];
        for (i, h) in halves.iter_mut().enumerate() {
            let idx = ctx.scalar(DataType::Int64, i as f64)?;
            let p = ctx.temp(dt);
            ctx.push(Step::Take {
                x: past,
                indices: idx,
                axis: 0,
                out: p,
            });
            *h = concat(ctx, vec![p, *h], 2, dt);
        }
        [kh, vh] = halves;
    }
    let mut mask = None;
    if let Some(m) = ctx.opt_input(node, ATT_MASK)? {
        let md = ctx.shape_of(node.input(ATT_MASK).unwrap_or(""));
        let input = ctx.shape_of(node.input(ATT_INPUT).unwrap_or(""));
        let Some(md) = md else {
            crate::plan::invalid!(node, "the mask_index rank is unknown");
        };
        let form = mask_form(&md, input.as_deref()).or_invalid(node)?;
        let keep = mask_keep(ctx, m, form, x, kh)?;
        mask = Some(additive(ctx, keep, a.mask_filter as f64, dt)?);
    }
    if a.causal {
        // Key t is after query s when t - T > s - S (the past precedes the new tokens).
        let t = ctx.iota(kh, 2);
        let tl = ctx.dim_1d(kh, 2);
        let t = ctx.binary(B::Subtract, t, tl, DataType::Int64);
        let s = ctx.iota(qh, 2);
        let sl = ctx.dim_1d(qh, 2);
        let s = ctx.binary(B::Subtract, s, sl, DataType::Int64);
        let s = unsqueeze(ctx, s, 1, DataType::Int64);
        let future = ctx.binary(B::Greater, t, s, DataType::Int64);
        let low = ctx.scalar(dt, lowest(dt))?;
        let base = match mask {
            Some(m) => m,
            None => ctx.scalar(dt, 0.0)?,
        };
        let out = ctx.temp(dt);
        ctx.push(Step::Where {
            cond: future,
            x: low,
            y: base,
            out,
        });
        mask = Some(out);
    }
    if let Some(bias) = ctx.opt_input(node, ATT_ATTN_BIAS)? {
        mask = Some(match mask {
            Some(m) => ctx.binary(B::Add, m, bias, dt),
            None => bias,
        });
    }
    let scale = a.scale.unwrap_or(1.0 / ((hq / a.heads) as f32).sqrt());
    let y = crate::ops::sdpa::attention(
        ctx,
        &crate::ops::sdpa::Sdpa {
            q: qh,
            k: kh,
            v: vh,
            mask: mask.map(|m| (m, dt)),
            mask_heads: None,
            causal: false,
            sinks: None,
            scale,
            softcap: 0.0,
            heads: None,
            dt,
        },
    )?;
    let y = from_heads(ctx, y, dt);
    ctx.finish(node, 0, y, dt)?;
    if node.output(1).is_some() {
        let k = unsqueeze(ctx, kh, 0, dt);
        let v = unsqueeze(ctx, vh, 0, dt);
        let present = concat(ctx, vec![k, v], 0, dt);
        ctx.finish(node, 1, present, dt)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// EmbedLayerNormalization.

const EMB_IDS: usize = 0;
const EMB_SEGMENT_IDS: usize = 1;
const EMB_WORD: usize = 2;
const EMB_POSITION: usize = 3;
const EMB_SEGMENT: usize = 4;
const EMB_GAMMA: usize = 5;
const EMB_BETA: usize = 6;
const EMB_MASK: usize = 7;
const EMB_POSITION_IDS: usize = 8;

fn claim_embed(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, EMB_WORD, FLOATS)?;
    for i in [EMB_POSITION, EMB_SEGMENT, EMB_GAMMA, EMB_BETA] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    for i in [EMB_IDS, EMB_SEGMENT_IDS, EMB_MASK, EMB_POSITION_IDS] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[DataType::Int32])?;
        }
    }
    if node.input(EMB_SEGMENT_IDS).is_some() != node.input(EMB_SEGMENT).is_some() {
        decline!("EmbedLayerNormalization: segment_ids and segment_embedding must come together");
    }
    if node.input(EMB_BETA).is_none() {
        decline!("EmbedLayerNormalization: beta is required");
    }
    for i in [EMB_WORD, EMB_POSITION, EMB_SEGMENT] {
        if node.input(i).is_some() {
            let Some(d) = dims_of(ctx, node.input(i).unwrap_or("")) else {
                decline!("EmbedLayerNormalization: the shape of input {i} is unknown");
            };
            if d.len() != 2 || d[0].fixed().is_none() {
                decline!(
                    "EmbedLayerNormalization: input {i} must be 2-D with a fixed number of rows"
                );
            }
        }
    }
    for i in [EMB_GAMMA, EMB_BETA] {
        if ctx.expect_rank(node, i)? != 1 {
            decline!("EmbedLayerNormalization: input {i} must be 1-D");
        }
    }
    if ctx.expect_rank(node, EMB_IDS)? != 2 {
        decline!("EmbedLayerNormalization: input_ids must be 2-D");
    }
    Ok(())
}

/// Rows of a 2-D table input.
fn rows(ctx: &LowerCtx, node: &Node, i: usize) -> Result<i64, PlanError> {
    match ctx
        .shape_of(node.input(i).unwrap_or(""))
        .and_then(|d| d.first().and_then(Dim::fixed))
    {
        Some(r) => Ok(r),
        None => crate::plan::invalid!(node, "the rows of input {i} are unknown"),
    }
}

/// `table[ids]`, failing the run unless every id is in `[0, rows)`.
fn lookup(
    ctx: &mut LowerCtx,
    node: &Node,
    table: usize,
    ids: Slot,
    what: &str,
    dt: DataType,
) -> Result<Slot, PlanError> {
    let n = rows(ctx, node, table)?;
    let i32_ = DataType::Int32;
    let zero = ctx.scalar(i32_, 0.0)?;
    let hi = ctx.scalar(i32_, n as f64)?;
    let ge = ctx.binary(B::GreaterEqual, ids, zero, i32_);
    let lt = ctx.binary(B::Less, ids, hi, i32_);
    let ok = ctx.binary(B::LogicalAnd, ge, lt, DataType::Bool);
    ctx.require(ok, format!("{what} out of range [0, {n})"));
    let t = ctx.input(node, table)?;
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x: t,
        indices: ids,
        axis: 0,
        out,
    });
    Ok(out)
}

fn lower_embed(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, EMB_WORD)?;
    let i32_ = DataType::Int32;
    let eps = attr_float(node, "epsilon")
        .or_invalid(node)?
        .unwrap_or(1e-12);
    let ids = ctx.input(node, EMB_IDS)?;
    let word = lookup(ctx, node, EMB_WORD, ids, "input_ids", dt)?;
    let pos_ids = match ctx.opt_input(node, EMB_POSITION_IDS)? {
        Some(p) => p,
        None => {
            let out = ctx.temp(i32_);
            ctx.push(Step::Iota {
                like: ids,
                axis: 1,
                dtype: i32_,
                out,
            });
            out
        }
    };
    let pos = lookup(ctx, node, EMB_POSITION, pos_ids, "position ids", dt)?;
    let mut sum = ctx.binary(B::Add, word, pos, dt);
    if let Some(seg_ids) = ctx.opt_input(node, EMB_SEGMENT_IDS)? {
        let seg = lookup(ctx, node, EMB_SEGMENT, seg_ids, "segment_ids", dt)?;
        sum = ctx.binary(B::Add, sum, seg, dt);
    }
    let gamma = ctx.input(node, EMB_GAMMA)?;
    let beta = ctx.input(node, EMB_BETA)?;
    let y = ctx.temp(dt);
    ctx.push(Step::LayerNorm {
        x: sum,
        weight: Some(gamma),
        bias: Some(beta),
        eps,
        out: y,
    });
    ctx.finish(node, 0, y, dt)?;
    if node.output(1).is_some() {
        // The number of ones in each mask row (zeros without a mask), as ORT counts them.
        let ones = match ctx.opt_input(node, EMB_MASK)? {
            Some(m) => {
                let one = ctx.scalar(i32_, 1.0)?;
                let eq = ctx.binary(B::Equal, m, one, i32_);
                ctx.cast(eq, DataType::Bool, i32_)
            }
            None => {
                let zero = ctx.scalar(i32_, 0.0)?;
                ctx.binary(B::Multiply, ids, zero, i32_)
            }
        };
        let out = ctx.temp(i32_);
        ctx.push(Step::Reduce {
            op: crate::step::ReduceOp::Sum,
            x: ones,
            axes: crate::step::ReduceAxes::Static(vec![1]),
            keepdims: false,
            out,
        });
        ctx.finish(node, 1, out, i32_)?;
    }
    ctx.finish(node, 2, sum, dt)
}

// ---------------------------------------------------------------------------------------------
// BiasSoftmax.

fn claim_bias_softmax(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    same_dtypes(ctx, node, 0..2, FLOATS)?;
    let r = ctx.expect_rank(node, 0)?;
    let rb = ctx.expect_rank(node, 1)?;
    let inner = attr_int(node, "is_inner_broadcast")
        .or_decline()?
        .ok_or_else(|| Decline::new("BiasSoftmax: is_inner_broadcast is required"))?
        != 0;
    if rb > r || (inner && rb != r) {
        decline!(
            "BiasSoftmax: a rank-{rb} bias against a rank-{r} input is not claimed (numpy broadcasting only)"
        );
    }
    crate::step::normalize_axis(attr_int(node, "axis").or_decline()?.unwrap_or(1), r)
        .or_decline()?;
    Ok(())
}

fn lower_bias_softmax(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let r = ctx.need_rank(node, 0)?;
    let axis =
        crate::step::normalize_axis(attr_int(node, "axis").or_invalid(node)?.unwrap_or(1), r)
            .or_invalid(node)?;
    let x = ctx.input(node, 0)?;
    let b = ctx.input(node, 1)?;
    let s = ctx.binary(B::Add, x, b, dt);
    let out = ctx.temp(dt);
    ctx.push(Step::Softmax {
        x: s,
        axes: (axis as i32..r as i32).collect(),
        precise: true,
        out,
    });
    ctx.finish(node, 0, out, dt)
}

// ---------------------------------------------------------------------------------------------
// PackedMultiHeadAttention.

const PMHA_QUERY: usize = 0;
const PMHA_KEY: usize = 1;
const PMHA_VALUE: usize = 2;
const PMHA_BIAS: usize = 3;
const PMHA_OFFSET: usize = 4;
const PMHA_CUMLEN: usize = 5;
const PMHA_ATTN_BIAS: usize = 6;

fn claim_packed_mha(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, PMHA_QUERY, FLOATS)?;
    let heads = attr_int(node, "num_heads").or_decline()?.unwrap_or(0);
    if heads <= 0 {
        decline!("PackedMultiHeadAttention: num_heads must be positive");
    }
    for i in [PMHA_KEY, PMHA_VALUE, PMHA_BIAS, PMHA_ATTN_BIAS] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    for i in [PMHA_OFFSET, PMHA_CUMLEN] {
        ctx.expect_dtype(node, i, &[DataType::Int32])?;
    }
    if ctx.expect_rank(node, PMHA_OFFSET)? != 2 || ctx.expect_rank(node, PMHA_CUMLEN)? != 1 {
        decline!(
            "PackedMultiHeadAttention: token_offset must be 2-D and cumulative_sequence_length 1-D"
        );
    }
    let packed = node.input(PMHA_KEY).is_none();
    if packed != node.input(PMHA_VALUE).is_none() {
        decline!("PackedMultiHeadAttention: key and value must come together");
    }
    if packed {
        let d = dims_of(ctx, node.input(PMHA_QUERY).unwrap_or(""));
        let ok = d.as_ref().is_some_and(|d| {
            d.len() == 4 && d[1].fixed() == Some(heads) && d[2].fixed() == Some(3)
        });
        if !ok {
            decline!(
                "PackedMultiHeadAttention: packed QKV must be [tokens, num_heads, 3, head_size]"
            );
        }
        no_input(node, PMHA_BIAS, "bias with packed QKV")?;
    } else {
        for i in [PMHA_QUERY, PMHA_KEY, PMHA_VALUE] {
            if ctx.expect_rank(node, i)? != 2 {
                decline!("PackedMultiHeadAttention: input {i} must be 2-D");
            }
        }
        match (
            last_dim(ctx, node, PMHA_QUERY),
            last_dim(ctx, node, PMHA_VALUE),
        ) {
            (Some(h), Some(v)) if h % heads == 0 && v % heads == 0 => {}
            _ => decline!(
                "PackedMultiHeadAttention: the query and value hidden sizes must be fixed multiples of num_heads"
            ),
        }
    }
    if node.input(PMHA_ATTN_BIAS).is_some() && ctx.expect_rank(node, PMHA_ATTN_BIAS)? != 4 {
        decline!("PackedMultiHeadAttention: attention_bias must be 4-D");
    }
    Ok(())
}

fn lower_packed_mha(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, PMHA_QUERY)?;
    let i64_ = DataType::Int64;
    let heads = attr_int(node, "num_heads").or_invalid(node)?.unwrap_or(1);
    let mfv = attr_float(node, "mask_filter_value")
        .or_invalid(node)?
        .unwrap_or(-10000.0);
    let query = ctx.input(node, PMHA_QUERY)?;
    let (mut q, mut k, mut v, head) = if node.input(PMHA_KEY).is_none() {
        // [T, N, 3, H] -> three [T, N*H]
        let Some(h) = lower_last_dim(ctx, node, PMHA_QUERY) else {
            crate::plan::invalid!(node, "the head size is unknown");
        };
        let parts = vec![ctx.temp(dt), ctx.temp(dt), ctx.temp(dt)];
        ctx.push(Step::Split {
            x: query,
            axis: 2,
            sizes: None,
            outs: parts.clone(),
        });
        let flat: Vec<Slot> = parts
            .iter()
            .map(|&p| reshape_to(ctx, p, &[0, heads * h], dt))
            .collect();
        (flat[0], flat[1], flat[2], h)
    } else {
        let (Some(hidden), Some(vh)) = (
            lower_last_dim(ctx, node, PMHA_QUERY),
            lower_last_dim(ctx, node, PMHA_VALUE),
        ) else {
            crate::plan::invalid!(node, "hidden sizes are unknown");
        };
        let (mut q, mut k, mut v) = (
            query,
            ctx.input(node, PMHA_KEY)?,
            ctx.input(node, PMHA_VALUE)?,
        );
        if let Some(bias) = ctx.opt_input(node, PMHA_BIAS)? {
            let parts = vec![ctx.temp(dt), ctx.temp(dt), ctx.temp(dt)];
            ctx.push(Step::Split {
                x: bias,
                axis: 0,
                sizes: Some(ShapeSource::Static(vec![hidden, hidden, vh])),
                outs: parts.clone(),
            });
            q = ctx.binary(B::Add, q, parts[0], dt);
            k = ctx.binary(B::Add, k, parts[1], dt);
            v = ctx.binary(B::Add, v, parts[2], dt);
        }
        (q, k, v, hidden / heads)
    };
    // Padded position p holds packed token inv[p] (token_offset is a permutation of the
    // B*S positions whose first `tokens` entries place the real tokens); padding rows read
    // token 0 and are masked or dropped.
    let offset = ctx.input(node, PMHA_OFFSET)?;
    let offset = ctx.cast(offset, DataType::Int32, i64_);
    let flat = reshape_to(ctx, offset, &[-1], i64_);
    let inv = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgSort {
        x: flat,
        axis: 0,
        out: inv,
    });
    let inv = ctx.cast(inv, DataType::Uint32, i64_);
    let tokens = ctx.dim_1d(q, 0);

    let real = ctx.binary(B::Less, inv, tokens, i64_);
    let zero = ctx.scalar(i64_, 0.0)?;
    let src = ctx.temp(i64_);
    ctx.push(Step::Where {
        cond: real,
        x: inv,
        y: zero,
        out: src,
    });
    let src = reshape(ctx, src, ReshapeTarget::Like(offset), i64_);
    for t in [&mut q, &mut k, &mut v] {
        let out = ctx.temp(dt);
        ctx.push(Step::Take {
            x: *t,
            indices: src,
            axis: 0,
            out,
        });
        *t = out;
    }
    let qh = to_heads(ctx, q, heads, dt);
    let kh = to_heads(ctx, k, heads, dt);
    let vh = to_heads(ctx, v, heads, dt);
    // key t of sequence b is real when t < cum[b + 1] - cum[b]
    let cum = ctx.input(node, PMHA_CUMLEN)?;
    let cum = ctx.cast(cum, DataType::Int32, i64_);
    let hi = slice_last(ctx, cum, 1, i64::MAX, 1, i64_);
    let lo = slice_last(ctx, cum, 0, -1, 1, i64_);
    let len = ctx.binary(B::Subtract, hi, lo, i64_);
    let keep = mask_keep(ctx, len, MaskForm::End, qh, kh)?;
    let mut mask = additive(ctx, keep, mfv as f64, dt)?;
    if let Some(b) = ctx.opt_input(node, PMHA_ATTN_BIAS)? {
        mask = ctx.binary(B::Add, mask, b, dt);
    }
    let scale = attr_float(node, "scale")
        .or_invalid(node)?
        .filter(|&s| s != 0.0)
        .unwrap_or(1.0 / (head as f32).sqrt());
    let y = crate::ops::sdpa::attention(
        ctx,
        &crate::ops::sdpa::Sdpa {
            q: qh,
            k: kh,
            v: vh,
            mask: Some((mask, dt)),
            mask_heads: None,
            causal: false,
            sinks: None,
            scale,
            softcap: 0.0,
            heads: None,
            dt,
        },
    )?;
    // back to the packed order: token i sits at padded position token_offset[i]
    let y = from_heads(ctx, y, dt);
    let y = reshape(ctx, y, ReshapeTarget::Flatten { axis: -1 }, dt);
    let i = ctx.temp(i64_);
    ctx.push(Step::Iota {
        like: query,
        axis: 0,
        dtype: i64_,
        out: i,
    });
    let pos = ctx.temp(i64_);
    ctx.push(Step::Take {
        x: flat,
        indices: i,
        axis: 0,
        out: pos,
    });
    let out = ctx.temp(dt);
    ctx.push(Step::Take {
        x: y,
        indices: pos,
        axis: 0,
        out,
    });
    ctx.finish(node, 0, out, dt)
}
