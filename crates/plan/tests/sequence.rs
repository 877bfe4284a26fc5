//! Sequence and Optional ops: claims, declines (sequence/optional values never cross a fused
//! node's boundary) and their plans.

mod common;

use common::*;
use onnx_ir::DataType;

const F: DataType = DataType::Float;
const I64: DataType = DataType::Int64;

/// `x[2,6] -> SplitToSequence(axis) -> SequenceAt(pos) -> y`.
fn split_at(split: Option<&[i64]>, pos: i64) -> G {
    let mut g = G::new(18);
    g.input("x", F, &[2, 6]).output_any("y", F);
    g.init_i64("pos", &[], &[pos]);
    let ins: Vec<&str> = match split {
        Some(s) => {
            if s.len() == 1 {
                g.init_i64("split", &[], s);
            } else {
                g.init_i64("split", &[s.len() as i64], s);
            }
            vec!["x", "split"]
        }
        None => vec!["x"],
    };
    g.node("SplitToSequence", &ins, &["s"]).attr("axis", int(1));
    g.node("SequenceAt", &["s", "pos"], &["y"]);
    g
}

#[test]
fn split_to_sequence_forms_plan_and_count_parts() {
    for (split, parts) in [(None, 6), (Some(&[4][..]), 2), (Some(&[1, 2, 3][..]), 3)] {
        let g = split_at(split, -1);
        let p = plan_of(&g.build());
        let split_step = p
            .steps
            .iter()
            .find_map(|s| match s {
                plan::Step::Split { outs, .. } => Some(outs.len()),
                _ => None,
            })
            .expect("a Split step");
        assert_eq!(split_step, parts, "{split:?}");
        // The last part is the output.
        assert_eq!(p.outputs.len(), 1);
    }
}

#[test]
fn keepdims_zero_squeezes_each_part() {
    let mut g = split_at(None, 0);
    g.g.nodes[0].attr("keepdims", int(0));
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, plan::Step::Reshape { .. })), 6);
}

#[test]
fn out_of_range_position_fails_planning() {
    let g = split_at(Some(&[3, 3]), 2);
    let r = plan::Registry::default();
    let err = plan::build_plan(&g.build(), &r).unwrap_err().to_string();
    assert!(err.contains("out of range"), "{err}");
    let part = plan::partition_plannable(&g.build(), &r);
    assert!(part.clusters.is_empty(), "{part:?}");
}

#[test]
fn sequence_graph_output_is_declined() {
    let mut g = G::new(18);
    g.input("x", F, &[2, 6]);
    g.g.outputs.push(onnx_ir::ValueInfo {
        name: "s".into(),
        ..Default::default()
    });
    g.node("SplitToSequence", &["x"], &["s"]);
    declined(&g, 0, "graph output");
}

#[test]
fn sequence_graph_input_is_declined() {
    let mut g = G::new(18);
    g.g.inputs.push(onnx_ir::ValueInfo {
        name: "s".into(),
        ..Default::default()
    });
    g.output_any("y", F);
    g.node("ConcatFromSequence", &["s"], &["y"])
        .attr("axis", int(0));
    declined(&g, 0, "sequence graph inputs are not read");
}

#[test]
fn run_time_position_and_unknown_split_size_are_declined() {
    let mut g = G::new(18);
    g.input("a", F, &[2])
        .input("p", I64, &[])
        .output_any("y", F);
    g.node("SequenceConstruct", &["a", "a"], &["s"]);
    g.node("SequenceAt", &["s", "p"], &["y"]);
    declined(&g, 1, "not a plan-time constant");

    let mut g = G::new(18);
    g.input("x", F, &[2, -1]).output_any("y", F);
    g.init_i64("pos", &[], &[0]);
    g.node("SplitToSequence", &["x"], &["s"])
        .attr("axis", int(1));
    g.node("SequenceAt", &["s", "pos"], &["y"]);
    declined(&g, 0, "must be known at plan time");
}

#[test]
fn a_sequence_cut_by_an_unclaimed_node_is_refused_on_both_sides() {
    // s = SequenceConstruct(a, b); u = Unknown(a); y = ConcatFromSequence(s) + u: the
    // ConcatFromSequence needs u (made on ORT) and s (made by the MLX cluster before u).
    let mut g = G::new(18);
    g.input("a", F, &[2]).input("b", F, &[2]).output_any("y", F);
    g.node("SequenceConstruct", &["a", "b"], &["s"]);
    g.node("NotAnOp", &["a"], &["u"]);
    g.node("SequenceInsert", &["s", "u"], &["s2"]);
    g.node("ConcatFromSequence", &["s2"], &["y"])
        .attr("axis", int(0));
    let part = plan::partition_plannable(&g.build(), &plan::Registry::default());
    let declined: Vec<&str> = part.declines.iter().map(|d| d.op_type.as_str()).collect();
    for op in ["SequenceConstruct", "SequenceInsert", "ConcatFromSequence"] {
        assert!(declined.contains(&op), "{op} not declined: {part:?}");
    }
    assert!(part.clusters.is_empty(), "{part:?}");
}

