//! Claims, declines and lowerings of If, Loop and Scan.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, Graph, ValueInfo};
use plan::{CompileClass, Step};

fn body(
    inputs: &[(&str, DataType)],
    outputs: &[(&str, DataType)],
    f: impl FnOnce(&mut G),
) -> Attribute {
    let mut g = G::new(17);
    g.g.opset_imports.clear();
    for (n, dt) in inputs {
        g.g.inputs.push(ValueInfo {
            name: (*n).into(),
            dtype: Some(*dt),
            shape: None,
        });
    }
    for (n, dt) in outputs {
        g.output_any(n, *dt);
    }
    f(&mut g);
    Attribute::Graph(Box::new(g.build()))
}

fn if_graph(then_op: &str) -> G {
    let mut g = G::new(17);
    g.input("c", DataType::Bool, &[]);
    g.input("x", DataType::Float, &[2, 3]);
    g.init_f32("w", &[3], &[1.0, 2.0, 3.0]);
    g.output_any("y", DataType::Float);
    let then_b = body(&[], &[("t", DataType::Float)], |b| {
        b.node(then_op, &["x", "w"], &["t"]);
    });
    let else_b = body(&[], &[("e", DataType::Float)], |b| {
        b.node("Neg", &["x"], &["e"]);
    });
    let n = g.node("If", &["c"], &["y"]);
    n.attributes.insert("then_branch".into(), then_b);
    n.attributes.insert("else_branch".into(), else_b);
    g
}

#[test]
fn if_lowers_to_a_branch_with_outer_values() {
    let g = if_graph("Mul");
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    let Some(Step::Branch {
        then_body,
        else_body,
        then_args,
        else_args,
        outs,
        ..
    }) = p.steps.iter().find(|s| matches!(s, Step::Branch { .. }))
    else {
        panic!("no branch step:\n{p}");
    };
    // x is passed in; the initializer w is copied into the branch as a constant.
    assert_eq!(then_args.len(), 1);
    assert_eq!(else_args.len(), 1);
    assert_eq!(then_body.plan.inputs[0].name, "x");
    assert!(
        then_body
            .plan
            .constants
            .iter()
            .any(|(s, _)| then_body.plan.slots[s.index()].name == "w")
    );
    assert!(matches!(then_body.plan.steps[0], Step::Binary { .. }));
    assert!(matches!(else_body.plan.steps[0], Step::Unary { .. }));
    assert_eq!(outs.len(), 1);
    assert_eq!(p.dtype(outs[0]), DataType::Float);
}

#[test]
fn if_with_an_unclaimable_branch_is_declined() {
    declined(&if_graph("NoSuchOp"), 0, "then_branch");
}

#[test]
fn if_with_a_wrong_cond_type_is_declined() {
    let mut g = if_graph("Mul");
    g.g.inputs[0].dtype = Some(DataType::Float);
    declined(&g, 0, "bool");
}

#[test]
fn nested_if_reads_the_outermost_scope() {
    let mut g = G::new(17);
    g.input("c", DataType::Bool, &[]);
    g.input("x", DataType::Float, &[2]);
    g.output_any("y", DataType::Float);
    let inner_then = body(&[], &[("it", DataType::Float)], |b| {
        b.node("Relu", &["x"], &["it"]);
    });
    let inner_else = body(&[], &[("ie", DataType::Float)], |b| {
        b.node("Neg", &["x"], &["ie"]);
    });
    let outer_then = body(&[], &[("ot", DataType::Float)], |b| {
        let n = b.node("If", &["c"], &["ot"]);
        n.attributes.insert("then_branch".into(), inner_then);
        n.attributes.insert("else_branch".into(), inner_else);
    });
    let outer_else = body(&[], &[("oe", DataType::Float)], |b| {
        b.node("Identity", &["x"], &["oe"]);
    });
    let n = g.node("If", &["c"], &["y"]);
    n.attributes.insert("then_branch".into(), outer_then);
    n.attributes.insert("else_branch".into(), outer_else);
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    let Some(Step::Branch {
        then_body,
        then_args,
        ..
    }) = p.steps.first()
    else {
        panic!("{p}");
    };
    // The outer branch passes both c and x on to its own If.
    assert_eq!(then_args.len(), 2);
    assert!(matches!(then_body.plan.steps[0], Step::Branch { .. }));
}

fn loop_graph(carried_type: Option<DataType>) -> G {
    let mut g = G::new(17);
    g.input("m", DataType::Int64, &[]);
    g.input("a0", DataType::Float, &[2]);
    if carried_type.is_none() {
        g.g.inputs[1].dtype = None;
    }
    g.input("s", DataType::Float, &[2]);
    g.output_any("a", DataType::Float);
    g.output_any("scan", DataType::Float);
    let b = body(
        &[
            ("i", DataType::Int64),
            ("cin", DataType::Bool),
            ("ain", DataType::Float),
        ],
        &[
            ("cout", DataType::Bool),
            ("aout", DataType::Float),
            ("sc", DataType::Float),
        ],
        |b| {
            b.node("Identity", &["cin"], &["cout"]);
            b.node("Add", &["ain", "s"], &["aout"]);
            b.node("Identity", &["aout"], &["sc"]);
        },
    );
    g.node("Loop", &["m", "", "a0"], &["a", "scan"])
        .attributes
        .insert("body".into(), b);
    g
}

#[test]
fn loop_lowers_to_a_counted_repeat() {
    let g = loop_graph(Some(DataType::Float));
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    let Some(Step::Repeat {
        body,
        counted,
        max_trips,
        cond,
        carried,
        args,
        scan_out,
        outs,
        ..
    }) = p.steps.first()
    else {
        panic!("{p}");
    };
    assert!(*counted);
    assert!(max_trips.is_some() && cond.is_none());
    assert_eq!(
        (carried.len(), args.len(), scan_out.len(), outs.len()),
        (1, 1, 1, 2)
    );
    // iteration number, condition, carried value, outer `s`.
    assert_eq!(body.plan.inputs.len(), 4);
    assert_eq!(body.formal_inputs, 3);
}

