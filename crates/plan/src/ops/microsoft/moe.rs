//! `com.microsoft` MoE (mixture of experts), as ORT's CPU kernel computes it: the router
//! logits are softmaxed over all experts, the `k` most probable experts of each token are
//! chosen (ties to the higher expert index), their probabilities optionally renormalised,
//! and the token's output is the weighted sum of those experts' FFNs
//! `fc2(act(fc1(x) + b1)) + b2`.
//!
//! On MLX every expert runs on every token (batched matmuls over the expert axis) and a dense
//! `[tokens, experts]` weight matrix, zero off the chosen experts, combines them: exact in
//! what it selects and weighs, with the sum taken in another order.
//!
//! QMoE's constant int4/int8 expert weights (`w = (q - zero_point) * scale`, per row or per
//! block along K, packed low bits first) are dequantized at plan time and take the same path.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ReduceAxes, ReduceOp, UnaryOp as U};

/// Registers the op.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op(MS, "MoE", 1, 1, claim_moe, lower_moe)
        .notes("top-k of the router softmax, `normalize_routing_weights`; relu, gelu (tanh), silu, identity, and swiglu interleaved (`swiglu_fusion=1`, alpha/beta/limit); every expert computed densely; no FC3 or sparse mixer (as ORT's CPU kernel)");
    r.op(MS, "QMoE", 1, 1, claim_qmoe, lower_qmoe)
        .notes("float32; `quant_type` int with 4 or 8 bits, constant weights, per-row or block-wise scales (block_size >= 16) and optional zero points, dequantized at plan time; routing weights always renormalised over the top k, as ORT 1.31's CPU kernel does; activations as MoE; no FC3, `router_weights`, FP4/FP8 or 8-bit block-wise weights (ORT's CPU kernel departs from the formula there)");
}

const X: usize = 0;
const ROUTER: usize = 1;
const FC1: usize = 2;
const FC1_B: usize = 3;
const FC2: usize = 4;
const FC2_B: usize = 5;

/// The FFN activation.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Relu,
    /// The tanh approximation (ORT's MoE kernel).
    Gelu,
    Silu,
    Identity,
    /// Interleaved gate/linear pairs of fc1's output.
    SwiGlu {
        alpha: f32,
        beta: f32,
        limit: Option<f32>,
    },
}

struct MoeAttrs {
    k: i64,
    normalize: bool,
    act: Act,
}

fn moe_attrs(node: &Node) -> Result<MoeAttrs, String> {
    let act = match attr_str(node, "activation_type")?
        .as_deref()
        .unwrap_or("relu")
    {
        "relu" => Act::Relu,
        "gelu" => Act::Gelu,
        "silu" => Act::Silu,
        "identity" => Act::Identity,
        "swiglu" => {
            let fusion = attr_int(node, "swiglu_fusion")?.unwrap_or(0);
            if fusion != 1 {
                return Err(format!(
                    "MoE: swiglu_fusion={fusion} is not claimed (ORT's CPU kernel takes interleaved SwiGLU only)"
                ));
            }
            Act::SwiGlu {
                alpha: attr_float(node, "activation_alpha")?.unwrap_or(1.0),
                beta: attr_float(node, "activation_beta")?.unwrap_or(0.0),
                limit: attr_float(node, "swiglu_limit")?,
            }
        }
        other => return Err(format!("MoE: activation_type '{other}' is not claimed")),
    };
    Ok(MoeAttrs {
        k: attr_int(node, "k")?.unwrap_or(1),
        normalize: attr_int(node, "normalize_routing_weights")?.unwrap_or(0) != 0,
        act,
    })
}

