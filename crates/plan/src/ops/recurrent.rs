//! Recurrent layers: RNN, GRU and LSTM (ONNX layout 0, `[seq_length, batch, input]`).
//!
//! The time loop is unrolled at plan time, so the sequence length must be a static dim. Each
//! step is a handful of MatMul / Add / Slice / activation steps computed in float32 (half
//! inputs are widened and the outputs narrowed back). `sequence_lens` becomes a `[T, B, 1]`
//! mask: a masked step keeps the previous state and writes zeros to `Y`, which gives ORT's CPU
//! results for both directions (a reverse pass starts at each sequence's own last step because
//! the padded steps before it leave the initial state untouched). As in ORT, an empty sequence
//! (length 0) ends with zero states.

use onnx_ir::{Attribute, DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::plan::invalid;
use crate::registry::ClaimCtx;
use crate::step::{BinaryOp as B, ShapeSource, SliceSpec};

/// The longest sequence unrolled into a plan.
pub(crate) const MAX_UNROLL: i64 = 512;

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "RNN", 7, MAX, claim_rnn, lower_rnn).dtypes(FLOATS);
    r.op("", "GRU", 7, MAX, claim_gru, lower_gru).dtypes(FLOATS);
    r.op("", "LSTM", 7, MAX, claim_lstm, lower_lstm).dtypes(FLOATS);
}

/// Which recurrent layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    /// Gates stacked in W / R.
    fn gates(self) -> i64 {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }

    /// Activation functions per direction.
    fn acts(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 2,
            Kind::Lstm => 3,
        }
    }

    /// Number of ONNX outputs.
    fn outputs(self) -> usize {
        if self == Kind::Lstm { 3 } else { 2 }
    }
}

/// An activation with its resolved alpha / beta.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
    Affine(f32, f32),
    LeakyRelu(f32),
    ThresholdedRelu(f32),
    ScaledTanh(f32, f32),
    HardSigmoid(f32, f32),
    Elu(f32),
    Softsign,
    Softplus,
}

/// `(uses alpha, uses beta, default alpha, default beta)` of a lower-case activation name, as
/// ORT's LSTM / GRU kernels resolve it.
fn act_usage(name: &str) -> Option<(bool, bool, f32, f32)> {
    Some(match name {
        "sigmoid" | "tanh" | "relu" | "softsign" | "softplus" => (false, false, 0.0, 0.0),
        "affine" | "scaledtanh" => (true, true, 0.0, 0.0),
        "hardsigmoid" => (true, true, 0.2, 0.5),
        "leakyrelu" => (true, false, 0.01, 0.0),
        "elu" => (true, false, 1.0, 0.0),
        "thresholdedrelu" => (true, false, 0.0, 0.0),
        _ => return None,
    })
}

/// The activation of a lower-case name with its parameters.
fn make_act(name: &str, alpha: f32, beta: f32) -> Option<Act> {
    Some(match name {
        "sigmoid" => Act::Sigmoid,
        "tanh" => Act::Tanh,
        "relu" => Act::Relu,
        "affine" => Act::Affine(alpha, beta),
        "leakyrelu" => Act::LeakyRelu(alpha),
        "thresholdedrelu" => Act::ThresholdedRelu(alpha),
        "scaledtanh" => Act::ScaledTanh(alpha, beta),
        "hardsigmoid" => Act::HardSigmoid(alpha, beta),
        "elu" => Act::Elu(alpha),
        "softsign" => Act::Softsign,
        "softplus" => Act::Softplus,
        _ => return None,
    })
}

/// The static attributes of one recurrent node.
#[derive(Debug, Clone, PartialEq)]
struct Spec {
    kind: Kind,
    /// One entry per direction: true when it runs backwards in time.
    reverse: Vec<bool>,
    hidden: i64,
    /// `kind.acts()` activations per direction, directions in order.
    acts: Vec<Act>,
    clip: Option<f32>,
    input_forget: bool,
    linear_before_reset: bool,
}

fn attr_floats(node: &Node, name: &str) -> Result<Option<Vec<f32>>, String> {
    match node.attributes.get(name) {
        None => Ok(None),
        Some(Attribute::Floats(v)) => Ok(Some(v.clone())),
        Some(a) => Err(format!(
            "{}: attribute '{name}' is {}, expected FLOATS",
            node.op_type,
            a.kind()
        )),
    }
}

