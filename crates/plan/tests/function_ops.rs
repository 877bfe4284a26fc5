//! ONNX function ops claimed directly: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss,
//! Swish, CenterCropPad (claims, declines and plan shapes; numerics are checked against ORT's
//! CPU EP in tests/python/test_function_ops.py).

mod common;

use common::*;
use onnx_ir::DataType;
use plan::Step;
use plan::step::ShapeSource;

fn loss_graph(op: &str, opset: i64, weight: bool) -> G {
    let mut g = G::new(opset);
    g.input("x", DataType::Float, &[3, 4, 2]);
    g.input("t", DataType::Int64, &[3, 2]);
    let mut ins = vec!["x", "t"];
    if weight {
        g.input("w", DataType::Float, &[4]);
        ins.push("w");
    }
    g.output_any("y", DataType::Float);
    g.node(op, &ins, &["y"]);
    g
}

#[test]
fn losses_claimed_and_lowered() {
    for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"] {
        for opset in [12, 13, 22] {
            for weight in [false, true] {
                let mut g = loss_graph(op, opset, weight);
                g.g.nodes[0]
                    .attr("reduction", string("mean"))
                    .attr("ignore_index", int(-1));
                let p = plan_of(&g.build());
                assert_eq!(
                    count(&p, |s| matches!(s, Step::TakeAlongAxis { axis: 1, .. })),
                    1
                );
            }
        }
    }
}

#[test]
fn loss_declines() {
    let mut g = loss_graph("NegativeLogLikelihoodLoss", 13, false);
    g.g.nodes[0].attr("reduction", string("max"));
    declined(&g, 0, "reduction 'max' is invalid");
    let mut g = loss_graph("SoftmaxCrossEntropyLoss", 13, false);
    g.g.inputs[1].dtype = Some(DataType::Float);
    declined(&g, 0, "input 1 has element type float");
    let mut g = loss_graph("NegativeLogLikelihoodLoss", 13, true);
    g.g.inputs[2].dtype = Some(DataType::Float16);
    declined(&g, 0, "weight is float16 but input 0 is float");
    let mut g = loss_graph("NegativeLogLikelihoodLoss", 11, false);
    g.g.opset_imports.insert(String::new(), 11);
    declined(&g, 0, "outside the supported opset range 12");
}

#[test]
fn swish_claimed_from_opset_24() {
    let mut g = G::new(24);
    g.input("x", DataType::Float, &[2, 3]);
    g.node("Swish", &["x"], &["y"]).attr("alpha", float(0.5));
    assert!(claim(&g, 0).is_ok());
    plan_of(&g.build());
    let mut g = G::new(23);
    g.input("x", DataType::Float, &[2, 3]);
    g.node("Swish", &["x"], &["y"]);
    declined(&g, 0, "outside the supported opset range 24");
}

#[test]
fn center_crop_pad_static_and_dynamic() {
    // Constant shape, fixed input: bounds fixed at plan time (crop 7 -> 4 from 1, pad 3 -> 6
    // by 1 before and 2 after).
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 7, 3]);
    g.init_i64("s", &[2], &[6, 4]);
    g.node("CenterCropPad", &["x", "s"], &["y"])
        .attr("axes", ints(&[-1, 1]));
    let p = plan_of(&g.build());
    assert!(p.steps.iter().any(|s| matches!(s,
        Step::Slice { spec, .. } if spec.starts == ShapeSource::Static(vec![0, 1])
            && spec.ends == ShapeSource::Static(vec![3, 5]))));
    assert!(p.steps.iter().any(|s| matches!(s,
        Step::Pad { pads: plan::step::PadSpec::Onnx { pads, .. }, .. }
            if *pads == ShapeSource::Static(vec![1, 0, 2, 0]))));
    // Shape fed at run time: bounds read on the host.
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 7, 3]);
    g.input("s", DataType::Int64, &[3]);
    g.node("CenterCropPad", &["x", "s"], &["y"]);
    let p = plan_of(&g.build());
    assert!(p.steps.iter().any(|s| matches!(s,
        Step::Slice { spec, .. } if matches!(spec.starts, ShapeSource::Dynamic(_)))));
}

#[test]
fn center_crop_pad_declines() {
    let mut g = G::new(18);
    g.input_unranked("x", DataType::Float);
    g.input("s", DataType::Int64, &[1]);
    g.node("CenterCropPad", &["x", "s"], &["y"])
        .attr("axes", ints(&[0]));
    declined(&g, 0, "the rank of input 0");
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 3]);
    g.input("s", DataType::Int64, &[2]);
    g.node("CenterCropPad", &["x", "s"], &["y"])
        .attr("axes", ints(&[1, -1]));
    declined(&g, 0, "repeat an axis");
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 3]);
    g.input("s", DataType::Int64, &[1]);
    g.node("CenterCropPad", &["x", "s"], &["y"])
        .attr("axes", ints(&[2]));
    declined(&g, 0, "CenterCropPad:");
}
