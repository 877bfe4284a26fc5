//! The per-direction weights a recurrent layer reads: `W[d]^T`, `R[d]^T` (GRU: its z|r and h
//! columns), the biases that add outside the recurrence (GRU: `Rb_h` apart, it adds inside
//! the reset gate's product) and the LSTM peepholes.
//!
//! A weight that is a plan constant (an initializer or a folded value) is transposed, split and
//! summed here, in pure Rust over its bytes, into new float32 constants: a run does no work on
//! it. A weight known only at run time gets the same values from steps. Both paths widen to
//! float32 first and add in float32, so they give the same bits.

use onnx_ir::{Node, TensorData};

use super::{F, FLOATS, Kind, Spec, concat, load, per_direction, split, transpose2};
use crate::plan::{LowerCtx, PlanError};
use crate::step::{BinaryOp, Slot};

/// The weight values of every direction, as slots (one entry per direction).
pub(super) struct Weights {
    /// `W[d]^T`, `[input, gates * hidden]`.
    pub wt: Vec<Slot>,
    /// `R[d]^T`, `[hidden, gates * hidden]` (GRU: the z|r columns only).
    pub rt: Vec<Slot>,
    /// GRU: the h columns of `R[d]^T`, `[hidden, hidden]`.
    pub rt_h: Option<Vec<Slot>>,
    /// The bias added to `X W^T` once for all time steps, `[gates * hidden]`: `Wb + Rb`
    /// (GRU: `Wb_zr + Rb_zr` then `Wb_h`).
    pub bias: Option<Vec<Slot>>,
    /// GRU with a bias: `Rb_h`, `[hidden]`.
    pub rb_h: Option<Vec<Slot>>,
    /// LSTM: the peepholes i, o, f, each `[hidden]`.
    pub peep: Option<Vec<[Slot; 3]>>,
}

/// Input `i` of `node` as float32 host values with its dims, when it is a plan constant of a
/// claimed float dtype whose dims are `dims`.
fn host_f32(ctx: &LowerCtx, node: &Node, i: usize, dims: &[i64]) -> Option<Vec<f32>> {
    let t = ctx.const_input(node, i)?;
    if !FLOATS.contains(&t.dtype) || t.dims != dims {
        return None;
    }
    // float16 and bfloat16 widen to float32 exactly, as the run-time cast does.
    Some(t.to_f64_vec()?.into_iter().map(|v| v as f32).collect())
}

/// The `[cols, rows]` transpose of the row-major `[rows, cols]` matrix `m`.
fn transposed(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = m[r * cols + c];
        }
    }
    out
}

/// Columns `from..to` of the row-major `[rows, cols]` matrix `m`.
fn columns(m: &[f32], rows: usize, cols: usize, from: usize, to: usize) -> Vec<f32> {
    (0..rows)
        .flat_map(|r| m[r * cols + from..r * cols + to].iter().copied())
        .collect()
}

/// A float32 constant derived from input `i` of `node`, named `<input><what>` in the plan.
fn derived(
    ctx: &mut LowerCtx,
    node: &Node,
    i: usize,
    what: &str,
    dims: Vec<i64>,
    v: &[f32],
) -> Slot {
    let source = format!("{}{what}", node.input(i).unwrap_or(""));
    ctx.constant_from(&source, TensorData::from_f32(dims, v))
}

