//! Plan snapshots ("this node became these MLX calls") and targeted lowering checks.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, Graph, TensorData};
use plan::{
    BinaryOp, CompileClass, Plan, ReduceAxes, Registry, ReshapeTarget, ShapeSource, Step, UnaryOp,
    partition,
};

/// The plan of a graph that partitions into one cluster.
fn plan_of(g: &Graph) -> Plan {
    let p = partition(g, &Registry::default());
    assert_eq!(p.clusters.len(), 1, "clusters: {:?}", p.clusters);
    common::plan_of(g)
}

/// A tiny attention block: LayerNorm, QKV projections, heads via Reshape/Transpose, scaled
/// scores with a mask, Softmax, context, a dynamic-batch reshape back, output projection, Gelu.
fn attention() -> Graph {
    let (d, h, hd) = (8, 2, 4);
    let mut g = G::new(20);
    g.input("x", DataType::Float, &[-1, 4, d]);
    g.output("y", DataType::Float, &[-1, 4, d]);
    g.weight("ln_w", &[d]).weight("ln_b", &[d]);
    g.weight("wq", &[d, d])
        .weight("wk", &[d, d])
        .weight("wv", &[d, d]);
    g.weight("wo", &[d, d]).weight("bo", &[d]);
    g.init_i64("heads", &[4], &[0, 0, h, hd]);
    g.init_f32("scale", &[], &[2.0]);
    g.init_f32("mask", &[1, 1, 4, 4], &[0.0; 16]);
    g.init_i64("zero", &[], &[0]);
    g.init_i64("axes0", &[1], &[0]);
    g.init_i64("tail", &[2], &[4, d]);
    g.node("LayerNormalization", &["x", "ln_w", "ln_b"], &["hn"])
        .attr("epsilon", float(1e-5));
    for (w, o) in [("wq", "q"), ("wk", "k"), ("wv", "v")] {
        g.node("MatMul", &["hn", w], &[o]);
        let r = format!("{o}4");
        g.node("Reshape", &[o, "heads"], &[r.as_str()]);
        let perm: &[i64] = if o == "k" {
            &[0, 2, 3, 1]
        } else {
            &[0, 2, 1, 3]
        };
        let t = format!("{o}h");
        g.node("Transpose", &[r.as_str()], &[t.as_str()])
            .attr("perm", ints(perm));
    }
    g.node("MatMul", &["qh", "kh"], &["scores"]);
    g.node("Div", &["scores", "scale"], &["scaled"]);
    g.node("Add", &["scaled", "mask"], &["masked"]);
    g.node("Softmax", &["masked"], &["probs"])
        .attr("axis", int(-1));
    g.node("MatMul", &["probs", "vh"], &["ctx"]);
    g.node("Transpose", &["ctx"], &["ctx_t"])
        .attr("perm", ints(&[0, 2, 1, 3]));
    // Dynamic batch: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    g.node("Shape", &["x"], &["xs"]);
    g.node("Gather", &["xs", "zero"], &["b"])
        .attr("axis", int(0));
    g.node("Unsqueeze", &["b", "axes0"], &["b1"]);
    g.node("Concat", &["b1", "tail"], &["newshape"])
        .attr("axis", int(0));
    g.node("Reshape", &["ctx_t", "newshape"], &["merged"]);
    g.node("MatMul", &["merged", "wo"], &["proj"]);
    g.node("Add", &["proj", "bo"], &["biased"]);
    g.node("Gelu", &["biased"], &["y"]);
    for (v, s) in [
        ("hn", vec![-1, 4, d]),
        ("q", vec![-1, 4, d]),
        ("k", vec![-1, 4, d]),
        ("v", vec![-1, 4, d]),
        ("q4", vec![-1, 4, h, hd]),
        ("k4", vec![-1, 4, h, hd]),
        ("v4", vec![-1, 4, h, hd]),
        ("qh", vec![-1, h, 4, hd]),
        ("kh", vec![-1, h, hd, 4]),
        ("vh", vec![-1, h, 4, hd]),
        ("scores", vec![-1, h, 4, 4]),
        ("scaled", vec![-1, h, 4, 4]),
        ("masked", vec![-1, h, 4, 4]),
        ("probs", vec![-1, h, 4, 4]),
        ("ctx", vec![-1, h, 4, hd]),
        ("ctx_t", vec![-1, 4, h, hd]),
        ("merged", vec![-1, 4, d]),
        ("proj", vec![-1, 4, d]),
        ("biased", vec![-1, 4, d]),
    ] {
        g.value(v, DataType::Float, &s);
    }
    g.value("xs", DataType::Int64, &[3]);
    g.value("b", DataType::Int64, &[]);
    g.value("b1", DataType::Int64, &[1]);
    g.value("newshape", DataType::Int64, &[3]);
    g.build()
}