fn attr_strings(node: &Node, name: &str) -> Result<Option<Vec<String>>, String> {
    match node.attributes.get(name) {
        None => Ok(None),
        Some(Attribute::Strings(v)) => Ok(Some(
            v.iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
        )),
        Some(a) => Err(format!(
            "{}: attribute '{name}' is {}, expected STRINGS",
            node.op_type,
            a.kind()
        )),
    }
}

/// Reads and validates the attributes (the rules of ORT's CPU kernels).
fn parse(node: &Node, kind: Kind) -> Result<Spec, String> {
    let op = &node.op_type;
    let direction = attr_str(node, "direction")?.unwrap_or_else(|| "forward".into());
    let reverse = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(format!("{op}: direction '{d}' is invalid")),
    };
    let dirs = reverse.len();
    let hidden = match attr_int(node, "hidden_size")? {
        Some(h) if h > 0 => h,
        Some(h) => return Err(format!("{op}: hidden_size {h} must be positive")),
        None => {
            return Err(format!(
                "{op}: hidden_size is required (ORT's kernel needs it)"
            ));
        }
    };
    if attr_int(node, "layout")?.unwrap_or(0) != 0 {
        return Err(format!(
            "{op}: layout=1 (batch-major) is not claimed: ORT's CPU EP rejects it too"
        ));
    }
    let mut clip = attr_float(node, "clip")?;
    let alphas = attr_floats(node, "activation_alpha")?;
    let betas = attr_floats(node, "activation_beta")?;
    let names = attr_strings(node, "activations")?;
    let acts = if kind == Kind::Rnn {
        // ORT's RNN: case-sensitive names, one per direction ({"Tanh", "Tanh"} is the schema
        // default, cut to one for a single direction), alpha / beta indexed by direction
        // with 0 as the default.
        let mut names = names.unwrap_or_else(|| vec!["Tanh".into(); dirs]);
        if names.len() == 2 && dirs == 1 {
            names.truncate(1);
        }
        if names.len() != dirs {
            return Err(format!(
                "{op}: {} activations for {dirs} direction(s)",
                names.len()
            ));
        }
        for (what, v) in [("activation_alpha", &alphas), ("activation_beta", &betas)] {
            if let Some(v) = v
                && v.len() < dirs
            {
                return Err(format!(
                    "{op}: {what} has {} value(s) for {dirs} direction(s)",
                    v.len()
                ));
            }
        }
        let mut acts = Vec::new();
        for (d, name) in names.iter().enumerate() {
            let known = [
                "Relu",
                "Tanh",
                "Sigmoid",
                "Affine",
                "LeakyRelu",
                "ThresholdedRelu",
                "ScaledTanh",
                "HardSigmoid",
                "Elu",
                "Softsign",
                "Softplus",
            ];
            if !known.contains(&name.as_str()) {
                return Err(format!("{op}: activation '{name}' is not supported"));
            }
            let alpha = alphas.as_ref().map_or(0.0, |v| v[d]);
            let beta = betas.as_ref().map_or(0.0, |v| v[d]);
            acts.push(make_act(&name.to_ascii_lowercase(), alpha, beta).expect("known name"));
        }
        // ORT's RNN treats a negative clip as "no clip".
        clip = clip.filter(|&c| c >= 0.0);
        acts
    } else {
        // ORT's LSTM / GRU: lower-cased names, kind.acts() per direction, alpha / beta
        // consumed in order by the functions that take them, per-function defaults.
        let names = names.unwrap_or_else(|| {
            let one: &[&str] = if kind == Kind::Lstm {
                &["sigmoid", "tanh", "tanh"]
            } else {
                &["sigmoid", "tanh"]
            };
            (0..dirs)
                .flat_map(|_| one.iter().map(|s| s.to_string()))
                .collect()
        });
        if names.len() != kind.acts() * dirs {
            return Err(format!(
                "{op}: {} activations given; {} expected for {dirs} direction(s)",
                names.len(),
                kind.acts() * dirs
            ));
        }
        let mut alpha_it = alphas.unwrap_or_default().into_iter();
        let mut beta_it = betas.unwrap_or_default().into_iter();
        let mut acts = Vec::new();
        for name in &names {
            let lower = name.to_ascii_lowercase();
            let Some((ua, ub, da, db)) = act_usage(&lower) else {
                return Err(format!("{op}: activation '{name}' is not supported"));
            };
            let alpha = if ua {
                alpha_it.next().unwrap_or(da)
            } else {
                0.0
            };
            let beta = if ub {
                beta_it.next().unwrap_or(db)
            } else {
                0.0
            };
            acts.push(make_act(&lower, alpha, beta).expect("known name"));
        }
        if let Some(c) = clip
            && c <= 0.0
        {
            return Err(format!("{op}: clip {c} must be positive"));
        }
        acts
    };
    let input_forget = kind == Kind::Lstm && attr_int(node, "input_forget")?.unwrap_or(0) != 0;
    let linear_before_reset =
        kind == Kind::Gru && attr_int(node, "linear_before_reset")?.unwrap_or(0) != 0;
    Ok(Spec {
        kind,
        reverse,
        hidden,
        acts,
        clip,
        input_forget,
        linear_before_reset,
    })
}

