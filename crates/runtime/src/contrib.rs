//! The MLX calls of the steps that com.microsoft transformer ops lower to: the
//! GroupQueryAttention cache, mask and positions (laid out by [`plan::gqa_layout`]).

use mlx::{Array, Dtype, Stream, ops};
use plan::{GqaLayout, HostReader, ShapeSource, Slot, gqa_layout};

use crate::RuntimeError;

fn err(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError(e.to_string())
}

/// The layout of a GroupQueryAttention run: `new` is `[B, H, S, D]`, `past` `[B, H, M, D]`.
pub(crate) fn layout(
    host: &mut dyn HostReader,
    seqlens: Slot,
    total: &ShapeSource,
    new_shape: &[i32],
    past_shape: Option<&[i32]>,
) -> Result<GqaLayout, RuntimeError> {
    let seqlens = host.ints(seqlens).map_err(err)?;
    let total = total.get(host).map_err(err)?;
    let total = *total
        .first()
        .ok_or_else(|| err("GroupQueryAttention: total_sequence_length is empty"))?;
    if new_shape.len() != 4 || past_shape.is_some_and(|p| p.len() != 4) {
        return Err(err("GroupQueryAttention: keys and caches must be 4-D"));
    }
    gqa_layout(
        new_shape[0] as i64,
        new_shape[2] as i64,
        past_shape.map(|p| p[2] as i64),
        &seqlens,
        total,
    )
    .map_err(err)
}

fn slice_seq(a: &Array, b: Option<i32>, start: i32, stop: i32, s: &Stream) -> mlx::Result<Array> {
    let shape = a.shape();
    let (b0, b1) = match b {
        Some(b) => (b, b + 1),
        None => (0, shape[0]),
    };
    ops::slice(
        a,
        &[b0, 0, start, 0],
        &[b1, shape[1], stop, shape[3]],
        &[1, 1, 1, 1],
        s,
    )
}

/// One sequence (`b`) or all (`None`, uniform offset): `past[:, :, :off]`, `new`, zeros.
fn cache_rows(
    past: Option<&Array>,
    new: &Array,
    b: Option<i32>,
    off: i64,
    present_len: i64,
    s: &Stream,
) -> mlx::Result<Array> {
    let ns = new.shape();
    let mut parts = Vec::with_capacity(3);
    if off > 0 {
        let p = past.ok_or_else(|| mlx::Error::new("GroupQueryAttention: no past cache"))?;
        // The whole past of every sequence is the array itself (shape-polymorphic, for the
        // compiled decode closure).
        if b.is_none() && off == p.shape()[2] as i64 {
            parts.push(p.clone());
        } else {
            parts.push(slice_seq(p, b, 0, off as i32, s)?);
        }
    }
    parts.push(match b {
        Some(b) => slice_seq(new, Some(b), 0, ns[2], s)?,
        None => new.clone(),
    });
    let tail = present_len - off - ns[2] as i64;
    if tail > 0 {
        let rows = if b.is_some() { 1 } else { ns[0] };
        parts.push(ops::zeros(
            &[rows, ns[1], tail as i32, ns[3]],
            new.dtype(),
            s,
        )?);
    }
    if parts.len() == 1 {
        return Ok(parts.pop().expect("one part"));
    }
    let refs: Vec<&Array> = parts.iter().collect();
    ops::concatenate(&refs, 2, s)
}

/// The present cache (see `Step::KvCache`).
pub(crate) fn kv_cache(
    past: Option<&Array>,
    new: &Array,
    l: &GqaLayout,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    if let Some(off) = l.uniform_offset() {
        return cache_rows(past, new, None, off, l.present_len, s).map_err(err);
    }
    let rows = l
        .offsets
        .iter()
        .enumerate()
        .map(|(b, &off)| cache_rows(past, new, Some(b as i32), off, l.present_len, s))
        .collect::<mlx::Result<Vec<_>>>()
        .map_err(err)?;
    let refs: Vec<&Array> = rows.iter().collect();
    ops::concatenate(&refs, 0, s).map_err(err)
}