/// Conv + BatchNorm + Relu + MaxPool + AveragePool (excluding pads) + global pool + Gemm head.
fn conv_block() -> Graph {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 3, 8, 8]);
    g.output("logits", DataType::Float, &[1, 5]);
    g.weight("w", &[4, 3, 3, 3]).weight("b", &[4]);
    g.init_f32("bn_s", &[4], &[1.0, 2.0, 0.5, 1.0]);
    g.init_f32("bn_b", &[4], &[0.0, 0.1, 0.2, 0.3]);
    g.init_f32("bn_m", &[4], &[0.0, 0.5, 1.0, 1.5]);
    g.init_f32("bn_v", &[4], &[1.0, 1.0, 4.0, 0.25]);
    g.weight("fc_w", &[5, 4]).weight("fc_b", &[5]);
    g.node("Conv", &["x", "w", "b"], &["c"])
        .attr("pads", ints(&[1, 1, 1, 1]))
        .attr("kernel_shape", ints(&[3, 3]));
    g.node(
        "BatchNormalization",
        &["c", "bn_s", "bn_b", "bn_m", "bn_v"],
        &["bn"],
    );
    g.node("Relu", &["bn"], &["r"]);
    g.node("MaxPool", &["r"], &["mp"])
        .attr("kernel_shape", ints(&[2, 2]))
        .attr("strides", ints(&[2, 2]));
    g.node("AveragePool", &["mp"], &["ap"])
        .attr("kernel_shape", ints(&[3, 3]))
        .attr("pads", ints(&[1, 1, 1, 1]));
    g.node("GlobalAveragePool", &["ap"], &["gp"]);
    g.node("Flatten", &["gp"], &["f"]);
    g.node("Gemm", &["f", "fc_w", "fc_b"], &["logits"])
        .attr("transB", int(1));
    for (v, s) in [
        ("c", vec![1, 4, 8, 8]),
        ("bn", vec![1, 4, 8, 8]),
        ("r", vec![1, 4, 8, 8]),
        ("mp", vec![1, 4, 4, 4]),
        ("ap", vec![1, 4, 4, 4]),
        ("gp", vec![1, 4, 1, 1]),
        ("f", vec![1, 4]),
    ] {
        g.value(v, DataType::Float, &s);
    }
    g.build()
}

#[test]
fn snapshot_attention_block() {
    let plan = plan_of(&attention());
    insta::assert_snapshot!("attention_block", plan.to_string());
    // The batch-dependent reshape target is computed from the input shape by the host program,
    // so the plan compiles per input shape.
    assert_eq!(plan.compile_class(), CompileClass::ShapeKeyed);
    let bound = plan.host.run(&[vec![3, 4, 8]]).unwrap();
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].1.to_i64_vec().unwrap(), vec![3, 4, 8]);
}

#[test]
fn snapshot_conv_block() {
    let plan = plan_of(&conv_block());
    insta::assert_snapshot!("conv_block", plan.to_string());
    assert_eq!(plan.compile_class(), CompileClass::ShapeKeyed);
}

#[test]
fn static_batch_folds_the_shape_chain() {
    // With a fixed batch the Shape -> ... -> Reshape chain is computed at plan time.
    let mut g = attention();
    g.inputs[0] = onnx_ir::ValueInfo::new("x", DataType::Float, dims(&[2, 4, 8]));
    let plan = plan_of(&g);
    assert!(!plan.steps.iter().any(|s| matches!(s, Step::Shape { .. })));
    assert!(plan.steps.iter().all(|s| s.host_reads().is_empty()));
}

