//! `Plan::compile_blockers`: what keeps a plan from the shapeless compiled slot, by node.

mod common;

use common::{G, int, plan_of};
use onnx_ir::DataType;
use plan::CompileClass;

#[test]
fn a_shapeless_plan_has_no_blockers() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[-1, 4])
        .output("y", DataType::Float, &[-1, 4]);
    g.node("Tanh", &["x"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Shapeless);
    assert!(p.compile_blockers().is_empty());
}

#[test]
fn host_program_and_host_reads_are_named_by_node() {
    // reshape(x, shape(x)) runs its Shape in the host program (shape-keyed); the Reshape of
    // `y` by a target computed on the device (cast of a float input) is a host read (eager).
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[-1, 4])
        .input("t", DataType::Float, &[2])
        .value("s", DataType::Int64, &[2])
        .value("r", DataType::Float, &[-1, 4])
        .value("t2", DataType::Int64, &[2])
        .output("y", DataType::Float, &[-1, -1]);
    g.node("Shape", &["x"], &["s"]).name = "shape_of_x".into();
    g.node("Reshape", &["x", "s"], &["r"]).name = "reshape_same".into();
    let cast = g.node("Cast", &["t"], &["t2"]);
    cast.name = "computed_target".into();
    cast.attributes.insert("to".into(), int(7));
    g.node("Reshape", &["r", "t2"], &["y"]).name = "reshape_computed".into();
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    let blockers = p.compile_blockers();
    let host = blockers
        .iter()
        .find(|b| b.step.is_none())
        .expect("a host-program entry");
    assert_eq!(host.limits_to, CompileClass::ShapeKeyed);
    assert!(host.reason.contains("shape_of_x (Shape)"), "{host}");
    let eager: Vec<_> = blockers
        .iter()
        .filter(|b| b.limits_to == CompileClass::Eager)
        .collect();
    assert_eq!(eager.len(), 1, "{blockers:?}");
    assert_eq!(
        (eager[0].node.as_str(), eager[0].op_type.as_str()),
        ("reshape_computed", "Reshape")
    );
    assert!(eager[0].reason.contains("t2"), "{}", eager[0]);
    assert!(
        eager[0]
            .to_string()
            .starts_with("Eager: node 'reshape_computed' (Reshape): step Reshape reads"),
        "{}",
        eager[0]
    );
}

#[test]
fn integer_arithmetic_on_input_values_moves_to_the_host_program() {
    // A target computed from an integer input's value (t * 1) is computed on the host before
    // the steps, from the input's bytes: no host read of a device value, so shape-keyed.
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[-1, 4])
        .input("t", DataType::Int64, &[2])
        .init_i64("one", &[], &[1])
        .value("t2", DataType::Int64, &[2])
        .output("y", DataType::Float, &[-1, -1]);
    g.node("Mul", &["t", "one"], &["t2"]).name = "computed_target".into();
    g.node("Reshape", &["x", "t2"], &["y"]).name = "reshape_computed".into();
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed, "{p}");
    assert_eq!(p.host.value_inputs, vec![(1, "t".to_string())]);
    assert_eq!(p.host.nodes.len(), 1);
    let t = onnx_ir::TensorData::from_i64(vec![2], &[2, 8]);
    let bound = p
        .host
        .run_with_values(&[vec![4, 4], vec![2]], &|i| (i == 1).then(|| t.clone()))
        .unwrap();
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].1.to_i64_vec().unwrap(), vec![2, 8]);
    // Without the value, the host program says so.
    assert!(p.host.run(&[vec![4, 4], vec![2]]).is_err());
}
