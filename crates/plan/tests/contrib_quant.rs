//! Claims and declines of the quantized `com.microsoft` ops (contrib QuantizeLinear /
//! DequantizeLinear, QLinearLeakyRelu, QLinearSigmoid).

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, TensorData};

/// `op` of com.microsoft over `ins` -> `y`, on a uint8 or int32 `x` of shape [2, 4].
fn one(op: &str, xdt: DataType, ins: &[&str]) -> G {
    let mut g = ms_graph(17);
    g.input("x", xdt, &[2, 4]);
    g.input("rs", DataType::Float, &[]);
    g.output_any("y", DataType::Uint8);
    g.init_f32("s", &[], &[0.1]);
    g.init(
        "z",
        TensorData::new(DataType::Uint8, vec![], vec![3]).expect("u8"),
    );
    g.init(
        "z32",
        TensorData::new(DataType::Int32, vec![], 5i32.to_le_bytes().to_vec()).expect("i32"),
    );
    let n = g.node(op, ins, &["y"]);
    n.domain = MS.into();
    g
}

#[test]
fn lookup_ops_claim_constant_parameters_only() {
    for op in ["QLinearSigmoid", "QLinearLeakyRelu"] {
        assert_eq!(
            claim(&one(op, DataType::Uint8, &["x", "s", "z", "s", "z"]), 0),
            Ok(())
        );
        assert_eq!(
            claim(&one(op, DataType::Uint8, &["x", "s", "", "s", ""]), 0),
            Ok(())
        );
        declined(
            &one(op, DataType::Uint8, &["x", "rs", "z", "s", "z"]),
            0,
            "constant",
        );
        declined(
            &one(op, DataType::Int32, &["x", "s", "z", "s", "z"]),
            0,
            "int32",
        );
    }
}

#[test]
fn contrib_quantize_declines_what_its_schema_lacks() {
    let mut g = one("DequantizeLinear", DataType::Uint8, &["x", "s", "z"]);
    assert_eq!(claim(&g, 0), Ok(()));
    g.g.nodes[0].attr("block_size", Attribute::Int(2));
    declined(&g, 0, "block_size");
    // int32 input: only without a zero point (or a zero one)
    assert_eq!(
        claim(&one("DequantizeLinear", DataType::Int32, &["x", "s"]), 0),
        Ok(())
    );
    declined(
        &one("DequantizeLinear", DataType::Int32, &["x", "s", "z32"]),
        0,
        "constant zero",
    );
    let q = one("QuantizeLinear", DataType::Float, &["x", "s", "z"]);
    assert_eq!(claim(&q, 0), Ok(()));
}

#[test]
fn qlinear_concat_claims_constant_tuples_only() {
    let mut g = one(
        "QLinearConcat",
        DataType::Uint8,
        &["s", "z", "x", "s", "z", "x", "s", "z"],
    );
    g.g.nodes[0].attr("axis", Attribute::Int(1));
    assert_eq!(claim(&g, 0), Ok(()));
    let mut g = one(
        "QLinearConcat",
        DataType::Uint8,
        &["s", "z", "x", "rs", "z"],
    );
    g.g.nodes[0].attr("axis", Attribute::Int(1));
    declined(&g, 0, "constant");
    // a tuple cut short
    let mut g = one("QLinearConcat", DataType::Uint8, &["s", "z", "x", "s"]);
    g.g.nodes[0].attr("axis", Attribute::Int(1));
    declined(&g, 0, "tuples");
}
