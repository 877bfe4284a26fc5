//! One plan snapshot per op family module (`crates/plan/src/ops/`): a small graph of a few ops
//! with non-default attributes, its lowered steps ("this node became these steps") and the
//! compile-mode decision (class and blockers); the last cases cover the compile decisions no
//! family case shows. A lowering change shows up as a snapshot diff.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, TensorData};

const F: DataType = DataType::Float;
const I64: DataType = DataType::Int64;
const U8: DataType = DataType::Uint8;
const ML: &str = "ai.onnx.ml";

/// Named attributes of a node.
type Attrs<'a> = &'a [(&'a str, Attribute)];

/// A graph at ONNX `opset` (importing `com.microsoft` 1 and `ai.onnx.ml` 3) with the given
/// inputs (`-1`: a symbolic dim) and outputs of undeclared shape.
fn graph(opset: i64, ins: &[(&str, DataType, &[i64])], outs: &[(&str, DataType)]) -> G {
    let mut g = ms_graph(opset);
    g.g.opset_imports.insert(ML.into(), 3);
    for (name, dt, d) in ins {
        g.input(name, *dt, d);
    }
    for (name, dt) in outs {
        g.output_any(name, *dt);
    }
    g
}

/// The value names of one side of an `io` spec (`_`: absent).
fn names(side: &str) -> Vec<&str> {
    side.split_whitespace()
        .map(|n| if n == "_" { "" } else { n })
        .collect()
}

/// Adds node `op` (`ms.` or `ml.` before the name: of `com.microsoft` or `ai.onnx.ml`) with
/// its attributes; `io` names its inputs and outputs as `"a b -> y"` (`_`: an absent input).
fn op(g: &mut G, op: &str, io: &str, attrs: Attrs) {
    let (domain, op) = match op.split_once('.') {
        Some(("ms", name)) => (MS, name),
        Some(("ml", name)) => (ML, name),
        _ => ("", op),
    };
    let (ins, outs) = io.split_once("->").expect("inputs -> outputs");
    let n = g.node(op, &names(ins), &names(outs));
    n.domain = domain.into();
    for (k, v) in attrs {
        n.attr(k, v.clone());
    }
}

/// A float initializer of `d` filled with `0.5` (positive, so norms and logs stay finite).
fn halves(g: &mut G, name: &str, d: &[i64]) {
    let n: i64 = d.iter().product();
    g.init_f32(name, d, &vec![0.5; n as usize]);
}

/// `text` with each sub-plan digest (`#` and 16 hex digits, a std hash not stable across
/// toolchains) replaced by `#digest`.
fn redact_digests(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('#') {
        out.push_str(&rest[..i]);
        let hex = rest[i + 1..]
            .bytes()
            .take_while(u8::is_ascii_hexdigit)
            .count();
        if hex == 16 {
            out.push_str("#digest");
            rest = &rest[i + 17..];
        } else {
            out.push('#');
            rest = &rest[i + 1..];
        }
    }
    out + rest
}

/// Snapshots the plan of `g` under `name`: its steps, those of its sub-plans, its compile class
/// and the blockers of that class.
fn snap(name: &str, g: &G) {
    let plan = plan_of(&g.build());
    let mut text = plan.to_string().trim_end().to_string();
    for (i, step) in plan.steps.iter().enumerate() {
        for (k, sub) in step.sub_plans().iter().enumerate() {
            let body = sub.plan.to_string();
            text.push_str(&format!(
                "\n## sub-plan {k} of step {i}\n{}",
                body.trim_end()
            ));
        }
    }
    text.push_str(&format!("\ncompile: {:?}", plan.compile_class()));
    for b in plan.compile_blockers() {
        text.push_str(&format!("\nblocker: {b}"));
    }
    insta::assert_snapshot!(name, redact_digests(&text));
}

#[test]
fn elementwise() {
    let mut g = graph(17, &[("x", F, &[2, 3])], &[("y", F)]);
    g.value("a", F, &[2, 3]).value("b", F, &[2, 3]);
    op(&mut g, "LeakyRelu", "x -> a", &[("alpha", float(0.2))]);
    let hard_sigmoid = [("alpha", float(0.3)), ("beta", float(0.4))];
    op(&mut g, "HardSigmoid", "a -> b", &hard_sigmoid);
    op(&mut g, "Mod", "b x -> y", &[("fmod", int(1))]);
    snap("elementwise", &g);
}

#[test]
fn matmul() {
    let mut g = graph(17, &[("a", F, &[2, 3])], &[("y", F)]);
    g.weight("b", &[4, 3])
        .weight("c", &[4])
        .weight("w", &[4, 2]);
    let gemm = [
        ("transB", int(1)),
        ("alpha", float(0.5)),
        ("beta", float(2.0)),
    ];
    g.value("h", F, &[2, 4]);
    op(&mut g, "Gemm", "a b c -> h", &gemm);
    op(&mut g, "MatMul", "h w -> y", &[]);
    snap("matmul", &g);
}

#[test]
fn nn() {
    let mut g = graph(17, &[("x", F, &[1, 2, 7, 7])], &[("y", F)]);
    g.weight("w", &[2, 1, 3, 3]);
    let conv = [
        ("group", int(2)),
        ("strides", ints(&[2, 2])),
        ("dilations", ints(&[1, 2])),
    ];
    g.value("c", F, &[1, 2, 3, 2]).value("m", F, &[1, 2, 3, 2]);
    op(&mut g, "Conv", "x w -> c", &conv);
    let pool = [
        ("kernel_shape", ints(&[2, 2])),
        ("auto_pad", string("SAME_UPPER")),
    ];
    op(&mut g, "MaxPool", "c -> m", &pool);
    op(&mut g, "GlobalMaxPool", "m -> y", &[]);
    snap("nn", &g);
}

#[test]
fn norm() {
    let mut g = graph(17, &[("x", F, &[2, 3, 4])], &[("y", F)]);
    g.weight("s", &[3])
        .weight("b", &[3])
        .weight("lw", &[4])
        .weight("lb", &[4]);
    g.value("i", F, &[2, 3, 4]).value("l", F, &[2, 3, 4]);
    let inorm = [("epsilon", float(1e-3))];
    op(&mut g, "InstanceNormalization", "x s b -> i", &inorm);
    let ln = [("axis", int(-1)), ("epsilon", float(1e-4))];
    op(&mut g, "LayerNormalization", "i lw lb -> l", &ln);
    op(&mut g, "LogSoftmax", "l -> y", &[("axis", int(1))]);
    snap("norm", &g);
}

#[test]
fn reduce() {
    let mut g = graph(18, &[("x", F, &[2, 3, 4])], &[("y", I64), ("z", F)]);
    g.init_i64("axes", &[1], &[-1]);
    g.value("r", F, &[2, 3]);
    let lse = [("keepdims", int(0))];
    op(&mut g, "ReduceLogSumExp", "x axes -> r", &lse);
    let argmax = [("axis", int(1)), ("select_last_index", int(1))];
    op(&mut g, "ArgMax", "r -> y", &argmax);
    g.init_i64("axis", &[], &[0]);
    op(&mut g, "CumSum", "x axis -> z", &[("reverse", int(1))]);
    snap("reduce", &g);
}

#[test]
fn shape() {
    let mut g = graph(18, &[("x", F, &[2, 3, 4])], &[("y", F)]);
    g.init_i64("starts", &[1], &[1])
        .init_i64("ends", &[1], &[3]);
    g.init_i64("axes", &[1], &[2])
        .init_i64("pads", &[6], &[0, 0, 1, 0, 0, 1]);
    g.value("s", F, &[2, 3, 2]).value("p", F, &[2, 3, 4]);
    g.value("c", F, &[2, 3, 8]);
    op(&mut g, "Slice", "x starts ends axes -> s", &[]);
    op(&mut g, "Pad", "s pads -> p", &[("mode", string("reflect"))]);
    op(&mut g, "Concat", "p x -> c", &[("axis", int(-1))]);
    op(&mut g, "Transpose", "c -> y", &[("perm", ints(&[2, 0, 1]))]);
    snap("shape", &g);
}

#[test]
fn indexing() {
    let mut g = graph(18, &[("x", F, &[2, 5])], &[("y", F)]);
    g.init_i64("k", &[1], &[2]);
    let topk = [("axis", int(-1)), ("largest", int(0))];
    g.value("v", F, &[2, 2]).value("i", I64, &[2, 2]);
    op(&mut g, "TopK", "x k -> v i", &topk);
    let scatter = [("axis", int(1)), ("reduction", string("add"))];
    op(&mut g, "ScatterElements", "x i v -> y", &scatter);
    snap("indexing", &g);
}

#[test]
fn layout() {
    let mut g = graph(17, &[("x", F, &[1, 8, 2, 2])], &[("y", F)]);
    let d2s = [("blocksize", int(2)), ("mode", string("CRD"))];
    g.value("d", F, &[1, 2, 4, 4]);
    op(&mut g, "DepthToSpace", "x -> d", &d2s);
    op(&mut g, "SpaceToDepth", "d -> y", &[("blocksize", int(2))]);
    snap("layout", &g);
}

#[test]
fn resize() {
    let mut g = graph(19, &[("x", F, &[1, 1, 2, 3])], &[("y", F), ("z", F)]);
    g.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
    let linear = [
        ("mode", string("linear")),
        ("coordinate_transformation_mode", string("align_corners")),
    ];
    op(&mut g, "Resize", "x _ scales -> y", &linear);
    let nearest = [
        ("mode", string("nearest")),
        ("nearest_mode", string("floor")),
        ("coordinate_transformation_mode", string("asymmetric")),
    ];
    op(&mut g, "Resize", "x _ scales -> z", &nearest);
    snap("resize", &g);
}

#[test]
fn recurrent() {
    let mut g = graph(14, &[("x", F, &[2, 1, 3])], &[("y", F), ("h", F)]);
    g.weight("w", &[1, 12, 3]).weight("r", &[1, 12, 4]);
    let gru = [
        ("hidden_size", int(4)),
        ("linear_before_reset", int(1)),
        ("direction", string("reverse")),
    ];
    op(&mut g, "GRU", "x w r -> y h", &gru);
    snap("recurrent", &g);
}

#[test]
fn recurrent_lstm() {
    let ins: &[(&str, DataType, &[i64])] = &[
        ("x", F, &[-1, 2, 3]),
        ("lens", DataType::Int32, &[2]),
        ("h0", F, &[1, 2, 2]),
    ];
    let mut g = graph(14, ins, &[("y", F), ("h", F), ("c", F)]);
    g.weight("w", &[1, 8, 3])
        .weight("r", &[1, 8, 2])
        .weight("b", &[1, 16])
        .weight("p", &[1, 6]);
    let lstm = [
        ("hidden_size", int(2)),
        ("clip", float(3.0)),
        (
            "activations",
            Attribute::Strings(vec![
                b"HardSigmoid".to_vec(),
                b"Tanh".to_vec(),
                b"Softsign".to_vec(),
            ]),
        ),
    ];
    op(&mut g, "LSTM", "x w r b lens h0 _ p -> y h c", &lstm);
    snap("recurrent_lstm", &g);
}

#[test]
fn signal() {
    let mut g = graph(20, &[("x", F, &[1, 8, 1])], &[("y", F), ("z", F)]);
    g.init_i64("axis", &[], &[1]);
    op(&mut g, "DFT", "x _ axis -> y", &[("onesided", int(1))]);
    g.init_i64("step", &[], &[2]);
    halves(&mut g, "window", &[4]);
    op(&mut g, "STFT", "x step window -> z", &[]);
    snap("signal", &g);
}

/// DFT whose values are known only at run time: the last dim (real or complex), the length
/// and the axis (a one-sided forward transform of a real input, then an inverse one).
#[test]
fn signal_dynamic() {
    let ins: &[(&str, DataType, &[i64])] = &[
        ("x", F, &[2, -1, 1]),
        ("c", F, &[2, 6, -1]),
        ("n", I64, &[]),
        ("axis", I64, &[1]),
    ];
    let mut g = graph(20, ins, &[("y", F), ("z", F)]);
    op(&mut g, "DFT", "x _ axis -> y", &[("onesided", int(1))]);
    op(&mut g, "DFT", "c n axis -> z", &[("inverse", int(1))]);
    snap("signal_dynamic", &g);
}

#[test]
fn loss() {
    let mut g = graph(
        13,
        &[("x", F, &[2, 3]), ("t", I64, &[2]), ("w", F, &[3])],
        &[("y", F)],
    );
    let attrs = [("reduction", string("mean")), ("ignore_index", int(1))];
    op(&mut g, "SoftmaxCrossEntropyLoss", "x t w -> y", &attrs);
    snap("loss", &g);
}

#[test]
fn text() {
    let mut g = graph(17, &[("x", I64, &[2, 4])], &[("y", F)]);
    let tfidf = [
        ("mode", string("TF")),
        ("min_gram_length", int(1)),
        ("max_gram_length", int(2)),
        ("max_skip_count", int(1)),
        ("ngram_counts", ints(&[0, 2])),
        ("ngram_indexes", ints(&[0, 1, 2])),
        ("pool_int64s", ints(&[1, 2, 1, 2])),
    ];
    op(&mut g, "TfIdfVectorizer", "x -> y", &tfidf);
    snap("text", &g);
}

#[test]
fn detection() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[1, 1, 4, 4]), ("boxes", F, &[1, 3, 4])];
    let mut g = graph(16, ins, &[("y", F), ("sel", I64)]);
    g.init_f32("rois", &[1, 4], &[0.0, 0.0, 2.0, 3.0]);
    g.init_i64("bi", &[1], &[0]);
    let roi = [
        ("output_height", int(2)),
        ("output_width", int(2)),
        ("sampling_ratio", int(2)),
        ("spatial_scale", float(0.5)),
        ("mode", string("max")),
    ];
    op(&mut g, "RoiAlign", "x rois bi -> y", &roi);
    halves(&mut g, "scores", &[1, 1, 3]);
    g.init_i64("max", &[1], &[2]);
    g.init_f32("iou", &[1], &[0.4]);
    let nms = [("center_point_box", int(1))];
    op(
        &mut g,
        "NonMaxSuppression",
        "boxes scores max iou -> sel",
        &nms,
    );
    snap("detection", &g);
}