fn claim_moe(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    let dt = ctx.expect_dtype(node, X, FLOATS)?;
    for i in [ROUTER, FC1, FC1_B, FC2, FC2_B] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[dt])?;
        }
    }
    no_input(node, 6, "fc3_experts_weights")?;
    no_input(node, 7, "fc3_experts_bias")?;
    if attr_int(node, "use_sparse_mixer")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("MoE: use_sparse_mixer is not claimed");
    }
    let a = moe_attrs(node).or_decline()?;
    let r = ctx.expect_rank(node, X)?;
    if r != 2 && r != 3 {
        decline!("MoE: the input must be 2-D or 3-D");
    }
    if ctx.expect_rank(node, ROUTER)? != 2 {
        decline!("MoE: router_probs must be 2-D");
    }
    for i in [FC1, FC2] {
        if ctx.expect_rank(node, i)? != 3 {
            decline!("MoE: input {i} must be 3-D");
        }
    }
    let experts =
        dims_of(ctx, node.input(FC1).unwrap_or("")).and_then(|d| d.first().and_then(|d| d.fixed()));
    let routed = dims_of(ctx, node.input(ROUTER).unwrap_or(""))
        .and_then(|d| d.get(1).and_then(|d| d.fixed()));
    if let (Some(r), Some(e)) = (routed, experts)
        && r != e
    {
        decline!("MoE: router_probs has {r} experts, the weights {e}");
    }
    match experts {
        Some(e) if a.k >= 1 && a.k <= e => Ok(()),
        Some(e) => decline!("MoE: k={} is not in [1, {e}]", a.k),
        None => decline!("MoE: the number of experts is unknown"),
    }
}

/// Sum over `axes`, dropped.
fn sum(ctx: &mut LowerCtx, x: Slot, axes: &[i64], keepdims: bool, dt: DataType) -> Slot {
    let out = ctx.temp(dt);
    ctx.push(Step::Reduce {
        op: ReduceOp::Sum,
        x,
        axes: ReduceAxes::Static(axes.to_vec()),
        keepdims,
        out,
    });
    out
}

/// `[E, n]` bias -> `[E, 1, n]`, added.
fn add_bias(ctx: &mut LowerCtx, h: Slot, bias: Option<Slot>, dt: DataType) -> Slot {
    match bias {
        Some(b) => {
            let b = unsqueeze(ctx, b, 1, dt);
            ctx.binary(B::Add, h, b, dt)
        }
        None => h,
    }
}

fn activate(ctx: &mut LowerCtx, h: Slot, act: Act, dt: DataType) -> Result<Slot, PlanError> {
    Ok(match act {
        Act::Relu => {
            let zero = ctx.scalar(dt, 0.0)?;
            ctx.binary(B::Maximum, h, zero, dt)
        }
        Act::Identity => h,
        Act::Silu => {
            let s = ctx.unary(U::Sigmoid, h, dt);
            ctx.binary(B::Multiply, h, s, dt)
        }
        Act::Gelu => {
            // 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3)))
            let c = ctx.scalar(dt, 0.7978845608)?;
            let k = ctx.scalar(dt, 0.044715)?;
            let x2 = ctx.unary(U::Square, h, dt);
            let x3 = ctx.binary(B::Multiply, x2, h, dt);
            let kx3 = ctx.binary(B::Multiply, x3, k, dt);
            let s = ctx.binary(B::Add, h, kx3, dt);
            let cs = ctx.binary(B::Multiply, s, c, dt);
            let t = ctx.unary(U::Tanh, cs, dt);
            let one = ctx.scalar(dt, 1.0)?;
            let half = ctx.scalar(dt, 0.5)?;
            let p = ctx.binary(B::Add, t, one, dt);
            let hx = ctx.binary(B::Multiply, h, half, dt);
            ctx.binary(B::Multiply, hx, p, dt)
        }
        Act::SwiGlu { alpha, beta, limit } => {
            let mut g = slice_last(ctx, h, 0, i64::MAX, 2, dt);
            let mut l = slice_last(ctx, h, 1, i64::MAX, 2, dt);
            if let Some(lim) = limit {
                let hi = ctx.scalar(dt, lim as f64)?;
                let lo = ctx.scalar(dt, -lim as f64)?;
                g = ctx.binary(B::Minimum, g, hi, dt);
                l = ctx.binary(B::Minimum, l, hi, dt);
                l = ctx.binary(B::Maximum, l, lo, dt);
            }
            let a = ctx.scalar(dt, alpha as f64)?;
            let ag = ctx.binary(B::Multiply, g, a, dt);
            let s = ctx.unary(U::Sigmoid, ag, dt);
            let swish = ctx.binary(B::Multiply, g, s, dt);
            let b = ctx.scalar(dt, beta as f64)?;
            let lb = ctx.binary(B::Add, l, b, dt);
            ctx.binary(B::Multiply, swish, lb, dt)
        }
    })
}

