//! Transformer building blocks: Attention (opsets 23 and 24) and RotaryEmbedding (opset 23).

use onnx_ir::{DataType, Dim, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceOp, ReshapeTarget, ShapeSource, SliceSpec, UnaryOp};

/// Registers the transformer family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "Attention", 23, MAX, claim_attention, lower_attention)
        .notes("causal mask aligned top-left after the past (none for a one-query step over a past), as ORT's CPU kernel; as the ONNX spec: the mask is added before the soft cap, `qk_matmul_output` modes 0-3 are the scores, with the mask (masked: -inf), after the soft cap, after softmax, a mask shorter than the keys is padded as masked; masked keys stay masked through the soft cap and all-masked rows give zeros (as ORT); no `nonpad_kv_seqlen` with a past cache");
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

/// The resolved attributes and input forms of an ONNX `Attention` node.
struct AttentionForm {
    /// Input rank (3 or 4).
    rank: usize,
    /// `q_num_heads` / `kv_num_heads` (0 when absent).
    qh: i64,
    kvh: i64,
    /// `is_causal`.
    causal: bool,
    /// `softcap` (`0`: none).
    softcap: f32,
    /// `qk_matmul_output_mode` when output 3 is requested.
    qk_mode: Option<i64>,
    /// MLX's bottom-right causal mask agrees with ORT's (new key length == query length).
    causal_fast: bool,
}

impl AttentionForm {
    /// A fused attention step computes the node exactly: no scores output, no
    /// `nonpad_kv_seqlen`, and no soft cap over a mask (ONNX caps the masked scores; the
    /// fused step caps before masking).
    fn fast(&self, node: &Node) -> bool {
        self.qk_mode.is_none()
            && node.input(6).is_none()
            && !(self.softcap > 0.0 && (self.causal || node.input(3).is_some()))
    }

    /// MLX's own causal mode (no keep-mask array) is ORT's causal mask.
    fn mlx_causal(&self, node: &Node) -> bool {
        self.causal && node.input(3).is_none() && self.causal_fast
    }
}

fn attention_form(
    node: &Node,
    q: Option<Vec<Dim>>,
    k: Option<Vec<Dim>>,
    rank: usize,
) -> Result<AttentionForm, String> {
    let qh = attr_int(node, "q_num_heads")?.unwrap_or(0);
    let kvh = attr_int(node, "kv_num_heads")?.unwrap_or(0);
    let causal = attr_int(node, "is_causal")?.unwrap_or(0) != 0;
    let softcap = attr_float(node, "softcap")?.unwrap_or(0.0).max(0.0);
    let qk_mode = match node.output(3) {
        Some(_) => Some(attr_int(node, "qk_matmul_output_mode")?.unwrap_or(0)),
        None => None,
    };
    let seq_axis = if rank == 3 { 1 } else { 2 };
    let causal_fast = matches!((q, k), (Some(q), Some(k))
        if q.len() == rank && k.len() == rank && same_dim(&q[seq_axis], &k[seq_axis]));
    Ok(AttentionForm {
        rank,
        qh,
        kvh,
        causal,
        softcap,
        qk_mode,
        causal_fast,
    })
}

