//! Claims, declines and lowerings of the integer ops: MatMulInteger, QLinearMatMul,
//! ConvInteger, QLinearConv (exact int32 accumulation from float32 chunks of K).

mod common;

use common::*;
use onnx_ir::{DataType, TensorData};
use plan::{Plan, Step};

fn split_sizes(p: &Plan) -> Vec<Vec<i64>> {
    p.steps
        .iter()
        .filter_map(|s| match s {
            Step::Split {
                sizes: Some(plan::ShapeSource::Static(v)),
                ..
            } => Some(v.clone()),
            _ => None,
        })
        .collect()
}

fn u8_scalar(v: u8) -> TensorData {
    TensorData::new(DataType::Uint8, vec![], vec![v]).unwrap()
}

fn f32_scalar(v: f32) -> TensorData {
    TensorData::from_f32(vec![], &[v])
}

fn matmul_integer(a: &[i64], b: &[i64], dt: DataType) -> G {
    let mut g = G::new(17);
    g.input("a", DataType::Uint8, a)
        .input("b", dt, b)
        .output_any("y", DataType::Int32);
    g.node("MatMulInteger", &["a", "b"], &["y"]);
    g
}

#[test]
fn matmul_integer_small_k_is_one_matmul() {
    let g = matmul_integer(&[4, 200], &[200, 3], DataType::Int8);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    assert!(split_sizes(&p).is_empty());
}

#[test]
fn matmul_integer_chunks_k_by_256() {
    let g = matmul_integer(&[-1, 4, 1000], &[1000, 3], DataType::Uint8);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    // A along its last axis, B along K: 256 + 256 + 256 + 232
    assert_eq!(split_sizes(&p), vec![vec![256, 256, 256, 232]; 2]);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 4);
    // each partial product converted to int32 and summed in int32
    let int32_casts = count(
        &p,
        |s| matches!(s, Step::AsType { dtype, .. } if *dtype == DataType::Int32),
    );
    assert_eq!(int32_casts, 4);
    let int_adds = p
        .steps
        .iter()
        .filter(|s| {
            matches!(s, Step::Binary { op: plan::BinaryOp::Add, out, .. }
                if p.dtype(*out) == DataType::Int32)
        })
        .count();
    assert_eq!(int_adds, 3);
}

#[test]
fn matmul_integer_k_from_b_and_zero_points() {
    let mut g = G::new(17);
    g.input("a", DataType::Uint8, &[2, -1])
        .input("b", DataType::Uint8, &[512, 3])
        .init("azp", u8_scalar(3))
        .init(
            "bzp",
            TensorData::new(DataType::Uint8, vec![3], vec![1, 2, 3]).unwrap(),
        )
        .output_any("y", DataType::Int32);
    g.node("MatMulInteger", &["a", "b", "azp", "bzp"], &["y"]);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(split_sizes(&p), vec![vec![256, 256]; 2]);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: plan::BinaryOp::Subtract,
                ..
            }
        )),
        2
    );
}

#[test]
fn matmul_integer_per_row_a_zero_point_is_unsqueezed() {
    let mut g = G::new(17);
    g.input("a", DataType::Int8, &[4, 8])
        .input("b", DataType::Int8, &[8, 3])
        .input("azp", DataType::Int8, &[4])
        .output_any("y", DataType::Int32);
    g.node("MatMulInteger", &["a", "b", "azp"], &["y"]);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Reshape { .. })), 1);
}

#[test]
fn matmul_integer_declines() {
    // K unknown on both sides
    declined(
        &matmul_integer(&[2, -1], &[-1, 3], DataType::Uint8),
        0,
        "K is unknown",
    );
    // not an 8-bit integer
    let mut g = G::new(17);
    g.input("a", DataType::Int32, &[2, 4])
        .input("b", DataType::Int32, &[4, 3])
        .output_any("y", DataType::Int32);
    g.node("MatMulInteger", &["a", "b"], &["y"]);
    declined(&g, 0, "not claimed");
    // a zero point of another type
    let mut g = matmul_integer(&[2, 4], &[4, 3], DataType::Int8);
    g.input("azp", DataType::Int8, &[]);
    g.g.nodes[0].inputs = vec!["a".into(), "b".into(), "azp".into()];
    declined(&g, 0, "differs in type");
    // a zero point of a higher rank than its operand
    let mut g = matmul_integer(&[2, 4], &[4, 3], DataType::Uint8);
    g.input("bzp", DataType::Uint8, &[1, 1, 3]);
    g.g.nodes[0].inputs = vec!["a".into(), "b".into(), "".into(), "bzp".into()];
    declined(&g, 0, "scalar");
}

