//! The runtime's guards: inputs that would make MLX crash the process (out-of-range indices,
//! integer division by zero or of the minimum by -1, tensors larger than memory) and failed
//! run-time requirements are errors naming the node, and the executable keeps working.

use onnx_ir::{DataType, Dim, Graph, Node, ValueInfo};
use runtime::{Executable, RuntimeOptions};

mod common;
use common::input;

fn graph(inputs: Vec<ValueInfo>, output: ValueInfo, nodes: Vec<Node>) -> Graph {
    let mut g = Graph {
        inputs,
        outputs: vec![output.clone()],
        nodes,
        ..Graph::default()
    };
    g.opset_imports.insert(String::new(), 17);
    g.value_info.insert(output.name.clone(), output);
    g
}

fn executable(g: &Graph) -> Executable {
    let plan = plan::build_plan(g, &plan::Registry::default()).expect("plan");
    Executable::new(plan, &RuntimeOptions::default()).expect("executable")
}

fn fixed(dims: &[i64]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::Fixed(d)).collect()
}

fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    // SAFETY: plain numbers, read as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        .to_vec()
}

#[test]
fn out_of_range_gather_indices_are_an_error_not_a_read() {
    let g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, fixed(&[3, 2])),
            ValueInfo::new("i", DataType::Int64, fixed(&[2])),
        ],
        ValueInfo::new("y", DataType::Float, fixed(&[2, 2])),
        vec![Node::new("Gather", ["x", "i"], ["y"])],
    );
    let exe = executable(&g);
    let x = bytes(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    for bad in [[0i64, 100_000_000], [-4, 0], [3, 0]] {
        let i = bytes(&bad);
        let err = exe
            .run(&[
                input(DataType::Float, &[3, 2], &x),
                input(DataType::Int64, &[2], &i),
            ])
            .err()
            .unwrap_or_else(|| panic!("indices {bad:?} gave outputs"));
        assert!(
            err.0.contains("Gather_y") && err.0.contains("out of range"),
            "{err}"
        );
    }
    let i = bytes(&[-1i64, 0]);
    let out = exe
        .run(&[
            input(DataType::Float, &[3, 2], &x),
            input(DataType::Int64, &[2], &i),
        ])
        .unwrap();
    assert_eq!(out[0].data(), bytes(&[5.0f32, 6.0, 1.0, 2.0]));
}

#[test]
fn constant_indices_are_checked_against_the_run_time_dimension() {
    // The indices are an initializer, so their range is known once; the axis they index has
    // a run-time length, so index 2 is fine for 3 rows and out of range for 2.
    let mut g = graph(
        vec![ValueInfo::new(
            "x",
            DataType::Float,
            vec![Dim::Symbolic("n".into()), Dim::Fixed(2)],
        )],
        ValueInfo::new("y", DataType::Float, fixed(&[2, 2])),
        vec![Node::new("Gather", ["x", "i"], ["y"])],
    );
    g.initializers
        .insert("i".into(), onnx_ir::TensorData::from_i64(vec![2], &[2, 0]));
    let exe = executable(&g);
    let three = bytes(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let out = exe.run(&[input(DataType::Float, &[3, 2], &three)]).unwrap();
    assert_eq!(out[0].data(), bytes(&[5.0f32, 6.0, 1.0, 2.0]));
    let err = exe
        .run(&[input(DataType::Float, &[2, 2], &three[..16])])
        .err()
        .expect("index 2 of 2 rows gave outputs");
    assert!(err.0.contains("out of range"), "{err}");
}

#[test]
fn integer_division_never_traps() {
    let g = graph(
        vec![
            ValueInfo::new("a", DataType::Int32, fixed(&[3])),
            ValueInfo::new("b", DataType::Int32, fixed(&[3])),
        ],
        ValueInfo::new("y", DataType::Int32, fixed(&[3])),
        vec![Node::new("Div", ["a", "b"], ["y"])],
    );
    let exe = executable(&g);
    let run = |a: [i32; 3], b: [i32; 3]| {
        let (a, b) = (bytes(&a), bytes(&b));
        exe.run(&[
            input(DataType::Int32, &[3], &a),
            input(DataType::Int32, &[3], &b),
        ])
        .map(|o| o[0].data().to_vec())
    };
    // x86 traps (SIGFPE) on both; MLX divides with the C operator.
    let err = run([7, 1, 2], [2, 0, 1]).unwrap_err();
    assert!(
        err.0.contains("division by zero") && err.0.contains("Div_y"),
        "{err}"
    );
    assert_eq!(
        run([i32::MIN, -7, 7], [-1, 2, -2]).unwrap(),
        bytes(&[i32::MIN, -3, -3])
    );
}

#[test]
fn tensors_larger_than_memory_are_refused_before_evaluation() {
    let g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, fixed(&[1])),
            ValueInfo::new("s", DataType::Int64, fixed(&[2])),
        ],
        ValueInfo::new("y", DataType::Float, vec![Dim::Unknown, Dim::Unknown]),
        vec![Node::new("Expand", ["x", "s"], ["y"])],
    );
    let exe = executable(&g);
    let x = bytes(&[1.0f32]);
    let huge = bytes(&[1_000_000i64, 1_000_000]);
    let err = exe
        .run(&[
            input(DataType::Float, &[1], &x),
            input(DataType::Int64, &[2], &huge),
        ])
        .err()
        .expect("the run should fail");
    assert!(
        err.0.contains("Expand_y") && err.0.contains("bytes"),
        "{err}"
    );
    let small = bytes(&[2i64, 3]);
    let out = exe
        .run(&[
            input(DataType::Float, &[1], &x),
            input(DataType::Int64, &[2], &small),
        ])
        .unwrap();
    assert_eq!(out[0].dims, vec![2, 3]);
    assert!(runtime::max_tensor_bytes() > 0);
}

#[test]
fn failed_requirements_name_the_node() {
    let mut g = graph(
        vec![
            ValueInfo::new("x", DataType::Float, fixed(&[2, 5])),
            ValueInfo::new("k", DataType::Int64, fixed(&[1])),
        ],
        ValueInfo::new("v", DataType::Float, vec![Dim::Fixed(2), Dim::Unknown]),
        vec![Node::new("TopK", ["x", "k"], ["v", "i"])],
    );
    g.value_info.insert(
        "i".into(),
        ValueInfo::new("i", DataType::Int64, vec![Dim::Fixed(2), Dim::Unknown]),
    );
    let exe = executable(&g);
    let x = bytes(&[5.0f32, 1.0, 4.0, 2.0, 3.0, 0.0, 9.0, 8.0, 7.0, 6.0]);
    for k in [7i64, -1] {
        let kb = bytes(&[k]);
        let err = exe
            .run(&[
                input(DataType::Float, &[2, 5], &x),
                input(DataType::Int64, &[1], &kb),
            ])
            .err()
            .expect("the run should fail");
        assert!(
            err.0.contains("TopK") && err.0.contains("k must be"),
            "{err}"
        );
    }
    let kb = bytes(&[2i64]);
    let out = exe
        .run(&[
            input(DataType::Float, &[2, 5], &x),
            input(DataType::Int64, &[1], &kb),
        ])
        .unwrap();
    assert_eq!(out[0].data(), bytes(&[5.0f32, 4.0, 9.0, 8.0]));
}
