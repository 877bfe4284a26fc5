//! The host kernels, called by name over host buffers (no MLX, no ORT).

use onnx_ir::{DataType, TensorData};
use plan::{KernelAttrs, run_host_kernel};

fn f32t(dims: &[i64], v: &[f32]) -> Option<TensorData> {
    Some(TensorData::from_f32(dims.to_vec(), v))
}

fn i64t(dims: &[i64], v: &[i64]) -> Option<TensorData> {
    Some(TensorData::from_i64(dims.to_vec(), v))
}

fn run(name: &str, inputs: &[Option<TensorData>], attrs: KernelAttrs) -> Vec<TensorData> {
    run_host_kernel(name, inputs, &attrs).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn f32s(t: &TensorData) -> Vec<f32> {
    t.to_f64_vec()
        .unwrap()
        .into_iter()
        .map(|v| v as f32)
        .collect()
}

#[test]
fn every_family_kernel_is_registered_once() {
    let r = plan::Registry::default();
    let mut names: Vec<&str> = r.kernels().keys().copied().collect();
    names.sort();
    for k in [
        "cosine_window",
        "max_roi_pool",
        "non_max_suppression",
        "nonzero",
        "roi_align",
        "unique",
    ] {
        assert!(names.contains(&k), "{k} missing from {names:?}");
    }
    let err = run_host_kernel("no_such_kernel", &[], &KernelAttrs::new()).unwrap_err();
    assert!(err.contains("no host kernel"), "{err}");
}

#[test]
fn non_max_suppression_selects_by_score_and_overlap() {
    // Two overlapping boxes and one apart; the lower-scored overlapping one is suppressed.
    let boxes = f32t(
        &[1, 3, 4],
        &[0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 10.0, 1.0, 11.0],
    );
    let scores = f32t(&[1, 1, 3], &[0.9, 0.75, 0.6]);
    let inputs = [boxes, scores, i64t(&[1], &[3]), f32t(&[1], &[0.5]), None];
    let attrs = KernelAttrs::new().bool("center_point_box", false);
    let out = run("non_max_suppression", &inputs, attrs);
    assert_eq!(out[0].dims, vec![2, 3]);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![0, 0, 0, 0, 0, 2]);
    // A missing attribute is an error, not a panic.
    assert!(run_host_kernel("non_max_suppression", &inputs, &KernelAttrs::new()).is_err());
}

#[test]
fn roi_align_averages_and_maxes_bilinear_samples() {
    // X [1, 1, 4, 4] = 0..16; one roi over the whole image, 2x2 bins, 1 sample per bin.
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let inputs = [
        f32t(&[1, 1, 4, 4], &x),
        f32t(&[1, 4], &[0.0, 0.0, 4.0, 4.0]),
        i64t(&[1], &[0]),
    ];
    let attrs = |max: bool| {
        KernelAttrs::new()
            .bool("max_mode", max)
            .int("output_height", 2)
            .int("output_width", 2)
            .int("sampling_ratio", 1)
            .float("spatial_scale", 1.0)
            .bool("half_pixel", true)
    };
    // half_pixel: samples at (0.5, 0.5), (0.5, 2.5), (2.5, 0.5), (2.5, 2.5) (y, x), each the
    // bilinear value y * 4 + x.
    let avg = run("roi_align", &inputs, attrs(false));
    assert_eq!(avg[0].dims, vec![1, 1, 2, 2]);
    assert_eq!(f32s(&avg[0]), vec![2.5, 4.5, 10.5, 12.5]);
    // Max takes the largest weighted corner: at (0.5, 0.5) the corners 0, 1, 4, 5 weigh 1/4.
    let max = run("roi_align", &inputs, attrs(true));
    assert_eq!(f32s(&max[0]), vec![1.25, 1.75, 3.25, 3.75]);
    // A batch index out of range is an error.
    let bad = [inputs[0].clone(), inputs[1].clone(), i64t(&[1], &[1])];
    assert!(run_host_kernel("roi_align", &bad, &attrs(false)).is_err());
}

#[test]
fn max_roi_pool_follows_ort() {
    // X [1, 2, 4, 4]: channel 0 = 0..16, channel 1 all negative.
    let mut x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    x.extend((0..16).map(|v| -(v as f32) - 1.0));
    let inputs = [
        f32t(&[1, 2, 4, 4], &x),
        // The whole image, and a roi of rows/cols 1..=2 given at twice the scale.
        f32t(&[2, 5], &[0.0, 0.0, 0.0, 3.0, 3.0, 0.0, 2.0, 2.0, 4.0, 4.0]),
    ];
    let attrs = |scale: f64| {
        KernelAttrs::new()
            .ints("pooled_shape", vec![2, 2])
            .float("spatial_scale", scale)
    };
    let out = run("max_roi_pool", &inputs, attrs(0.5));
    assert_eq!(out[0].dims, vec![2, 2, 2, 2]);
    let v = f32s(&out[0]);
    // Roi 0 at scale 0.5: x1 = y1 = 0, x2 = y2 = round(1.5) = 2 -> a 3x3 region, bins
    // [0, 2) x [0, 2) etc.
    assert_eq!(&v[..4], &[5.0, 6.0, 9.0, 10.0]);
    // All-negative bins: their maximum.
    assert_eq!(&v[4..8], &[-1.0, -2.0, -5.0, -6.0]);
    // Roi 1: round(1) = 1 .. round(2) = 2 -> rows/cols 1..=2, one pixel per bin.
    assert_eq!(&v[8..12], &[5.0, 6.0, 9.0, 10.0]);
    let bad = [inputs[0].clone(), f32t(&[1, 5], &[3.0, 0.0, 0.0, 1.0, 1.0])];
    assert!(run_host_kernel("max_roi_pool", &bad, &attrs(1.0)).is_err());
}

#[test]
fn nonzero_treats_negative_zero_as_zero() {
    let x = f32t(&[2, 2], &[0.0, -0.0, 3.0, 0.5]);
    let out = run("nonzero", &[x], KernelAttrs::new());
    assert_eq!(out[0].dims, vec![2, 2]);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![1, 1, 0, 1]);
    let b = Some(TensorData::new(DataType::Bool, vec![3], vec![0u8, 1, 1]).unwrap());
    let out = run("nonzero", &[b], KernelAttrs::new());
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![1, 2]);
}

#[test]
fn unique_returns_four_outputs() {
    let x = i64t(&[6], &[2, 1, 1, 3, 4, 3]);
    let attrs = KernelAttrs::new()
        .bool("sorted", true)
        .int("dtype", DataType::Int64.to_onnx() as i64);
    let out = run("unique", &[x], attrs);
    assert_eq!(out.len(), 4);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(out[1].to_i64_vec().unwrap(), vec![1, 0, 3, 4]);
    assert_eq!(out[2].to_i64_vec().unwrap(), vec![1, 0, 0, 2, 3, 2]);
    assert_eq!(out[3].to_i64_vec().unwrap(), vec![2, 1, 2, 1]);
}

#[test]
fn cosine_window_of_a_run_time_size() {
    let attrs = KernelAttrs::new()
        .int("kind", 0)
        .bool("periodic", true)
        .int("dtype", DataType::Float.to_onnx() as i64);
    let out = run("cosine_window", &[i64t(&[], &[4])], attrs.clone());
    let v = f32s(&out[0]);
    assert_eq!(v.len(), 4);
    assert!(v[0].abs() < 1e-7 && (v[2] - 1.0).abs() < 1e-7);
    assert!(run_host_kernel("cosine_window", &[i64t(&[], &[-1])], &attrs).is_err());
}