/// The weights of `node` for `spec`, folded where they are constants.
pub(super) fn weights(ctx: &mut LowerCtx, node: &Node, spec: &Spec) -> Result<Weights, PlanError> {
    let dirs = spec.reverse.len();
    let hs = spec.hidden;
    let h = hs as usize;
    let gates = spec.kind.gates();
    let gh = (gates * hs) as usize;
    let gru = spec.kind == Kind::Gru;

    // W [dirs, G*H, input]: the input size comes from W itself.
    let w_dims = ctx
        .input_fixed_shape(node, 1)
        .filter(|d| d.len() == 3 && d[0] == dirs as i64 && d[1] == gates * hs);
    let wt = match w_dims.and_then(|d| Some((host_f32(ctx, node, 1, &d)?, d[2] as usize))) {
        Some((w, input)) => (0..dirs)
            .map(|d| {
                let m = transposed(&w[d * gh * input..(d + 1) * gh * input], gh, input);
                derived(
                    ctx,
                    node,
                    1,
                    &format!("[{d}]^T"),
                    vec![input as i64, gh as i64],
                    &m,
                )
            })
            .collect(),
        None => {
            let w = load(ctx, node, 1)?.expect("required");
            per_direction(ctx, w, dirs)
                .into_iter()
                .map(|w| transpose2(ctx, w))
                .collect()
        }
    };

    // R [dirs, G*H, H].
    let (rt, rt_h) = match host_f32(ctx, node, 2, &[dirs as i64, gates * hs, hs]) {
        Some(r) => {
            let mut rt = Vec::with_capacity(dirs);
            let mut rt_h = Vec::with_capacity(dirs);
            for d in 0..dirs {
                let m = transposed(&r[d * gh * h..(d + 1) * gh * h], gh, h);
                if gru {
                    let zr = columns(&m, h, gh, 0, 2 * h);
                    let hh = columns(&m, h, gh, 2 * h, gh);
                    rt.push(derived(
                        ctx,
                        node,
                        2,
                        &format!("[{d}]^T.zr"),
                        vec![hs, 2 * hs],
                        &zr,
                    ));
                    rt_h.push(derived(
                        ctx,
                        node,
                        2,
                        &format!("[{d}]^T.h"),
                        vec![hs, hs],
                        &hh,
                    ));
                } else {
                    rt.push(derived(
                        ctx,
                        node,
                        2,
                        &format!("[{d}]^T"),
                        vec![hs, gh as i64],
                        &m,
                    ));
                }
            }
            (rt, gru.then_some(rt_h))
        }
        None => {
            let r = load(ctx, node, 2)?.expect("required");
            let mut rt = Vec::with_capacity(dirs);
            let mut rt_h = Vec::with_capacity(dirs);
            for r in per_direction(ctx, r, dirs) {
                let t = transpose2(ctx, r);
                if gru {
                    let parts = split(ctx, t, 1, Some(vec![2 * hs, hs]), 2);
                    rt.push(parts[0]);
                    rt_h.push(parts[1]);
                } else {
                    rt.push(t);
                }
            }
            (rt, gru.then_some(rt_h))
        }
    };

    // B [dirs, 2*G*H]: Wb | Rb.
    let (bias, rb_h) = if node.input(3).is_none() {
        (None, None)
    } else {
        match host_f32(ctx, node, 3, &[dirs as i64, 2 * gh as i64]) {
            Some(b) => {
                let mut bias = Vec::with_capacity(dirs);
                let mut rb_h = Vec::with_capacity(dirs);
                for d in 0..dirs {
                    let (wb, rb) = b[d * 2 * gh..(d + 1) * 2 * gh].split_at(gh);
                    // GRU: Rb_h adds inside the reset gate's product; the others up front.
                    let summed = if gru { 2 * h } else { gh };
                    let mut v: Vec<f32> = (0..summed).map(|j| wb[j] + rb[j]).collect();
                    v.extend_from_slice(&wb[summed..]);
                    bias.push(derived(
                        ctx,
                        node,
                        3,
                        &format!("[{d}].bias"),
                        vec![gh as i64],
                        &v,
                    ));
                    if gru {
                        let s =
                            derived(ctx, node, 3, &format!("[{d}].Rb_h"), vec![hs], &rb[2 * h..]);
                        rb_h.push(s);
                    }
                }
                (Some(bias), gru.then_some(rb_h))
            }
            None => {
                let b = load(ctx, node, 3)?.expect("present");
                let mut bias = Vec::with_capacity(dirs);
                let mut rb_h = Vec::with_capacity(dirs);
                for b in per_direction(ctx, b, dirs) {
                    let wr = split(ctx, b, 0, None, 2);
                    if gru {
                        let zr_h = Some(vec![2 * hs, hs]);
                        let wb = split(ctx, wr[0], 0, zr_h.clone(), 2);
                        let rb = split(ctx, wr[1], 0, zr_h, 2);
                        rb_h.push(rb[1]);
                        let zr = ctx.binary(BinaryOp::Add, wb[0], rb[0], F);
                        bias.push(concat(ctx, vec![zr, wb[1]], 0));
                    } else {
                        bias.push(ctx.binary(BinaryOp::Add, wr[0], wr[1], F));
                    }
                }
                (Some(bias), gru.then_some(rb_h))
            }
        }
    };

    // P [dirs, 3*H]: i | o | f.
    let peep = if spec.kind != Kind::Lstm || node.input(7).is_none() {
        None
    } else {
        Some(match host_f32(ctx, node, 7, &[dirs as i64, 3 * hs]) {
            Some(p) => (0..dirs)
                .map(|d| {
                    let mut part = |k: usize, name: &str| {
                        let v = &p[(3 * d + k) * h..(3 * d + k + 1) * h];
                        derived(ctx, node, 7, &format!("[{d}].{name}"), vec![hs], v)
                    };
                    [part(0, "i"), part(1, "o"), part(2, "f")]
                })
                .collect(),
            None => {
                let p = load(ctx, node, 7)?.expect("present");
                per_direction(ctx, p, dirs)
                    .into_iter()
                    .map(|p| {
                        let v = split(ctx, p, 0, None, 3);
                        [v[0], v[1], v[2]]
                    })
                    .collect()
            }
        })
    };

    Ok(Weights {
        wt,
        rt,
        rt_h,
        bias,
        rb_h,
        peep,
    })
}
