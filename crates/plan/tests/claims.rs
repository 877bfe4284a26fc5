//! Claim and decline reasons.

mod common;

use common::*;
use onnx_ir::{DataType, Node, TensorData};
use plan::Registry;

#[test]
fn unknown_op_and_domain() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.node("NoSuchOp", &["x"], &["y"]);
    declined(&g, 0, "no MLX lowering for ai.onnx::NoSuchOp");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.node("Relu", &["x"], &["y"]).domain = "com.example".into();
    declined(&g, 0, "no MLX lowering for com.example::Relu");
}

#[test]
fn opset_ranges() {
    let mut g = G::new(6);
    g.input("x", DataType::Float, &[2]);
    g.node("Add", &["x", "x"], &["y"]);
    declined(&g, 0, "opset 6 is outside the supported opset range 7..=26");
    // Newer than the planner's newest: claimed unless the op's schema changed since (more in
    // tests/opset_forward.rs).
    let mut g = G::new(28);
    g.input("x", DataType::Float, &[2]);
    g.node("Relu", &["x"], &["y"]);
    g.node("Mod", &["x", "x"], &["z"]).attr("fmod", int(1));
    assert!(claim(&g, 0).is_ok());
    declined(&g, 1, "Op Mod got a new schema in opset 28");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.node("Gelu", &["x"], &["y"]);
    declined(
        &g,
        0,
        "Gelu at opset 17 is outside the supported opset range 20..=26",
    );
    let mut g = G::new(17);
    g.g.opset_imports.clear();
    g.input("x", DataType::Float, &[2]);
    g.node("Relu", &["x"], &["y"]);
    declined(&g, 0, "imports no opset");
}

#[test]
fn dtypes() {
    // float64: claimed for the ops of FLOAT64_OPS (float64-accurate on MLX's CPU backend),
    // declined for the others (MLX's float64 exp is float32-accurate).
    let mut g = G::new(17);
    g.input("x", DataType::Double, &[2]);
    g.node("Relu", &["x"], &["y"]);
    g.node("Softmax", &["x"], &["z"]);
    g.node("Cast", &["x"], &["w"]).attr("to", int(1));
    g.node("Erf", &["x"], &["e"]);
    assert!(claim(&g, 0).is_ok());
    declined(&g, 1, "float64");
    assert!(claim(&g, 2).is_ok());
    declined(&g, 3, "float64");
    let mut g = G::new(17);
    g.input("x", DataType::Int64, &[2]);
    g.input("w", DataType::Int64, &[2, 2]);
    g.node("MatMul", &["x", "w"], &["y"]);
    declined(&g, 0, "input 0 has element type int64");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.input("y", DataType::Float16, &[2]);
    g.node("Add", &["x", "y"], &["z"]);
    declined(&g, 0, "input 1 is float16 but input 0 is float");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.node("Cast", &["x"], &["y"]).attr("to", int(8));
    declined(&g, 0, "casting to string");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.node("Cast", &["x"], &["y"]).attr("to", int(7));
    assert!(claim(&g, 0).is_ok());
    // An input whose type nothing states.
    let mut g = G::new(17);
    g.node("Relu", &["mystery"], &["y"]);
    declined(&g, 0, "element type of input 0 ('mystery') is unknown");
}

#[test]
fn integer_ops() {
    let mut g = G::new(17);
    g.input("a", DataType::Int64, &[2]);
    g.input("b", DataType::Int64, &[2]);
    g.node("Div", &["a", "b"], &["c"]);
    g.node("Pow", &["a", "b"], &["d"]);
    g.node("Mod", &["a", "b"], &["e"]);
    assert!(claim(&g, 0).is_ok());
    // an integer base with a run-time exponent runs as pow(double, double), as ORT does
    assert!(claim(&g, 1).is_ok());
    assert!(claim(&g, 2).is_ok());
    g.init_i64("two", &[], &[2]);
    g.node("Pow", &["a", "two"], &["f"]);
    assert!(claim(&g, 3).is_ok());
    let mut g = G::new(17);
    g.input("a", DataType::Float, &[2]);
    g.node("Mod", &["a", "a"], &["e"]).attr("fmod", int(1));
    assert!(claim(&g, 0).is_ok());
    g.node("Mod", &["a", "a"], &["f"]);
    declined(&g, 1, "need fmod=1");
}