#[test]
fn construct_concat_length_plan() {
    let mut g = G::new(18);
    g.input("a", F, &[2, 3]).input("b", F, &[2, 3]);
    g.output_any("y", F).output_any("n", I64);
    g.node("SequenceConstruct", &["a", "b", "a"], &["s"]);
    g.node("ConcatFromSequence", &["s"], &["y"])
        .attr("axis", int(0))
        .attr("new_axis", int(1));
    g.node("SequenceLength", &["s"], &["n"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, plan::Step::Concat { .. })), 1);
    // One unsqueeze per distinct tensor: `a`'s second one is the same step (merged).
    assert_eq!(count(&p, |s| matches!(s, plan::Step::Reshape { .. })), 2);
    // The length is a constant.
    assert_eq!(p.constants.len(), 1);
}

#[test]
fn optional_forms() {
    // Optional(x) -> HasElement / GetElement; HasElement with no input; None -> HasElement.
    let mut g = G::new(18);
    g.input("x", F, &[3]);
    g.output_any("h", DataType::Bool)
        .output_any("e", DataType::Bool)
        .output_any("nh", DataType::Bool)
        .output_any("y", F);
    g.node("Optional", &["x"], &["o"]);
    g.node("OptionalHasElement", &["o"], &["h"]);
    g.node("OptionalHasElement", &[], &["e"]);
    g.node("Optional", &[], &["none"]);
    g.node("OptionalHasElement", &["none"], &["nh"]);
    g.node("OptionalGetElement", &["o"], &["y"]);
    let p = plan_of(&g.build());
    assert!(p.steps.is_empty(), "{p}");
    let text = p.to_string();
    assert!(text.contains("true") || !p.constants.is_empty(), "{text}");
    let bools: Vec<u8> = p
        .constants
        .iter()
        .filter(|(_, t)| t.dtype == DataType::Bool)
        .map(|(_, t)| t.bytes[0])
        .collect();
    assert!(bools.contains(&1) && bools.contains(&0), "{bools:?}");
}

#[test]
fn optional_declines() {
    // GetElement of None; HasElement of an untyped graph input (a sequence, say); opset 15
    // without input.
    let mut g = G::new(18);
    g.output_any("y", F);
    g.node("Optional", &[], &["none"]);
    g.node("OptionalGetElement", &["none"], &["y"]);
    declined(&g, 1, "None");

    let mut g = G::new(18);
    g.g.inputs.push(onnx_ir::ValueInfo {
        name: "o".into(),
        ..Default::default()
    });
    g.output_any("h", DataType::Bool);
    g.node("OptionalHasElement", &["o"], &["h"]);
    declined(&g, 0, "sequence graph inputs are not read");

    let mut g = G::new(15);
    g.output_any("h", DataType::Bool);
    g.node("OptionalHasElement", &[], &["h"]);
    declined(&g, 0, "needs an input");
}

/// A graph of one node reading the optional(tensor) graph input `opt` (float32 [4]).
fn optional_input_graph(op: &str, out: DataType) -> G {
    let mut g = G::new(18);
    g.input("opt", DataType::Float, &[4]);
    g.g.optional_inputs.insert("opt".into());
    g.output_any("y", out);
    g.node(op, &["opt"], &["y"]);
    g
}

#[test]
fn optional_graph_inputs_are_read_by_the_optional_ops_only() {
    let g = optional_input_graph("OptionalHasElement", DataType::Bool);
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    assert_eq!(kernel_steps(&p, "optional_has_element").len(), 1, "{p}");
    let g = optional_input_graph("OptionalGetElement", DataType::Float);
    claim(&g, 0).unwrap();
    // any other op would read a value that may be absent
    declined(
        &optional_input_graph("Identity", DataType::Float),
        0,
        "optional graph input",
    );
    declined(
        &optional_input_graph("Relu", DataType::Float),
        0,
        "optional graph input",
    );
}

#[test]
fn optional_has_element_kernel_sees_absence() {
    let k = |inputs: &[Option<onnx_ir::TensorData>]| {
        plan::run_host_kernel("optional_has_element", inputs, &plan::KernelAttrs::new()).unwrap()[0]
            .bytes
            .to_vec()
    };
    assert_eq!(k(&[None]), [0]);
    assert_eq!(
        k(&[Some(onnx_ir::TensorData::from_i64(vec![1], &[4]))]),
        [1]
    );
}