#[test]
fn loop_carrying_an_untyped_value_is_declined() {
    declined(&loop_graph(None), 0, "not a tensor");
}

fn scan_graph(opset: i64) -> G {
    let mut g = G::new(opset);
    g.input("s0", DataType::Float, &[3]);
    g.input("x", DataType::Float, &[4, 3]);
    g.output_any("s", DataType::Float);
    g.output_any("ys", DataType::Float);
    let b = body(
        &[("sin", DataType::Float), ("xi", DataType::Float)],
        &[("sout", DataType::Float), ("y", DataType::Float)],
        |b| {
            b.node("Add", &["sin", "xi"], &["sout"]);
            b.node("Neg", &["xi"], &["y"]);
        },
    );
    let n = g.node("Scan", &["s0", "x"], &["s", "ys"]);
    n.attributes.insert("body".into(), b);
    n.attributes.insert("num_scan_inputs".into(), int(1));
    n.attributes
        .insert("scan_input_directions".into(), ints(&[1]));
    n.attributes.insert("scan_output_axes".into(), ints(&[-1]));
    g
}

#[test]
fn scan_lowers_to_a_sliced_repeat() {
    let g = scan_graph(11);
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    let Some(Step::Repeat {
        counted,
        carried,
        scanned,
        scan_in,
        scan_out,
        ..
    }) = p.steps.first()
    else {
        panic!("{p}");
    };
    assert!(!*counted);
    assert_eq!((carried.len(), scanned.len()), (1, 1));
    assert!(scan_in[0].reverse && scan_in[0].axis == 0);
    assert!(!scan_out[0].reverse && scan_out[0].axis == -1);
}

#[test]
fn scan_opset8_and_bad_attributes_are_declined() {
    declined(&scan_graph(8), 0, "sequence_lens");
    let mut g = scan_graph(11);
    g.g.nodes[0]
        .attributes
        .insert("scan_input_directions".into(), ints(&[2]));
    declined(&g, 0, "direction");
    let mut g = scan_graph(11);
    g.g.nodes[0].attributes.remove("body");
    declined(&g, 0, "body");
}

#[test]
fn body_with_wrong_arity_is_declined() {
    let mut g = scan_graph(11);
    if let Some(Attribute::Graph(b)) = g.g.nodes[0].attributes.get_mut("body") {
        let b: &mut Graph = b;
        b.inputs.pop();
    }
    declined(&g, 0, "input");
}

#[test]
fn small_constant_loop_is_unrolled_and_compilable() {
    let mut g = loop_graph(Some(DataType::Float));
    g.g.inputs.remove(0);
    g.init_i64("m", &[], &[3]);
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    assert!(
        !p.steps.iter().any(|s| matches!(s, Step::Repeat { .. })),
        "{p}"
    );
    // three adds, three unsqueezes, one concat
    assert_eq!(count(&p, |s| matches!(s, Step::Binary { .. })), 3, "{p}");
    assert_eq!(count(&p, |s| matches!(s, Step::Concat { .. })), 1, "{p}");
    assert_ne!(p.compile_class(), CompileClass::Eager);
}

#[test]
fn constant_condition_inlines_the_branch() {
    let mut g = if_graph("Mul");
    g.g.inputs.remove(0);
    g.init(
        "c",
        onnx_ir::TensorData::new(DataType::Bool, vec![], vec![1u8]).unwrap(),
    );
    claim(&g, 0).unwrap();
    let p = plan_of(&g.build());
    assert!(
        !p.steps.iter().any(|s| matches!(s, Step::Branch { .. })),
        "{p}"
    );
    assert_eq!(count(&p, |s| matches!(s, Step::Binary { .. })), 1, "{p}");
}

#[test]
fn body_reading_an_undefined_value_is_declined() {
    let mut g = if_graph("Mul");
    if let Some(Attribute::Graph(b)) = g.g.nodes[0].attributes.get_mut("then_branch") {
        b.nodes[0].inputs[1] = "nowhere".into();
    }
    declined(&g, 0, "no enclosing scope");
}

#[test]
fn device_condition_with_cheap_branches_selects_with_where() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2, 3]);
    g.init_f32("zero", &[], &[0.0]);
    g.value("s", DataType::Float, &[]);
    g.value("c", DataType::Bool, &[]);
    g.node("ReduceSum", &["x"], &["s"])
        .attributes
        .insert("keepdims".into(), int(0));
    g.node("Greater", &["s", "zero"], &["c"]);
    g.output_any("y", DataType::Float);
    let then_b = body(&[], &[], |b| {
        b.output("t", DataType::Float, &[2, 3]);
        b.node("Exp", &["x"], &["t"]);
    });
    let else_b = body(&[], &[], |b| {
        b.output("e", DataType::Float, &[2, 3]);
        b.node("Neg", &["x"], &["e"]);
    });
    let n = g.node("If", &["c"], &["y"]);
    n.attributes.insert("then_branch".into(), then_b);
    n.attributes.insert("else_branch".into(), else_b);
    claim(&g, 2).unwrap();
    let p = plan_of(&g.build());
    assert!(
        !p.steps.iter().any(|s| matches!(s, Step::Branch { .. })),
        "{p}"
    );
    assert_eq!(count(&p, |s| matches!(s, Step::Where { .. })), 1, "{p}");
    assert_ne!(p.compile_class(), CompileClass::Eager, "{p}");
}
