//! One time step of a recurrent layer as a sub-plan, the body of the layer's inline
//! [`Step::Repeat`](crate::step::Step::Repeat): every direction's gates, clip, activations
//! (ORT's formulas) and `sequence_lens` masking, in float32.

use onnx_ir::{DataType, Node};

use super::{Act, DirArgs, F, Kind, Spec, select, split};
use crate::plan::{LowerCtx, PlanError};
use crate::step::{BinaryOp, Slot, Step, SubPlan, UnaryOp};

/// The body of the time loop. Inputs: per direction `d` the carried `h_d` (and LSTM `c_d`),
/// `[B, H]`; then per direction the scanned projection `xw_d` `[B, G*H]` (and with `masked`
/// the mask `m_d` `[B, 1]`); then per direction the values of `args` (the layout of every
/// direction's [`DirArgs`]). Outputs: the next `h_d` (and `c_d`) per direction, then with
/// `want_y` each direction's hidden state for Y (zeros where masked).
pub(super) fn body(
    ctx: &LowerCtx,
    node: &Node,
    spec: &Spec,
    args: &DirArgs,
    masked: bool,
    want_y: bool,
) -> Result<SubPlan, PlanError> {
    let mut b = ctx.for_body(node);
    let dirs = spec.reverse.len();
    let lstm = spec.kind == Kind::Lstm;
    let mut inputs = Vec::new();
    let mut input = |b: &mut LowerCtx, name: String, dtype: DataType| {
        let s = b.body_input(&name, dtype);
        inputs.push(s);
        s
    };
    let mut states = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let h = input(&mut b, format!("h{d}"), F);
        let c = lstm.then(|| input(&mut b, format!("c{d}"), F));
        states.push((h, c));
    }
    let mut steps = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let xw = input(&mut b, format!("xw{d}"), F);
        let m = masked.then(|| input(&mut b, format!("mask{d}"), DataType::Bool));
        steps.push((xw, m));
    }
    let mut dir_args = Vec::with_capacity(dirs);
    for d in 0..dirs {
        let rt = input(&mut b, format!("rt{d}"), F);
        let rt_h = args.rt_h.map(|_| input(&mut b, format!("rt_h{d}"), F));
        let rb_h = args.rb_h.map(|_| input(&mut b, format!("rb_h{d}"), F));
        let peep = args.peep.map(|_| {
            [
                input(&mut b, format!("p_i{d}"), F),
                input(&mut b, format!("p_o{d}"), F),
                input(&mut b, format!("p_f{d}"), F),
            ]
        });
        dir_args.push(DirArgs {
            rt,
            rt_h,
            rb_h,
            peep,
        });
    }
    let formal = inputs.len() - dir_args.iter().map(|a| a.slots().len()).sum::<usize>();
    let mut next = Vec::new();
    let mut ys = Vec::new();
    for d in 0..dirs {
        let (h, c) = states[d];
        let (xw, m) = steps[d];
        let cell = Cell {
            spec,
            acts: spec.dir_acts(d),
            args: &dir_args[d],
        };
        let (h_new, c_new) = cell.step(&mut b, xw, h, c)?;
        match m {
            Some(m) => {
                next.push(select(&mut b, m, h_new, h));
                if let (Some(c_new), Some(c)) = (c_new, c) {
                    next.push(select(&mut b, m, c_new, c));
                }
                if want_y {
                    let zero = b.scalar(F, 0.0)?;
                    ys.push(select(&mut b, m, h_new, zero));
                }
            }
            None => {
                next.push(h_new);
                next.extend(c_new);
                if want_y {
                    ys.push(h_new);
                }
            }
        }
    }
    next.extend(ys);
    Ok(b.into_sub_plan(node, &inputs, next, formal))
}

/// One direction's time step.
struct Cell<'a> {
    spec: &'a Spec,
    acts: &'a [Act],
    args: &'a DirArgs,
}

