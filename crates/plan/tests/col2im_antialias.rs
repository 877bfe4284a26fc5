//! Col2Im lowering (a constant index map) and antialiased Resize weights.

mod common;

use common::*;
use onnx_ir::DataType;
use onnx_ir::TensorData;
use plan::KernelAttrs;
use plan::Step;
use plan::ops::col2im::Col2ImGeometry;
use plan::step::{CoordinateTransform, antialias_taps, source_coordinate};

fn col2im(image: &[i64], block: &[i64], constant: bool) -> G {
    let mut g = G::new(18);
    let k: i64 = block.iter().product();
    g.input("x", DataType::Float, &[1, 2 * k, -1]);
    if constant {
        g.init_i64("image", &[image.len() as i64], image);
        g.init_i64("block", &[block.len() as i64], block);
    } else {
        g.input("image", DataType::Int64, &[image.len() as i64]);
        g.input("block", DataType::Int64, &[block.len() as i64]);
    }
    g.output_any("y", DataType::Float);
    g.node("Col2Im", &["x", "image", "block"], &["y"]);
    g
}

#[test]
fn col2im_geometry_maps_each_column_to_its_pixel() {
    // 1-D: image 5, block 3, stride 2, pad 1/1: blocks (5 + 2 - 3) / 2 + 1 = 3.
    let g = Col2ImGeometry::new(&[5], &[3], &[1], &[1, 1], &[2]).unwrap();
    assert_eq!(g.blocks, vec![3]);
    let none = 9;
    // k = 0 lands at 2l - 1: pixels 1 and 3 from blocks 1 and 2.
    assert_eq!(g.sources[0], vec![none, 1, none, 2, none]);
    // k = 1 lands at 2l: pixels 0, 2, 4 from columns 3, 4, 5.
    assert_eq!(g.sources[1], vec![3, none, 4, none, 5]);
    assert_eq!(g.sources[2], vec![none, 6, none, 7, none]);
    // 2-D with dilation: 4x4 image, 2x2 block, dilation 2: 2x2 blocks.
    let g = Col2ImGeometry::new(&[4, 4], &[2, 2], &[2, 2], &[0, 0, 0, 0], &[1, 1]).unwrap();
    assert_eq!(g.blocks, vec![2, 2]);
    assert_eq!(g.sources.len(), 4);
    assert!(Col2ImGeometry::new(&[2], &[5], &[1], &[0, 0], &[1]).is_err());
}

#[test]
fn col2im_claims_and_lowers_to_takes_or_a_host_kernel() {
    assert!(claim(&col2im(&[4, 5], &[2, 2], true), 0).is_ok());
    // Shapes fed at run time are read on the host.
    assert!(claim(&col2im(&[4, 5], &[2, 2], false), 0).is_ok());
    assert!(claim(&col2im(&[4, 5, 3], &[2, 2, 2], true), 0).is_ok());
    let mut g = col2im(&[9], &[3], true);
    g.g.nodes[0].attr("strides", ints(&[2]));
    declined(&g, 0, "only 2-D honours them");
    let mut g = col2im(&[9], &[3], false);
    g.g.nodes[0].attr("dilations", ints(&[2]));
    declined(&g, 0, "only 2-D honours them");
    declined(&col2im(&[2, 2], &[3, 3], true), 0, "does not fit");
    // Shapes known at plan time: one constant-index take per kernel offset, summed; nothing
    // read on the host.
    let p = plan_of(&col2im(&[4, 5], &[2, 3], true).build());
    assert_eq!(count(&p, |s| matches!(s, Step::Take { .. })), 6);
    assert_eq!(count(&p, |s| matches!(s, Step::HostKernel { .. })), 0);
    assert!(p.steps.iter().all(|s| s.host_reads().is_empty()));
    // Shapes fed at run time: the host kernel, reading x and both shapes.
    let p = plan_of(&col2im(&[4, 5], &[2, 3], false).build());
    assert_eq!(
        count(
            &p,
            |s| matches!(s, Step::HostKernel { kernel, .. } if kernel == "col2im")
        ),
        1
    );
    assert_eq!(
        p.steps.iter().map(|s| s.host_reads().len()).sum::<usize>(),
        3
    );
}