#[test]
fn generators() {
    let mut g = graph(
        17,
        &[("x", F, &[3, 4])],
        &[("e", DataType::Int32), ("w", F)],
    );
    let eye_like = [("k", int(1)), ("dtype", int(6))];
    op(&mut g, "EyeLike", "x -> e", &eye_like);
    g.init_i64("size", &[], &[5]);
    op(&mut g, "HannWindow", "size -> w", &[("periodic", int(0))]);
    snap("generators", &g);
}

#[test]
fn random() {
    let mut g = graph(22, &[("x", F, &[3, 4])], &[("n", F), ("b", U8), ("m", I64)]);
    let normal = [
        ("shape", ints(&[2, 3])),
        ("mean", float(1.0)),
        ("seed", float(2.0)),
    ];
    op(&mut g, "RandomNormal", " -> n", &normal);
    g.value("p", F, &[3, 4]);
    op(
        &mut g,
        "RandomUniformLike",
        "x -> p",
        &[("low", float(0.0))],
    );
    op(&mut g, "Bernoulli", "p -> b", &[("dtype", int(2))]);
    op(
        &mut g,
        "Multinomial",
        "x -> m",
        &[("sample_size", int(5)), ("dtype", int(7))],
    );
    snap("random", &g);
}

#[test]
fn quantize() {
    let mut g = graph(19, &[("x", F, &[2, 4])], &[("y", F)]);
    g.value("q", U8, &[2, 4])
        .value("s", F, &[])
        .value("zp", U8, &[]);
    op(&mut g, "DynamicQuantizeLinear", "x -> q s zp", &[]);
    op(&mut g, "DequantizeLinear", "q s zp -> y", &[]);
    snap("quantize", &g);
}

