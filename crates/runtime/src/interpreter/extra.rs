//! The multi-call steps of the interpreter: linear / cubic resize.

use mlx::{Array, Dtype, Stream, ops};
use plan::step::{InterpArgs, InterpAxis};

use super::err;
use crate::RuntimeError;

/// A float32 weight (or divisor) vector shaped to broadcast along `axis` of a rank-`rank` array.
fn along_axis(values: &[f32], axis: i32, rank: usize) -> Result<Array, RuntimeError> {
    let mut shape = vec![1i32; rank];
    shape[axis as usize] = values.len() as i32;
    Array::from_slice(values, &shape).map_err(err)
}

fn take(x: &Array, idx: &[i32], axis: i32, s: &Stream) -> Result<Array, RuntimeError> {
    let i = Array::from_slice(idx, &[idx.len() as i32]).map_err(err)?;
    ops::take_axis(x, &i, axis, s).map_err(err)
}

fn accumulate(acc: Option<Array>, t: Array, s: &Stream) -> Result<Array, RuntimeError> {
    match acc {
        None => Ok(t),
        Some(a) => ops::add(&a, &t, s).map_err(err),
    }
}

/// Linear / cubic resize of a float32 array (see `plan::Step::ResizeInterp`).
pub(super) fn resize_interp(x: &Array, a: &InterpArgs, s: &Stream) -> Result<Array, RuntimeError> {
    if a.axes.is_empty() {
        return ops::astype(x, Dtype::Float32, s).map_err(err);
    }
    let rank = x.ndim();
    let y = if a.separable {
        // One weighted pass per axis, innermost first.
        let mut cur = x.clone();
        for ax in a.axes.iter().rev() {
            let div = ax
                .divisor
                .as_ref()
                .map(|d| along_axis(d, ax.axis, rank))
                .transpose()?;
            let mut acc = None;
            for (idx, w) in &ax.taps {
                let g = take(&cur, idx, ax.axis, s)?;
                let wa = along_axis(w, ax.axis, rank)?;
                let mut t = ops::multiply(&wa, &g, s).map_err(err)?;
                if let Some(d) = &div {
                    t = ops::divide(&t, d, s).map_err(err)?;
                }
                acc = Some(accumulate(acc, t, s)?);
            }
            cur = acc.ok_or_else(|| RuntimeError("resize axis without taps".into()))?;
        }
        cur
    } else {
        linear_corners(x, &a.axes, rank, s)?
    };
    match a.extrapolation {
        None => Ok(y),
        Some(value) => {
            let mut mask: Option<Array> = None;
            for ax in &a.axes {
                let Some(inside) = &ax.inside else { continue };
                let mut shape = vec![1i32; rank];
                shape[ax.axis as usize] = inside.len() as i32;
                let m = Array::from_slice(inside, &shape).map_err(err)?;
                mask = Some(match mask {
                    None => m,
                    Some(prev) => ops::logical_and(&prev, &m, s).map_err(err)?,
                });
            }
            match mask {
                None => Ok(y),
                Some(m) => {
                    let v = Array::scalar_f32(value);
                    ops::where_(&m, &y, &v, s).map_err(err)
                }
            }
        }
    }
}

/// `sum over corners of (w_last * ... * w_first) * corner`, corners ordered with the last axis
/// varying fastest (ORT's bilinear / trilinear order of operations).
fn linear_corners(
    x: &Array,
    axes: &[InterpAxis],
    rank: usize,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    // Each corner: the gathered values and the tap chosen on each axis so far.
    let mut corners: Vec<(Array, Vec<usize>)> = vec![(x.clone(), Vec::new())];
    for ax in axes {
        let mut next = Vec::with_capacity(corners.len() * ax.taps.len());
        for (arr, picks) in &corners {
            for (t, (idx, _)) in ax.taps.iter().enumerate() {
                let mut p = picks.clone();
                p.push(t);
                next.push((take(arr, idx, ax.axis, s)?, p));
            }
        }
        corners = next;
    }
    // Per-axis weight arrays, built once.
    let weights: Vec<Vec<Array>> = axes
        .iter()
        .map(|ax| {
            ax.taps
                .iter()
                .map(|(_, w)| along_axis(w, ax.axis, rank))
                .collect::<Result<Vec<_>, _>>()
        })
        .collect::<Result<_, _>>()?;
    let mut acc = None;
    for (value, picks) in &corners {
        let last = axes.len() - 1;
        let mut w = weights[last][picks[last]].clone();
        for j in (0..last).rev() {
            w = ops::multiply(&w, &weights[j][picks[j]], s).map_err(err)?;
        }
        let t = ops::multiply(&w, value, s).map_err(err)?;
        acc = Some(accumulate(acc, t, s)?);
    }
    acc.ok_or_else(|| RuntimeError("resize without corners".into()))
}