/// How query heads share key-value heads, when known at plan time: `Some(None)` for equal
/// head counts, `Some(Some((hq, hkv)))` for grouped-query heads.
fn head_groups(
    form: &AttentionForm,
    q: &Option<Vec<Dim>>,
    k: &Option<Vec<Dim>>,
) -> Option<Option<(i64, i64)>> {
    let (hq, hkv) = if form.rank == 3 {
        (form.qh, form.kvh)
    } else {
        let (qd, kd) = (q.as_ref()?.get(1)?, k.as_ref()?.get(1)?);
        if same_dim(qd, kd) {
            return Some(None);
        }
        (qd.fixed()?, kd.fixed()?)
    };
    Some((hq != hkv).then_some((hq, hkv)))
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
    let q = dims(ctx, node.input(0).unwrap_or(""));
    let k = dims(ctx, node.input(1).unwrap_or(""));
    let form = attention_form(node, q.clone(), k.clone(), rank).or_decline()?;
    if rank == 3 && (form.qh <= 0 || form.kvh <= 0) {
        decline!("Attention: 3-D inputs need q_num_heads and kv_num_heads");
    }
    if rank == 3 && form.qh % form.kvh != 0 {
        decline!("Attention: q_num_heads is not a multiple of kv_num_heads");
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
    if node.input(6).is_some() {
        ctx.expect_dtype(node, 6, &[DataType::Int64])?;
        if ctx.expect_rank(node, 6)? != 1 {
            decline!("Attention: nonpad_kv_seqlen must be 1-D");
        }
        if node.input(4).is_some() {
            decline!("Attention: nonpad_kv_seqlen together with a past cache (ORT refuses it)");
        }
    }
    if let Some(mode) = form.qk_mode
        && !(0..=3).contains(&mode)
    {
        decline!("Attention: qk_matmul_output_mode {mode} is invalid");
    }
    if node.input(3).is_some() {
        let mdt = ctx.input_dtype(node, 3)?;
        if mdt != DataType::Bool && mdt != dt {
            decline!("Attention: a {mdt} mask with {dt} inputs is not claimed");
        }
        let mrank = ctx.expect_rank(node, 3)?;
        if !(2..=4).contains(&mrank) {
            decline!("Attention: a rank-{mrank} attn_mask is invalid (2-D to 4-D)");
        }
        // The ONNX spec pads a mask shorter than the total key length as masked (ORT's CPU
        // kernel refuses it); a longer one is invalid.
        let seq_axis = if rank == 3 { 1 } else { 2 };
        let total = k
            .as_ref()
            .and_then(|k| k.get(seq_axis)?.fixed())
            .and_then(|t| match node.input(4) {
                Some(p) => Some(t + dims(ctx, p)?.get(2)?.fixed()?),
                None => Some(t),
            });
        let last = dims(ctx, node.input(3).unwrap_or("")).and_then(|m| m.last()?.fixed());
        if let (Some(total), Some(last)) = (total, last)
            && last > total
        {
            decline!("Attention: an attn_mask of {last} keys for {total} keys is invalid");
        }
    }
    if !form.fast(node) && head_groups(&form, &q, &k).is_none() {
        decline!(
            "Attention: this form needs the head counts of 4-D Q and K known (or known equal) at plan time"
        );
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

/// ORT's mask filter value: the lowest finite value of `dt`.
fn lowest(dt: DataType) -> f64 {
    match dt {
        DataType::Float16 => -65504.0,
        DataType::BFloat16 => -3.389_531_4e38,
        DataType::Double => f64::MIN,
        _ => f32::MIN as f64,
    }
}

fn onnx_reshape(ctx: &mut LowerCtx, x: Slot, shape: Vec<i64>, dt: DataType) -> Slot {
    reshape(
        ctx,
        x,
        ReshapeTarget::Onnx {
            shape: ShapeSource::Static(shape),
            allowzero: false,
        },
        dt,
    )
}

fn lower_attention(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, 0)?;
    let rank = ctx.need_rank(node, 0)?;
    let qd = ctx.shape_of(node.input(0).unwrap_or(""));
    let kd = ctx.shape_of(node.input(1).unwrap_or(""));
    let form = attention_form(node, qd.clone(), kd.clone(), rank).or_invalid(node)?;
    let mut q = ctx.input(node, 0)?;
    let mut k = ctx.input(node, 1)?;
    let mut v = ctx.input(node, 2)?;
    let scale = match attr_float(node, "scale").or_invalid(node)? {
        Some(s) => s,
        None => {
            let Some(last) = ctx
                .input_fixed_shape(node, 0)
                .and_then(|s| s.last().copied())
                .or_else(|| qd.as_ref().and_then(|s| s.last().and_then(Dim::fixed)))
            else {
                crate::plan::invalid!(node, "the head size is unknown");
            };
            let hs = if rank == 3 {
                last / form.qh.max(1)
            } else {
                last
            };
            (1.0 / (hs as f64).sqrt()) as f32
        }
    };
    if rank == 3 {
        q = to_heads(ctx, q, form.qh, dt);
        k = to_heads(ctx, k, form.kvh, dt);
        v = to_heads(ctx, v, form.kvh, dt);
    }
    let past = ctx.opt_input(node, 4)?;
    if let (Some(pk), Some(pv)) = (past, ctx.opt_input(node, 5)?) {
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
    let mut mask = ctx.opt_input(node, 3)?;
    if let Some(m) = mask {
        mask = Some(pad_mask(ctx, node, m)?);
    }
    let y = if form.fast(node) {
        let mdt = match mask {
            Some(_) => ctx.input_dtype(node, 3)?,
            None => DataType::Bool,
        };
        let mlx_causal = form.mlx_causal(node);
        if form.causal && !mlx_causal {
            // ORT's causal mask as a keep-mask array, combined with the given mask.
            let keep = causal_keep(ctx, q, k, past, None)?;
            mask = Some(match mask {
                None => keep,
                Some(m) if mdt == DataType::Bool => {
                    ctx.binary(B::LogicalAnd, keep, m, DataType::Bool)
                }
                Some(m) => {
                    let low = ctx.scalar(mdt, lowest(dt))?;
                    select(ctx, keep, m, low, mdt)
                }
            });
        }
        let heads = head_groups(&form, &qd, &kd).map(|g| g.unwrap_or((1, 1)));
        let y = super::sdpa::attention(
            ctx,
            &super::sdpa::Sdpa {
                q,
                k,
                v,
                mask: mask.map(|m| (m, mdt)),
                mask_heads: None,
                causal: mlx_causal,
                sinks: None,
                scale,
                softcap: form.softcap,
                heads,
                dt,
            },
        )?;
        match mask {
            // ORT gives zeros for a query whose every key is masked (a causal mask alone
            // leaves every query a key).
            Some(m) if node.input(3).is_some() => {
                let alive = if mdt == DataType::Bool {
                    reduce_last(ctx, ReduceOp::Any, m, DataType::Bool)
                } else {
                    let mx = reduce_last(ctx, ReduceOp::Max, m, mdt);
                    let low = ctx.scalar(mdt, lowest(dt))?;
                    ctx.binary(B::Greater, mx, low, mdt)
                };
                let zero = ctx.scalar(dt, 0.0)?;
                let out = ctx.temp(dt);
                ctx.push(Step::Where {
                    cond: alive,
                    x: y,
                    y: zero,
                    out,
                });
                out
            }
            _ => y,
        }
    } else {
        let Some(groups) = head_groups(&form, &qd, &kd) else {
            crate::plan::invalid!(node, "the head counts are unknown");
        };
        explicit_attention(ctx, node, &form, [q, k, v], mask, past, groups, scale, dt)?
    };
    let y = if rank == 3 {
        let t = ctx.temp(dt);
        ctx.push(Step::Transpose {
            x: y,
            perm: Some(vec![0, 2, 1, 3]),
            out: t,
        });
        onnx_reshape(ctx, t, vec![0, 0, -1], dt)
    } else {
        y
    };
    ctx.finish(node, 0, y, dt)?;
    // present_key / present_value are the (concatenated) 4-D keys and values.
    ctx.finish(node, 1, k, dt)?;
    ctx.finish(node, 2, v, dt)
}

/// A mask shorter than the total key length, padded at the end as masked (`false`, or -inf
/// for a float mask), as the ONNX spec does; the lengths must be known at plan time.
fn pad_mask(ctx: &mut LowerCtx, node: &Node, m: Slot) -> Result<Slot, PlanError> {
    let rank = ctx.need_rank(node, 0)?;
    let seq_axis = if rank == 3 { 1 } else { 2 };
    let fixed = |ctx: &LowerCtx, i: usize, axis: Option<usize>| {
        let s = ctx.input_fixed_shape(node, i)?;
        s.get(axis.unwrap_or(s.len().wrapping_sub(1))).copied()
    };
    let keys = fixed(ctx, 1, Some(seq_axis));
    let past = match node.input(4) {
        Some(_) => fixed(ctx, 4, Some(2)),
        None => Some(0),
    };
    let (Some(keys), Some(past), Some(last)) = (keys, past, fixed(ctx, 3, None)) else {
        return Ok(m);
    };
    let total = keys + past;
    if last >= total {
        return Ok(m);
    }
    let mdt = ctx.input_dtype(node, 3)?;
    let mrank = ctx.need_rank(node, 3)?;
    let value = if mdt == DataType::Bool {
        ctx.scalar(mdt, 0.0)?
    } else {
        ctx.scalar(mdt, f64::NEG_INFINITY)?
    };
    let out = ctx.temp(mdt);
    ctx.push(Step::Pad {
        x: m,
        pads: crate::step::PadSpec::Static {
            axes: vec![mrank as i32 - 1],
            lo: vec![0],
            hi: vec![(total - last) as i32],
        },
        mode: crate::step::PadMode::Constant,
        value,
        out,
    });
    Ok(out)
}

fn reduce_last(ctx: &mut LowerCtx, op: ReduceOp, x: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op,
        x,
        axes: crate::step::ReduceAxes::Static(vec![-1]),
        keepdims: true,
        out,
    });
    out
}

fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

/// ORT's causal keep-mask `[S, T]`: key `t` is visible from query `s` when
/// `t <= s + past_length`; a one-query step over a past cache sees every key. With
/// `nonpad_kv_seqlen` (`[B]`, 4-D `lens`) the mask is `[B, 1, S, T]`, aligned to the end of
/// each batch's valid keys: `t <= s + lens[b] - S`.
fn causal_keep(
    ctx: &mut LowerCtx,
    q: Slot,
    k: Slot,
    past: Option<Slot>,
    lens: Option<Slot>,
) -> Result<Slot, PlanError> {
    let rows = ctx.iota(q, 2);
    let rows = unsqueeze(ctx, rows, 1, DataType::Int64);
    let cols = ctx.iota(k, 2);
    if let Some(lens) = lens {
        let s = ctx.dim_1d(q, 2);
        let shifted = ctx.binary(B::Add, cols, s, DataType::Int64);
        let limit = ctx.binary(B::Add, rows, lens, DataType::Int64);
        return Ok(ctx.binary(B::LessEqual, shifted, limit, DataType::Int64));
    }
    let Some(past) = past else {
        return Ok(ctx.binary(B::LessEqual, cols, rows, DataType::Int64));
    };
    let p = ctx.dim_1d(past, 2);
    let limit = ctx.binary(B::Add, rows, p, DataType::Int64);
    let keep = ctx.binary(B::LessEqual, cols, limit, DataType::Int64);
    let s = ctx.dim_1d(q, 2);
    let one = ctx.scalar(DataType::Int64, 1.0)?;
    let zero = ctx.scalar(DataType::Int64, 0.0)?;
    let single = ctx.binary(B::Equal, s, one, DataType::Int64);
    let has_past = ctx.binary(B::Greater, p, zero, DataType::Int64);
    let decode = ctx.binary(B::LogicalAnd, single, has_past, DataType::Bool);
    Ok(ctx.binary(B::LogicalOr, keep, decode, DataType::Bool))
}

/// Attention step by step, as the ONNX spec orders it: `scale * q k^T`, plus the mask (bool
/// masks, causal and `nonpad_kv_seqlen` positions are -inf), soft cap (masked keys stay -inf,
/// as in ORT, where ONNX's reference lets `tanh` turn them into `-softcap`), softmax
/// (all-masked rows give zeros, as ORT), times `v`; output 3 is the scores after the step
/// `qk_matmul_output_mode` names. Computed in float32 for halves.
#[allow(clippy::too_many_arguments)]
fn explicit_attention(
    ctx: &mut LowerCtx,
    node: &Node,
    form: &AttentionForm,
    [q, k, v]: [Slot; 3],
    mask: Option<Slot>,
    past: Option<Slot>,
    groups: Option<(i64, i64)>,
    scale: f32,
    dt: DataType,
) -> Result<Slot, PlanError> {
    let cdt = compute_dtype(dt);
    let low = ctx.scalar(cdt, f64::NEG_INFINITY)?;
    let zero = ctx.scalar(cdt, 0.0)?;
    let qc = ctx.cast(q, dt, cdt);
    let kc = ctx.cast(k, dt, cdt);
    let vc = ctx.cast(v, dt, cdt);
    // Query heads `h * G .. (h + 1) * G` share key-value head `h`: group them along the rows.
    let grouped = groups.is_some();
    let (hq, hkv) = groups.unwrap_or((0, 0));
    let qg = if grouped {
        onnx_reshape(ctx, qc, vec![0, hkv, -1, 0], cdt)
    } else {
        qc
    };
    let kt = ctx.temp(cdt);
    ctx.push(Step::Transpose {
        x: kc,
        perm: Some(vec![0, 1, 3, 2]),
        out: kt,
    });
    let raw = ctx.temp(cdt);
    ctx.push(Step::MatMul {
        a: qg,
        b: kt,
        out: raw,
    });
    let raw = if grouped {
        onnx_reshape(ctx, raw, vec![0, hq, -1, 0], cdt)
    } else {
        raw
    };
    let sc = ctx.scalar(cdt, scale as f64)?;
    let raw = ctx.binary(B::Multiply, raw, sc, cdt);
    let mut snapshots = vec![raw];
    let mut scores = raw;
    let mut additive = match mask {
        Some(m) => {
            let mdt = ctx.input_dtype(node, 3)?;
            Some(if mdt == DataType::Bool {
                select(ctx, m, zero, low, cdt)
            } else {
                ctx.cast(m, mdt, cdt)
            })
        }
        None => None,
    };
    let lens = ctx
        .opt_input(node, 6)?
        .map(|l| onnx_reshape(ctx, l, vec![-1, 1, 1, 1], DataType::Int64));
    if form.causal {
        let keep = causal_keep(ctx, q, k, past, lens)?;
        let inner = additive.unwrap_or(zero);
        additive = Some(select(ctx, keep, inner, low, cdt));
    }
    if let Some(a) = additive {
        scores = ctx.binary(B::Add, scores, a, cdt);
    }
    if let Some(lens) = lens {
        let cols = ctx.iota(k, 2);
        let valid = ctx.binary(B::Less, cols, lens, DataType::Int64);
        scores = select(ctx, valid, scores, low, cdt);
    }
    snapshots.push(scores);
    let masked = additive.is_some() || lens.is_some();
    if form.softcap > 0.0 {
        let cap = ctx.scalar(cdt, form.softcap as f64)?;
        let d = ctx.binary(B::Divide, scores, cap, cdt);
        let t = ctx.unary(UnaryOp::Tanh, d, cdt);
        let capped = ctx.binary(B::Multiply, t, cap, cdt);
        // masked keys (-inf) stay masked: the cap would turn them into -softcap
        scores = if masked {
            let hard = ctx.binary(B::Equal, scores, low, cdt);
            select(ctx, hard, low, capped, cdt)
        } else {
            capped
        };
    }
    snapshots.push(scores);
    // a row whose every key is masked
    let alive = if masked {
        let mx = reduce_last(ctx, ReduceOp::Max, scores, cdt);
        Some(ctx.binary(B::Greater, mx, low, cdt))
    } else {
        None
    };
    let probs = ctx.temp(cdt);
    ctx.push(Step::Softmax {
        x: scores,
        axes: vec![-1],
        precise: true,
        out: probs,
    });
    let probs = match alive {
        // A row whose every score is masked gives zeros (as ORT's kernel does).
        Some(alive) => select(ctx, alive, probs, zero, cdt),
        None => probs,
    };
    snapshots.push(probs);
    if let Some(mode) = form.qk_mode {
        let snap = snapshots[mode as usize];
        let snap = ctx.cast(snap, cdt, dt);
        ctx.finish(node, 3, snap, dt)?;
    }
    let pg = if grouped {
        onnx_reshape(ctx, probs, vec![0, hkv, -1, 0], cdt)
    } else {
        probs
    };
    let y = ctx.temp(cdt);
    ctx.push(Step::MatMul {
        a: pg,
        b: vc,
        out: y,
    });
    let y = if grouped {
        onnx_reshape(ctx, y, vec![0, hq, -1, 0], cdt)
    } else {
        y
    };
    Ok(ctx.cast(y, cdt, dt))
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