#[test]
fn integer() {
    let ins: &[(&str, DataType, &[i64])] = &[("a", U8, &[2, 3]), ("b", U8, &[3, 2])];
    let mut g = graph(17, ins, &[("y", DataType::Int32)]);
    g.init(
        "azp",
        TensorData::new(U8, vec![], vec![3]).expect("a uint8 scalar"),
    );
    op(&mut g, "MatMulInteger", "a b azp -> y", &[]);
    snap("integer", &g);
}

#[test]
fn bits() {
    let mut g = graph(26, &[("x", F, &[4])], &[("y", DataType::Int32)]);
    op(&mut g, "BitCast", "x -> y", &[("to", int(6))]);
    snap("bits", &g);
}

#[test]
fn float64() {
    let mut g = graph(
        18,
        &[("x", DataType::Double, &[2, 3])],
        &[("y", DataType::Double)],
    );
    g.value("e", DataType::Double, &[2, 3]);
    op(&mut g, "Exp", "x -> e", &[]);
    g.init_i64("axes", &[1], &[0]);
    op(&mut g, "ReduceLogSumExp", "e axes -> y", &[]);
    snap("float64", &g);
}

#[test]
fn linalg() {
    let mut g = graph(17, &[("x", F, &[2, 3, 3])], &[("y", F)]);
    op(&mut g, "Det", "x -> y", &[]);
    snap("linalg", &g);
}

