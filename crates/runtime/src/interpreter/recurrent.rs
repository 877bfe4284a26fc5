//! ONNX RNN / GRU / LSTM (see `plan::Step::Recurrent`): the time loop over the run-time
//! sequence length, each step a handful of lazy MLX ops in float32.

use mlx::{Array, Dtype, Stream, ops};
use plan::step::{Activation, RecurrentKind as Kind, RecurrentSpec};

use super::err;
use crate::RuntimeError;

type R<T> = Result<T, RuntimeError>;

/// The input arrays of a recurrent layer (float32; `lens` int32).
pub(super) struct Inputs<'a> {
    pub x: &'a Array,
    pub w: &'a Array,
    pub r: &'a Array,
    pub b: Option<&'a Array>,
    pub lens: Option<&'a Array>,
    pub h0: Option<&'a Array>,
    pub c0: Option<&'a Array>,
    pub p: Option<&'a Array>,
}

/// `a[.., lo..hi]` along the last axis.
fn cols(a: &Array, lo: i64, hi: i64, s: &Stream) -> R<Array> {
    let shape = a.shape();
    let n = shape.len();
    let mut start = vec![0i32; n];
    let mut stop = shape.clone();
    start[n - 1] = lo as i32;
    stop[n - 1] = hi as i32;
    ops::slice(a, &start, &stop, &vec![1; n], s).map_err(err)
}

/// `a[i]` along axis 0 (that axis removed).
fn pick(a: &Array, i: i64, s: &Stream) -> R<Array> {
    let shape = a.shape();
    let n = shape.len();
    let mut start = vec![0i32; n];
    let mut stop = shape.clone();
    start[0] = i as i32;
    stop[0] = i as i32 + 1;
    let y = ops::slice(a, &start, &stop, &vec![1; n], s).map_err(err)?;
    ops::squeeze_axes(&y, &[0], s).map_err(err)
}

fn add(a: &Array, b: &Array, s: &Stream) -> R<Array> {
    ops::add(a, b, s).map_err(err)
}

fn mul(a: &Array, b: &Array, s: &Stream) -> R<Array> {
    ops::multiply(a, b, s).map_err(err)
}

fn sub(a: &Array, b: &Array, s: &Stream) -> R<Array> {
    ops::subtract(a, b, s).map_err(err)
}

fn matmul(a: &Array, b: &Array, s: &Stream) -> R<Array> {
    ops::matmul(a, b, s).map_err(err)
}

fn select(c: &Array, x: &Array, y: &Array, s: &Stream) -> R<Array> {
    ops::where_(c, x, y, s).map_err(err)
}

fn f(v: f32) -> Array {
    Array::scalar_f32(v)
}

/// `min(max(x, -c), c)` when a clip is set.
fn clip(x: Array, c: Option<f32>, s: &Stream) -> R<Array> {
    let Some(c) = c else { return Ok(x) };
    let y = ops::maximum(&x, &f(-c), s).map_err(err)?;
    ops::minimum(&y, &f(c), s).map_err(err)
}

/// Applies an activation (ORT's formulas).
fn activate(a: Activation, x: &Array, s: &Stream) -> R<Array> {
    use Activation::*;
    let e = err;
    Ok(match a {
        Sigmoid => ops::sigmoid(x, s).map_err(e)?,
        Tanh => ops::tanh(x, s).map_err(e)?,
        Relu => ops::maximum(x, &f(0.0), s).map_err(e)?,
        Affine(alpha, beta) => add(&mul(x, &f(alpha), s)?, &f(beta), s)?,
        LeakyRelu(alpha) => {
            let pos = ops::greater_equal(x, &f(0.0), s).map_err(e)?;
            select(&pos, x, &mul(x, &f(alpha), s)?, s)?
        }
        ThresholdedRelu(alpha) => {
            let keep = ops::greater(x, &f(alpha), s).map_err(e)?;
            select(&keep, x, &f(0.0), s)?
        }
        ScaledTanh(alpha, beta) => {
            let y = ops::tanh(&mul(x, &f(beta), s)?, s).map_err(e)?;
            mul(&y, &f(alpha), s)?
        }
        HardSigmoid(alpha, beta) => {
            let y = add(&mul(x, &f(alpha), s)?, &f(beta), s)?;
            let y = ops::maximum(&y, &f(0.0), s).map_err(e)?;
            ops::minimum(&y, &f(1.0), s).map_err(e)?
        }
        Elu(alpha) => {
            let pos = ops::greater_equal(x, &f(0.0), s).map_err(e)?;
            let ex = sub(&ops::exp(x, s).map_err(e)?, &f(1.0), s)?;
            select(&pos, x, &mul(&ex, &f(alpha), s)?, s)?
        }
        Softsign => {
            let d = add(&ops::abs(x, s).map_err(e)?, &f(1.0), s)?;
            ops::divide(x, &d, s).map_err(e)?
        }
        Softplus => {
            let ex = add(&ops::exp(x, s).map_err(e)?, &f(1.0), s)?;
            ops::log(&ex, s).map_err(e)?
        }
    })
}