fn lower_moe(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let dt = ctx.input_dtype(node, X)?;
    let a = moe_attrs(node).or_invalid(node)?;
    let ws = [ctx.input(node, FC1)?, ctx.input(node, FC2)?];
    let bs = [ctx.opt_input(node, FC1_B)?, ctx.opt_input(node, FC2_B)?];
    experts_ffn(ctx, node, &a, ws, bs, dt)
}

/// The routed sum of the experts' FFNs; `ws` are fc1 `[E, F, H]` and fc2 `[E, H, I]` weights
/// of dtype `dt`, `bs` their optional `[E, n]` biases.
fn experts_ffn(
    ctx: &mut LowerCtx,
    node: &Node,
    a: &MoeAttrs,
    mut ws: [Slot; 2],
    mut bs: [Option<Slot>; 2],
    dt: DataType,
) -> Result<(), PlanError> {
    let cdt = compute_dtype(dt);
    let i64_ = DataType::Int64;
    let x = ctx.input(node, X)?;
    let router = ctx.input(node, ROUTER)?;
    // routing: softmax over the experts, the last k of a stable ascending sort (ties to the
    // higher index, as ORT's descending partial sort of (probability, index) pairs)
    let r = ctx.cast(router, dt, DataType::Float);
    let probs = ctx.temp(DataType::Float);
    ctx.push(Step::Softmax {
        x: r,
        axes: vec![-1],
        precise: true,
        out: probs,
    });
    let order = ctx.temp(DataType::Uint32);
    ctx.push(Step::ArgSort {
        x: probs,
        axis: -1,
        out: order,
    });
    // router_probs and the weights must agree on the experts (broadcasting would hide it)
    let ew = ctx.temp(i64_);
    ctx.push(Step::Shape {
        x: ws[0],
        start: 0,
        end: Some(1),
        out: ew,
    });
    let er = ctx.temp(i64_);
    ctx.push(Step::Shape {
        x: probs,
        start: 1,
        end: Some(2),
        out: er,
    });
    let same = ctx.binary(B::Equal, ew, er, i64_);
    ctx.require(
        same,
        "router_probs and the expert weights differ in the number of experts",
    );
    let top = slice_last(ctx, order, -a.k, i64::MAX, 1, DataType::Uint32);
    let mut topp = ctx.temp(DataType::Float);
    ctx.push(Step::TakeAlongAxis {
        x: probs,
        indices: top,
        axis: -1,
        out: topp,
    });
    if a.normalize {
        let s = sum(ctx, topp, &[-1], true, DataType::Float);
        topp = ctx.binary(B::Divide, topp, s, DataType::Float);
    }
    // dense weights [T, E]: chosen[t, j, e] = (top[t, j] == e)
    let top = ctx.cast(top, DataType::Uint32, i64_);
    let top = unsqueeze(ctx, top, -1, i64_);
    let experts = iota(ctx, probs);
    let chosen = ctx.binary(B::Equal, top, experts, i64_);
    let zero = ctx.scalar(DataType::Float, 0.0)?;
    let topp = unsqueeze(ctx, topp, -1, DataType::Float);
    let w = ctx.temp(DataType::Float);
    ctx.push(Step::Where {
        cond: chosen,
        x: topp,
        y: zero,
        out: w,
    });
    let w = sum(ctx, w, &[1], false, DataType::Float);
    let any = ctx.temp(DataType::Bool);
    ctx.push(Step::Reduce {
        op: ReduceOp::Any,
        x: chosen,
        axes: ReduceAxes::Static(vec![1]),
        keepdims: false,
        out: any,
    });
    // experts over every token: [T, H] @ [E, H, F] -> [E, T, F]
    let x2 = reshape(ctx, x, crate::step::ReshapeTarget::Flatten { axis: -1 }, dt);
    let x2 = ctx.cast(x2, dt, cdt);
    for w in &mut ws {
        let c = ctx.cast(*w, dt, cdt);
        *w = transpose(ctx, c, &[0, 2, 1], cdt);
    }
    for b in bs.iter_mut().flatten() {
        *b = ctx.cast(*b, dt, cdt);
    }
    let h = ctx.temp(cdt);
    ctx.push(Step::MatMul {
        a: x2,
        b: ws[0],
        out: h,
    });
    let h = add_bias(ctx, h, bs[0], cdt);
    let h = activate(ctx, h, a.act, cdt)?;
    let y = ctx.temp(cdt);
    ctx.push(Step::MatMul {
        a: h,
        b: ws[1],
        out: y,
    });
    let y = add_bias(ctx, y, bs[1], cdt);
    // combine: sum_e w[t, e] * y[e, t, :] over the chosen experts only
    let y = ctx.cast(y, cdt, DataType::Float);
    let wt = transpose(ctx, w, &[1, 0], DataType::Float);
    let wt = unsqueeze(ctx, wt, -1, DataType::Float);
    let at = transpose(ctx, any, &[1, 0], DataType::Bool);
    let at = unsqueeze(ctx, at, -1, DataType::Bool);
    let wy = ctx.binary(B::Multiply, y, wt, DataType::Float);
    let kept = ctx.temp(DataType::Float);
    ctx.push(Step::Where {
        cond: at,
        x: wy,
        y: zero,
        out: kept,
    });
    let out = sum(ctx, kept, &[0], false, DataType::Float);
    let out = ctx.cast(out, DataType::Float, dt);
    let out = reshape(ctx, out, crate::step::ReshapeTarget::Like(x), dt);
    ctx.finish(node, 0, out, dt)
}