/// A branch body of If computing `op(x)` into `out` from the outer scope's `x`.
fn branch(op_type: &str, out: &str) -> Attribute {
    let mut b = G::new(17);
    b.g.opset_imports.clear();
    b.output_any(out, F);
    b.node(op_type, &["x"], &[out]);
    Attribute::Graph(Box::new(b.build()))
}

#[test]
fn control() {
    let ins: &[(&str, DataType, &[i64])] = &[("c", DataType::Bool, &[]), ("x", F, &[2, 3])];
    let mut g = graph(17, ins, &[("y", F)]);
    let arms = [
        ("then_branch", branch("Neg", "t")),
        ("else_branch", branch("Abs", "e")),
    ];
    op(&mut g, "If", "c -> y", &arms);
    snap("control", &g);
}

#[test]
fn transformer() {
    let ins: &[(&str, DataType, &[i64])] = &[("q", F, &[1, 2, 3, 4]), ("k", F, &[1, 2, 5, 4])];
    let mut g = graph(23, ins, &[("y", F), ("r", F)]);
    let attn = [("scale", float(0.25)), ("softcap", float(2.0))];
    op(&mut g, "Attention", "q k k -> y", &attn);
    halves(&mut g, "cos", &[1, 3, 2]);
    halves(&mut g, "sin", &[1, 3, 2]);
    let rope = [("interleaved", int(1))];
    op(&mut g, "RotaryEmbedding", "q cos sin -> r", &rope);
    snap("transformer", &g);
}