fn single(g: &G) -> Plan {
    plan_of(&g.build())
}

#[test]
fn softmax_legacy_axes() {
    let mut g = G::new(11);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.output("y", DataType::Float, &[2, 3, 4]);
    g.node("Softmax", &["x"], &["y"]);
    let p = single(&g);
    assert!(matches!(&p.steps[0], Step::Softmax { axes, .. } if axes == &vec![1, 2]));
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.output("y", DataType::Float, &[2, 3, 4]);
    g.node("Softmax", &["x"], &["y"]).attr("axis", int(1));
    let p = single(&g);
    assert!(matches!(&p.steps[0], Step::Softmax { axes, .. } if axes == &vec![1]));
}

#[test]
fn integer_division_truncates() {
    let mut g = G::new(17);
    g.input("a", DataType::Int32, &[4]);
    g.input("b", DataType::Int32, &[4]);
    g.output("c", DataType::Int32, &[4]);
    g.node("Div", &["a", "b"], &["c"]);
    let p = single(&g);
    assert!(matches!(
        p.steps[0],
        Step::Binary {
            op: BinaryOp::FloorDivide,
            ..
        }
    ));
    assert!(matches!(
        p.steps.last().unwrap(),
        Step::Binary {
            op: BinaryOp::Add,
            ..
        }
    ));
    assert_eq!(p.dtype(p.outputs[0]), DataType::Int32);
    // Floats divide directly.
    let mut g = G::new(17);
    g.input("a", DataType::Float16, &[4]);
    g.output("c", DataType::Float16, &[4]);
    g.node("Div", &["a", "a"], &["c"]);
    assert_eq!(single(&g).steps.len(), 1);
}

#[test]
fn reshape_forms() {
    // Symbolic input + initializer shape: ONNX target resolved at run time (0 copies a dim).
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[-1, 6]);
    g.output_any("y", DataType::Float);
    g.init_i64("s", &[3], &[0, 2, 3]);
    g.node("Reshape", &["x", "s"], &["y"])
        .attr("allowzero", int(0));
    let p = single(&g);
    assert!(matches!(
        &p.steps[0],
        Step::Reshape { target: ReshapeTarget::Onnx { shape: ShapeSource::Static(v), allowzero: false }, .. } if v == &vec![0, 2, 3]
    ));
    // Static input: a fixed target.
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[4, 6]);
    g.output_any("y", DataType::Float);
    g.init_i64("s", &[2], &[-1, 3]);
    g.node("Reshape", &["x", "s"], &["y"]);
    let p = single(&g);
    assert!(
        matches!(&p.steps[0], Step::Reshape { target: ReshapeTarget::Fixed(v), .. } if v == &vec![8, 3])
    );
    // A runtime shape tensor: a host read of an input, whose bytes the host has, so the plan
    // compiles per target (the runtime keys closures by the value).
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[-1, 6]);
    g.input("s", DataType::Int64, &[2]);
    g.output_any("y", DataType::Float);
    g.node("Reshape", &["x", "s"], &["y"]);
    let p = single(&g);
    assert_eq!(p.steps[0].host_reads(), vec![p.inputs[1].slot]);
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
    // A shape tensor of unknown rank could be anything large: eager.
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[-1, 6]);
    g.input_unranked("s", DataType::Int64);
    g.output_any("y", DataType::Float);
    g.node("Reshape", &["x", "s"], &["y"]);
    let p = single(&g);
    assert_eq!(p.compile_class(), CompileClass::Eager);
}