#[test]
fn attribute_limits() {
    let mut g = G::new(19);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
    g.node("Resize", &["x", "", "scales"], &["y"])
        .attr("mode", string("linear"))
        .attr("antialias", int(1))
        .attr(
            "coordinate_transformation_mode",
            string("tf_crop_and_resize"),
        );
    declined(&g, 0, "antialias=1 with tf_crop_and_resize is not claimed");
    g.node("Resize", &["x", "", "scales"], &["y2"]).attr(
        "coordinate_transformation_mode",
        string("tf_crop_and_resize"),
    );
    declined(&g, 1, "tf_crop_and_resize");
    g.node("Resize", &["x", "", "scales"], &["y3"]);
    assert!(claim(&g, 2).is_ok());

    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.node("MaxPool", &["x"], &["y", "idx"])
        .attr("kernel_shape", ints(&[2, 2]))
        .attr("storage_order", int(2));
    declined(&g, 0, "storage_order 2");
    g.node("MaxPool", &["x"], &["y2"])
        .attr("kernel_shape", ints(&[2, 2]));
    assert!(claim(&g, 1).is_ok());
    g.node("AveragePool", &["x"], &["y3"])
        .attr("kernel_shape", ints(&[2, 2]))
        .attr("pads", ints(&[2, 0, 0, 0]));
    declined(&g, 2, "reach a whole window");

    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2, 4]);
    g.weight("s", &[4]);
    g.node("LayerNormalization", &["x", "s"], &["y"])
        .attr("stash_type", int(0));
    declined(&g, 0, "stash_type=0");

    let mut g = G::new(15);
    g.input("x", DataType::Float, &[2, 3, 4, 4]);
    for p in ["s", "b", "m", "v"] {
        g.weight(p, &[3]);
    }
    g.node("BatchNormalization", &["x", "s", "b", "m", "v"], &["y"])
        .attr("training_mode", int(1));
    declined(&g, 0, "training_mode=1");

    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.node("ArgMax", &["x"], &["y"])
        .attr("select_last_index", int(1));
    assert!(claim(&g, 0).is_ok());
    // select_last_index searches the reversed input: it needs the rank
    g.input_unranked("u", DataType::Float);
    g.node("ArgMin", &["u"], &["z"])
        .attr("select_last_index", int(1));
    declined(&g, 1, "rank of input 0");

    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 3]);
    g.init_i64("p", &[4], &[0, 1, 0, 1]);
    g.node("Pad", &["x", "p"], &["y"])
        .attr("mode", string("mirror"));
    declined(&g, 0, "mode 'mirror'");
    g.init_i64("neg", &[4], &[0, -1, 0, 1]);
    g.node("Pad", &["x", "neg"], &["y2"]);
    declined(&g, 1, "negative pads");
}

#[test]
fn rank_requirements() {
    // Legacy Softmax coerces to 2-D at axis 1: the rank is needed.
    let mut g = G::new(11);
    g.input_unranked("x", DataType::Float);
    g.node("Softmax", &["x"], &["y"]);
    declined(&g, 0, "rank is unknown");
    g.node("Softmax", &["x"], &["y2"]).attr("axis", int(-1));
    assert!(claim(&g, 1).is_ok());
    // Opset 13 Softmax is per-axis: no rank needed.
    let mut g = G::new(13);
    g.input_unranked("x", DataType::Float);
    g.node("Softmax", &["x"], &["y"]);
    assert!(claim(&g, 0).is_ok());
    // Conv needs the kernel shape.
    let mut g = G::new(17);
    g.input_unranked("x", DataType::Float);
    g.input_unranked("w", DataType::Float);
    g.node("Conv", &["x", "w"], &["y"]);
    declined(&g, 0, "kernel shape is unknown");
}

