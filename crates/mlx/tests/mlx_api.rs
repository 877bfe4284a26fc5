//! Behaviour of the safe wrapper against the real libmlx.

use mlx::{Array, Closure, Dtype, Element, FrozenArray, Stream, fast, ops};

fn round_trip<T: Element + PartialEq + std::fmt::Debug>(values: &[T]) {
    let a = Array::from_slice(values, &[values.len() as i32]).unwrap();
    assert_eq!(a.dtype(), T::DTYPE);
    assert_eq!(a.shape(), vec![values.len() as i32]);
    assert_eq!(a.to_vec::<T>().unwrap(), values);
}

#[test]
fn every_dtype_round_trips() {
    round_trip(&[true, false, true]);
    round_trip(&[0u8, 7, 255]);
    round_trip(&[0u16, 7, 65535]);
    round_trip(&[0u32, 7, u32::MAX]);
    round_trip(&[0u64, 7, u64::MAX]);
    round_trip(&[i8::MIN, -1, i8::MAX]);
    round_trip(&[i16::MIN, -1, i16::MAX]);
    round_trip(&[i32::MIN, -1, i32::MAX]);
    round_trip(&[i64::MIN, -1, i64::MAX]);
    round_trip(&[-1.5f32, 0.0, f32::MAX]);
    round_trip(&[-1.5f64, 0.0, 1e300]);
}

#[test]
fn half_types_round_trip_through_bytes() {
    let s = Stream::default_cpu();
    // 1.0, -2.0 in IEEE half, and 1.0, -2.0 in bfloat16.
    for (dtype, bytes) in [
        (Dtype::Float16, [0x00u8, 0x3c, 0x00, 0xc0]),
        (Dtype::Bfloat16, [0x80, 0x3f, 0x00, 0xc0]),
    ] {
        let a = Array::from_bytes(&bytes, &[2], dtype).unwrap();
        assert_eq!(a.dtype(), dtype);
        let c = a.to_contiguous(&s).unwrap();
        assert_eq!(c.as_bytes().unwrap(), &bytes);
        let f = ops::astype(&a, Dtype::Float32, &s).unwrap();
        assert_eq!(f.to_vec::<f32>().unwrap(), vec![1.0, -2.0]);
    }
}

#[test]
fn wrong_byte_count_is_an_error() {
    assert!(Array::from_bytes(&[0u8; 7], &[2], Dtype::Float32).is_err());
    assert!(Array::from_bytes(&[0u8; 8], &[-2], Dtype::Float32).is_err());
}

#[test]
fn external_bytes_are_read_and_their_owner_released() {
    let data: std::sync::Arc<[f32]> = vec![1.0f32, 2.0, 3.0].into();
    let ptr = data.as_ptr() as *const u8;
    // SAFETY: the Arc keeps the bytes alive and unchanged; `a` is held until evaluated.
    let a =
        unsafe { Array::from_external_bytes(ptr, &[3], Dtype::Float32, Box::new(data.clone())) }
            .unwrap();
    let s = Stream::default_cpu();
    let b = ops::add(&a, &a, &s).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
    // MLX reads the buffer in place where its allocator can wrap it (Metal) and copies it
    // otherwise (the CPU allocator); either way the owner is released with the array.
    drop(a);
    assert_eq!(std::sync::Arc::strong_count(&data), 1);
}

#[test]
fn matmul_matches_a_host_product() {
    let s = Stream::default_cpu();
    let (m, k, n) = (7usize, 5usize, 3usize);
    let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
    let c = ops::matmul(
        &Array::from_slice(&a, &[m as i32, k as i32]).unwrap(),
        &Array::from_slice(&b, &[k as i32, n as i32]).unwrap(),
        &s,
    )
    .unwrap();
    assert_eq!(c.shape(), vec![m as i32, n as i32]);
    let got = c.to_vec::<f32>().unwrap();
    for i in 0..m {
        for j in 0..n {
            let want: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            assert!(
                (got[i * n + j] - want).abs() < 1e-5,
                "({i},{j}) {} vs {want}",
                got[i * n + j]
            );
        }
    }
}

#[test]
fn transposed_views_come_back_contiguous() {
    let s = Stream::default_cpu();
    let a = Array::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let t = ops::transpose_axes(&a, &[1, 0], &s).unwrap();
    assert_eq!(t.shape(), vec![3, 2]);
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
}

#[test]
fn rms_norm_fast_op_matches_definition() {
    let s = Stream::default_cpu();
    let x: Vec<f32> = (0..8).map(|i| i as f32 - 3.0).collect();
    let w = vec![0.5f32, 1.0, 1.5, 2.0];
    let y = fast::rms_norm(
        &Array::from_slice(&x, &[2, 4]).unwrap(),
        Some(&Array::from_slice(&w, &[4]).unwrap()),
        1e-5,
        &s,
    )
    .unwrap()
    .to_vec::<f32>()
    .unwrap();
    for row in 0..2 {
        let r = &x[row * 4..row * 4 + 4];
        let rms = (r.iter().map(|v| v * v).sum::<f32>() / 4.0 + 1e-5).sqrt();
        for j in 0..4 {
            assert!((y[row * 4 + j] - r[j] / rms * w[j]).abs() < 1e-5);
        }
    }
}

/// Query, key and value `[1, 1, 4, 4]` for the attention tests.
fn sdpa_inputs() -> (Array, Array, Array) {
    let data = |f: fn(f32) -> f32| (0..16).map(|i| f(i as f32)).collect::<Vec<_>>();
    let q = Array::from_slice(&data(|i| (i * 0.3).sin()), &[1, 1, 4, 4]).unwrap();
    let k = Array::from_slice(&data(|i| (i * 0.7).cos()), &[1, 1, 4, 4]).unwrap();
    let v = Array::from_slice(&data(|i| i), &[1, 1, 4, 4]).unwrap();
    (q, k, v)
}