#[test]
fn squeeze_unsqueeze_clip_by_opset() {
    let mut g = G::new(10);
    g.input("x", DataType::Float, &[-1, 1, 3]);
    g.output_any("y", DataType::Float);
    g.output_any("z", DataType::Float);
    g.node("Squeeze", &["x"], &["y"]).attr("axes", ints(&[1]));
    g.node("Clip", &["x"], &["z"])
        .attr("min", float(0.0))
        .attr("max", float(6.0));
    let p = single(&g);
    assert!(
        matches!(&p.steps[0], Step::Reshape { target: ReshapeTarget::Squeeze { axes: Some(ShapeSource::Static(a)) }, .. } if a == &vec![1])
    );
    assert!(matches!(
        p.steps[1],
        Step::Binary {
            op: BinaryOp::Maximum,
            ..
        }
    ));
    assert!(matches!(
        p.steps[2],
        Step::Binary {
            op: BinaryOp::Minimum,
            ..
        }
    ));

    let mut g = G::new(13);
    g.input("x", DataType::Float, &[-1, 3]);
    g.input("lo", DataType::Float, &[]);
    g.output_any("y", DataType::Float);
    g.output_any("z", DataType::Float);
    g.init_i64("axes", &[1], &[-1]);
    g.node("Unsqueeze", &["x", "axes"], &["y"]);
    g.node("Clip", &["x", "lo"], &["z"]);
    let p = single(&g);
    assert!(
        matches!(&p.steps[0], Step::Reshape { target: ReshapeTarget::Unsqueeze { axes: ShapeSource::Static(a) }, .. } if a == &vec![-1])
    );
    assert_eq!(p.steps.len(), 2, "Clip with only min is one maximum");
}

#[test]
fn gemm_prefolds_transposed_weights() {
    let mut g = G::new(13);
    g.input("a", DataType::Float, &[-1, 4]);
    g.output_any("y", DataType::Float);
    g.weight("w", &[3, 4]);
    g.weight("c", &[3]);
    g.node("Gemm", &["a", "w", "c"], &["y"])
        .attr("transB", int(1))
        .attr("alpha", float(0.5));
    let p = single(&g);
    assert_eq!(p.steps.len(), 1);
    let Step::Addmm { b, alpha, beta, .. } = &p.steps[0] else {
        panic!("{:?}", p.steps);
    };
    assert_eq!((*alpha, *beta), (0.5, 1.0));
    let (_, t) = p.constants.iter().find(|(s, _)| s == b).unwrap();
    assert_eq!(t.dims, vec![4, 3]);
}

#[test]
fn shape_folds_static_dims_only() {
    let mut g = G::new(15);
    g.input("x", DataType::Float, &[-1, 3, 5]);
    g.output_any("tail", DataType::Int64);
    g.output_any("all", DataType::Int64);
    g.node("Shape", &["x"], &["tail"]).attr("start", int(1));
    g.node("Shape", &["x"], &["all"]);
    let p = single(&g);
    // The tail [3, 5] is a constant; the full shape needs the batch.
    assert_eq!(p.steps.len(), 1);
    assert!(matches!(
        p.steps[0],
        Step::Shape {
            start: 0,
            end: None,
            ..
        }
    ));
    let (_, t) = p
        .constants
        .iter()
        .find(|(s, _)| *s == p.outputs[0])
        .unwrap();
    assert_eq!(t.to_i64_vec().unwrap(), vec![3, 5]);
}

#[test]
fn cast_and_identity_alias() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[2]);
    g.output_any("same", DataType::Float);
    g.output_any("half", DataType::Float16);
    g.output_any("id", DataType::Float);
    g.node("Cast", &["x"], &["same"]).attr("to", int(1));
    g.node("Cast", &["x"], &["half"]).attr("to", int(10));
    g.node("Identity", &["x"], &["id"]);
    let p = single(&g);
    assert_eq!(p.outputs[0], p.inputs[0].slot);
    assert_eq!(p.outputs[2], p.inputs[0].slot);
    assert!(matches!(
        p.steps[0],
        Step::AsType {
            dtype: DataType::Float16,
            ..
        }
    ));
}

#[test]
fn reduce_mean_axes_forms() {
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.input("axes", DataType::Int64, &[1]);
    g.output_any("a", DataType::Float);
    g.output_any("b", DataType::Float);
    g.output_any("c", DataType::Float);
    g.init_i64("ax", &[1], &[-1]);
    g.node("ReduceMean", &["x", "ax"], &["a"])
        .attr("keepdims", int(0));
    g.node("ReduceMean", &["x", "axes"], &["b"])
        .attr("noop_with_empty_axes", int(1));
    g.node("ReduceMean", &["x"], &["c"])
        .attr("noop_with_empty_axes", int(1));
    let p = single(&g);
    assert!(
        matches!(&p.steps[0], Step::Reduce { axes: ReduceAxes::Static(a), keepdims: false, .. } if a == &vec![2])
    );
    assert!(matches!(
        &p.steps[1],
        Step::Reduce {
            axes: ReduceAxes::Dynamic {
                noop_with_empty_axes: true,
                ..
            },
            ..
        }
    ));
    assert_eq!(p.outputs[2], p.inputs[0].slot, "no axes + noop is identity");
    // Opset 13: attribute form.
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.output_any("a", DataType::Float);
    g.node("ReduceMean", &["x"], &["a"])
        .attr("axes", ints(&[0, -1]));
    let p = single(&g);
    assert!(
        matches!(&p.steps[0], Step::Reduce { axes: ReduceAxes::Static(a), keepdims: true, .. } if a == &vec![0, 2])
    );
}