fn qlinear_matmul(k: i64, y_dt: DataType) -> G {
    let mut g = G::new(13);
    g.input("a", DataType::Uint8, &[3, k])
        .init("as", f32_scalar(0.1))
        .init("azp", u8_scalar(128))
        .input("b", DataType::Uint8, &[k, 5])
        .init("bs", TensorData::from_f32(vec![5], &[0.1; 5]))
        .init(
            "bzp",
            TensorData::new(DataType::Uint8, vec![5], vec![0; 5]).unwrap(),
        )
        .init("ys", f32_scalar(0.5))
        .input("yzp", y_dt, &[])
        .output_any("y", y_dt);
    g.node(
        "QLinearMatMul",
        &["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"],
        &["y"],
    );
    g
}

#[test]
fn qlinear_matmul_requantizes_with_round_half_even() {
    let g = qlinear_matmul(300, DataType::Uint8);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(split_sizes(&p), vec![vec![256, 44]; 2]);
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 2);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Unary {
                op: plan::UnaryOp::Round,
                ..
            }
        )),
        1
    );
    // clamped before rounding, then the zero point added
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Binary {
                op: plan::BinaryOp::Maximum,
                ..
            }
        )),
        1
    );
}

#[test]
fn qlinear_matmul_declines_non_float_scales_and_a_vector_output_scale() {
    let mut g = qlinear_matmul(16, DataType::Uint8);
    g.init("ys", TensorData::from_f32(vec![2], &[0.5, 0.5]));
    declined(&g, 0, "scalar");
    let mut g = qlinear_matmul(16, DataType::Int8);
    g.g.initializers.insert(
        "as".into(),
        TensorData::new(DataType::Float16, vec![], vec![0, 60]).unwrap(),
    );
    declined(&g, 0, "not claimed");
}

fn conv(c: i64, k: i64, group: i64) -> G {
    let mut g = G::new(17);
    g.input("x", DataType::Uint8, &[1, c * group, 8, 8])
        .input("w", DataType::Uint8, &[4 * group, c, k, k])
        .output_any("y", DataType::Int32);
    g.node("ConvInteger", &["x", "w"], &["y"])
        .attr("group", int(group));
    g
}

#[test]
fn conv_integer_chunks_input_channels() {
    // 64 channels x 9 taps: chunks of 28 channels (252 taps)
    let g = conv(64, 3, 1);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(split_sizes(&p), vec![vec![28, 28, 8]; 2]);
    assert_eq!(count(&p, |s| matches!(s, Step::Conv { .. })), 3);
    // small: one conv
    let p = plan_of(&conv(8, 3, 1).build());
    assert_eq!(count(&p, |s| matches!(s, Step::Conv { .. })), 1);
    assert!(split_sizes(&p).is_empty());
}

#[test]
fn conv_integer_declines_what_cannot_be_chunked() {
    // a kernel of more than 256 taps
    declined(&conv(1, 17, 1), 0, "exact chunks");
    // grouped with more than 256 taps per output
    declined(&conv(64, 3, 2), 0, "exact chunks");
    // the weight's channels unknown
    let mut g = G::new(17);
    g.input("x", DataType::Uint8, &[1, 3, 8, 8])
        .input("w", DataType::Uint8, &[4, -1, 3, 3])
        .output_any("y", DataType::Int32);
    g.node("ConvInteger", &["x", "w"], &["y"])
        .attr("kernel_shape", ints(&[3, 3]));
    declined(&g, 0, "input channels are unknown");
}

#[test]
fn qlinear_conv_claims_per_channel_scales_and_bias() {
    let mut g = G::new(17);
    g.input("x", DataType::Int8, &[1, 3, 8, 8])
        .init("xs", f32_scalar(0.1))
        .init(
            "xzp",
            TensorData::new(DataType::Int8, vec![], vec![0]).unwrap(),
        )
        .input("w", DataType::Int8, &[4, 3, 3, 3])
        .init("ws", TensorData::from_f32(vec![4], &[0.1; 4]))
        .init(
            "wzp",
            TensorData::new(DataType::Int8, vec![4], vec![0; 4]).unwrap(),
        )
        .init("ys", f32_scalar(0.5))
        .init(
            "yzp",
            TensorData::new(DataType::Int8, vec![], vec![0]).unwrap(),
        )
        .init(
            "bias",
            TensorData::new(DataType::Int32, vec![4], vec![0; 16]).unwrap(),
        )
        .output_any("y", DataType::Int8);
    g.node(
        "QLinearConv",
        &["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "bias"],
        &["y"],
    );
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Conv { .. })), 1);
}