/// Per-direction constants of one step.
struct Dir {
    /// `R[d]^T` `[H, G*H]` (GRU: the z|r columns).
    rt: Array,
    /// GRU: the h columns of `R[d]^T`.
    rt_h: Option<Array>,
    /// GRU: `Rb_h`, added inside the reset gate's product.
    rb_h: Option<Array>,
    /// LSTM peepholes i, o, f.
    peep: Option<[Array; 3]>,
}

/// One time step of one direction: the new hidden (and LSTM cell) state from the projected
/// input `xt` `[B, G*H]` and the previous state (`None`: zero, before any step).
fn cell(
    spec: &RecurrentSpec,
    acts: &[Activation],
    dir: &Dir,
    xt: &Array,
    h: Option<&Array>,
    c: Option<&Array>,
    s: &Stream,
) -> R<(Array, Option<Array>)> {
    let hs = spec.hidden;
    let cl = spec.clip;
    match spec.kind {
        Kind::Rnn => {
            let pre = match h {
                Some(h) => add(xt, &matmul(h, &dir.rt, s)?, s)?,
                None => xt.clone(),
            };
            Ok((activate(acts[0], &clip(pre, cl, s)?, s)?, None))
        }
        Kind::Gru => {
            let xzr = cols(xt, 0, 2 * hs, s)?;
            let xh = cols(xt, 2 * hs, 3 * hs, s)?;
            let zr = match h {
                Some(h) => add(&xzr, &matmul(h, &dir.rt, s)?, s)?,
                None => xzr,
            };
            let zr = activate(acts[0], &clip(zr, cl, s)?, s)?;
            let z = cols(&zr, 0, hs, s)?;
            let rg = cols(&zr, hs, 2 * hs, s)?;
            let rth = dir.rt_h.as_ref().expect("gru");
            let rb = dir.rb_h.as_ref();
            // The recurrent term of the candidate.
            let rec = match (h, spec.linear_before_reset) {
                (Some(h), true) => {
                    let hr = matmul(h, rth, s)?;
                    let hr = match rb {
                        Some(rb) => add(&hr, rb, s)?,
                        None => hr,
                    };
                    Some(mul(&rg, &hr, s)?)
                }
                (Some(h), false) => {
                    let hr = matmul(&mul(&rg, h, s)?, rth, s)?;
                    Some(match rb {
                        Some(rb) => add(&hr, rb, s)?,
                        None => hr,
                    })
                }
                (None, true) => rb.map(|rb| mul(&rg, rb, s)).transpose()?,
                (None, false) => rb.cloned(),
            };
            let pre = match rec {
                Some(rec) => add(&xh, &rec, s)?,
                None => xh,
            };
            let cand = activate(acts[1], &clip(pre, cl, s)?, s)?;
            // (1 - z) * cand + z * h
            let a = mul(&sub(&f(1.0), &z, s)?, &cand, s)?;
            let h_new = match h {
                Some(h) => add(&a, &mul(&z, h, s)?, s)?,
                None => a,
            };
            Ok((h_new, None))
        }
        Kind::Lstm => {
            let gates = match h {
                Some(h) => add(xt, &matmul(h, &dir.rt, s)?, s)?,
                None => xt.clone(),
            };
            // W / R / B gate order: i, o, f, c; P order: i, o, f.
            let mut gi = cols(&gates, 0, hs, s)?;
            let mut go = cols(&gates, hs, 2 * hs, s)?;
            let mut gf = cols(&gates, 2 * hs, 3 * hs, s)?;
            let gc = cols(&gates, 3 * hs, 4 * hs, s)?;
            if let (Some(pp), Some(c)) = (&dir.peep, c) {
                gi = add(&gi, &mul(&pp[0], c, s)?, s)?;
                if !spec.input_forget {
                    gf = add(&gf, &mul(&pp[2], c, s)?, s)?;
                }
            }
            let i = activate(acts[0], &clip(gi, cl, s)?, s)?;
            let fg = if spec.input_forget {
                sub(&f(1.0), &i, s)?
            } else {
                activate(acts[0], &clip(gf, cl, s)?, s)?
            };
            let cand = activate(acts[1], &clip(gc, cl, s)?, s)?;
            let ic = mul(&i, &cand, s)?;
            let c_new = match c {
                Some(c) => add(&mul(&fg, c, s)?, &ic, s)?,
                None => ic,
            };
            if let Some(pp) = &dir.peep {
                go = add(&go, &mul(&pp[1], &c_new, s)?, s)?;
            }
            let o = activate(acts[0], &clip(go, cl, s)?, s)?;
            let hc = activate(acts[2], &c_new, s)?;
            Ok((mul(&o, &hc, s)?, Some(c_new)))
        }
    }
}

