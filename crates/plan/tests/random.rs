//! The random generator family: claims, declines and the eager compile decision.

mod common;

use common::*;
use onnx_ir::DataType;
use plan::{CompileClass, Step};

const F: DataType = DataType::Float;

#[test]
fn claims_every_form() {
    let mut g = G::new(22);
    g.input("x", F, &[2, 3]).input("i", DataType::Int64, &[4]);
    g.output_any("a", F)
        .output_any("b", DataType::Float16)
        .output_any("c", F)
        .output_any("d", DataType::BFloat16)
        .output_any("e", DataType::Bool)
        .output_any("f", DataType::Int64);
    g.node("RandomNormal", &[], &["a"])
        .attr("shape", ints(&[2, 3]))
        .attr("seed", float(1.0));
    g.node("RandomUniform", &[], &["b"])
        .attr("shape", ints(&[5]))
        .attr("dtype", int(10));
    g.node("RandomNormalLike", &["i"], &["c"])
        .attr("dtype", int(1));
    g.node("RandomUniformLike", &["x"], &["d"])
        .attr("dtype", int(16));
    g.node("Bernoulli", &["x"], &["e"]).attr("dtype", int(9));
    g.node("Multinomial", &["x"], &["f"])
        .attr("dtype", int(7))
        .attr("sample_size", int(4));
    for i in 0..6 {
        assert!(claim(&g, i).is_ok(), "node {i}: {:?}", claim(&g, i));
    }
    let plan = plan_of(&g.build());
    assert_eq!(plan.steps.iter().filter(|s| s.is_random()).count(), 6);
    assert_eq!(plan.compile_class(), CompileClass::Eager);
    assert!(
        plan.compile_blockers()
            .iter()
            .any(|b| b.reason.contains("random"))
    );
}

#[test]
fn identical_unseeded_nodes_stay_two_draws() {
    let mut g = G::new(17);
    g.output_any("a", F).output_any("b", F);
    g.node("RandomNormal", &[], &["a"])
        .attr("shape", ints(&[3]));
    g.node("RandomNormal", &[], &["b"])
        .attr("shape", ints(&[3]));
    let plan = plan_of(&g.build());
    let random: Vec<&Step> = plan.steps.iter().filter(|s| s.is_random()).collect();
    assert_eq!(random.len(), 2);
}

#[test]
fn declines() {
    let mut g = G::new(17);
    g.input("x", F, &[2, 3])
        .input("d", DataType::Double, &[2, 3]);
    g.input("v", F, &[6]).input("s", DataType::String, &[2]);
    for o in ["a", "b", "c", "e", "f", "h", "k", "m", "n"] {
        g.output_any(o, F);
    }
    g.node("RandomNormal", &[], &["a"])
        .attr("shape", ints(&[2]))
        .attr("dtype", int(11));
    g.node("RandomUniform", &[], &["b"]);
    g.node("RandomUniform", &[], &["c"])
        .attr("shape", ints(&[2]))
        .attr("dtype", int(16));
    g.node("RandomNormalLike", &["s"], &["e"])
        .attr("dtype", int(1));
    g.node("RandomUniformLike", &["x"], &["f"])
        .attr("dtype", int(7));
    g.node("Bernoulli", &["d"], &["h"]);
    g.node("Multinomial", &["v"], &["k"]);
    g.node("Multinomial", &["x"], &["m"])
        .attr("sample_size", int(0));
    g.node("Multinomial", &["x"], &["n"]).attr("dtype", int(1));
    declined(
        &g,
        0,
        "output type double is not claimed (MLX draws in float32",
    );
    declined(&g, 1, "the required attribute 'shape' is missing");
    declined(&g, 2, "output type bfloat16 is not claimed");
    declined(&g, 3, "input 0 has element type string");
    declined(&g, 4, "output type int64 is not claimed");
    declined(&g, 5, "input 0 has element type double");
    declined(&g, 6, "input rank 1 is not 2");
    declined(&g, 7, "sample_size 0 is not positive");
    declined(&g, 8, "output type float is not claimed");
    let mut g = G::new(17);
    g.output_any("a", F);
    g.node("RandomNormal", &[], &["a"])
        .attr("shape", ints(&[-1, 2]));
    declined(&g, 0, "shape dim -1 is negative");
    let mut g = G::new(17);
    g.output_any("a", F);
    g.node("RandomNormal", &[], &["a"])
        .attr("shape", ints(&[1 << 20, 1 << 20]));
    declined(&g, 0, "more than 2^31 - 1 elements");
}
