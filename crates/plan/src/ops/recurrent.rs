//! Recurrent layers: RNN, GRU and LSTM (ONNX layout 0, `[seq_length, batch, input]`; layout 1,
//! batch-major, is transposed to layout 0 around the same steps).
//!
//! Lowered to generic steps, in float32 (half inputs are widened and the outputs narrowed
//! back): per direction, the input projection `X W^T` plus the biases that add outside the
//! recurrence, once for all time steps; then one inline [`Step::Repeat`] over the time axis
//! whose body (built in `cell`) is one time step of every direction, its state carried and
//! its hidden state stacked into `Y`. The loop's count is X's run-time dim 0, so the length
//! may be symbolic. `sequence_lens` masks the steps: a masked step keeps the previous state
//! and writes zeros to `Y`, which gives ORT's CPU results for both directions (a reverse pass
//! starts at each sequence's own last step because the padded steps before it leave the
//! initial state untouched). As in ORT, an empty sequence (length 0) ends with zero states.

use onnx_ir::{DataType, Node, TensorData};

use super::*;
use crate::decline;
use crate::registry::ClaimCtx;
use crate::step::{ReshapeTarget, ScanAxis, ShapeSource};

mod cell;
mod spec;
mod weights;

use weights::weights;

pub use spec::{Activation as Act, RecurrentKind as Kind, RecurrentSpec as Spec};

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
pub fn parse(node: &Node, kind: Kind) -> Result<Spec, String> {
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

/// `x` reshaped by `target` into a new float32 temporary.
fn reshape(ctx: &mut LowerCtx, x: Slot, target: ReshapeTarget) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Reshape { x, target, out });
    out
}

/// `x` with size-1 axes inserted at `axes`.
fn unsqueeze(ctx: &mut LowerCtx, x: Slot, axes: &[i64], dtype: DataType) -> Slot {
    let out = ctx.temp(dtype);
    ctx.push(Step::Reshape {
        x,
        target: ReshapeTarget::Unsqueeze {
            axes: ShapeSource::Static(axes.to_vec()),
        },
        out,
    });
    out
}

/// `x` split along `axis` into parts of `sizes` (`None`: `n` equal parts).
fn split(ctx: &mut LowerCtx, x: Slot, axis: i32, sizes: Option<Vec<i64>>, n: usize) -> Vec<Slot> {
    let outs: Vec<Slot> = (0..n).map(|_| ctx.temp(F)).collect();
    ctx.push(Step::Split {
        x,
        axis,
        sizes: sizes.map(ShapeSource::Static),
        outs: outs.clone(),
    });
    outs
}

/// The `dirs` entries of a value with a leading direction axis, that axis removed.
fn per_direction(ctx: &mut LowerCtx, x: Slot, dirs: usize) -> Vec<Slot> {
    let squeeze = || ReshapeTarget::Squeeze {
        axes: Some(ShapeSource::Static(vec![0])),
    };
    if dirs == 1 {
        return vec![reshape(ctx, x, squeeze())];
    }
    split(ctx, x, 0, None, dirs)
        .into_iter()
        .map(|p| reshape(ctx, p, squeeze()))
        .collect()
}

/// The 2-D transpose of `x`.
fn transpose2(ctx: &mut LowerCtx, x: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Transpose {
        x,
        perm: Some(vec![1, 0]),
        out,
    });
    out
}

/// `x` joined along `axis` (itself when alone).
fn concat(ctx: &mut LowerCtx, inputs: Vec<Slot>, axis: i32) -> Slot {
    if inputs.len() == 1 {
        return inputs[0];
    }
    let out = ctx.temp(F);
    ctx.push(Step::Concat { inputs, axis, out });
    out
}

/// `cond ? x : y` into a new float32 temporary.
fn select(ctx: &mut LowerCtx, cond: Slot, x: Slot, y: Slot) -> Slot {
    let out = ctx.temp(F);
    ctx.push(Step::Where { cond, x, y, out });
    out
}

