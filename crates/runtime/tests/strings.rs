//! Plans with host-only values: strings live on the host (host kernels read and write them, no
//! MLX array holds one), while the bool / int64 results they feed are ordinary arrays; absent
//! optional inputs bind no array at all.

use onnx_ir::{DataType, Dim, Graph, Node, TensorData, ValueInfo};
use runtime::RunPath;

mod common;
use common::{executable_with, i64_bytes, input};

fn vi(name: &str, dtype: DataType, dims: &[i64]) -> ValueInfo {
    ValueInfo::new(name, dtype, dims.iter().map(|&d| Dim::Fixed(d)).collect())
}

fn strings(v: &[&str]) -> Vec<u8> {
    TensorData::from_strings(vec![v.len() as i64], v)
        .unwrap()
        .bytes
        .to_vec()
}

/// `ab = a + b; eq = ab == c; n = eq ? k : 0` and `ab` as outputs: strings, bools and int64
/// in one plan.
fn mixed() -> Graph {
    let mut g = common::graph(
        vec![
            vi("a", DataType::String, &[3]),
            vi("b", DataType::String, &[1]),
            vi("c", DataType::String, &[3]),
            vi("k", DataType::Int64, &[3]),
        ],
        vec![
            vi("ab", DataType::String, &[3]),
            vi("n", DataType::Int64, &[3]),
        ],
        vec![
            Node::new("StringConcat", ["a", "b"], ["ab"]),
            Node::new("Equal", ["ab", "c"], ["eq"]),
            Node::new("Where", ["eq", "k", "zero"], ["n"]),
        ],
    );
    g.opset_imports.insert(String::new(), 20);
    g.initializers
        .insert("zero".into(), TensorData::from_i64(vec![], &[0]));
    g.value_info
        .insert("eq".into(), vi("eq", DataType::Bool, &[3]));
    g
}

#[test]
fn strings_flow_through_host_kernels_into_arrays() {
    // compiled or not, a string plan runs eagerly
    for compile in [None, Some(true)] {
        let exe = executable_with(&mixed(), compile, None);
        let (a, b, c) = (
            strings(&["x", "y", "é"]),
            strings(&["!"]),
            strings(&["x!", "z", "é!"]),
        );
        let k = i64_bytes(&[10, 20, 30]);
        let inputs = [
            input(DataType::String, &[3], &a),
            input(DataType::String, &[1], &b),
            input(DataType::String, &[3], &c),
            input(DataType::Int64, &[3], &k),
        ];
        for _ in 0..2 {
            let out = exe.run(&inputs).unwrap();
            assert_eq!(out[0].dtype, DataType::String);
            assert_eq!(out[0].dims, vec![3]);
            assert_eq!(
                out[0].strings().unwrap(),
                [&b"x!"[..], b"y!", "é!".as_bytes()]
            );
            assert_eq!(out[1].dtype, DataType::Int64);
            assert_eq!(out[1].data(), i64_bytes(&[10, 0, 30]));
        }
        assert_eq!(exe.run_stats().last.unwrap().path, RunPath::Eager);
    }
}

#[test]
fn malformed_string_input_is_an_error() {
    let exe = executable_with(&mixed(), None, None);
    let bad = vec![9u8, 0, 0];
    let (b, c) = (strings(&["!"]), strings(&["x!", "z", "é!"]));
    let k = i64_bytes(&[10, 20, 30]);
    let err = exe
        .run(&[
            input(DataType::String, &[3], &bad),
            input(DataType::String, &[1], &b),
            input(DataType::String, &[3], &c),
            input(DataType::Int64, &[3], &k),
        ])
        .err()
        .expect("malformed bytes are refused");
    assert!(err.0.contains("input 'a'"), "{err}");
}

/// `has = OptionalHasElement(opt)`, `y = OptionalGetElement(opt)` over the optional graph
/// input `opt`: an absent input binds no array, and only the optional ops read it.
#[test]
fn absent_optional_inputs_bind_nothing() {
    let opt_graph = |get: bool| {
        let mut outputs = vec![vi("has", DataType::Bool, &[])];
        let mut nodes = vec![Node::new("OptionalHasElement", ["opt"], ["has"])];
        if get {
            outputs.push(vi("y", DataType::Float, &[2]));
            nodes.push(Node::new("OptionalGetElement", ["opt"], ["y"]));
        }
        let mut g = common::graph(vec![vi("opt", DataType::Float, &[2])], outputs, nodes);
        g.opset_imports.insert(String::new(), 18);
        g.optional_inputs.insert("opt".into());
        g
    };
    let exe = executable_with(&opt_graph(false), None, None);
    let out = exe
        .run(&[runtime::InputTensor::absent(DataType::Float)])
        .unwrap();
    assert_eq!(out[0].data(), [0]);
    let x = common::f32_bytes(&[1.5, -2.0]);
    let out = exe.run(&[input(DataType::Float, &[2], &x)]).unwrap();
    assert_eq!(out[0].data(), [1]);
    // OptionalGetElement of an absent input fails the run (as ORT), then runs again
    let exe = executable_with(&opt_graph(true), None, None);
    assert!(
        exe.run(&[runtime::InputTensor::absent(DataType::Float)])
            .is_err()
    );
    let out = exe.run(&[input(DataType::Float, &[2], &x)]).unwrap();
    assert_eq!((out[0].data(), out[1].data()), (&[1u8][..], &x[..]));
}