#[test]
fn layer_norm_fast_path_and_decomposition() {
    let mut g = G::new(17);
    g.input("x", DataType::Float16, &[2, 3, 4]);
    g.output_any("y", DataType::Float16);
    g.output_any("z", DataType::Float16);
    g.init(
        "s",
        onnx_ir::TensorData::new(DataType::Float16, vec![4], vec![0u8; 8]).unwrap(),
    );
    g.init(
        "s2",
        onnx_ir::TensorData::new(DataType::Float16, vec![3, 4], vec![0u8; 24]).unwrap(),
    );
    g.node("LayerNormalization", &["x", "s"], &["y"]);
    g.node("LayerNormalization", &["x", "s2"], &["z"])
        .attr("axis", int(1));
    let p = single(&g);
    assert!(matches!(p.steps[0], Step::LayerNorm { bias: None, .. }));
    // The axis-1 form: widened to float32, mean/var over [1, 2], narrowed back.
    assert!(matches!(
        p.steps[1],
        Step::AsType {
            dtype: DataType::Float,
            ..
        }
    ));
    assert!(p.steps.iter().any(
        |s| matches!(s, Step::Reduce { axes: ReduceAxes::Static(a), .. } if a == &vec![1, 2])
    ));
    assert!(p.steps.iter().any(|s| matches!(
        s,
        Step::Unary {
            op: UnaryOp::Rsqrt,
            ..
        }
    )));
    assert_eq!(p.dtype(p.outputs[1]), DataType::Float16);
}

#[test]
fn pools_with_dynamic_shapes_use_pool_specs() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[-1, 3, -1, -1]);
    g.output_any("m", DataType::Float);
    g.output_any("a", DataType::Float);
    g.node("MaxPool", &["x"], &["m"])
        .attr("kernel_shape", ints(&[3, 3]))
        .attr("auto_pad", string("SAME_UPPER"));
    g.node("AveragePool", &["x"], &["a"])
        .attr("kernel_shape", ints(&[2, 2]))
        .attr("strides", ints(&[2, 2]))
        .attr("ceil_mode", int(1));
    let p = single(&g);
    let kinds: Vec<&'static str> = p
        .steps
        .iter()
        .map(|s| match s {
            Step::Pad { .. } => "pad",
            Step::Windows { .. } => "windows",
            Step::Reduce { .. } => "reduce",
            Step::PoolDivisor { .. } => "divisor",
            Step::Binary { .. } => "binary",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "pad", "windows", "reduce", "pad", "windows", "divisor", "reduce", "binary"
        ]
    );
}

#[test]
fn constant_of_shape_and_range_fold() {
    let mut g = G::new(20);
    g.output_any("z", DataType::Int64);
    g.output_any("r", DataType::Int64);
    g.init_i64("shape", &[2], &[2, 3]);
    g.init_i64("s", &[], &[0]);
    g.init_i64("l", &[], &[5]);
    g.init_i64("d", &[], &[2]);
    g.node("ConstantOfShape", &["shape"], &["z"]).attr(
        "value",
        Attribute::Tensor(TensorData::from_i64(vec![1], &[7])),
    );
    g.node("Range", &["s", "l", "d"], &["r"]);
    let p = single(&g);
    assert!(p.steps.is_empty());
    let get = |slot| {
        p.constants
            .iter()
            .find(|(s, _)| *s == slot)
            .unwrap()
            .1
            .clone()
    };
    assert_eq!(get(p.outputs[0]).to_i64_vec().unwrap(), vec![7; 6]);
    assert_eq!(get(p.outputs[1]).to_i64_vec().unwrap(), vec![0, 2, 4]);
}