/// The static `seq_length` of X.
fn seq_length(graph: &onnx_ir::Graph, node: &Node) -> Option<i64> {
    graph.value(node.input(0)?)?.shape?.first()?.fixed()
}

fn claim_rnn(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim(ctx, node, Kind::Rnn)
}

fn claim_gru(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim(ctx, node, Kind::Gru)
}

fn claim_lstm(ctx: &ClaimCtx, node: &Node) -> Result<(), Decline> {
    claim(ctx, node, Kind::Lstm)
}

fn claim(ctx: &ClaimCtx, node: &Node, kind: Kind) -> Result<(), Decline> {
    let op = &node.op_type;
    let dt = ctx.expect_dtype(node, 0, FLOATS)?;
    let float_inputs: &[usize] = match kind {
        Kind::Lstm => &[1, 2, 3, 5, 6, 7],
        _ => &[1, 2, 3, 5],
    };
    for &i in float_inputs {
        if i >= 3 && node.input(i).is_none() {
            continue;
        }
        let d = ctx.input_dtype(node, i)?;
        if d != dt {
            decline!("{op}: input {i} is {d} but X is {dt}");
        }
    }
    if node.input(4).is_some() {
        ctx.expect_dtype(node, 4, &[DataType::Int32])?;
    }
    for i in kind.outputs()..node.outputs.len() {
        if node.output(i).is_some() {
            decline!("{op}: output {i} is not defined");
        }
    }
    parse(node, kind).or_decline()?;
    let r = ctx.expect_rank(node, 0)?;
    if r != 3 {
        decline!("{op}: X has rank {r}, expected 3");
    }
    for i in [1, 2] {
        let r = ctx.expect_rank(node, i)?;
        if r != 3 {
            decline!("{op}: input {i} has rank {r}, expected 3");
        }
    }
    match seq_length(ctx.graph, node) {
        None => decline!(
            "{op}: seq_length (dim 0 of X) is not static; the time loop is unrolled at plan time"
        ),
        Some(0) => decline!("{op}: an empty sequence is not claimed"),
        Some(t) if t > MAX_UNROLL => {
            decline!("{op}: seq_length {t} is over the unroll limit {MAX_UNROLL}")
        }
        Some(_) => {}
    }
    Ok(())
}

fn lower_rnn(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    lower(ctx, node, Kind::Rnn)
}

fn lower_gru(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    lower(ctx, node, Kind::Gru)
}

fn lower_lstm(ctx: &mut LowerCtx, node: &Node) -> Result<(), PlanError> {
    lower(ctx, node, Kind::Lstm)
}

/// Float32, the dtype every recurrent computation runs in.
const F: DataType = DataType::Float;

/// `x[..., start..end]` along the last axis.
fn slice_last(ctx: &mut LowerCtx, x: Slot, start: i64, end: i64) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Slice {
        x,
        spec: SliceSpec {
            starts: ShapeSource::Static(vec![start]),
            ends: ShapeSource::Static(vec![end]),
            axes: Some(ShapeSource::Static(vec![-1])),
            steps: None,
        },
        out,
    });
    out
}