/// `0..E` (int64) over the last axis of `probs` (`[T, E]`).
fn iota(ctx: &mut LowerCtx, probs: Slot) -> Slot {
    let out = ctx.temp(DataType::Int64);
    ctx.push(Step::Iota {
        like: probs,
        axis: -1,
        dtype: DataType::Int64,
        out,
    });
    out
}

// ---------------------------------------------------------------------------------------------
// QMoE.

const Q_FC1_SCALES: usize = 3;
const Q_FC1_B: usize = 4;
const Q_FC2: usize = 5;
const Q_FC2_SCALES: usize = 6;
const Q_FC2_B: usize = 7;
const Q_FC1_ZP: usize = 11;
const Q_FC2_ZP: usize = 12;

/// QMoE's quantization: bits of FC1 and FC2, and the block size along K (0: per row).
fn qmoe_quant(node: &Node) -> Result<(usize, usize), String> {
    if let Some(q) = attr_str(node, "quant_type")?
        && q != "int"
    {
        return Err(format!("QMoE: quant_type '{q}' is not claimed"));
    }
    let bits = attr_int(node, "expert_weight_bits")?.unwrap_or(4);
    for a in ["fc1_expert_weight_bits", "fc2_expert_weight_bits"] {
        if attr_int(node, a)?.is_some_and(|b| b != bits) {
            return Err(format!(
                "QMoE: {a} other than expert_weight_bits is not claimed"
            ));
        }
    }
    if bits != 4 && bits != 8 {
        return Err(format!(
            "QMoE: {bits}-bit weights are not claimed (4 and 8 are)"
        ));
    }
    let block = attr_int(node, "block_size")?.unwrap_or(0);
    if block != 0 && (block < 16 || block & (block - 1) != 0) {
        return Err(format!(
            "QMoE: block_size={block} must be a power of 2, at least 16"
        ));
    }
    Ok((bits as usize, block as usize))
}