/// A Llama-style decoder layer (opset 23): RMSNorm, QKV projections, rotary embeddings with
/// position ids, grouped-query Attention with a KV cache, output projection, residual.
fn llama_block() -> Graph {
    let (d, hq, hkv, hd) = (16, 4, 2, 4);
    let mut g = G::new(23);
    g.input("x", DataType::Float, &[-1, -1, d]);
    g.input("pos", DataType::Int64, &[-1, -1]);
    g.input("past_k", DataType::Float, &[-1, hkv, -1, hd]);
    g.input("past_v", DataType::Float, &[-1, hkv, -1, hd]);
    g.output("y", DataType::Float, &[-1, -1, d]);
    g.output_any("present_k", DataType::Float);
    g.output_any("present_v", DataType::Float);
    g.weight("norm_w", &[d]);
    g.weight("wq", &[d, hq * hd])
        .weight("wk", &[d, hkv * hd])
        .weight("wv", &[d, hkv * hd]);
    g.weight("wo", &[hq * hd, d]);
    g.weight("cos", &[64, hd / 2]).weight("sin", &[64, hd / 2]);
    g.node("RMSNormalization", &["x", "norm_w"], &["h"]);
    g.node("MatMul", &["h", "wq"], &["q"]);
    g.node("MatMul", &["h", "wk"], &["k"]);
    g.node("MatMul", &["h", "wv"], &["v"]);
    g.node("RotaryEmbedding", &["q", "cos", "sin", "pos"], &["qr"])
        .attr("num_heads", int(hq));
    g.node("RotaryEmbedding", &["k", "cos", "sin", "pos"], &["kr"])
        .attr("num_heads", int(hkv));
    g.node(
        "Attention",
        &["qr", "kr", "v", "", "past_k", "past_v"],
        &["attn", "present_k", "present_v"],
    )
    .attr("q_num_heads", int(hq))
    .attr("kv_num_heads", int(hkv))
    .attr("is_causal", int(1));
    g.node("MatMul", &["attn", "wo"], &["o"]);
    g.node("Add", &["x", "o"], &["y"]);
    for (v, s) in [
        ("h", vec![-1, -1, d]),
        ("q", vec![-1, -1, hq * hd]),
        ("k", vec![-1, -1, hkv * hd]),
        ("v", vec![-1, -1, hkv * hd]),
        ("qr", vec![-1, -1, hq * hd]),
        ("kr", vec![-1, -1, hkv * hd]),
        ("attn", vec![-1, -1, hq * hd]),
        ("o", vec![-1, -1, d]),
    ] {
        g.value(v, DataType::Float, &s);
    }
    g.build()
}

#[test]
fn snapshot_llama_block() {
    let plan = plan_of(&llama_block());
    insta::assert_snapshot!("llama_block", plan.to_string());
    assert_eq!(plan.compile_class(), CompileClass::ShapeKeyed);
    assert!(plan.steps.iter().any(|s| matches!(
        s,
        Step::Attention {
            causal: true,
            mask: None,
            ..
        }
    )));
    assert!(plan.steps.iter().any(|s| matches!(s, Step::RmsNorm { .. })));
}

/// A 4-D ONNX Attention node over `q` and `k` (`k` doubles as `v`) with `extra` attributes.
fn onnx_attention(q: &[i64], k: &[i64], extra: &[(&str, Attribute)], outs: &[&str]) -> G {
    let mut g = G::new(23);
    g.input("q", DataType::Float, q);
    g.input("k", DataType::Float, k);
    for o in outs.iter().filter(|o| !o.is_empty()) {
        g.output_any(o, DataType::Float);
    }
    let n = g.node("Attention", &["q", "k", "k"], outs);
    for (name, a) in extra {
        n.attributes.insert((*name).into(), a.clone());
    }
    g
}

