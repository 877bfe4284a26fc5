//! Claims, declines and lowerings of RNN, GRU and LSTM.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, Graph};
use plan::{Plan, Registry, Step, build_plan, partition};

fn claim(g: &G) -> Result<(), String> {
    let graph = g.build();
    Registry::default()
        .claim(&graph, &graph.nodes[0])
        .map_err(|d| d.reason)
}

fn declined(g: &G, needle: &str) {
    match claim(g) {
        Ok(()) => panic!("claimed; expected a decline mentioning '{needle}'"),
        Err(r) => assert!(r.contains(needle), "reason '{r}' lacks '{needle}'"),
    }
}

fn plan_of(g: &Graph) -> Plan {
    let r = Registry::default();
    let p = partition(g, &r);
    assert!(p.declines.is_empty(), "declines: {:?}", p.declines);
    build_plan(g, &r).unwrap_or_else(|e| panic!("{e}"))
}

fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

/// A recurrent node over X [t, 2, 3] with hidden size 4, `dirs` directions.
fn layer(op: &str, t: i64, dirs: i64) -> G {
    let gates = match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[t, 2, 3]);
    g.weight("w", &[dirs, gates * 4, 3]);
    g.weight("r", &[dirs, gates * 4, 4]);
    g.output_any("y", DataType::Float);
    g.output_any("y_h", DataType::Float);
    let dir = if dirs == 2 {
        "bidirectional"
    } else {
        "forward"
    };
    g.node(op, &["x", "w", "r"], &["y", "y_h"])
        .attr("hidden_size", int(4))
        .attr("direction", string(dir));
    g
}

#[test]
fn claims_the_three_layers() {
    for op in ["RNN", "GRU", "LSTM"] {
        for dirs in [1, 2] {
            let g = layer(op, 5, dirs);
            assert_eq!(claim(&g), Ok(()), "{op} dirs={dirs}");
            let p = plan_of(&g.build());
            // Per direction: one input projection, then the recurrent matmuls of every step
            // after the first (no initial_h: the first has none); GRU has two (z|r and h).
            let mm = p
                .steps
                .iter()
                .filter(|s| matches!(s, Step::MatMul { .. }))
                .count();
            let per_step = if op == "GRU" { 2 } else { 1 };
            assert_eq!(mm as i64, dirs * (1 + 4 * per_step), "{op} dirs={dirs}");
        }
    }
}

#[test]
fn declines_layout_1() {
    let mut g = layer("LSTM", 5, 1);
    g.g.nodes[0].attr("layout", int(1));
    declined(&g, "layout=1");
}

#[test]
fn declines_a_dynamic_sequence_length() {
    let mut g = layer("GRU", 5, 1);
    g.g.inputs[0] = onnx_ir::ValueInfo::new("x", DataType::Float, dims(&[-1, 2, 3]));
    declined(&g, "not static");
}

#[test]
fn declines_unknown_activations_and_bad_counts() {
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["Sigmoid", "Gelu", "Tanh"]));
    declined(&g, "activation 'Gelu' is not supported");
    let mut g = layer("GRU", 3, 2);
    g.g.nodes[0].attr("activations", strings(&["Sigmoid", "Tanh"]));
    declined(&g, "2 activations given; 4 expected");
    // ORT's RNN names are case-sensitive.
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["relu"]));
    declined(&g, "activation 'relu'");
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["Relu"]));
    assert_eq!(claim(&g), Ok(()));
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr(
        "activations",
        strings(&["HardSigmoid", "LeakyRelu", "Softsign"]),
    );
    assert_eq!(claim(&g), Ok(()));
}

#[test]
fn declines_missing_hidden_size_and_bad_clip() {
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attributes.remove("hidden_size");
    declined(&g, "hidden_size is required");
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr("clip", float(0.0));
    declined(&g, "clip 0 must be positive");
}

#[test]
fn declines_other_dtypes() {
    let mut g = layer("GRU", 3, 1);
    g.g.inputs[0] = onnx_ir::ValueInfo::new("x", DataType::Int32, dims(&[3, 2, 3]));
    declined(&g, "not claimed");
    let mut g = layer("LSTM", 3, 1);
    g.input("lens", DataType::Int64, &[2]);
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    declined(&g, "input 4 has element type");
}

#[test]
fn sequence_lens_masks_the_steps() {
    let mut g = layer("LSTM", 4, 2);
    g.input("lens", DataType::Int32, &[2]);
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    assert_eq!(claim(&g), Ok(()));
    let p = plan_of(&g.build());
    let wheres = p
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Where { .. }))
        .count();
    // Per step and direction: Y, H and C (the last C is unused without Y_c and dropped).
    assert_eq!(wheres, 4 * 2 * 3 - 2);
    // A constant sequence_lens equal to seq_length everywhere needs no mask.
    let mut g = layer("LSTM", 4, 2);
    let bytes: Vec<u8> = [4i32, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    g.init(
        "lens",
        onnx_ir::TensorData::new(DataType::Int32, vec![2], bytes).unwrap(),
    );
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    assert_eq!(claim(&g), Ok(()));
    let p = plan_of(&g.build());
    assert!(!p.steps.iter().any(|s| matches!(s, Step::Where { .. })));
}