fn claim_qmoe(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    ctx.expect_dtype(node, X, &[DataType::Float])?;
    ctx.expect_dtype(node, ROUTER, &[DataType::Float])?;
    let (bits, block) = qmoe_quant(node).or_decline()?;
    for (i, what) in [
        (8, "fc3_experts_weights"),
        (9, "fc3_scales"),
        (10, "fc3_experts_bias"),
        (13, "fc3_zero_points"),
        (14, "router_weights"),
        (15, "fc1_global_scale"),
        (16, "fc2_global_scale"),
        (17, "fc1_act_scale"),
        (18, "fc2_act_scale"),
        (19, "fc1_act_block_scale"),
        (20, "fc2_act_block_scale"),
    ] {
        no_input(node, i, what)?;
    }
    if attr_int(node, "use_sparse_mixer")
        .or_decline()?
        .unwrap_or(0)
        != 0
    {
        decline!("QMoE: use_sparse_mixer is not claimed");
    }
    if attr_int(node, "weights_prepacked")
        .or_decline()?
        .unwrap_or(-1)
        == 1
    {
        decline!("QMoE: prepacked weights are not claimed");
    }
    if block > 0 && bits == 4 && attr_int(node, "accuracy_level").or_decline()?.unwrap_or(0) >= 4 {
        decline!("QMoE: accuracy_level 4 (int8 activations in ORT's CPU kernel) is not claimed");
    }
    if block > 0 && bits == 8 {
        decline!(
            "QMoE: 8-bit block-wise weights are not claimed (measured: ORT's CPU kernel differs from the dequantization formula by ~0.5% there)"
        );
    }
    let a = moe_attrs(node).or_decline()?;
    for i in [Q_FC1_B, Q_FC2_B] {
        if node.input(i).is_some() {
            ctx.expect_dtype(node, i, &[DataType::Float])?;
        }
    }
    for i in [2, Q_FC1_SCALES, Q_FC2, Q_FC2_SCALES, Q_FC1_ZP, Q_FC2_ZP] {
        if let Some(name) = node.input(i)
            && ctx.constant(name).is_none()
        {
            decline!("QMoE: input {i} must be a constant initializer");
        }
    }
    let r = ctx.expect_rank(node, X)?;
    if r != 2 && r != 3 {
        decline!("QMoE: the input must be 2-D or 3-D");
    }
    let Some(hidden) = last_dim(ctx, node, X) else {
        decline!("QMoE: the hidden size is unknown");
    };
    let fusion = if matches!(a.act, Act::SwiGlu { .. }) {
        2
    } else {
        1
    };
    let Some(q1) = node.input(2).and_then(|n| ctx.constant(n)) else {
        decline!("QMoE: fc1 weights must be a constant initializer");
    };
    let Some(q2) = node.input(Q_FC2).and_then(|n| ctx.constant(n)) else {
        decline!("QMoE: fc2 weights must be a constant initializer");
    };
    if q1.dims.len() != 3
        || q2.dims.len() != 3
        || q1.dtype != DataType::Uint8
        || q2.dtype != DataType::Uint8
    {
        decline!("QMoE: the expert weights must be 3-D uint8");
    }
    let (e, f1) = (q1.dims[0], q1.dims[1]);
    let inter = f1 / fusion;
    let per = (8 / bits) as i64;
    if f1 % fusion != 0
        || q1.dims[2] * per != hidden
        || q2.dims != [e, hidden, inter / per]
        || inter % per != 0
    {
        decline!("QMoE: the expert weight shapes do not match the hidden and inter sizes");
    }
    if block > 0 && (hidden % block as i64 != 0 || inter % block as i64 != 0) {
        decline!("QMoE: block_size must divide the hidden and inter sizes");
    }
    if a.k < 1 || a.k > e {
        decline!("QMoE: k={} is not in [1, {e}]", a.k);
    }
    for (w, s, z) in [(2, Q_FC1_SCALES, Q_FC1_ZP), (Q_FC2, Q_FC2_SCALES, Q_FC2_ZP)] {
        let c = |i: usize| node.input(i).and_then(|n| ctx.constant(n));
        dequantized(c(w), c(s), c(z), bits, block).or_decline()?;
    }
    Ok(())
}