#[test]
fn einsum() {
    let ins: &[(&str, DataType, &[i64])] = &[("a", F, &[2, 3, 4]), ("b", F, &[2, 4, 5])];
    let mut g = graph(17, ins, &[("y", F)]);
    let einsum = [("equation", string("bij,bjk->bki"))];
    op(&mut g, "Einsum", "a b -> y", &einsum);
    snap("einsum", &g);
}

#[test]
fn grid_sample() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[1, 1, 3, 3]), ("grid", F, &[1, 2, 2, 2])];
    let mut g = graph(20, ins, &[("y", F)]);
    let gs = [
        ("mode", string("linear")),
        ("padding_mode", string("border")),
        ("align_corners", int(1)),
    ];
    op(&mut g, "GridSample", "x grid -> y", &gs);
    snap("grid_sample", &g);
}

#[test]
fn conv_transpose() {
    let mut g = graph(17, &[("x", F, &[1, 2, 3, 3])], &[("y", F)]);
    g.weight("w", &[2, 3, 3, 3]);
    let ct = [
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 1, 1, 1])),
        ("output_padding", ints(&[1, 0])),
    ];
    op(&mut g, "ConvTranspose", "x w -> y", &ct);
    snap("conv_transpose", &g);
}

/// Pads beyond the kernel's span become a crop: a static `Slice` after the flipped
/// convolution; with `output_shape` over an input of run-time size, its bounds come from a
/// host kernel.
#[test]
fn conv_transpose_crop() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[1, 2, 8]), ("u", F, &[1, 2, -1])];
    let mut g = graph(17, ins, &[("y", F), ("z", F)]);
    g.weight("w", &[2, 3, 2]);
    let pads = [("pads", ints(&[3, 2]))];
    op(&mut g, "ConvTranspose", "x w -> y", &pads);
    let os = [("output_shape", ints(&[2]))];
    op(&mut g, "ConvTranspose", "u w -> z", &os);
    snap("conv_transpose_crop", &g);
}

#[test]
fn deform_conv() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[1, 1, 4, 4]), ("off", F, &[1, 8, 3, 3])];
    let mut g = graph(19, ins, &[("y", F)]);
    g.weight("w", &[1, 1, 2, 2]);
    let deform_conv = [("offset_group", int(1))];
    op(&mut g, "DeformConv", "x w off -> y", &deform_conv);
    snap("deform_conv", &g);
}

#[test]
fn col2im() {
    let mut g = graph(18, &[("x", F, &[1, 4, 4])], &[("y", F)]);
    g.init_i64("image", &[2], &[4, 4])
        .init_i64("block", &[2], &[2, 2]);
    let col2_im = [("strides", ints(&[2, 2]))];
    op(&mut g, "Col2Im", "x image block -> y", &col2_im);
    snap("col2im", &g);
}

#[test]
fn pool_more() {
    let mut g = graph(18, &[("x", F, &[1, 2, 4, 4])], &[("y", F), ("z", F)]);
    let lp = [
        ("p", int(3)),
        ("kernel_shape", ints(&[2, 2])),
        ("strides", ints(&[2, 2])),
    ];
    op(&mut g, "LpPool", "x -> y", &lp);
    op(&mut g, "GlobalLpPool", "x -> z", &[("p", int(1))]);
    snap("pool_more", &g);
}

#[test]
fn normalize() {
    let mut g = graph(17, &[("x", F, &[1, 3, 2, 2])], &[("y", F)]);
    let lrn = [
        ("size", int(3)),
        ("alpha", float(1e-3)),
        ("beta", float(0.5)),
        ("bias", float(2.0)),
    ];
    g.value("l", F, &[1, 3, 2, 2]).value("n", F, &[1, 3, 2, 2]);
    op(&mut g, "LRN", "x -> l", &lrn);
    let lp_normalization = [("axis", int(1)), ("p", int(1))];
    op(&mut g, "LpNormalization", "l -> n", &lp_normalization);
    op(&mut g, "Hardmax", "n -> y", &[("axis", int(1))]);
    snap("normalize", &g);
}

#[test]
fn microsoft_attention() {
    let ins: &[(&str, DataType, &[i64])] = &[
        ("q", F, &[1, 3, 8]),
        ("k", F, &[1, 4, 8]),
        ("v", F, &[1, 4, 8]),
    ];
    let mut g = graph(17, ins, &[("y", F)]);
    let mha = [("num_heads", int(2)), ("scale", float(0.5))];
    op(&mut g, "ms.MultiHeadAttention", "q k v -> y", &mha);
    snap("microsoft_attention", &g);
}

