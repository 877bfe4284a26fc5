//! Helpers shared by the runtime's integration tests.

#![allow(dead_code)]

use onnx_ir::{DataType, Graph, Node, ValueInfo};
use runtime::{Executable, InputTensor, RuntimeOptions};

/// Little-endian bytes of float32 values, as ORT hands tensors over.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Little-endian bytes of int64 values.
pub fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A graph of `nodes` at opset 17 of the default domain.
pub fn graph(inputs: Vec<ValueInfo>, outputs: Vec<ValueInfo>, nodes: Vec<Node>) -> Graph {
    let mut g = Graph {
        inputs,
        outputs,
        nodes,
        ..Graph::default()
    };
    g.opset_imports.insert(String::new(), 17);
    g
}

/// An input of `dtype` and `dims` over the little-endian bytes `data`.
pub fn input<'a>(dtype: DataType, dims: &'a [i64], data: &'a [u8]) -> InputTensor<'a> {
    InputTensor { dtype, dims, data }
}

/// An executable of `g` with the default registry; `compile` and `capacity` as in
/// [`RuntimeOptions`] (`None`: the runtime's defaults).
pub fn executable_with(g: &Graph, compile: Option<bool>, capacity: Option<usize>) -> Executable {
    let plan = plan::build_plan(g, &plan::Registry::default()).expect("plan");
    let options = RuntimeOptions {
        compile,
        compile_cache_capacity: capacity,
        ..RuntimeOptions::default()
    };
    Executable::new(plan, &options).expect("executable")
}
