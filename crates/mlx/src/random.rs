//! MLX's counter-based random number generation (`mlx_random_*`). Every draw takes an
//! explicit key (a uint32 array of shape `[2]` made by [`key`] or [`split`]): the same key
//! gives the same values, so callers choose when a sequence advances.

use mlx_sys as sys;

use crate::error::{Result, check};
use crate::{Array, Dtype, Stream};

/// Calls an mlx-c op that writes one array, returning it.
macro_rules! call {
    ($ffi:ident($($arg:expr),* $(,)?)) => {{
        let mut out = Array::empty();
        // SAFETY: every handle argument is valid for the call and `out` receives the result.
        check(unsafe { sys::$ffi(&mut out.raw, $($arg),*) })?;
        Ok(out)
    }};
}

/// The key of `seed` (`mlx_random_key`).
#[track_caller]
pub fn key(seed: u64) -> Result<Array> {
    call!(mlx_random_key(seed))
}

/// Two new keys derived from `key` (`mlx_random_split`).
#[track_caller]
pub fn split(key: &Array, s: &Stream) -> Result<(Array, Array)> {
    let (mut a, mut b) = (Array::empty(), Array::empty());
    // SAFETY: `key` and `s` are valid handles; `a` and `b` receive the results.
    check(unsafe { sys::mlx_random_split(&mut a.raw, &mut b.raw, key.raw, s.raw) })?;
    Ok((a, b))
}

/// `width`-byte random bits (`width` 1, 2 or 4) of `shape` (`mlx_random_bits`).
#[track_caller]
pub fn bits(shape: &[i32], width: i32, key: &Array, s: &Stream) -> Result<Array> {
    call!(mlx_random_bits(
        shape.as_ptr(),
        shape.len(),
        width,
        key.raw,
        s.raw
    ))
}

/// Normal samples `loc + scale * N(0, 1)` of `shape` in the float `dtype`
/// (`mlx_random_normal`).
#[track_caller]
pub fn normal(
    shape: &[i32],
    dtype: Dtype,
    loc: f32,
    scale: f32,
    key: &Array,
    s: &Stream,
) -> Result<Array> {
    call!(mlx_random_normal(
        shape.as_ptr(),
        shape.len(),
        dtype.to_raw(),
        loc,
        scale,
        key.raw,
        s.raw
    ))
}

/// Uniform samples in `[low, high)` of `shape` in the float `dtype` (`low` and `high`
/// broadcast to `shape`; `mlx_random_uniform`).
#[track_caller]
pub fn uniform(
    low: &Array,
    high: &Array,
    shape: &[i32],
    dtype: Dtype,
    key: &Array,
    s: &Stream,
) -> Result<Array> {
    call!(mlx_random_uniform(
        low.raw,
        high.raw,
        shape.as_ptr(),
        shape.len(),
        dtype.to_raw(),
        key.raw,
        s.raw
    ))
}

/// Bool samples of `shape`, true with probability `p` (broadcast to `shape`):
/// `uniform(shape, p.dtype) < p` (`mlx_random_bernoulli`).
#[track_caller]
pub fn bernoulli(p: &Array, shape: &[i32], key: &Array, s: &Stream) -> Result<Array> {
    call!(mlx_random_bernoulli(
        p.raw,
        shape.as_ptr(),
        shape.len(),
        key.raw,
        s.raw
    ))
}

/// One category index per row of `logits` (unnormalised log-probabilities along `axis`,
/// which is removed; uint32; `mlx_random_categorical`).
#[track_caller]
pub fn categorical(logits: &Array, axis: i32, key: &Array, s: &Stream) -> Result<Array> {
    call!(mlx_random_categorical(logits.raw, axis, key.raw, s.raw))
}

/// `num_samples` independent category indices per row of `logits` (unnormalised
/// log-probabilities along `axis`, which becomes the samples' axis, last; uint32;
/// `mlx_random_categorical_num_samples`).
#[track_caller]
pub fn categorical_samples(
    logits: &Array,
    axis: i32,
    num_samples: i32,
    key: &Array,
    s: &Stream,
) -> Result<Array> {
    call!(mlx_random_categorical_num_samples(
        logits.raw,
        axis,
        num_samples,
        key.raw,
        s.raw
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_same_values_split_keys_differ() {
        let s = Stream::default_cpu();
        let k = key(7).unwrap();
        let a = normal(&[64], Dtype::Float32, 0.0, 1.0, &k, &s).unwrap();
        let b = normal(&[64], Dtype::Float32, 0.0, 1.0, &key(7).unwrap(), &s).unwrap();
        assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let (k1, k2) = split(&k, &s).unwrap();
        let c = normal(&[64], Dtype::Float32, 0.0, 1.0, &k1, &s).unwrap();
        let d = normal(&[64], Dtype::Float32, 0.0, 1.0, &k2, &s).unwrap();
        assert_ne!(c.to_vec::<f32>().unwrap(), d.to_vec::<f32>().unwrap());
    }

    #[test]
    fn uniform_bernoulli_categorical_shapes_and_ranges() {
        let s = Stream::default_cpu();
        let k = key(1).unwrap();
        let (lo, hi) = (Array::scalar_f32(2.0), Array::scalar_f32(3.0));
        let u = uniform(&lo, &hi, &[1000], Dtype::Float32, &k, &s).unwrap();
        assert!(
            u.to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|&v| (2.0..3.0).contains(&v))
        );
        let one = bernoulli(&Array::scalar_f32(1.0), &[100], &k, &s).unwrap();
        let one = crate::ops::astype(&one, Dtype::Int32, &s).unwrap();
        assert!(one.to_vec::<i32>().unwrap().iter().all(|&v| v == 1));
        let logits = Array::from_slice(&[0.0f32, -1e9, -1e9, 0.0], &[2, 2]).unwrap();
        let c = categorical_samples(&logits, 1, 5, &k, &s).unwrap();
        assert_eq!(c.shape(), vec![2, 5]);
        let c = crate::ops::astype(&c, Dtype::Int32, &s).unwrap();
        assert_eq!(
            c.to_vec::<i32>().unwrap(),
            vec![0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
        );
        let b = bits(&[3], 4, &k, &s).unwrap();
        assert_eq!(b.dtype(), Dtype::Uint32);
        let c1 = categorical(&logits, 1, &k, &s).unwrap();
        assert_eq!(c1.shape(), vec![2]);
    }
}