#[test]
fn microsoft_bert() {
    let mut g = graph(17, &[("x", F, &[2, 3, 4])], &[("y", F)]);
    g.weight("bias", &[4]);
    let bias_softmax = [("axis", int(-1)), ("is_inner_broadcast", int(0))];
    op(&mut g, "ms.BiasSoftmax", "x bias -> y", &bias_softmax);
    snap("microsoft_bert", &g);
}

#[test]
fn microsoft_gelu() {
    let mut g = graph(17, &[("x", F, &[2, 4])], &[("y", F)]);
    g.weight("bias", &[4]);
    g.value("f", F, &[2, 4]);
    op(&mut g, "ms.FastGelu", "x bias -> f", &[]);
    op(&mut g, "ms.QuickGelu", "f -> y", &[("alpha", float(1.5))]);
    snap("microsoft_gelu", &g);
}

#[test]
fn microsoft_matmul() {
    let ins: &[(&str, DataType, &[i64])] = &[("a", F, &[2, 3]), ("b", F, &[4, 3])];
    let mut g = graph(17, ins, &[("y", F)]);
    let fused = [("transB", int(1)), ("alpha", float(0.5))];
    op(&mut g, "ms.FusedMatMul", "a b -> y", &fused);
    snap("microsoft_matmul", &g);
}

#[test]
fn microsoft_moe() {
    let (experts, hidden, inner) = (2, 4, 8);
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[3, hidden]), ("router", F, &[3, experts])];
    let mut g = graph(17, ins, &[("y", F)]);
    g.weight("w1", &[experts, hidden, inner])
        .weight("w2", &[experts, inner, hidden]);
    let moe = [("k", int(1)), ("activation_type", string("relu"))];
    op(&mut g, "ms.MoE", "x router w1 _ w2 -> y", &moe);
    snap("microsoft_moe", &g);
}

#[test]
fn microsoft_norm() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[2, 4]), ("skip", F, &[2, 4])];
    let mut g = graph(17, ins, &[("y", F)]);
    g.weight("gamma", &[4]);
    let eps = [("epsilon", float(1e-3))];
    let skip_rms = "ms.SkipSimplifiedLayerNormalization";
    op(&mut g, skip_rms, "x skip gamma -> y", &eps);
    snap("microsoft_norm", &g);
}

#[test]
fn microsoft_quant() {
    let (k, n, block) = (32, 4, 16);
    let mut g = graph(17, &[("a", F, &[2, k])], &[("y", F)]);
    let packed = (n * (k / block) * block / 2) as usize;
    let bytes: Vec<u8> = (0..packed).map(|i| (i * 37 % 256) as u8).collect();
    let b = TensorData::new(U8, vec![n, k / block, block / 2], bytes).expect("packed weights");
    g.init("b", b);
    halves(&mut g, "scales", &[n * (k / block)]);
    let nbits = [
        ("K", int(k)),
        ("N", int(n)),
        ("bits", int(4)),
        ("block_size", int(block)),
    ];
    op(&mut g, "ms.MatMulNBits", "a b scales -> y", &nbits);
    snap("microsoft_quant", &g);
}

#[test]
fn microsoft_rotary() {
    let ins: &[(&str, DataType, &[i64])] = &[("x", F, &[1, 3, 8]), ("pos", I64, &[1, 3])];
    let mut g = graph(17, ins, &[("y", F)]);
    halves(&mut g, "cos", &[16, 2]);
    halves(&mut g, "sin", &[16, 2]);
    let rot = [("num_heads", int(2)), ("interleaved", int(1))];
    op(&mut g, "ms.RotaryEmbedding", "x pos cos sin -> y", &rot);
    snap("microsoft_rotary", &g);
}

#[test]
fn microsoft_unet() {
    let mut g = graph(17, &[("x", F, &[1, 2, 2, 8])], &[("y", F), ("z", F)]);
    g.weight("bias", &[8])
        .weight("gamma", &[8])
        .weight("beta", &[8]);
    op(&mut g, "ms.BiasSplitGelu", "x bias -> y", &[]);
    let gn = [
        ("groups", int(2)),
        ("epsilon", float(1e-3)),
        ("activation", int(1)),
        ("channels_last", int(1)),
    ];
    op(&mut g, "ms.GroupNorm", "x gamma beta -> z", &gn);
    snap("microsoft_unet", &g);
}