/// The mask (see `Step::GqaMask`).
pub(crate) fn gqa_mask(
    l: &GqaLayout,
    window: i64,
    bias: Option<&Array>,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    let keep: Vec<u8> = l.mask(window).into_iter().map(u8::from).collect();
    let shape = [l.batch as i32, 1, l.seq as i32, l.present_len as i32];
    let keep = Array::from_bytes(&keep, &shape, Dtype::Bool).map_err(err)?;
    let Some(bias) = bias else {
        return Ok(keep);
    };
    let bs = bias.shape();
    let t = *bs.last().ok_or_else(|| err("attention_bias is a scalar"))? as i64;
    let bias = if t < l.present_len {
        let zero = ops::astype(&Array::scalar_f32(0.0), bias.dtype(), s).map_err(err)?;
        let last = bs.len() as i32 - 1;
        ops::pad(
            bias,
            &[last],
            &[0],
            &[(l.present_len - t) as i32],
            &zero,
            "constant",
            s,
        )
        .map_err(err)?
    } else {
        bias.clone()
    };
    let ninf = ops::astype(&Array::scalar_f32(f32::NEG_INFINITY), bias.dtype(), s).map_err(err)?;
    ops::where_(&keep, &bias, &ninf, s).map_err(err)
}

/// Rotary positions `[B, S]` (see `Step::GqaPositions`).
pub(crate) fn gqa_positions(
    l: &GqaLayout,
    position_ids: Option<&[i64]>,
) -> Result<Array, RuntimeError> {
    let pos = l.positions(position_ids).map_err(err)?;
    Array::from_slice(&pos, &[l.batch as i32, l.seq as i32]).map_err(err)
}

/// Rotary positions `[B, S]` outside the first prompt (see `Step::GqaPositions`), from the
/// arrays rather than host values, so that a compiled closure follows them: `position_ids`
/// as given, else `seqlens_k[b] + 1 - S + s`.
pub(crate) fn gqa_positions_on_device(
    l: &GqaLayout,
    seqlens: &Array,
    position_ids: Option<&Array>,
    s: &Stream,
) -> Result<Array, RuntimeError> {
    let shape = [l.batch as i32, l.seq as i32];
    if let Some(ids) = position_ids {
        if ids.size() != l.batch * l.seq as usize {
            return Err(err(format!(
                "GroupQueryAttention: position_ids has {} values, expected {}",
                ids.size(),
                l.batch * l.seq as usize
            )));
        }
        let ids = ops::astype(ids, Dtype::Int64, s).map_err(err)?;
        return ops::reshape(&ids, &shape, s).map_err(err);
    }
    let k = ops::astype(seqlens, Dtype::Int64, s).map_err(err)?;
    let k = ops::reshape(&k, &[l.batch as i32, 1], s).map_err(err)?;
    if l.seq == 1 {
        // One new token: its position is `seqlens_k` itself. Without the `arange`, every layer
        // computes the same ops from the same input, which a compiled closure's common-
        // subexpression pass merges (the rotary gathers and their index guards included).
        return Ok(k);
    }
    let steps = ops::arange((1 - l.seq) as f64, 1.0, 1.0, Dtype::Int64, s).map_err(err)?;
    ops::add(&k, &steps, s).map_err(err)
}

/// Device-specific rewrites of a plan before its constants are made: on the GPU stream, matmul
/// weights are stored transposed for MLX's GEMV (`plan::gemv`); on the CPU stream,
/// quantized matmuls over constant weights become float matmuls over weights dequantized
/// once (MLX's CPU quantized matmul is scalar code; BLAS is far faster at the cost of float
/// weights in memory). `ORTMLX_CPU_QUANTIZED_MATMUL=1` keeps MLX's quantized matmul.
pub(crate) fn prepare_plan(mut plan: plan::Plan, on_gpu: bool) -> plan::Plan {
    if on_gpu {
        let n = plan::gemv::transpose_constant_weights(&mut plan);
        if n > 0 {
            log::debug!("{n} matmul weight(s) stored transposed for the GPU's GEMV");
        }
    }
    let keep = crate::config().cpu_quantized_matmul;
    if !on_gpu && !keep {
        let n = plan::quantized::dequantize_quantized_matmuls(&mut plan);
        if n > 0 {
            log::debug!("{n} quantized matmul(s) dequantized for the CPU stream");
        }
    }
    plan
}