/// Expert weights `[E, N, K]` (float32) from the packed `q`, its scales and zero points.
fn dequantized(
    q: Option<&TensorData>,
    scales: Option<&TensorData>,
    zp: Option<&TensorData>,
    bits: usize,
    block: usize,
) -> Result<TensorData, String> {
    let q = q.ok_or("QMoE: the expert weights are not constant")?;
    let (e, n) = (q.dims[0] as usize, q.dims[1] as usize);
    let row = q.dims[2] as usize;
    let k = row * 8 / bits;
    let blocks = k.checked_div(block).unwrap_or(1);
    let scales = scales.ok_or("QMoE: the scales are missing or not constant")?;
    if scales.numel() as usize != e * n * blocks {
        return Err(format!(
            "QMoE: the scales must hold {} values",
            e * n * blocks
        ));
    }
    let scales = scales.to_f64_vec().ok_or("QMoE: unreadable scales")?;
    let zp_row = if block > 0 {
        (blocks * bits).div_ceil(8)
    } else {
        (n * bits).div_ceil(8)
    };
    if let Some(t) = zp
        && (t.dtype != DataType::Uint8
            || t.numel() as usize
                != if block > 0 {
                    e * n * zp_row
                } else {
                    e * zp_row
                })
    {
        return Err("QMoE: the zero points have the wrong type or size".into());
    }
    let default = (1u32 << (bits - 1)) as f32;
    let mut out = Vec::with_capacity(e * n * k);
    for ei in 0..e {
        for ni in 0..n {
            let bytes = &q.bytes[(ei * n + ni) * row..(ei * n + ni + 1) * row];
            for ki in 0..k {
                let b = ki.checked_div(block).unwrap_or(0);
                let zero = match zp {
                    None => default,
                    Some(t) if block > 0 => {
                        let r = (ei * n + ni) * zp_row;
                        super::quant::unpack(&t.bytes[r..r + zp_row], bits, b) as f32
                    }
                    Some(t) => {
                        super::quant::unpack(&t.bytes[ei * zp_row..(ei + 1) * zp_row], bits, ni)
                            as f32
                    }
                };
                let scale = scales[(ei * n + ni) * blocks + b] as f32;
                let v = super::quant::unpack(bytes, bits, ki) as f32;
                out.push((v - zero) * scale);
            }
        }
    }
    Ok(TensorData::from_f32(
        vec![e as i64, n as i64, k as i64],
        &out,
    ))
}

fn lower_qmoe(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    let (bits, block) = qmoe_quant(node).or_invalid(node)?;
    let mut a = moe_attrs(node).or_invalid(node)?;
    // ORT 1.31's CPU kernel renormalises the top-k weights whatever the attribute says.
    a.normalize = true;
    let mut ws = Vec::with_capacity(2);
    for (w, s, z) in [(2, Q_FC1_SCALES, Q_FC1_ZP), (Q_FC2, Q_FC2_SCALES, Q_FC2_ZP)] {
        let t = dequantized(
            ctx.const_input(node, w),
            ctx.const_input(node, s),
            ctx.const_input(node, z),
            bits,
            block,
        )
        .or_invalid(node)?;
        ws.push(ctx.constant_from(node.input(w).unwrap_or(""), t));
    }
    let bs = [ctx.opt_input(node, Q_FC1_B)?, ctx.opt_input(node, Q_FC2_B)?];
    experts_ffn(ctx, node, &a, [ws[0], ws[1]], bs, DataType::Float)
}