#[test]
fn causal_attention_with_unequal_lengths_uses_orts_top_left_mask() {
    // Query length unknown, key length 5: MLX's bottom-right causal mode could disagree, so
    // the keep-mask `t <= s` is built from iotas and passed as a bool mask.
    let g = onnx_attention(
        &[1, 2, -1, 4],
        &[1, 2, 5, 4],
        &[("is_causal", int(1))],
        &["y"],
    );
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 2);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Attention {
                causal: false,
                mask: Some(_),
                ..
            }
        )),
        1
    );
}

#[test]
fn causal_attention_with_equal_lengths_uses_mlx_causal_mode() {
    let g = onnx_attention(
        &[1, 2, 5, 4],
        &[1, 2, 5, 4],
        &[("is_causal", int(1))],
        &["y"],
    );
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 0);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Attention {
                causal: true,
                mask: None,
                ..
            }
        )),
        1
    );
}

#[test]
fn attention_softcap_is_computed_step_by_step() {
    let g = onnx_attention(
        &[1, 2, 3, 4],
        &[1, 2, 5, 4],
        &[("softcap", float(2.0))],
        &["y"],
    );
    let p = plan_of(&g.build());
    // scores = 2 * tanh(q k^T * scale / 2), softmax, times v: no fused attention.
    assert_eq!(count(&p, |s| matches!(s, Step::Attention { .. })), 0);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 2);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Unary {
                op: UnaryOp::Tanh,
                ..
            }
        )),
        1
    );
    assert_eq!(count(&p, |s| matches!(s, Step::Softmax { .. })), 1);
}

#[test]
fn attention_scores_output_is_computed_step_by_step() {
    for mode in 0..4 {
        let g = onnx_attention(
            &[1, 4, 3, 4],
            &[1, 2, 5, 4],
            &[
                ("qk_matmul_output_mode", int(mode)),
                ("softcap", float(1.5)),
            ],
            &["y", "", "", "qk"],
        );
        let p = plan_of(&g.build());
        let fused = count(&p, |s| matches!(s, Step::Attention { .. }));
        assert_eq!(fused, 0, "mode {mode}");
        assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 2);
        assert_eq!(count(&p, |s| matches!(s, Step::Softmax { .. })), 1);
        assert_eq!(p.outputs.len(), 2);
    }
}

#[test]
fn attention_declines_what_ort_refuses() {
    let g = onnx_attention(
        &[1, 2, 3, 4],
        &[1, 2, 5, 4],
        &[("qk_matmul_output_mode", int(4))],
        &["y", "", "", "qk"],
    );
    declined(&g, 0, "qk_matmul_output_mode 4");
    // a shorter mask is padded as masked (the ONNX spec); a longer one is invalid
    let mut g = onnx_attention(&[1, 2, 3, 4], &[1, 2, 5, 4], &[], &["y"]);
    g.input("m", DataType::Bool, &[3, 6]);
    g.g.nodes[0].inputs.push("m".into());
    declined(&g, 0, "an attn_mask of 6 keys for 5 keys");
    let mut g = onnx_attention(&[1, 2, 3, 4], &[1, 2, 5, 4], &[], &["y"]);
    g.input("m", DataType::Bool, &[3, 4]);
    g.g.nodes[0].inputs.push("m".into());
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Pad { .. })), 1);
    let mut g = onnx_attention(&[1, 2, 3, 4], &[1, 2, 5, 4], &[], &["y"]);
    g.input("m", DataType::Bool, &[5]);
    g.g.nodes[0].inputs.push("m".into());
    declined(&g, 0, "rank-1 attn_mask");
}

