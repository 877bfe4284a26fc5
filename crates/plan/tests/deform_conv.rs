//! DeformConv (2-D, float32): claim rules and the gather + matmul lowering.

mod common;

use common::*;
use onnx_ir::DataType;
use plan::Step;

/// X [1, 4, 6, 7], W [oc, 4/group, 3, 3] (an initializer), offset for `og` offset groups.
fn deform(group: i64, og: i64, mask: bool, x_dims: &[i64]) -> G {
    let mut g = G::new(19);
    g.input("x", DataType::Float, x_dims);
    g.weight("w", &[6, 4 / group, 3, 3]);
    g.input("o", DataType::Float, &[1, og * 18, 6, 7]);
    g.weight("b", &[6]);
    let mut ins = vec!["x", "w", "o", "b"];
    if mask {
        g.input("m", DataType::Float, &[1, og * 9, 6, 7]);
        ins.push("m");
    }
    g.output_any("y", DataType::Float);
    let n = g.node("DeformConv", &ins, &["y"]);
    n.attr("pads", ints(&[1, 1, 1, 1]));
    n.attr("group", int(group));
    n.attr("offset_group", int(og));
    g
}

#[test]
fn deform_conv_claims_static_2d_float() {
    assert!(claim(&deform(1, 1, false, &[1, 4, 6, 7]), 0).is_ok());
    assert!(claim(&deform(2, 2, true, &[1, 4, 6, 7]), 0).is_ok());
    declined(&deform(1, 1, false, &[-1, 4, 6, 7]), 0, "static shape");
    declined(&deform(1, 1, false, &[1, 4, 6]), 0, "only 2-D");
    // The offset must fit the output grid and the offset groups.
    declined(&deform(1, 1, false, &[1, 4, 8, 7]), 0, "offset shape");
    declined(&deform(1, 3, false, &[1, 4, 6, 7]), 0, "disagree");
    let mut g = deform(1, 1, false, &[1, 4, 6, 7]);
    g.g.nodes[0].attr("kernel_shape", ints(&[2, 2]));
    declined(&g, 0, "kernel_shape");
    let mut g = G::new(19);
    g.input("x", DataType::Float16, &[1, 1, 3, 3]);
    g.input("w", DataType::Float16, &[1, 1, 1, 1]);
    g.input("o", DataType::Float16, &[1, 2, 3, 3]);
    g.output_any("y", DataType::Float16);
    g.node("DeformConv", &["x", "w", "o"], &["y"]);
    assert!(claim(&g, 0).is_err());
}

#[test]
fn deform_conv_lowers_to_four_gathers_and_one_matmul() {
    let p = plan_of(&deform(2, 2, true, &[1, 4, 6, 7]).build());
    assert_eq!(count(&p, |s| matches!(s, Step::TakeAlongAxis { .. })), 4);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    assert_eq!(count(&p, |s| matches!(s, Step::Where { .. })), 4);
    assert_eq!(count(&p, |s| matches!(s, Step::Conv { .. })), 0);
}