impl Cell<'_> {
    /// The new hidden (and LSTM cell) state from the projected input `xw` `[B, G*H]` and the
    /// previous state.
    fn step(
        &self,
        b: &mut LowerCtx,
        xw: Slot,
        h: Slot,
        c: Option<Slot>,
    ) -> Result<(Slot, Option<Slot>), PlanError> {
        let hs = self.spec.hidden;
        let acts = self.acts;
        let rt = self.args.rt;
        match self.spec.kind {
            Kind::Rnn => {
                let hr = matmul(b, h, rt);
                let pre = add(b, xw, hr);
                let pre = self.clip(b, pre)?;
                Ok((activate(b, acts[0], pre)?, None))
            }
            Kind::Gru => {
                let x = split(b, xw, 1, Some(vec![2 * hs, hs]), 2);
                let hr = matmul(b, h, rt);
                let zr = add(b, x[0], hr);
                let zr = self.clip(b, zr)?;
                let zr = activate(b, acts[0], zr)?;
                let zr = split(b, zr, 1, None, 2);
                let (z, rg) = (zr[0], zr[1]);
                let rt_h = self.args.rt_h.expect("GRU");
                let with_bias = |b: &mut LowerCtx, v: Slot| match self.args.rb_h {
                    Some(rb) => add(b, v, rb),
                    None => v,
                };
                // The recurrent term of the candidate.
                let rec = if self.spec.linear_before_reset {
                    let hr = matmul(b, h, rt_h);
                    let hr = with_bias(b, hr);
                    mul(b, rg, hr)
                } else {
                    let rh = mul(b, rg, h);
                    let hr = matmul(b, rh, rt_h);
                    with_bias(b, hr)
                };
                let pre = add(b, x[1], rec);
                let pre = self.clip(b, pre)?;
                let cand = activate(b, acts[1], pre)?;
                // (1 - z) * cand + z * h
                let one = b.scalar(F, 1.0)?;
                let keep = sub(b, one, z);
                let a = mul(b, keep, cand);
                let zh = mul(b, z, h);
                Ok((add(b, a, zh), None))
            }
            Kind::Lstm => {
                let c = c.expect("LSTM");
                let hr = matmul(b, h, rt);
                let gates = add(b, xw, hr);
                // W / R / B gate order: i, o, f, c; P order: i, o, f.
                let g = split(b, gates, 1, None, 4);
                let (mut gi, mut go, mut gf, gc) = (g[0], g[1], g[2], g[3]);
                if let Some(p) = self.args.peep {
                    let pc = mul(b, p[0], c);
                    gi = add(b, gi, pc);
                    if !self.spec.input_forget {
                        let pc = mul(b, p[2], c);
                        gf = add(b, gf, pc);
                    }
                }
                let gi = self.clip(b, gi)?;
                let i = activate(b, acts[0], gi)?;
                let f = if self.spec.input_forget {
                    let one = b.scalar(F, 1.0)?;
                    sub(b, one, i)
                } else {
                    let gf = self.clip(b, gf)?;
                    activate(b, acts[0], gf)?
                };
                let gc = self.clip(b, gc)?;
                let cand = activate(b, acts[1], gc)?;
                let ic = mul(b, i, cand);
                let fc = mul(b, f, c);
                let c_new = add(b, fc, ic);
                if let Some(p) = self.args.peep {
                    let pc = mul(b, p[1], c_new);
                    go = add(b, go, pc);
                }
                let go = self.clip(b, go)?;
                let o = activate(b, acts[0], go)?;
                let hc = activate(b, acts[2], c_new)?;
                Ok((mul(b, o, hc), Some(c_new)))
            }
        }
    }

    /// `min(max(x, -c), c)` when a clip is set.
    fn clip(&self, b: &mut LowerCtx, x: Slot) -> Result<Slot, PlanError> {
        let Some(c) = self.spec.clip else {
            return Ok(x);
        };
        let lo = b.scalar(F, f64::from(-c))?;
        let hi = b.scalar(F, f64::from(c))?;
        let y = b.binary(BinaryOp::Maximum, x, lo, F);
        Ok(b.binary(BinaryOp::Minimum, y, hi, F))
    }
}

