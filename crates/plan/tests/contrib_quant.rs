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

#[test]
fn qlinear_softmax_needs_constant_scales_and_fixed_rows() {
    let sm = |ins: &[&str], opset: i64, axis: i64| {
        let mut g = one("QLinearSoftmax", DataType::Uint8, ins);
        g.g.nodes[0].attr("opset", Attribute::Int(opset));
        g.g.nodes[0].attr("axis", Attribute::Int(axis));
        g
    };
    assert_eq!(claim(&sm(&["x", "s", "z", "s", "z"], 13, -1), 0), Ok(()));
    assert_eq!(claim(&sm(&["x", "s", "z", "s", "z"], 1, 0), 0), Ok(()));
    declined(&sm(&["x", "rs", "z", "s", "z"], 13, -1), 0, "constant");
    declined(&sm(&["x", "s", "z", "rs", "z"], 13, -1), 0, "constant");
    let mut g = sm(&["x", "s", "z", "s", "z"], 13, -1);
    g.g.nodes[0].attributes.remove("opset");
    declined(&g, 0, "opset");
    assert!(claim(&sm(&["x", "s", "z", "s", "z"], 13, 2), 0).is_err());
}

#[test]
fn qlinear_pools_need_constant_parameters_and_supported_forms() {
    let pool = |op: &str, ins: &[&str], attrs: &[(&str, Attribute)]| {
        let mut g = G::new(17);
        g.g.opset_imports.insert(MS.into(), 1);
        g.input("x", DataType::Uint8, &[1, 2, 4, 4]);
        g.input("rs", DataType::Float, &[]);
        g.output_any("y", DataType::Uint8);
        g.init_f32("s", &[], &[0.1]);
        g.init_f32("big", &[], &[1000.0]);
        g.init(
            "z",
            TensorData::new(DataType::Uint8, vec![], vec![3]).expect("u8"),
        );
        let n = g.node(op, ins, &["y"]);
        n.domain = MS.into();
        for (k, v) in attrs {
            n.attr(k, v.clone());
        }
        g
    };
    let k = [("kernel_shape", Attribute::Ints(vec![2, 2]))];
    let ok = ["x", "s", "z", "s", "z"];
    assert_eq!(
        claim(&pool("QLinearGlobalAveragePool", &ok, &[]), 0),
        Ok(())
    );
    assert_eq!(claim(&pool("QLinearAveragePool", &ok, &k), 0), Ok(()));
    let runtime = ["x", "rs", "z", "s", "z"];
    declined(&pool("QLinearAveragePool", &runtime, &k), 0, "constant");
    declined(
        &pool("QLinearGlobalAveragePool", &runtime, &[]),
        0,
        "constant",
    );
    // MLAS rejects a scale of 1000 / (0.1 * 16)
    let big = ["x", "big", "z", "s", "z"];
    declined(&pool("QLinearGlobalAveragePool", &big, &[]), 0, "range");
    let dil = [
        ("kernel_shape", Attribute::Ints(vec![2, 2])),
        ("dilations", Attribute::Ints(vec![2, 2])),
    ];
    declined(&pool("QLinearAveragePool", &ok, &dil), 0, "dilations");
    let wide = [("kernel_shape", Attribute::Ints(vec![9, 9]))];
    assert!(claim(&pool("QLinearAveragePool", &ok, &wide), 0).is_err());
}

#[test]
fn qgemm_claims_its_schema_forms() {
    let qgemm = |adt: DataType, bdt: DataType, bs: &[i64], ins: &[&str]| {
        let mut g = G::new(17);
        g.g.opset_imports.insert(MS.into(), 1);
        g.input("a", adt, &[2, 4]);
        g.input("b", bdt, &[4, 3]);
        g.output_any("y", DataType::Float);
        g.init_f32("s", &[], &[0.1]);
        g.init_f32("bs", bs, &vec![0.1; bs.iter().product::<i64>() as usize]);
        for (name, dt) in [("za", adt), ("zb", bdt)] {
            let n: i64 = if name == "zb" { bs.iter().product() } else { 1 };
            let d = if name == "zb" { bs.to_vec() } else { vec![] };
            g.init(
                name,
                TensorData::new(dt, d, vec![1; n as usize]).expect("zp"),
            );
        }
        let n = g.node("QGemm", ins, &["y"]);
        n.domain = MS.into();
        g
    };
    let (u8t, i8t) = (DataType::Uint8, DataType::Int8);
    let ins = ["a", "s", "za", "b", "bs", "zb"];
    assert_eq!(claim(&qgemm(u8t, i8t, &[3], &ins), 0), Ok(()));
    assert_eq!(claim(&qgemm(i8t, i8t, &[], &ins), 0), Ok(()));
    // int8 A takes int8 B only
    assert!(claim(&qgemm(i8t, u8t, &[], &ins), 0).is_err());
    // b_scale of neither 1 nor N elements
    declined(&qgemm(u8t, u8t, &[2], &ins), 0, "b_scale");
    // y_scale without y_zero_point
    let half = ["a", "s", "za", "b", "bs", "zb", "", "s"];
    declined(&qgemm(u8t, u8t, &[], &half), 0, "together");
}

#[test]
fn qlinear_binary_ops_need_constant_parameters() {
    for op in ["QLinearAdd", "QLinearMul"] {
        let mut g = one(
            op,
            DataType::Uint8,
            &["x", "s", "z", "x", "s", "z", "s", "z"],
        );
        let supported = cfg!(all(target_os = "linux", target_arch = "x86_64"))
            && (op == "QLinearMul" || claim(&g, 0).is_ok());
        if supported {
            assert_eq!(claim(&g, 0), Ok(()));
        } else {
            declined(&g, 0, "MLAS");
        }
        g.g.nodes[0].inputs[4] = "rs".into();
        assert!(claim(&g, 0).is_err());
    }
}