#[test]
fn col2im_kernel_matches_the_geometry() {
    // 1-D image 5, block 3, stride 2, pads 1/1 (as above): x [1, 3, 3] = columns 0..9.
    let x = TensorData::from_f32(vec![1, 3, 3], &(0..9).map(|v| v as f32).collect::<Vec<_>>());
    let shape = |v: &[i64]| Some(TensorData::from_i64(vec![v.len() as i64], v));
    let attrs = KernelAttrs::new()
        .ints("pads", vec![1, 1])
        .ints("strides", vec![2]);
    let inputs = [Some(x.clone()), shape(&[5]), shape(&[3])];
    // Any spatial rank but 2 declines pads / strides (ORT ignores them there).
    assert!(plan::run_host_kernel("col2im", &inputs, &attrs).is_err());
    // 2-D: a 1 x 5 image with a 1 x 3 block.
    let x = TensorData::new(DataType::Float, vec![1, 3, 3], x.bytes.clone()).unwrap();
    let attrs = KernelAttrs::new()
        .ints("pads", vec![0, 1, 0, 1])
        .ints("strides", vec![1, 2]);
    let out = plan::run_host_kernel("col2im", &[Some(x), shape(&[1, 5]), shape(&[1, 3])], &attrs)
        .unwrap();
    assert_eq!(out[0].dims, vec![1, 1, 1, 5]);
    // Pixel p sums the columns landing on it: [3, 1 + 6, 4, 2 + 7, 5].
    let v: Vec<f32> = out[0]
        .bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(v, vec![3.0, 7.0, 4.0, 9.0, 5.0]);
    // x of the wrong block count.
    let bad = TensorData::from_f32(vec![1, 3, 2], &[0.0; 6]);
    assert!(
        plan::run_host_kernel(
            "col2im",
            &[Some(bad), shape(&[1, 5]), shape(&[1, 3])],
            &attrs
        )
        .is_err()
    );
}

fn resize_aa(mode: &str, scales: &[f32]) -> G {
    let mut g = G::new(19);
    g.input("x", DataType::Float, &[1, 1, 8, 8]);
    g.init_f32("scales", &[scales.len() as i64], scales);
    g.output_any("y", DataType::Float);
    g.node("Resize", &["x", "", "scales"], &["y"])
        .attr("mode", string(mode))
        .attr("antialias", int(1));
    g
}

#[test]
fn antialias_resize_is_claimed() {
    assert!(claim(&resize_aa("linear", &[1.0, 1.0, 0.5, 0.5]), 0).is_ok());
    assert!(claim(&resize_aa("cubic", &[1.0, 1.0, 0.3, 0.6]), 0).is_ok());
    // Cubic on NHWC-like scales is accepted with antialias.
    assert!(claim(&resize_aa("cubic", &[1.0, 0.5, 0.5, 1.0]), 0).is_ok());
    declined(
        &resize_aa("cubic", &[0.5, 1.0, 0.5, 1.0]),
        0,
        "cubic supports",
    );
}

#[test]
fn antialias_weights_widen_and_normalise() {
    let ct = Some(CoordinateTransform::HalfPixel);
    // 8 -> 4 linear: support 2, window 5; each row sums to 1.
    let taps = antialias_taps(8, 4, 0.5, 2.0, 0.0, false, |o| {
        source_coordinate(ct, o, 0.5, 4.0, 8.0, 0.0, 1.0)
    });
    assert_eq!(taps.len(), 4);
    for o in 0..4 {
        let s: f32 = taps.iter().map(|t| t.1[o]).sum();
        assert!((s - 1.0).abs() < 1e-6);
    }
    // Output 1 is centred at input 2.5 + 0.5 = 3: inputs 1..5 with weights 1, 3, 3, 1 / 8.
    assert_eq!(taps[0].0[1], 1);
    assert_eq!(
        taps.iter().map(|t| t.1[1]).collect::<Vec<_>>(),
        vec![0.125, 0.375, 0.375, 0.125]
    );
    // Upscaling keeps the plain support (2 taps, triangle).
    let taps = antialias_taps(4, 8, 2.0, 2.0, 0.0, false, |o| {
        source_coordinate(ct, o, 2.0, 8.0, 4.0, 0.0, 1.0)
    });
    assert!(taps.len() <= 3);
}