fn add(b: &mut LowerCtx, x: Slot, y: Slot) -> Slot {
    b.binary(BinaryOp::Add, x, y, F)
}

fn sub(b: &mut LowerCtx, x: Slot, y: Slot) -> Slot {
    b.binary(BinaryOp::Subtract, x, y, F)
}

fn mul(b: &mut LowerCtx, x: Slot, y: Slot) -> Slot {
    b.binary(BinaryOp::Multiply, x, y, F)
}

fn matmul(b: &mut LowerCtx, x: Slot, y: Slot) -> Slot {
    let out = b.temp(F);
    b.push(Step::MatMul { a: x, b: y, out });
    out
}

/// Applies an activation (ORT's formulas).
fn activate(b: &mut LowerCtx, a: Act, x: Slot) -> Result<Slot, PlanError> {
    use Act::*;
    let k = |b: &mut LowerCtx, v: f32| b.scalar(F, f64::from(v));
    Ok(match a {
        Sigmoid => b.unary(UnaryOp::Sigmoid, x, F),
        Tanh => b.unary(UnaryOp::Tanh, x, F),
        Relu => {
            let zero = k(b, 0.0)?;
            b.binary(BinaryOp::Maximum, x, zero, F)
        }
        Affine(alpha, beta) => {
            let (alpha, beta) = (k(b, alpha)?, k(b, beta)?);
            let y = mul(b, x, alpha);
            add(b, y, beta)
        }
        LeakyRelu(alpha) => {
            let (alpha, zero) = (k(b, alpha)?, k(b, 0.0)?);
            let pos = b.binary(BinaryOp::GreaterEqual, x, zero, F);
            let neg = mul(b, x, alpha);
            select(b, pos, x, neg)
        }
        ThresholdedRelu(alpha) => {
            let (alpha, zero) = (k(b, alpha)?, k(b, 0.0)?);
            let keep = b.binary(BinaryOp::Greater, x, alpha, F);
            select(b, keep, x, zero)
        }
        ScaledTanh(alpha, beta) => {
            let (alpha, beta) = (k(b, alpha)?, k(b, beta)?);
            let y = mul(b, x, beta);
            let y = b.unary(UnaryOp::Tanh, y, F);
            mul(b, y, alpha)
        }
        HardSigmoid(alpha, beta) => {
            let (alpha, beta) = (k(b, alpha)?, k(b, beta)?);
            let y = mul(b, x, alpha);
            let y = add(b, y, beta);
            let (zero, one) = (k(b, 0.0)?, k(b, 1.0)?);
            let y = b.binary(BinaryOp::Maximum, y, zero, F);
            b.binary(BinaryOp::Minimum, y, one, F)
        }
        Elu(alpha) => {
            let (alpha, zero, one) = (k(b, alpha)?, k(b, 0.0)?, k(b, 1.0)?);
            let pos = b.binary(BinaryOp::GreaterEqual, x, zero, F);
            let e = b.unary(UnaryOp::Exp, x, F);
            let em1 = sub(b, e, one);
            let neg = mul(b, em1, alpha);
            select(b, pos, x, neg)
        }
        Softsign => {
            let one = k(b, 1.0)?;
            let a = b.unary(UnaryOp::Abs, x, F);
            let d = add(b, a, one);
            b.binary(BinaryOp::Divide, x, d, F)
        }
        Softplus => {
            let one = k(b, 1.0)?;
            let e = b.unary(UnaryOp::Exp, x, F);
            let e1 = add(b, e, one);
            b.unary(UnaryOp::Log, e1, F)
        }
    })
}