#[test]
fn constants_and_dropout() {
    let mut g = G::new(17);
    g.node("Constant", &[], &["c"]).attr(
        "value",
        onnx_ir::Attribute::Tensor(TensorData::from_i64(vec![1], &[3])),
    );
    assert!(claim(&g, 0).is_ok());
    g.node("Constant", &[], &["s"])
        .attr("value_string", string("hi"));
    declined(&g, 1, "only value");
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2]);
    g.node("Dropout", &["x"], &["y", "mask"]);
    assert!(claim(&g, 0).is_ok());
    g.node("Dropout", &["x"], &["y2"]);
    assert!(claim(&g, 1).is_ok());
    // training mode known only at run time: claimed (drops at random when true)
    g.input("t", DataType::Bool, &[]);
    g.node("Dropout", &["x", "", "t"], &["y3"]);
    assert!(claim(&g, 2).is_ok());
    g.input("i", DataType::Int64, &[2]);
    g.node("Dropout", &["i", "", "t"], &["y4"]);
    declined(&g, 3, "not claimed");
}

#[test]
fn registry_lists_required_ops() {
    let r = Registry::default();
    let ops: Vec<&str> = r.entries().iter().map(|e| e.op_type).collect();
    for op in [
        "Gather",
        "Add",
        "Mul",
        "Sub",
        "Div",
        "MatMul",
        "Gemm",
        "Reshape",
        "Transpose",
        "Concat",
        "Slice",
        "Squeeze",
        "Unsqueeze",
        "Shape",
        "Cast",
        "Softmax",
        "Erf",
        "Gelu",
        "Tanh",
        "Sqrt",
        "Pow",
        "ReduceMean",
        "LayerNormalization",
        "Where",
        "Equal",
        "Expand",
        "ConstantOfShape",
        "Constant",
        "Identity",
        "Conv",
        "BatchNormalization",
        "Relu",
        "Clip",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "Flatten",
        "Sigmoid",
        "Resize",
    ] {
        assert!(ops.contains(&op), "{op} is not registered");
    }
    // Every entry's range is sane.
    for e in r.entries() {
        assert!(e.since <= e.until, "{e:?}");
    }
    let _ = Node::default();
}

#[test]
fn narrow_float_casts_and_bitcasts() {
    // float4 e2m1 (opset 23) and float8 e8m0 (opset 24), both ways, from and to the wide floats
    for (opset, small) in [(23, DataType::Float4E2M1), (24, DataType::Float8E8M0)] {
        for wide in [DataType::Float, DataType::Float16] {
            let mut g = G::new(opset);
            g.input("x", wide, &[3]);
            g.node("Cast", &["x"], &["y"])
                .attr("to", int(small as i64))
                .attr("round_mode", string("nearest"));
            assert!(claim(&g, 0).is_ok(), "{wide} -> {small}");
            let mut g = G::new(opset);
            g.input("x", small, &[3]);
            g.node("Cast", &["x"], &["y"]).attr("to", int(wide as i64));
            assert!(claim(&g, 0).is_ok(), "{small} -> {wide}");
        }
        let mut g = G::new(opset);
        g.input("x", small, &[3]);
        g.node("Cast", &["x"], &["y"])
            .attr("to", int(DataType::Int32 as i64));
        declined(&g, 0, "float8 decodes to float types");
    }
    let mut g = G::new(24);
    g.input("x", DataType::Float, &[3]);
    g.node("Cast", &["x"], &["y"])
        .attr("to", int(DataType::Float8E8M0 as i64))
        .attr("round_mode", string("sideways"));
    declined(&g, 0, "unknown round_mode 'sideways'");
    let mut g = G::new(24);
    g.input("x", DataType::Float4E2M1, &[3]);
    g.node("Cast", &["x"], &["y"])
        .attr("to", int(DataType::Float8E8M0 as i64));
    declined(&g, 0, "is not claimed");
    // BitCast: same width, bool only as the source
    let mut g = G::new(26);
    g.input("x", DataType::Bool, &[3]);
    g.node("BitCast", &["x"], &["y"])
        .attr("to", int(DataType::Uint8 as i64));
    assert!(claim(&g, 0).is_ok());
    let mut g = G::new(26);
    g.input("x", DataType::Uint8, &[3]);
    g.node("BitCast", &["x"], &["y"])
        .attr("to", int(DataType::Bool as i64));
    declined(&g, 0, "no valid MLX booleans");
    let mut g = G::new(26);
    g.input("x", DataType::Int16, &[3]);
    g.node("BitCast", &["x"], &["y"])
        .attr("to", int(DataType::Float as i64));
    declined(&g, 0, "differ in width");
}