#[test]
fn ml_linear() {
    let mut g = graph(17, &[("x", F, &[2, 3])], &[("y", F)]);
    let reg = [
        ("coefficients", floats(&[1.0, -1.0, 0.5, 0.25, 2.0, 0.0])),
        ("intercepts", floats(&[0.5, -0.5])),
        ("targets", int(2)),
        ("post_transform", string("SOFTMAX")),
    ];
    op(&mut g, "ml.LinearRegressor", "x -> y", &reg);
    snap("ml_linear", &g);
}

#[test]
fn ml_preprocess() {
    let mut g = graph(17, &[("x", F, &[2, 3])], &[("y", F)]);
    let scaler = [
        ("offset", floats(&[0.5, 1.0, -1.0])),
        ("scale", floats(&[2.0, 1.0, 0.5])),
    ];
    g.value("s", F, &[2, 3]);
    op(&mut g, "ml.Scaler", "x -> s", &scaler);
    op(&mut g, "ml.Normalizer", "s -> y", &[("norm", string("L1"))]);
    snap("ml_preprocess", &g);
}

#[test]
fn ml_svm() {
    let mut g = graph(17, &[("x", F, &[2, 2])], &[("y", F)]);
    let svm = [
        ("kernel_type", string("RBF")),
        ("kernel_params", floats(&[0.5, 0.0, 3.0])),
        ("n_supports", int(2)),
        ("support_vectors", floats(&[0.0, 1.0, 1.0, 0.0])),
        ("coefficients", floats(&[0.5, -0.5])),
        ("rho", floats(&[0.1])),
    ];
    op(&mut g, "ml.SVMRegressor", "x -> y", &svm);
    snap("ml_svm", &g);
}

#[test]
fn ml_tree() {
    let mut g = graph(17, &[("x", F, &[2, 2])], &[("y", F)]);
    let tree = [
        ("n_targets", int(1)),
        ("nodes_treeids", ints(&[0, 0, 0])),
        ("nodes_nodeids", ints(&[0, 1, 2])),
        ("nodes_featureids", ints(&[1, 0, 0])),
        ("nodes_values", floats(&[0.5, 0.0, 0.0])),
        ("nodes_modes", strings(&["BRANCH_LEQ", "LEAF", "LEAF"])),
        ("nodes_truenodeids", ints(&[1, 0, 0])),
        ("nodes_falsenodeids", ints(&[2, 0, 0])),
        ("target_treeids", ints(&[0, 0])),
        ("target_nodeids", ints(&[1, 2])),
        ("target_ids", ints(&[0, 0])),
        ("target_weights", floats(&[-1.0, 2.0])),
        ("aggregate_function", string("AVERAGE")),
    ];
    op(&mut g, "ml.TreeEnsembleRegressor", "x -> y", &tree);
    snap("ml_tree", &g);
}

// Compile-mode decisions not shown above: shape arithmetic on the host, and a device value
// read back to the host.

#[test]
fn compile_host_shape_program() {
    let mut g = graph(17, &[("x", F, &[-1, 6])], &[("y", F)]);
    g.init_i64("zero", &[], &[0]).init_i64("axes", &[1], &[0]);
    g.init_i64("tail", &[2], &[2, 3]);
    g.value("s", I64, &[2]).value("b", I64, &[]);
    g.value("b1", I64, &[1]).value("t", I64, &[3]);
    op(&mut g, "Shape", "x -> s", &[]);
    op(&mut g, "Gather", "s zero -> b", &[("axis", int(0))]);
    op(&mut g, "Unsqueeze", "b axes -> b1", &[]);
    op(&mut g, "Concat", "b1 tail -> t", &[("axis", int(0))]);
    op(&mut g, "Reshape", "x t -> y", &[]);
    snap("compile_host_shape_program", &g);
}

#[test]
fn compile_device_read() {
    let mut g = graph(17, &[("x", F, &[-1, 6])], &[("y", F)]);
    g.input_unranked("s", I64);
    op(&mut g, "Reshape", "x s -> y", &[]);
    snap("compile_device_read", &g);
}

#[test]
fn sequence() {
    let mut g = graph(18, &[("x", F, &[2, 6])], &[("y", F), ("z", F), ("n", I64)]);
    g.init_i64("split", &[2], &[3, 3]).init_i64("p", &[], &[-1]);
    op(
        &mut g,
        "SplitToSequence",
        "x split -> s",
        &[("axis", int(1))],
    );
    op(&mut g, "SequenceInsert", "s x -> s2", &[]);
    op(&mut g, "SequenceErase", "s2 p -> s3", &[]);
    op(&mut g, "SequenceAt", "s3 p -> y", &[]);
    let stack = [("axis", int(-1)), ("new_axis", int(1))];
    op(&mut g, "ConcatFromSequence", "s3 -> z", &stack);
    op(&mut g, "SequenceLength", "s2 -> n", &[]);
    snap("sequence", &g);
}