/// softmax(q k^T * 0.5 + mask) v, built from plain ops.
fn reference_attention(
    q: &Array,
    k: &Array,
    v: &Array,
    mask: Option<&Array>,
    s: &Stream,
) -> Vec<f32> {
    let kt = ops::transpose_axes(k, &[0, 1, 3, 2], s).unwrap();
    let mut scores =
        ops::multiply(&ops::matmul(q, &kt, s).unwrap(), &Array::scalar_f32(0.5), s).unwrap();
    if let Some(mask) = mask {
        scores = ops::add(&scores, mask, s).unwrap();
    }
    let probs = ops::softmax_axes(&scores, &[-1], true, s).unwrap();
    ops::matmul(&probs, v, s).unwrap().to_vec::<f32>().unwrap()
}

fn assert_close(got: &Array, want: &[f32]) {
    let g = got.to_vec::<f32>().unwrap();
    assert!(
        g.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-4),
        "{g:?} vs {want:?}"
    );
}

#[test]
fn sdpa_matches_softmax_attention() {
    let s = Stream::default_cpu();
    let (q, k, v) = sdpa_inputs();
    let fused =
        fast::scaled_dot_product_attention(&q, &k, &v, 0.5, fast::AttentionMask::None, &s).unwrap();
    assert_close(&fused, &reference_attention(&q, &k, &v, None, &s));
}

fn gelu_body(x: &Array, s: &Stream) -> mlx::Result<Array> {
    let inner = ops::erf(
        &ops::multiply(x, &Array::scalar_f32(std::f32::consts::FRAC_1_SQRT_2), s)?,
        s,
    )?;
    let one_plus = ops::add(&inner, &Array::scalar_f32(1.0), s)?;
    ops::multiply(&ops::multiply(x, &one_plus, s)?, &Array::scalar_f32(0.5), s)
}

#[test]
fn compiled_closure_equals_eager() {
    let s = Stream::default_cpu();
    let x = Array::from_slice(
        &(0..64).map(|i| i as f32 / 8.0 - 4.0).collect::<Vec<_>>(),
        &[8, 8],
    )
    .unwrap();
    let eager = gelu_body(&x, &s).unwrap().to_vec::<f32>().unwrap();
    let closure = Closure::new(|args: &[Array]| {
        let s = Stream::default_cpu();
        Ok(vec![gelu_body(&args[0], &s)?])
    });
    let compiled = closure.compile(false).unwrap();
    for _ in 0..2 {
        let out = compiled.apply(&[&x]).unwrap();
        assert_eq!(out.len(), 1);
        let got = out[0].to_vec::<f32>().unwrap();
        assert!(
            got.iter()
                .zip(&eager)
                .all(|(a, b)| (a - b).abs() <= 1e-6 * b.abs().max(1.0))
        );
    }
}

#[test]
fn closure_errors_and_panics_come_back_as_err() {
    let x = Array::from_slice(&[1.0f32], &[1]).unwrap();
    let failing = Closure::new(|_: &[Array]| Err(mlx::Error::new("body failed on purpose")));
    let err = failing.apply(&[&x]).unwrap_err();
    assert!(err.message.contains("on purpose"), "{err}");
    let panicking = Closure::new(|_: &[Array]| panic!("boom"));
    assert!(panicking.apply(&[&x]).is_err());
    // Still alive and working.
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![1.0]);
}

#[test]
fn mlx_errors_are_results_and_the_process_survives() {
    let s = Stream::default_cpu();
    let a = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let b = Array::from_slice(&[1.0f32; 6], &[2, 3]).unwrap();
    let err = ops::matmul(&a, &b, &s).unwrap_err();
    assert!(!err.message.is_empty());
    assert!(
        err.to_string().contains("mlx_api.rs"),
        "call site recorded: {err}"
    );
    assert!(ops::reshape(&a, &[4, 4], &s).is_err());
    // The next call works.
    assert_eq!(
        ops::add(&a, &b, &s).unwrap().to_vec::<f32>().unwrap(),
        vec![2.0; 6]
    );
}

#[test]
fn frozen_arrays_are_shared_across_threads() {
    let frozen = std::sync::Arc::new(
        FrozenArray::new(Array::from_slice(&[1.0f32, 2.0], &[2]).unwrap()).unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let f = frozen.clone();
            std::thread::spawn(move || {
                let s = Stream::default_cpu();
                ops::add(&f.get(), &f.get(), &s)
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), vec![2.0, 4.0]);
    }
}

#[test]
fn version_and_devices() {
    assert!(mlx::version().starts_with("0.32"), "{}", mlx::version());
    assert!(mlx::Device::cpu().is_available());
    // On a CPU-only libmlx the GPU is reported absent rather than failing.
    let _ = mlx::gpu_available();
}

#[test]
fn sdpa_applies_an_additive_mask_and_causal_mode() {
    let s = Stream::default_cpu();
    let (q, k, v) = sdpa_inputs();
    // Causal as an explicit additive mask.
    let mask: Vec<f32> = (0..16)
        .map(|i| {
            if i % 4 > i / 4 {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    let mask = Array::from_slice(&mask, &[4, 4]).unwrap();
    let with_mask =
        fast::scaled_dot_product_attention(&q, &k, &v, 0.5, fast::AttentionMask::Array(&mask), &s)
            .unwrap();
    let causal =
        fast::scaled_dot_product_attention(&q, &k, &v, 0.5, fast::AttentionMask::Causal, &s)
            .unwrap();
    let r = reference_attention(&q, &k, &v, Some(&mask), &s);
    for got in [with_mask, causal] {
        assert_close(&got, &r);
    }
}
