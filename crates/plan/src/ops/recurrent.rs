//! Recurrent layers: RNN, GRU and LSTM (ONNX layout 0, `[seq_length, batch, input]`; layout 1,
//! batch-major, is transposed to layout 0 around the same step).
//!
//! One [`Step::Recurrent`] per node: the runtime runs the time loop over the sequence length it
//! finds in X, so the length may be symbolic. The layer computes in float32 (half inputs are
//! widened and the outputs narrowed back). `sequence_lens` masks the steps: a masked step keeps
//! the previous state and writes zeros to `Y`, which gives ORT's CPU results for both
//! directions (a reverse pass starts at each sequence's own last step because the padded steps
//! before it leave the initial state untouched). As in ORT, an empty sequence (length 0) ends
//! with zero states.

use onnx_ir::{DataType, Node};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{Activation as Act, RecurrentKind as Kind, RecurrentSpec as Spec};

/// Registers the family.
#[rustfmt::skip]
pub fn register(r: &mut Registry) {
    r.op("", "RNN", 7, MAX, claim_rnn, lower_rnn).dtypes(FLOATS);
    r.op("", "GRU", 7, MAX, claim_gru, lower_gru).dtypes(FLOATS);
    r.op("", "LSTM", 7, MAX, claim_lstm, lower_lstm).dtypes(FLOATS);
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
    match attr_int(node, "layout")?.unwrap_or(0) {
        0 | 1 => {}
        l => return Err(format!("{op}: layout {l} is invalid (0 or 1)")),
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
            acts.push(Act::from_name(&name.to_ascii_lowercase(), alpha, beta).expect("known name"));
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
            acts.push(Act::from_name(&lower, alpha, beta).expect("known name"));
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

/// Layout 1: X `[batch, seq_length, input]`, states `[batch, num_directions, hidden]`, Y
/// `[batch, seq_length, num_directions, hidden]` (opset 14+; earlier opsets have no layout).
fn batch_major(node: &Node) -> Result<bool, String> {
    Ok(attr_int(node, "layout")?.unwrap_or(0) == 1)
}

/// The static `seq_length` of X, when it is one.
fn seq_length(graph: &onnx_ir::Graph, node: &Node) -> Option<i64> {
    let axis = usize::from(batch_major(node).ok()?);
    graph.value(node.input(0)?)?.shape?.get(axis)?.fixed()
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
    if batch_major(node).or_decline()? && ctx.opset < 14 {
        decline!("{op}: layout is an attribute of opset 14 and later");
    }
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
    if seq_length(ctx.graph, node) == Some(0) {
        decline!("{op}: an empty sequence is not claimed");
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

/// Optional input `i` widened to float32.
fn load(ctx: &mut LowerCtx, node: &Node, i: usize) -> Result<Option<Slot>, PlanError> {
    let Some(s) = ctx.opt_input(node, i)? else {
        return Ok(None);
    };
    let dt = ctx.input_dtype(node, i)?;
    Ok(Some(ctx.cast(s, dt, F)))
}

/// Swaps the two leading axes of a rank-3 value.
fn swap01(ctx: &mut LowerCtx, x: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Transpose {
        x,
        perm: Some(vec![1, 0, 2]),
        out,
    });
    out
}

fn lower(ctx: &mut LowerCtx, node: &Node, kind: Kind) -> Result<(), PlanError> {
    let spec = parse(node, kind).or_invalid(node)?;
    let batch_major = batch_major(node).or_invalid(node)?;
    let dt = ctx.input_dtype(node, 0)?;
    // Batch-major X and initial states become sequence-major (layout 0) first.
    let to_layout0 = |ctx: &mut LowerCtx, s: Option<Slot>| {
        s.map(|s| if batch_major { swap01(ctx, s) } else { s })
    };
    let x = load(ctx, node, 0)?;
    let x = to_layout0(ctx, x).expect("required");
    let w = load(ctx, node, 1)?.expect("required");
    let r = load(ctx, node, 2)?.expect("required");
    let b = load(ctx, node, 3)?;
    let h0 = load(ctx, node, 5)?;
    let h0 = to_layout0(ctx, h0);
    let (c0, p) = if kind == Kind::Lstm {
        let c0 = load(ctx, node, 6)?;
        (to_layout0(ctx, c0), load(ctx, node, 7)?)
    } else {
        (None, None)
    };
    // A constant sequence_lens equal to a static seq_length everywhere masks nothing.
    let full = seq_length(ctx.graph(), node).is_some_and(|t| {
        ctx.const_input(node, 4)
            .and_then(|l| l.to_i64_vec())
            .is_some_and(|v| v.iter().all(|&l| l == t))
    });
    let lens = if full { None } else { ctx.opt_input(node, 4)? };
    let mut outs = [None; 3];
    for (i, o) in outs.iter_mut().enumerate().take(kind.outputs()) {
        if node.output(i).is_some() {
            *o = Some(ctx.temp(F));
        }
    }
    ctx.push(Step::Recurrent {
        spec,
        x,
        w,
        r,
        b,
        lens,
        h0,
        c0,
        p,
        outs,
    });
    for (i, o) in outs.iter().enumerate() {
        if let Some(mut o) = *o {
            if batch_major {
                // Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; Y_h / Y_c
                // [dirs, batch, hidden] -> [batch, dirs, hidden].
                let perm = if i == 0 {
                    vec![2, 0, 1, 3]
                } else {
                    vec![1, 0, 2]
                };
                let t = ctx.temp(F);
                ctx.push(Step::Transpose {
                    x: o,
                    perm: Some(perm),
                    out: t,
                });
                o = t;
            }
            let y = ctx.cast(o, F, dt);
            ctx.finish(node, i, y, dt)?;
        }
    }
    Ok(())
}