fn matmul(ctx: &mut LowerCtx, a: Slot, b: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::MatMul { a, b, out });
    out
}

fn transpose2(ctx: &mut LowerCtx, x: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Transpose {
        x,
        perm: Some(vec![1, 0]),
        out,
    });
    out
}

fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

fn concat(ctx: &mut LowerCtx, inputs: Vec<Slot>, axis: i32) -> Slot {
    if inputs.len() == 1 {
        return inputs[0];
    }
    let out = ctx.temp(F);
    ctx.push(Step::Concat { inputs, axis, out });
    out
}

/// `min(max(x, -c), c)` when a clip is set.
fn clip(ctx: &mut LowerCtx, x: Slot, c: Option<f32>) -> Result<Slot, PlanError> {
    let Some(c) = c else {
        return Ok(x);
    };
    let lo = ctx.scalar(F, -(c as f64))?;
    let hi = ctx.scalar(F, c as f64)?;
    let y = ctx.binary(B::Maximum, x, lo, F);
    Ok(ctx.binary(B::Minimum, y, hi, F))
}

/// Applies an activation (ORT's formulas).
fn activate(ctx: &mut LowerCtx, a: Act, x: Slot) -> Result<Slot, PlanError> {
    let s = |ctx: &mut LowerCtx, v: f32| ctx.scalar(F, v as f64);
    Ok(match a {
        Act::Sigmoid => ctx.unary(UnaryOp::Sigmoid, x, F),
        Act::Tanh => ctx.unary(UnaryOp::Tanh, x, F),
        Act::Relu => {
            let zero = s(ctx, 0.0)?;
            ctx.binary(B::Maximum, x, zero, F)
        }
        Act::Affine(alpha, beta) => {
            let a = s(ctx, alpha)?;
            let b = s(ctx, beta)?;
            let y = ctx.binary(B::Multiply, x, a, F);
            ctx.binary(B::Add, y, b, F)
        }
        Act::LeakyRelu(alpha) => {
            let zero = s(ctx, 0.0)?;
            let a = s(ctx, alpha)?;
            let pos = ctx.binary(B::GreaterEqual, x, zero, F);
            let neg = ctx.binary(B::Multiply, x, a, F);
            select(ctx, pos, x, neg)
        }
        Act::ThresholdedRelu(alpha) => {
            let zero = s(ctx, 0.0)?;
            let a = s(ctx, alpha)?;
            let keep = ctx.binary(B::Greater, x, a, F);
            select(ctx, keep, x, zero)
        }
        Act::ScaledTanh(alpha, beta) => {
            let a = s(ctx, alpha)?;
            let b = s(ctx, beta)?;
            let y = ctx.binary(B::Multiply, x, b, F);
            let y = ctx.unary(UnaryOp::Tanh, y, F);
            ctx.binary(B::Multiply, y, a, F)
        }
        Act::HardSigmoid(alpha, beta) => {
            let a = s(ctx, alpha)?;
            let b = s(ctx, beta)?;
            let zero = s(ctx, 0.0)?;
            let one = s(ctx, 1.0)?;
            let y = ctx.binary(B::Multiply, x, a, F);
            let y = ctx.binary(B::Add, y, b, F);
            let y = ctx.binary(B::Maximum, y, zero, F);
            ctx.binary(B::Minimum, y, one, F)
        }
        Act::Elu(alpha) => {
            let zero = s(ctx, 0.0)?;
            let one = s(ctx, 1.0)?;
            let a = s(ctx, alpha)?;
            let pos = ctx.binary(B::GreaterEqual, x, zero, F);
            let e = ctx.unary(UnaryOp::Exp, x, F);
            let e = ctx.binary(B::Subtract, e, one, F);
            let neg = ctx.binary(B::Multiply, e, a, F);
            select(ctx, pos, x, neg)
        }
        Act::Softsign => {
            let one = s(ctx, 1.0)?;
            let d = ctx.unary(UnaryOp::Abs, x, F);
            let d = ctx.binary(B::Add, d, one, F);
            ctx.binary(B::Divide, x, d, F)
        }
        Act::Softplus => {
            let one = s(ctx, 1.0)?;
            let e = ctx.unary(UnaryOp::Exp, x, F);
            let e = ctx.binary(B::Add, e, one, F);
            ctx.unary(UnaryOp::Log, e, F)
        }
    })
}