#[test]
fn microsoft_qlinear() {
    let mut g = graph(17, &[("x", U8, &[2, 4])], &[("y", F)]);
    g.value("s8", U8, &[2, 4]).value("q", U8, &[2, 4]);
    g.init_f32("xs", &[], &[0.05]).init_f32("ys", &[], &[0.01]);
    g.init(
        "z",
        TensorData::new(U8, vec![], vec![7]).expect("a uint8 scalar"),
    );
    op(&mut g, "ms.QLinearSigmoid", "x xs z ys z -> s8", &[]);
    op(
        &mut g,
        "ms.QLinearLeakyRelu",
        "s8 xs z ys _ -> q",
        &[("alpha", float(0.2))],
    );
    op(&mut g, "ms.DequantizeLinear", "q ys z -> y", &[]);
    snap("microsoft_qlinear", &g);
}

#[test]
fn microsoft_fused_conv() {
    let mut g = graph(
        17,
        &[("x", F, &[1, 2, 5, 5]), ("z", F, &[1, 3, 5, 5])],
        &[("y", F)],
    );
    halves(&mut g, "w", &[3, 2, 3, 3]);
    halves(&mut g, "b", &[3]);
    let attrs = [
        ("pads", ints(&[1, 1, 1, 1])),
        ("activation", string("Clip")),
        ("activation_params", floats(&[-1.0, 2.0])),
    ];
    op(&mut g, "ms.FusedConv", "x w b z -> y", &attrs);
    snap("microsoft_fused_conv", &g);
}

#[test]
fn microsoft_qlinear_softmax() {
    let mut g = graph(17, &[("x", U8, &[2, 3, 4])], &[("y", U8)]);
    g.init_f32("xs", &[], &[0.05])
        .init_f32("ys", &[], &[1.0 / 256.0]);
    g.init(
        "z",
        TensorData::new(U8, vec![], vec![0]).expect("a uint8 scalar"),
    );
    let attrs = [("opset", int(13)), ("axis", int(1))];
    op(&mut g, "ms.QLinearSoftmax", "x xs z ys z -> y", &attrs);
    snap("microsoft_qlinear_softmax", &g);
}

#[test]
fn microsoft_qlinear_pools() {
    let mut g = graph(17, &[("x", U8, &[1, 2, 4, 3])], &[("y", U8), ("g", U8)]);
    g.init_f32("xs", &[], &[0.05]).init_f32("ys", &[], &[0.04]);
    g.init(
        "z",
        TensorData::new(U8, vec![], vec![5]).expect("a uint8 scalar"),
    );
    let attrs = [
        ("kernel_shape", ints(&[2, 2])),
        ("strides", ints(&[2, 1])),
        ("pads", ints(&[1, 0, 0, 1])),
    ];
    op(&mut g, "ms.QLinearAveragePool", "x xs z ys z -> y", &attrs);
    let nhwc = [("channels_last", int(1))];
    op(
        &mut g,
        "ms.QLinearGlobalAveragePool",
        "x xs z ys z -> g",
        &nhwc,
    );
    snap("microsoft_qlinear_pools", &g);
}

#[test]
fn microsoft_qgemm() {
    let mut g = graph(17, &[("a", U8, &[3, 2])], &[("y", U8)]);
    g.init_f32("as", &[], &[0.05])
        .init_f32("bs", &[2], &[0.5, 0.25]);
    g.init_f32("ys", &[], &[0.2]);
    g.init("az", TensorData::new(U8, vec![], vec![3]).expect("u8"));
    g.init(
        "b",
        TensorData::new(U8, vec![2, 3], vec![1, 2, 3, 4, 5, 6]).expect("u8"),
    );
    g.init("bz", TensorData::new(U8, vec![2], vec![4, 9]).expect("u8"));
    let attrs = [
        ("transA", int(1)),
        ("transB", int(1)),
        ("alpha", float(0.5)),
    ];
    op(&mut g, "ms.QGemm", "a as az b bs bz _ ys az -> y", &attrs);
    snap("microsoft_qgemm", &g);
}

/// QLinearAdd is claimed only where MLAS runs the kernel its table reproduces.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn microsoft_qlinear_add() {
    if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
    {
        return;
    }
    let mut g = graph(17, &[("a", U8, &[2, 3]), ("b", U8, &[3])], &[("y", U8)]);
    g.init_f32("s", &[], &[0.05]);
    g.init("z", TensorData::new(U8, vec![], vec![7]).expect("u8"));
    op(&mut g, "ms.QLinearAdd", "a s z b s z s z -> y", &[]);
    snap("microsoft_qlinear_add", &g);
}
