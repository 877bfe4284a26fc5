//! How a plan's `Attention` step calls MLX.
//!
//! MLX's fused attention runs where its kernels apply; otherwise MLX falls back to matmuls over
//! a broadcast head axis (queries `[B, Hkv, G, S, D]` against keys `[B, Hkv, 1, T, D]` for
//! grouped-query attention), and on CUDA cuBLAS then needs an array of matrix pointers per
//! product, built by one more kernel each time (19-38 us per layer of a llama-tiny decode step
//! on an H200). On the GPU, grouped-query attention that MLX's fused kernels don't take is
//! computed here with the group folded into the query rows (`[B, Hkv, G * S, D]`): the same
//! arithmetic as MLX's fallback, with products of uniform batch strides.

use mlx::{Array, DeviceType, Dtype, Stream, fast, ops};

/// `softmax(q @ k^T * scale + mask) @ v` for `q [B, Hq, S, D]`, `k [B, Hkv, T, D]`,
/// `v [B, Hkv, T, Dv]`, with MLX's semantics of each mask form and of `sinks`.
pub(crate) fn attention(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: fast::AttentionMask<'_>,
    sinks: Option<&Array>,
    s: &Stream,
) -> mlx::Result<Array> {
    if sinks.is_none()
        && matches!(s.device_type(), Ok(DeviceType::Gpu))
        && takes_grouped(q, k, v, &mask)
    {
        return grouped(q, k, v, scale, mask, s);
    }
    fast::scaled_dot_product_attention_sinks(q, k, v, scale, mask, sinks, s)
}

/// True for float32 grouped-query attention that MLX 0.32's CUDA backend would run through its
/// broadcasting fallback: its one-pass decode kernel needs a head size of 64, 96 or 128, fewer
/// than 4 queries and no mask array (its cuDNN path takes half types only).
fn takes_grouped(q: &Array, k: &Array, v: &Array, mask: &fast::AttentionMask<'_>) -> bool {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if qs.len() != 4 || ks.len() != 4 || vs.len() != 4 || q.dtype() != Dtype::Float32 {
        return false;
    }
    let (hq, hkv) = (qs[1], ks[1]);
    if hkv <= 0 || hq <= hkv || hq % hkv != 0 || vs[1] != hkv {
        return false;
    }
    let fused = qs[3] == vs[3]
        && matches!(qs[3], 64 | 96 | 128)
        && qs[2] < 4
        && !matches!(mask, fast::AttentionMask::Array(_));
    !fused
}

/// Grouped-query attention with each key head's query group folded into its query rows.
fn grouped(
    q: &Array,
    k: &Array,
    v: &Array,
    scale: f32,
    mask: fast::AttentionMask<'_>,
    s: &Stream,
) -> mlx::Result<Array> {
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (b, hq, sq, d) = (qs[0], qs[1], qs[2], qs[3]);
    let (hkv, t) = (ks[1], ks[2]);
    let g = hq / hkv;
    let q = ops::multiply(q, &Array::scalar_f32(scale), s)?;
    let q = ops::reshape(&q, &[b, hkv, g * sq, d], s)?;
    let kt = ops::transpose_axes(k, &[0, 1, 3, 2], s)?;
    let scores = ops::matmul(&q, &kt, s)?;
    let causal;
    let mask = match mask {
        fast::AttentionMask::None => None,
        fast::AttentionMask::Causal => {
            // MLX's causal mask: query i sees keys up to i + (T - S).
            let rows = ops::arange((t - sq) as f64, t as f64, 1.0, Dtype::Int32, s)?;
            let rows = ops::reshape(&rows, &[sq, 1], s)?;
            let cols = ops::arange(0.0, t as f64, 1.0, Dtype::Int32, s)?;
            causal = ops::greater_equal(&rows, &cols, s)?;
            Some(&causal)
        }
        fast::AttentionMask::Array(m) => Some(m),
    };
    let scores = match mask {
        None => scores,
        Some(m) => {
            let m = folded_mask(m, hq, hkv, sq, s)?;
            if m.dtype() == Dtype::Bool {
                ops::where_(&m, &scores, &Array::scalar_f32(f32::MIN), s)?
            } else {
                ops::add(&scores, &m, s)?
            }
        }
    };
    let probs = ops::softmax_axes(&scores, &[-1], true, s)?;
    let out = ops::matmul(&probs, v, s)?;
    ops::reshape(&out, &[b, hq, sq, vs[3]], s)
}

/// A mask broadcastable to `[B, Hq, S, T]` in the folded layout `[B', Hkv or 1, G * S or 1, T']`.
fn folded_mask(m: &Array, hq: i32, hkv: i32, sq: i32, s: &Stream) -> mlx::Result<Array> {
    let g = hq / hkv;
    let mut ms = m.shape();
    while ms.len() < 4 {
        ms.insert(0, 1);
    }
    let (mb, mh, mq, mt) = (ms[0], ms[1], ms[2], ms[3]);
    if mh != 1 && mh != hq {
        return Err(mlx::Error::new(
            "attention mask: its head axis must be 1 or the query head count",
        ));
    }
    let (heads, groups) = if mh == 1 { (1, 1) } else { (hkv, g) };
    if groups == 1 && mq == 1 {
        return ops::reshape(m, &[mb, heads, 1, mt], s);
    }
    let m = ops::reshape(m, &[mb, heads, groups, mq, mt], s)?;
    let m = ops::broadcast_to(&m, &[mb, heads, g, sq, mt], s)?;
    ops::reshape(&m, &[mb, heads, g * sq, mt], s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(shape: &[i32], seed: u64) -> Array {
        let n: i32 = shape.iter().product();
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 2000) as f32 / 1000.0 - 1.0
            })
            .collect();
        Array::from_slice(&v, shape).unwrap()
    }

    fn values(a: &Array) -> Vec<f32> {
        a.eval().unwrap();
        a.to_vec::<f32>().unwrap()
    }

    #[test]
    fn the_folded_layout_equals_mlx_attention() {
        let s = Stream::default_cpu();
        for (b, hq, hkv, sq, t, d) in [(1, 8, 2, 1, 7, 32), (2, 6, 3, 3, 5, 16), (1, 4, 1, 2, 4, 8)]
        {
            let q = random(&[b, hq, sq, d], 1);
            let k = random(&[b, hkv, t, d], 2);
            let v = random(&[b, hkv, t, d], 3);
            let bool_mask =
                ops::greater(&random(&[b, hq, sq, t], 4), &Array::scalar_f32(-0.5), &s).unwrap();
            let head_mask = random(&[b, 1, sq, t], 5);
            let row_mask = ops::greater(&random(&[t], 6), &Array::scalar_f32(-0.7), &s).unwrap();
            let plain_mask = random(&[sq, t], 7);
            let masks = [
                fast::AttentionMask::None,
                fast::AttentionMask::Causal,
                fast::AttentionMask::Array(&bool_mask),
                fast::AttentionMask::Array(&head_mask),
                fast::AttentionMask::Array(&row_mask),
                fast::AttentionMask::Array(&plain_mask),
            ];
            for (i, mask) in masks.into_iter().enumerate() {
                let want =
                    fast::scaled_dot_product_attention_sinks(&q, &k, &v, 0.3, mask, None, &s)
                        .unwrap();
                let got = grouped(&q, &k, &v, 0.3, mask, &s).unwrap();
                assert_eq!(got.shape(), want.shape());
                for (x, y) in values(&got).iter().zip(values(&want)) {
                    assert!((x - y).abs() <= 1e-5, "mask form {i}: {x} vs {y}");
                }
            }
        }
    }
}