/// Optional input `i` widened to float32.
fn load(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<Option<Slot>, PlanError> {
    let Some(s) = ctx.opt_input(node, i)? else {
        return Ok(None);
    };
    let dt = ctx.input_dtype(node, i)?;
    Ok(Some(ctx.cast(s, dt, F)))
}

/// The recurrent state of one direction.
struct State {
    h: Option<Slot>,
    c: Option<Slot>,
}

fn lower(ctx: &mut LowerCtx, node: &Node, kind: Kind) -> Result<(), PlanError> {
    let spec = parse(node, kind).or_invalid(node)?;
    let Some(t_len) = seq_length(ctx.graph(), node) else {
        invalid!(node, "seq_length is not static");
    };
    let dt = ctx.input_dtype(node, 0)?;
    let hs = spec.hidden;
    let g = kind.gates();
    let x = load(ctx, node, 0)?.expect("required");
    let w = load(ctx, node, 1)?.expect("required");
    let r = load(ctx, node, 2)?.expect("required");
    let b = load(ctx, node, 3)?;
    let h0 = load(ctx, node, 5)?;
    let (c0, p) = if kind == Kind::Lstm {
        (load(ctx, node, 6)?, load(ctx, node, 7)?)
    } else {
        (None, None)
    };
    // sequence_lens as a [T, B, 1] mask, unless it is a constant equal to T everywhere.
    let full = ctx
        .const_input(node, 4)
        .and_then(|t| t.to_i64_vec())
        .is_some_and(|v| v.iter().all(|&l| l == t_len));
    let mask = match node.input(4) {
        Some(_) if !full => {
            let lens = ctx.input(node, 4)?;
            let lens = ctx.cast(lens, DataType::Int32, DataType::Int64);
            let steps: Vec<i64> = (0..t_len).collect();
            let steps = ctx.constant(TensorData::from_i64(vec![t_len, 1], &steps));
            let m = ctx.binary(B::Less, steps, lens, DataType::Int64);
            Some(ctx.unsqueeze(m, vec![2], DataType::Bool))
        }
        _ => None,
    };
    let zero = ctx.scalar(F, 0.0)?;
    let want_y = node.output(0).is_some();
    let mut ys = Vec::new();
    let mut yhs = Vec::new();
    let mut ycs = Vec::new();
    for (d, &reverse) in spec.reverse.iter().enumerate() {
        let acts = &spec.acts[d * kind.acts()..(d + 1) * kind.acts()];
        let wd = ctx.pick(w, d as i64, 0, F);
        let wt = transpose2(ctx, wd);
        let rd = ctx.pick(r, d as i64, 0, F);
        let rt = transpose2(ctx, rd); // [H, G*H]
        // X @ W^T for every step at once, plus the biases that add outside the recurrence.
        let mut xw = matmul(ctx, x, wt); // [T, B, G*H]
        let mut rb_h = None;
        if let Some(b) = b {
            let bd = ctx.pick(b, d as i64, 0, F);
            let wb = slice_last(ctx, bd, 0, g * hs);
            let rb = slice_last(ctx, bd, g * hs, 2 * g * hs);
            let bias = if kind == Kind::Gru {
                // Rb_h adds inside the reset gate's product; the others add up front.
                rb_h = Some(slice_last(ctx, rb, 2 * hs, 3 * hs));
                let keep: Vec<f32> = (0..3 * hs).map(|i| (i < 2 * hs) as u8 as f32).collect();
                let keep = ctx.constant(TensorData::from_f32(vec![3 * hs], &keep));
                let rb_zr = ctx.binary(B::Multiply, rb, keep, F);
                ctx.binary(B::Add, wb, rb_zr, F)
            } else {
                ctx.binary(B::Add, wb, rb, F)
            };
            xw = ctx.binary(B::Add, xw, bias, F);
        }
        // GRU splits R into the z|r part and the h part.
        let (rt_zr, rt_h) = if kind == Kind::Gru {
            (
                Some(slice_last(ctx, rt, 0, 2 * hs)),
                Some(slice_last(ctx, rt, 2 * hs, 3 * hs)),
            )
        } else {
            (None, None)
        };
        let peep = match p {
            Some(p) => {
                let pd = ctx.pick(p, d as i64, 0, F);
                Some([
                    slice_last(ctx, pd, 0, hs),
                    slice_last(ctx, pd, hs, 2 * hs),
                    slice_last(ctx, pd, 2 * hs, 3 * hs),
                ])
            }
            None => None,
        };
        let mut st = State {
            h: h0.map(|h| ctx.pick(h, d as i64, 0, F)),
            c: c0.map(|c| ctx.pick(c, d as i64, 0, F)),
        };
        let mut y_dir: Vec<Option<Slot>> = vec![None; t_len as usize];
        for step in 0..t_len {
            let t = if reverse { t_len - 1 - step } else { step };
            let xt = ctx.pick(xw, t, 0, F); // [B, G*H]
            let (h_new, c_new) = match kind {
                Kind::Rnn => {
                    let pre = match st.h {
                        Some(h) => {
                            let hr = matmul(ctx, h, rt);
                            ctx.binary(B::Add, xt, hr, F)
                        }
                        None => xt,
                    };
                    let pre = clip(ctx, pre, spec.clip)?;
                    (activate(ctx, acts[0], pre)?, None)
                }
                Kind::Gru => {
                    let xzr = slice_last(ctx, xt, 0, 2 * hs);
                    let xh = slice_last(ctx, xt, 2 * hs, 3 * hs);
                    let zr = match st.h {
                        Some(h) => {
                            let hr = matmul(ctx, h, rt_zr.expect("gru"));
                            ctx.binary(B::Add, xzr, hr, F)
                        }
                        None => xzr,
                    };
                    let zr = clip(ctx, zr, spec.clip)?;
                    let zr = activate(ctx, acts[0], zr)?;
                    let z = slice_last(ctx, zr, 0, hs);
                    let rg = slice_last(ctx, zr, hs, 2 * hs);
                    let rth = rt_h.expect("gru");
                    // The recurrent term of the candidate.
                    let rec = match (st.h, spec.linear_before_reset) {
                        (Some(h), true) => {
                            let hr = matmul(ctx, h, rth);
                            let hr = match rb_h {
                                Some(rb) => ctx.binary(B::Add, hr, rb, F),
                                None => hr,
                            };
                            Some(ctx.binary(B::Multiply, rg, hr, F))
                        }
                        (Some(h), false) => {
                            let rh = ctx.binary(B::Multiply, rg, h, F);
                            let hr = matmul(ctx, rh, rth);
                            Some(match rb_h {
                                Some(rb) => ctx.binary(B::Add, hr, rb, F),
                                None => hr,
                            })
                        }
                        (None, true) => rb_h.map(|rb| ctx.binary(B::Multiply, rg, rb, F)),
                        (None, false) => rb_h,
                    };
                    let pre = match rec {
                        Some(rec) => ctx.binary(B::Add, xh, rec, F),
                        None => xh,
                    };
                    let pre = clip(ctx, pre, spec.clip)?;
                    let cand = activate(ctx, acts[1], pre)?;
                    // (1 - z) * cand + z * h
                    let one = ctx.scalar(F, 1.0)?;
                    let keep = ctx.binary(B::Subtract, one, z, F);
                    let a = ctx.binary(B::Multiply, keep, cand, F);
                    let h_new = match st.h {
                        Some(h) => {
                            let zh = ctx.binary(B::Multiply, z, h, F);
                            ctx.binary(B::Add, a, zh, F)
                        }
                        None => a,
                    };
                    (h_new, None)
                }
                Kind::Lstm => {
                    let gates = match st.h {
                        Some(h) => {
                            let hr = matmul(ctx, h, rt);
                            ctx.binary(B::Add, xt, hr, F)
                        }
                        None => xt,
                    };
                    // W / R / B gate order: i, o, f, c; P order: i, o, f.
                    let mut gi = slice_last(ctx, gates, 0, hs);
                    let mut go = slice_last(ctx, gates, hs, 2 * hs);
                    let mut gf = slice_last(ctx, gates, 2 * hs, 3 * hs);
                    let gc = slice_last(ctx, gates, 3 * hs, 4 * hs);
                    if let (Some(pp), Some(c)) = (peep, st.c) {
                        let pi = ctx.binary(B::Multiply, pp[0], c, F);
                        gi = ctx.binary(B::Add, gi, pi, F);
                        if !spec.input_forget {
                            let pf = ctx.binary(B::Multiply, pp[2], c, F);
                            gf = ctx.binary(B::Add, gf, pf, F);
                        }
                    }
                    let gi = clip(ctx, gi, spec.clip)?;
                    let i = activate(ctx, acts[0], gi)?;
                    let f = if spec.input_forget {
                        let one = ctx.scalar(F, 1.0)?;
                        ctx.binary(B::Subtract, one, i, F)
                    } else {
                        let gf = clip(ctx, gf, spec.clip)?;
                        activate(ctx, acts[0], gf)?
                    };
                    let gc = clip(ctx, gc, spec.clip)?;
                    let cand = activate(ctx, acts[1], gc)?;
                    let ic = ctx.binary(B::Multiply, i, cand, F);
                    let c_new = match st.c {
                        Some(c) => {
                            let fc = ctx.binary(B::Multiply, f, c, F);
                            ctx.binary(B::Add, fc, ic, F)
                        }
                        None => ic,
                    };
                    if let Some(pp) = peep {
                        let po = ctx.binary(B::Multiply, pp[1], c_new, F);
                        go = ctx.binary(B::Add, go, po, F);
                    }
                    let go = clip(ctx, go, spec.clip)?;
                    let o = activate(ctx, acts[0], go)?;
                    let hc = activate(ctx, acts[2], c_new)?;
                    (ctx.binary(B::Multiply, o, hc, F), Some(c_new))
                }
            };
            match mask {
                Some(m) => {
                    let mt = ctx.pick(m, t, 0, DataType::Bool); // [B, 1]
                    if want_y {
                        y_dir[t as usize] = Some(select(ctx, mt, h_new, zero));
                    }
                    let prev_h = st.h.unwrap_or(zero);
                    st.h = Some(select(ctx, mt, h_new, prev_h));
                    if let Some(c_new) = c_new {
                        let prev_c = st.c.unwrap_or(zero);
                        st.c = Some(select(ctx, mt, c_new, prev_c));
                    }
                }
                None => {
                    y_dir[t as usize] = Some(h_new);
                    st.h = Some(h_new);
                    st.c = c_new;
                }
            }
        }
        if want_y {
            let parts: Vec<Slot> = y_dir
                .into_iter()
                .map(|y| ctx.unsqueeze(y.expect("every step"), vec![0, 1], F))
                .collect();
            ys.push(concat(ctx, parts, 0)); // [T, 1, B, H]
        }
        let mut h = st.h.expect("at least one step");
        let mut c = st.c;
        // ORT zeroes the final states of an empty sequence (where ours still hold the
        // initial states): `t = 0 < len` tells a non-empty one.
        if let Some(m) = mask {
            let nonempty = ctx.pick(m, 0, 0, DataType::Bool);
            if h0.is_some() {
                h = select(ctx, nonempty, h, zero);
            }
            if c0.is_some() {
                c = c.map(|c| select(ctx, nonempty, c, zero));
            }
        }
        yhs.push(ctx.unsqueeze(h, vec![0], F));
        if let Some(c) = c {
            ycs.push(ctx.unsqueeze(c, vec![0], F));
        }
    }
    if want_y {
        let y = concat(ctx, ys, 1);
        let y = ctx.cast(y, F, dt);
        ctx.finish(node, 0, y, dt)?;
    }
    if node.output(1).is_some() {
        let y = concat(ctx, yhs, 0);
        let y = ctx.cast(y, F, dt);
        ctx.finish(node, 1, y, dt)?;
    }
    if kind == Kind::Lstm && node.output(2).is_some() {
        let y = concat(ctx, ycs, 0);
        let y = ctx.cast(y, F, dt);
        ctx.finish(node, 2, y, dt)?;
    }
    Ok(())
}