/// The per-direction values one time step reads besides the state: `R[d]^T` (GRU: its z|r
/// columns; `rt_h` the h columns and `rb_h` the bias added inside the reset gate's product),
/// and the LSTM peepholes i, o, f.
pub(crate) struct DirArgs {
    rt: Slot,
    rt_h: Option<Slot>,
    rb_h: Option<Slot>,
    peep: Option<[Slot; 3]>,
}

impl DirArgs {
    fn slots(&self) -> Vec<Slot> {
        let mut v = vec![self.rt];
        v.extend(self.rt_h);
        v.extend(self.rb_h);
        v.extend(self.peep.iter().flatten());
        v
    }
}

fn lower(ctx: &mut LowerCtx, node: &Node, kind: Kind) -> Result<(), PlanError> {
    let spec = parse(node, kind).or_invalid(node)?;
    let batch_major = batch_major(node).or_invalid(node)?;
    let dt = ctx.input_dtype(node, 0)?;
    let dirs = spec.reverse.len();
    let hs = spec.hidden;
    // Batch-major X and initial states become sequence-major (layout 0) first.
    let to_layout0 = |ctx: &mut LowerCtx, s: Option<Slot>| {
        s.map(|s| if batch_major { swap01(ctx, s) } else { s })
    };
    let x = load(ctx, node, 0)?;
    let x = to_layout0(ctx, x).expect("required");
    let h0 = load(ctx, node, 5)?;
    let h0 = to_layout0(ctx, h0);
    let c0 = if kind == Kind::Lstm {
        let c0 = load(ctx, node, 6)?;
        to_layout0(ctx, c0)
    } else {
        None
    };
    // A constant sequence_lens equal to a static seq_length everywhere masks nothing.
    let full = seq_length(ctx.graph(), node).is_some_and(|t| {
        ctx.const_input(node, 4)
            .and_then(|l| l.to_i64_vec())
            .is_some_and(|v| v.iter().all(|&l| l == t))
    });
    let lens = if full { None } else { ctx.opt_input(node, 4)? };

    // Per direction: W^T, the biases outside the recurrence and the values a time step reads,
    // folded at plan time from constant weights, else computed by steps.
    let w = weights(ctx, node, &spec)?;
    let mut xws = Vec::with_capacity(dirs);
    let mut dir_args = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let mut xw = ctx.temp(F);
        ctx.push(Step::MatMul {
            a: x,
            b: w.wt[d],
            out: xw,
        });
        if let Some(bias) = w.bias.as_ref().map(|b| b[d]) {
            xw = ctx.binary(BinaryOp::Add, xw, bias, F);
        }
        xws.push(xw);
        dir_args.push(DirArgs {
            rt: w.rt[d],
            rt_h: w.rt_h.as_ref().map(|v| v[d]),
            rb_h: w.rb_h.as_ref().map(|v| v[d]),
            peep: w.peep.as_ref().map(|v| v[d]),
        });
    }

    // The [T, B, 1] mask `t < lens[b]`.
    let mask = match lens {
        Some(lens) => {
            let steps = ctx.iota_as(x, 0, DataType::Int32);
            let steps = unsqueeze(ctx, steps, &[1], DataType::Int32);
            let m = ctx.binary(BinaryOp::Less, steps, lens, DataType::Bool);
            Some(unsqueeze(ctx, m, &[2], DataType::Bool))
        }
        None => None,
    };
    // Zero states [B, H] where no initial state is given: `iota(B) * 0`, finite whatever X
    // holds.
    let needs_zeros = h0.is_none() || (kind == Kind::Lstm && c0.is_none());
    let zeros = if needs_zeros {
        let batch = ctx.iota_as(x, 1, F);
        let batch = unsqueeze(ctx, batch, &[1], F);
        let row = TensorData::new(F, vec![hs], vec![0; 4 * hs as usize]).or_invalid(node)?;
        let row = ctx.constant(row);
        Some(ctx.binary(BinaryOp::Multiply, batch, row, F))
    } else {
        None
    };
    let h0s = match h0 {
        Some(h0) => per_direction(ctx, h0, dirs),
        None => vec![zeros.expect("zeros"); dirs],
    };
    let c0s = match (kind, c0) {
        (Kind::Lstm, Some(c0)) => per_direction(ctx, c0, dirs),
        (Kind::Lstm, None) => vec![zeros.expect("zeros"); dirs],
        _ => Vec::new(),
    };

    // The time loop: carried h (and c) per direction, the projections (and mask) scanned in
    // each direction's order, Y's time steps stacked in time order.
    let want_y = node.output(0).is_some();
    let body = cell::body(ctx, node, &spec, &dir_args[0], mask.is_some(), want_y)?;
    let mut states = Vec::new();
    let mut seqs = Vec::new();
    let mut seq_axes = Vec::new();
    let mut per_step = Vec::new();
    for d in 0..dirs {
        states.push(h0s[d]);
        states.extend(c0s.get(d));
        let how = ScanAxis {
            axis: 0,
            reverse: spec.reverse[d],
        };
        seqs.push(xws[d]);
        seq_axes.push(how);
        if let Some(m) = mask {
            seqs.push(m);
            seq_axes.push(how);
        }
        per_step.extend(dir_args[d].slots());
    }
    let per_dir = if kind == Kind::Lstm { 2 } else { 1 };
    let n_out = states.len() + if want_y { dirs } else { 0 };
    let outs: Vec<Slot> = (0..n_out).map(|_| ctx.temp(F)).collect();
    let y_axes = if want_y {
        spec.reverse
            .iter()
            .map(|&reverse| ScanAxis { axis: 0, reverse })
            .collect()
    } else {
        Vec::new()
    };
    ctx.push(Step::Repeat {
        body,
        inline: true,
        counted: false,
        max_trips: None,
        cond: None,
        carried: states,
        scanned: seqs,
        scan_in: seq_axes,
        args: per_step,
        scan_out: y_axes,
        empty_shapes: Vec::new(),
        outs: outs.clone(),
    });

    // ORT zeroes the final states of an empty sequence (where the scan leaves the initial
    // states): `0 < lens[b]`, or without lens `0 < seq_length`, tells a non-empty one.
    let nonempty = if h0.is_some() || c0.is_some() {
        Some(match lens {
            Some(lens) => {
                let zero = ctx.scalar(DataType::Int32, 0.0)?;
                let ne = ctx.binary(BinaryOp::Less, zero, lens, DataType::Bool);
                unsqueeze(ctx, ne, &[1], DataType::Bool)
            }
            None => {
                let t = ctx.dim_1d(x, 0);
                let zero = ctx.scalar(DataType::Int64, 0.0)?;
                ctx.binary(BinaryOp::Less, zero, t, DataType::Bool)
            }
        })
    } else {
        None
    };
    let mut yh = Vec::with_capacity(dirs);
    let mut yc = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let mut h = outs[d * per_dir];
        if let (Some(ne), Some(_)) = (nonempty, h0) {
            let zero = ctx.scalar(F, 0.0)?;
            h = select(ctx, ne, h, zero);
        }
        yh.push(unsqueeze(ctx, h, &[0], F));
        if kind == Kind::Lstm {
            let mut c = outs[d * per_dir + 1];
            if let (Some(ne), Some(_)) = (nonempty, c0) {
                let zero = ctx.scalar(F, 0.0)?;
                c = select(ctx, ne, c, zero);
            }
            yc.push(unsqueeze(ctx, c, &[0], F));
        }
    }
    let stacked = &outs[dirs * per_dir..];
    let mut results = [None; 3];
    if want_y {
        let ys = stacked
            .iter()
            .map(|&y| unsqueeze(ctx, y, &[1], F))
            .collect();
        results[0] = Some(concat(ctx, ys, 1));
    }
    if node.output(1).is_some() {
        results[1] = Some(concat(ctx, yh, 0));
    }
    if kind == Kind::Lstm && node.output(2).is_some() {
        results[2] = Some(concat(ctx, yc, 0));
    }
    for (i, o) in results.iter().enumerate() {
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