#[test]
fn attention_nonpad_kv_seqlen_masks_past_each_length() {
    let mut g = G::new(24);
    g.input("q", DataType::Float, &[2, 2, 3, 4]);
    g.input("k", DataType::Float, &[2, 2, 5, 4]);
    g.input("lens", DataType::Int64, &[2]);
    g.output_any("y", DataType::Float);
    g.node("Attention", &["q", "k", "k", "", "", "", "lens"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 1);
    assert_eq!(count(&p, |s| matches!(s, Step::Softmax { .. })), 1);
}

#[test]
fn cumsum_trilu_groupnorm() {
    let mut g = G::new(21);
    g.input("x", DataType::Float, &[2, 4, 3, 3]);
    g.output_any("c", DataType::Float);
    g.output_any("t", DataType::Float);
    g.output_any("n", DataType::Float);
    g.init_i64("axis", &[], &[-1]);
    g.init_i64("k", &[], &[1]);
    g.weight("s", &[4]).weight("b", &[4]);
    g.node("CumSum", &["x", "axis"], &["c"])
        .attr("exclusive", int(1));
    g.node("Trilu", &["x", "k"], &["t"]).attr("upper", int(0));
    g.node("GroupNormalization", &["x", "s", "b"], &["n"])
        .attr("num_groups", int(2));
    let p = single(&g);
    assert!(matches!(
        p.steps[0],
        Step::CumSum {
            axis: 3,
            inclusive: false,
            reverse: false,
            ..
        }
    ));
    assert!(matches!(
        p.steps[1],
        Step::Triangle {
            upper: false,
            k: 1,
            ..
        }
    ));
    assert!(p.steps.iter().any(|s| matches!(
        s,
        Step::Reshape {
            target: ReshapeTarget::Like(_),
            ..
        }
    )));
}

#[test]
fn host_program_binds_symbols_and_checks_them() {
    // Two inputs share the symbol "s1"; the reshape target is computed from input shapes.
    let mut g = G::new(17);
    g.input("a", DataType::Float, &[2, -1]);
    g.input("b", DataType::Float, &[3, -1]);
    g.output_any("y", DataType::Float);
    g.init_i64("one", &[1], &[1]);
    g.init_i64("neg", &[1], &[-1]);
    g.node("Shape", &["a"], &["sa"]);
    g.node("Slice", &["sa", "one", "neg"], &["n"]);
    g.node("Concat", &["neg", "n"], &["target"])
        .attr("axis", int(0));
    g.node("Reshape", &["b", "target"], &["y"]);
    g.value("sa", DataType::Int64, &[2]);
    g.value("n", DataType::Int64, &[0]);
    g.value("target", DataType::Int64, &[1]);
    let p = single(&g);
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
    let host_nodes: Vec<&str> = p
        .host
        .nodes
        .iter()
        .map(|n| n.node.op_type.as_str())
        .collect();
    assert_eq!(host_nodes, vec!["Shape", "Slice", "Concat"]);
    // The Slice of [2, s1] from 1 to -1 is empty: target = [-1].
    let bound = p.host.run(&[vec![2, 5], vec![3, 5]]).unwrap();
    assert_eq!(bound[0].1.to_i64_vec().unwrap(), vec![-1]);
    // Inconsistent symbol values are an error, not a wrong answer.
    let err = p.host.run(&[vec![2, 5], vec![3, 6]]).unwrap_err();
    assert!(err.contains("'s1'"), "{err}");
}

#[test]
fn constant_matmul_weights_are_stored_transposed_for_the_gpu() {
    // Two products share one 2-D weight, a third multiplies two run-time values.
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 3])
        .input("y", DataType::Float, &[2, 4])
        .init_f32("w", &[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .output("p", DataType::Float, &[1, 2])
        .output("q", DataType::Float, &[1, 2])
        .output("r", DataType::Float, &[1, 4])
        .value("xr", DataType::Float, &[1, 3]);
    g.node("MatMul", &["x", "w"], &["p"]);
    g.node("Relu", &["x"], &["xr"]);
    g.node("MatMul", &["xr", "w"], &["q"]);
    g.node("MatMul", &["p", "y"], &["r"]);
    let mut p = plan_of(&g.build());
    assert_eq!(plan::gemv::transpose_constant_weights(&mut p), 2);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    let bts: Vec<_> = p
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::MatMulTransposed { bt, .. } => Some(*bt),
            _ => None,
        })
        .collect();
    assert_eq!(bts.len(), 2);
    assert_eq!(bts[0], bts[1], "one transposed copy of the shared weight");
    let (_, t) = p.constants.iter().find(|(s, _)| *s == bts[0]).unwrap();
    assert_eq!(t.dims, vec![2, 3]);
    assert_eq!(t.to_f64_vec().unwrap(), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    // The row-major original is read by nothing any more and is gone.
    assert_eq!(
        p.constants
            .iter()
            .filter(|(_, t)| t.dims == vec![3, 2])
            .count(),
        0
    );
}