/// Runs the layer; returns Y `[T, D, B, H]` (when `want_y`), Y_h and Y_c `[D, B, H]`.
pub(super) fn run(
    spec: &RecurrentSpec,
    inp: &Inputs,
    want_y: bool,
    s: &Stream,
) -> R<(Option<Array>, Array, Array)> {
    let kind = spec.kind;
    let hs = spec.hidden;
    let g = kind.gates();
    let xshape = inp.x.shape();
    if xshape.len() != 3 {
        return Err(RuntimeError(format!(
            "X has shape {xshape:?}, expected rank 3"
        )));
    }
    let (t_len, batch) = (xshape[0] as i64, xshape[1]);
    let dirs = spec.reverse.len() as i32;
    let state_shape = [dirs, batch, hs as i32];
    if t_len == 0 {
        // No step: zero states (ORT's LSTM; its GRU / RNN kernels abort on this input).
        let z = ops::zeros(&state_shape, Dtype::Float32, s).map_err(err)?;
        let y = want_y
            .then(|| ops::zeros(&[0, dirs, batch, hs as i32], Dtype::Float32, s))
            .transpose()
            .map_err(err)?;
        return Ok((y, z.clone(), z));
    }
    // The [T, B, 1] mask `t < lens[b]`.
    let mask = match inp.lens {
        Some(lens) => {
            let steps = ops::arange(0.0, t_len as f64, 1.0, Dtype::Int32, s).map_err(err)?;
            let steps = ops::reshape(&steps, &[t_len as i32, 1], s).map_err(err)?;
            let lens = ops::astype(lens, Dtype::Int32, s).map_err(err)?;
            let m = ops::less(&steps, &lens, s).map_err(err)?;
            Some(ops::expand_dims_axes(&m, &[2], s).map_err(err)?)
        }
        None => None,
    };
    let zero = f(0.0);
    let mut ys = Vec::new();
    let mut yhs = Vec::new();
    let mut ycs = Vec::new();
    for (d, &reverse) in spec.reverse.iter().enumerate() {
        let di = d as i64;
        let acts = spec.dir_acts(d);
        let wt = ops::transpose_axes(&pick(inp.w, di, s)?, &[1, 0], s).map_err(err)?;
        let rt = ops::transpose_axes(&pick(inp.r, di, s)?, &[1, 0], s).map_err(err)?;
        // X @ W^T for every step at once, plus the biases that add outside the recurrence.
        let mut xw = matmul(inp.x, &wt, s)?; // [T, B, G*H]
        let mut rb_h = None;
        if let Some(b) = inp.b {
            let bd = pick(b, di, s)?;
            let wb = cols(&bd, 0, g * hs, s)?;
            let rb = cols(&bd, g * hs, 2 * g * hs, s)?;
            let bias = if kind == Kind::Gru {
                // Rb_h adds inside the reset gate's product; the others add up front.
                rb_h = Some(cols(&rb, 2 * hs, 3 * hs, s)?);
                let zr = add(&cols(&wb, 0, 2 * hs, s)?, &cols(&rb, 0, 2 * hs, s)?, s)?;
                let wh = cols(&wb, 2 * hs, 3 * hs, s)?;
                ops::concatenate(&[&zr, &wh], 0, s).map_err(err)?
            } else {
                add(&wb, &rb, s)?
            };
            xw = add(&xw, &bias, s)?;
        }
        let dir = Dir {
            rt: if kind == Kind::Gru {
                cols(&rt, 0, 2 * hs, s)?
            } else {
                rt.clone()
            },
            rt_h: (kind == Kind::Gru)
                .then(|| cols(&rt, 2 * hs, 3 * hs, s))
                .transpose()?,
            rb_h,
            peep: match inp.p {
                Some(p) => {
                    let pd = pick(p, di, s)?;
                    Some([
                        cols(&pd, 0, hs, s)?,
                        cols(&pd, hs, 2 * hs, s)?,
                        cols(&pd, 2 * hs, 3 * hs, s)?,
                    ])
                }
                None => None,
            },
        };
        let mut h = inp.h0.map(|h| pick(h, di, s)).transpose()?;
        let mut c = inp.c0.map(|c| pick(c, di, s)).transpose()?;
        let mut y_dir: Vec<Option<Array>> = vec![None; if want_y { t_len as usize } else { 0 }];
        for step in 0..t_len {
            let t = if reverse { t_len - 1 - step } else { step };
            let xt = pick(&xw, t, s)?; // [B, G*H]
            let (h_new, c_new) = cell(spec, acts, &dir, &xt, h.as_ref(), c.as_ref(), s)?;
            match &mask {
                Some(m) => {
                    let mt = pick(m, t, s)?; // [B, 1]
                    if want_y {
                        y_dir[t as usize] = Some(select(&mt, &h_new, &zero, s)?);
                    }
                    h = Some(select(&mt, &h_new, h.as_ref().unwrap_or(&zero), s)?);
                    if let Some(c_new) = c_new {
                        c = Some(select(&mt, &c_new, c.as_ref().unwrap_or(&zero), s)?);
                    }
                }
                None => {
                    if want_y {
                        y_dir[t as usize] = Some(h_new.clone());
                    }
                    h = Some(h_new);
                    c = c_new;
                }
            }
        }
        if want_y {
            let parts: Vec<&Array> = y_dir.iter().map(|y| y.as_ref().expect("step")).collect();
            let y = ops::stack(&parts, 0, s).map_err(err)?; // [T, B, H]
            ys.push(ops::expand_dims_axes(&y, &[1], s).map_err(err)?);
        }
        let mut h = h.expect("at least one step");
        // ORT zeroes the final states of an empty sequence (where ours still hold the
        // initial states): `t = 0 < len` tells a non-empty one.
        if let Some(m) = &mask {
            let nonempty = pick(m, 0, s)?;
            if inp.h0.is_some() {
                h = select(&nonempty, &h, &zero, s)?;
            }
            if inp.c0.is_some() {
                c = c.map(|c| select(&nonempty, &c, &zero, s)).transpose()?;
            }
        }
        yhs.push(h);
        if let Some(c) = c {
            ycs.push(c);
        }
    }
    let y = if want_y {
        let parts: Vec<&Array> = ys.iter().collect();
        Some(ops::concatenate(&parts, 1, s).map_err(err)?)
    } else {
        None
    };
    let yh = ops::stack(&yhs.iter().collect::<Vec<_>>(), 0, s).map_err(err)?;
    let yc = if ycs.is_empty() {
        ops::zeros(&state_shape, Dtype::Float32, s).map_err(err)?
    } else {
        ops::stack(&ycs.iter().collect::<Vec<_>>(), 0, s).map_err(err)?
    };
    Ok((y, yh, yc))
}
