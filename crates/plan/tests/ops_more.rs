//! Claims, declines and lowerings of ConvTranspose, Resize linear / cubic, TopK, Einsum,
//! scatter / gather, layout, normalisation, pooling and data-dependent ops.

mod common;

use common::*;
use onnx_ir::{DataType, TensorData};
use plan::step::{ConvTransposePadding, InterpMode, ScatterOp};
use plan::{CompileClass, HostArg, ReshapeTarget, Step, UnaryOp};

#[test]
fn conv_transpose_claims_and_regroups_the_weight() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 4, 5, 5]);
    g.weight("w", &[4, 3, 3, 2]);
    g.output_any("y", DataType::Float);
    g.node("ConvTranspose", &["x", "w"], &["y"])
        .attr("group", int(2))
        .attr("strides", ints(&[2, 2]))
        .attr("output_shape", ints(&[10, 11]));
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    let conv = p
        .steps
        .iter()
        .find_map(|s| match s {
            Step::ConvFlipped { w, spec, .. } => Some((*w, spec.clone())),
            _ => None,
        })
        .expect("a ConvTranspose step");
    assert_eq!(spec_groups(&conv.1), 2);
    assert!(matches!(
        conv.1.padding,
        ConvTransposePadding::OutputShape { ref shape, upper: false } if shape == &vec![10, 11]
    ));
    // [C=4, M/g=3, 3, 2] -> [M=6, 3, 2, C/g=2], folded at plan time.
    let (_, t) = p.constants.iter().find(|(s, _)| *s == conv.0).unwrap();
    assert_eq!(t.dims, vec![6, 3, 2, 2]);
    // Input to channels-last, back to channels-first.
    assert_eq!(count(&p, |s| matches!(s, Step::Transpose { .. })), 2);
}

fn spec_groups(s: &plan::step::ConvTransposeSpec) -> i64 {
    s.groups
}

#[test]
fn conv_transpose_declines() {
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 2, 4, 4]);
    g.input("w", DataType::Float, &[2, -1, 3, 3]);
    g.node("ConvTranspose", &["x", "w"], &["y"]);
    declined(&g, 0, "weight's shape is not fixed");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 2, 4, 4]);
    g.weight("w", &[2, 2, 3, 3]);
    g.node("ConvTranspose", &["x", "w"], &["y"])
        .attr("output_padding", ints(&[1, 1]));
    declined(&g, 0, "max(stride, dilation)");
    g.node("ConvTranspose", &["x", "w"], &["y2"])
        .attr("group", int(4));
    declined(&g, 1, "groups");
    g.node("ConvTranspose", &["x", "w"], &["y3"])
        .attr("auto_pad", string("BOGUS"));
    declined(&g, 2, "auto_pad 'BOGUS'");
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[1, 1, 2, 2, 2, 2]);
    g.weight("w", &[1, 1, 1, 1, 1, 1]);
    g.node("ConvTranspose", &["x", "w"], &["y"]);
    declined(&g, 0, "4 spatial dims");
    let mut g = G::new(17);
    g.input("x", DataType::Int64, &[1, 1, 2, 2]);
    g.init_i64("w", &[1, 1, 1, 1], &[1]);
    g.node("ConvTranspose", &["x", "w"], &["y"]);
    declined(&g, 0, "int64");
}

#[test]
fn resize_interp_claims_and_declines() {
    let resize = |mode: &str, rank: usize, scales: &[f32], opset: i64| {
        let mut g = G::new(opset);
        let shape: Vec<i64> = (0..rank).map(|i| 2 + i as i64).collect();
        g.input("x", DataType::Float, &shape);
        g.init_f32("scales", &[scales.len() as i64], scales);
        g.output_any("y", DataType::Float);
        g.node("Resize", &["x", "", "scales"], &["y"])
            .attr("mode", string(mode));
        g
    };
    assert!(claim(&resize("linear", 4, &[1.0, 1.0, 2.0, 2.0], 19), 0).is_ok());
    assert!(claim(&resize("linear", 4, &[1.0, 2.0, 2.0, 1.0], 19), 0).is_ok());
    assert!(claim(&resize("linear", 3, &[2.0, 2.0, 2.0], 19), 0).is_ok());
    assert!(claim(&resize("cubic", 2, &[2.0, 0.5], 13), 0).is_ok());
    declined(&resize("linear", 1, &[2.0], 19), 0, "rank-1");
    declined(&resize("cubic", 3, &[1.0, 2.0, 2.0], 19), 0, "rank-3");
    declined(
        &resize("linear", 4, &[2.0, 1.0, 2.0, 2.0], 19),
        0,
        "outer scales are 1",
    );
    declined(
        &resize("cubic", 4, &[1.0, 2.0, 2.0, 1.0], 19),
        0,
        "cubic supports",
    );
    let mut g = resize("linear", 4, &[1.0, 1.0, 2.0, 2.0], 19);
    g.g.nodes[0].attr("exclude_outside", int(1));
    declined(&g, 0, "exclude_outside=1 needs cubic");
    let mut g = resize("cubic", 4, &[1.0, 1.0, 2.0, 2.0], 19);
    g.g.nodes[0].attr("antialias", int(1));
    g.g.nodes[0].attr(
        "coordinate_transformation_mode",
        string("tf_crop_and_resize"),
    );
    declined(&g, 0, "antialias=1 with tf_crop_and_resize");
    let mut g = resize("linear", 4, &[1.0, 1.0, 2.0, 2.0], 19);
    g.g.nodes[0].attr(
        "coordinate_transformation_mode",
        string("tf_crop_and_resize"),
    );
    declined(&g, 0, "without a roi");
    // Shapes and scales known: constant index / weight tables, 4 taps on each of the 2
    // interpolated axes (a gather and a multiply each), a shapeless plan.
    let mut g = resize("cubic", 4, &[1.0, 1.0, 2.0, 2.0], 19);
    g.g.nodes[0].attr("cubic_coeff_a", float(-0.5));
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Take { .. })), 8);
    assert_eq!(count(&p, |s| matches!(s, Step::HostKernel { .. })), 0);
    assert_eq!(p.compile_class(), CompileClass::Shapeless);
    // A spatial size known only at run time: the host kernel makes the tables from the
    // input's shape (no device read), the same gathers and sums use them.
    let mut g = G::new(19);
    g.input("x", DataType::Float, &[1, 1, -1, 5]);
    g.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
    g.output_any("y", DataType::Float);
    g.node("Resize", &["x", "", "scales"], &["y"])
        .attr("mode", string("cubic"));
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Take { .. })), 8);
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::HostKernel { kernel, inputs, .. }
                if kernel == "resize_tables" && matches!(inputs[0], HostArg::ShapeOf(_))
        )),
        1
    );
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
    // Scales fed at run time, 4-D linear: axis 1 may or may not be interpolated (NHWC), so
    // the layout holds axes 1, 2 and 3 (8 corners).
    let mut g = G::new(19);
    g.input("x", DataType::Float, &[1, 3, 4, 5]);
    g.input("scales", DataType::Float, &[4]);
    g.output_any("y", DataType::Float);
    g.node("Resize", &["x", "", "scales"], &["y"])
        .attr("mode", string("linear"));
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Take { .. })), 2 + 4 + 8);
    // Antialias with neither the scale nor the length of an axis known: unbounded taps.
    let mut g = G::new(19);
    g.input("x", DataType::Float, &[1, 1, -1, -1]);
    g.input("scales", DataType::Float, &[4]);
    g.output_any("y", DataType::Float);
    g.node("Resize", &["x", "", "scales"], &["y"])
        .attr("mode", string("linear"))
        .attr("antialias", int(1));
    declined(&g, 0, "needs its scale or its length");
}

#[test]
fn resize_tables_fill_the_layout() {
    use plan::step::{
        AspectPolicy, CoordinateTransform, FloatSource, InterpCoordinates, InterpSpec,
    };
    let spec = InterpSpec {
        mode: InterpMode::Linear,
        coordinates: InterpCoordinates::Transform(CoordinateTransform::HalfPixel),
        scales: None,
        sizes: None,
        axes: None,
        policy: AspectPolicy::Stretch,
        antialias: false,
    };
    let layout = spec.layout(&[None, None, None, None]).unwrap();
    let axes: Vec<usize> = layout.axes.iter().map(|a| a.axis).collect();
    assert_eq!(axes, vec![1, 2, 3]);
    // A run that interpolates axes 2 and 3 only: axis 1 gets identity taps.
    let spec = InterpSpec {
        scales: Some(FloatSource::Static(vec![1.0, 1.0, 2.0, 0.5])),
        ..spec
    };
    struct NoHost;
    impl plan::HostReader for NoHost {
        fn ints(&mut self, _: plan::Slot) -> Result<Vec<i64>, String> {
            Err("no host values".into())
        }
        fn floats(&mut self, _: plan::Slot) -> Result<Vec<f64>, String> {
            Err("no host values".into())
        }
    }
    let mut host = NoHost;
    let args = spec.resolve(&[1, 3, 2, 4], &mut host).unwrap();
    let t = args.fit(&layout, &[1, 3, 2, 4]).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t[0].taps[0], (vec![0, 1, 2], vec![1.0, 1.0, 1.0]));
    assert_eq!(t[0].taps[1], (vec![0, 1, 2], vec![0.0, 0.0, 0.0]));
    assert_eq!(t[1].taps[0].0.len(), 4);
    assert_eq!(t[2].taps[0].0.len(), 2);
    // The same through the host kernel.
    let inputs = [
        Some(TensorData::from_i64(vec![4], &[1, 3, 2, 4])),
        Some(TensorData::from_f32(vec![4], &[1.0, 1.0, 2.0, 0.5])),
        None,
        None,
    ];
    let p = {
        let mut g = G::new(19);
        g.input("x", DataType::Float, &[-1, -1, -1, -1]);
        g.input("scales", DataType::Float, &[4]);
        g.output_any("y", DataType::Float);
        g.node("Resize", &["x", "", "scales"], &["y"])
            .attr("mode", string("linear"));
        plan_of(&g.build())
    };
    let Some(Step::HostKernel { kernel, attrs, .. }) = p
        .steps
        .iter()
        .find(|s| matches!(s, Step::HostKernel { .. }))
    else {
        panic!("no host kernel:\n{p}");
    };
    let out = plan::run_host_kernel(kernel, &inputs, attrs).unwrap();
    // 3 axes x 2 taps x (indices, weights).
    assert_eq!(out.len(), 12);
    assert_eq!(out[0].to_i64_vec().unwrap(), vec![0, 1, 2]);
    assert_eq!(out[1].dims, vec![1, 3, 1, 1]);
    assert_eq!(out[4].dims, vec![4]);
    assert_eq!(out[5].dims, vec![1, 1, 4, 1]);
    // A shape of another rank than the plan's.
    let bad = [
        Some(TensorData::from_i64(vec![3], &[3, 2, 4])),
        inputs[1].clone(),
        None,
        None,
    ];
    assert!(plan::run_host_kernel(kernel, &bad, attrs).is_err());
}

#[test]
fn upsample_and_resize_10_declines() {
    let mut g = G::new(9);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.init_f32("s", &[4], &[1.0, 1.0, 0.5, 2.0]);
    g.node("Upsample", &["x", "s"], &["y"]);
    declined(&g, 0, "below 1");
    let mut g = G::new(10);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.init_f32("s", &[4], &[1.0, 1.0, 0.5, 2.0]);
    g.node("Resize", &["x", "s"], &["y"]);
    declined(&g, 0, "both shrink and grow");
    let mut g = G::new(10);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.input("s", DataType::Float, &[4]);
    g.node("Resize", &["x", "s"], &["y"]);
    declined(&g, 0, "known at plan time");
    let mut g = G::new(7);
    g.input("x", DataType::Float, &[1, 1, 4, 4]);
    g.node("Upsample", &["x"], &["y"]);
    declined(&g, 0, "'scales' attribute is missing");
}

#[test]
fn topk_sorts_a_key_stably() {
    for (dt, largest, key) in [
        (DataType::Float, 1, Some(UnaryOp::Negative)),
        (DataType::Int64, 1, Some(UnaryOp::BitwiseInvert)),
        (DataType::Float, 0, None),
    ] {
        let mut g = G::new(17);
        g.input("x", dt, &[3, 5]);
        g.init_i64("k", &[1], &[2]);
        g.output_any("v", dt);
        g.output_any("i", DataType::Int64);
        g.node("TopK", &["x", "k"], &["v", "i"])
            .attr("largest", int(largest));
        let p = plan_of(&g.build());
        let keys: Vec<UnaryOp> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Unary { op, .. } => Some(*op),
                _ => None,
            })
            .collect();
        assert_eq!(keys.first().copied(), key);
        assert_eq!(count(&p, |s| matches!(s, Step::ArgSort { axis: 1, .. })), 1);
        assert_eq!(count(&p, |s| matches!(s, Step::TakeAlongAxis { .. })), 1);
    }
    let mut g = G::new(17);
    g.input("x", DataType::Float, &[3, 5]);
    g.init_i64("k", &[1], &[2]);
    g.node("TopK", &["x", "k"], &["v", "i"])
        .attr("sorted", int(0));
    declined(&g, 0, "sorted=0");
    let mut g = G::new(17);
    g.input("x", DataType::Bool, &[3, 5]);
    g.init_i64("k", &[1], &[2]);
    g.node("TopK", &["x", "k"], &["v", "i"]);
    declined(&g, 0, "bool");
}

#[test]
fn einsum_lowers_to_matmul_or_multiply() {
    let einsum = |eq: &str, dt: DataType, shapes: &[&[i64]]| {
        let mut g = G::new(17);
        let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
        for (n, s) in names.iter().zip(shapes) {
            g.input(n, dt, s);
        }
        g.output_any("y", dt);
        let ins: Vec<&str> = names.iter().map(String::as_str).collect();
        g.node("Einsum", &ins, &["y"]).attr("equation", string(eq));
        g
    };
    let p = plan_of(
        &einsum(
            "bhqd,bhkd->bhqk",
            DataType::Float,
            &[&[2, 3, 4, 8], &[2, 3, 5, 8]],
        )
        .build(),
    );
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 1);
    let p = plan_of(&einsum("ij,jk->ik", DataType::Int64, &[&[2, 3], &[3, 4]]).build());
    assert_eq!(count(&p, |s| matches!(s, Step::MatMul { .. })), 0);
    assert_eq!(count(&p, |s| matches!(s, Step::Reduce { .. })), 1);
    // Two contracted dims merged by a rule of run-time dims.
    let p = plan_of(
        &einsum(
            "abcd,cdbe->ae",
            DataType::Float,
            &[&[-1, 3, 4, 5], &[4, 5, 3, -1]],
        )
        .build(),
    );
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Reshape {
                target: ReshapeTarget::Dims(_),
                ..
            }
        )),
        2
    );
    // A diagonal is a gather with the same positions on both axes.
    let p = plan_of(&einsum("ii->i", DataType::Float, &[&[3, 3]]).build());
    assert!(
        p.steps
            .iter()
            .any(|s| matches!(s, Step::Gather { axes, .. } if axes == &vec![0, 1]))
    );
    declined(
        &einsum("aB,c", DataType::Float, &[&[2, 2], &[2]]),
        0,
        "mixed-case",
    );
    declined(
        &einsum("ij,jk->ik", DataType::Float, &[&[2, 3], &[3, 4, 5]]),
        0,
        "rank",
    );
    let mut g = G::new(17);
    g.input_unranked("x", DataType::Float);
    g.node("Einsum", &["x"], &["y"])
        .attr("equation", string("ij->ji"));
    declined(&g, 0, "rank of input 0");
}

#[test]
fn scatter_and_gather_claims() {
    let mut g = G::new(18);
    g.input("d", DataType::Float, &[4, 5]);
    g.input("i", DataType::Int64, &[3, 2]);
    g.input("u", DataType::Float, &[3]);
    g.output_any("y", DataType::Float);
    g.node("ScatterND", &["d", "i", "u"], &["y"])
        .attr("reduction", string("max"));
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert!(p.steps.iter().any(|s| matches!(
        s,
        Step::Scatter { op: ScatterOp::Max, axes, indices, .. } if axes == &vec![0, 1] && indices.len() == 2
    )));
    let mut g = G::new(16);
    g.input("d", DataType::Float, &[4, 5]);
    g.input("i", DataType::Int64, &[3, 2]);
    g.input("u", DataType::Float, &[3]);
    g.node("ScatterND", &["d", "i", "u"], &["y"])
        .attr("reduction", string("max"));
    declined(&g, 0, "needs opset 18");
    let mut g = G::new(16);
    g.input("d", DataType::Float, &[4, 5]);
    g.input("i", DataType::Int64, &[3, -1]);
    g.input("u", DataType::Float, &[3]);
    g.node("ScatterND", &["d", "i", "u"], &["y"]);
    declined(&g, 0, "last dim must be known");
    let mut g = G::new(16);
    g.input("d", DataType::Bool, &[4]);
    g.input("i", DataType::Int64, &[1, 1]);
    g.input("u", DataType::Bool, &[1]);
    g.node("ScatterND", &["d", "i", "u"], &["y"])
        .attr("reduction", string("add"));
    declined(&g, 0, "bool");
    let mut g = G::new(13);
    g.input("d", DataType::Float, &[4, 5]);
    g.input("i", DataType::Int64, &[2, 2, 2]);
    g.input("u", DataType::Float, &[2, 2, 2]);
    g.node("ScatterElements", &["d", "i", "u"], &["y"]);
    declined(&g, 0, "indices rank 3 differs");
    let mut g = G::new(13);
    g.input("d", DataType::Float, &[4, 5]);
    g.input("i", DataType::Int64, &[3, 2]);
    g.node("GatherND", &["d", "i"], &["y"])
        .attr("batch_dims", int(2));
    declined(&g, 0, "batch_dims 2 is invalid");
    g.node("GatherND", &["d", "i"], &["y2"]);
    assert!(claim(&g, 1).is_ok());
}

#[test]
fn space_depth_reshapes_fold_when_static() {
    let d2s = |dims: &[i64]| {
        let mut g = G::new(13);
        g.input("x", DataType::Float, dims);
        g.output_any("y", DataType::Float);
        g.node("DepthToSpace", &["x"], &["y"])
            .attr("blocksize", int(2))
            .attr("mode", string("CRD"));
        g
    };
    let p = plan_of(&d2s(&[1, 8, 2, 3]).build());
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Reshape {
                target: ReshapeTarget::Fixed(_),
                ..
            }
        )),
        2
    );
    let p = plan_of(&d2s(&[-1, 8, -1, -1]).build());
    assert_eq!(
        count(&p, |s| matches!(
            s,
            Step::Reshape {
                target: ReshapeTarget::Dims(_),
                ..
            }
        )),
        2
    );
    declined(&d2s(&[8, 2, 3]), 0, "rank 3 is not 4");
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[1, 8, 2, 3]);
    g.node("DepthToSpace", &["x"], &["y"])
        .attr("blocksize", int(2))
        .attr("mode", string("XYZ"));
    declined(&g, 0, "mode 'XYZ'");
    g.node("SpaceToDepth", &["x"], &["y2"]);
    declined(&g, 1, "'blocksize' attribute is missing");
}

#[test]
fn normalisation_declines() {
    let mut g = G::new(11);
    g.input_unranked("x", DataType::Float);
    g.node("Hardmax", &["x"], &["y"]);
    declined(&g, 0, "rank of input 0");
    let mut g = G::new(13);
    g.input_unranked("x", DataType::Float);
    g.node("Hardmax", &["x"], &["y"]);
    assert!(claim(&g, 0).is_ok());
    g.node("LpNormalization", &["x"], &["y2"]).attr("p", int(3));
    declined(&g, 1, "p=3");
    g.node("MeanVarianceNormalization", &["x"], &["y3"]);
    declined(&g, 2, "rank of input 0");
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2, 3]);
    g.node("MeanVarianceNormalization", &["x"], &["y"]);
    declined(&g, 0, "out of range");
}

#[test]
fn pooling_claims() {
    let mut g = G::new(18);
    g.input("x", DataType::Float, &[1, 1, 5, 5]);
    g.node("LpPool", &["x"], &["y"])
        .attr("kernel_shape", ints(&[2, 2]))
        .attr("p", int(0));
    declined(&g, 0, "p=0");
    g.node("LpPool", &["x"], &["y2"])
        .attr("kernel_shape", ints(&[2, 2, 2]));
    declined(&g, 1, "does not match kernel_shape");
    g.node("GlobalLpPool", &["x"], &["y3"]);
    assert!(claim(&g, 2).is_ok());
    let mut g = G::new(11);
    g.input("x", DataType::Float, &[-1, 1, 2, 2]);
    g.input("i", DataType::Int64, &[-1, 1, 2, 2]);
    g.node("MaxUnpool", &["x", "i"], &["y"])
        .attr("kernel_shape", ints(&[2, 2]));
    declined(&g, 0, "shape must be fixed");
}

#[test]
fn data_dependent_ops_run_eagerly() {
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[3, 4]);
    g.output_any("y", DataType::Int64);
    g.node("NonZero", &["x"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[3, 4]);
    g.input("c", DataType::Bool, &[3]);
    g.output_any("y", DataType::Float);
    g.node("Compress", &["x", "c"], &["y"]).attr("axis", int(0));
    let p = plan_of(&g.build());
    assert_eq!(kernel_steps(&p, "nonzero").len(), 1);
    g.node("Compress", &["x", "c"], &["y2"])
        .attr("axis", int(2));
    declined(&g, 1, "out of range");
}

#[test]
fn misc_claims() {
    let mut g = G::new(14);
    g.input_unranked("x", DataType::Float);
    g.input("k", DataType::Int64, &[]);
    g.node("Trilu", &["x", "k"], &["y"]);
    declined(&g, 0, "needs the input's rank");
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[3, 4]);
    g.input("k", DataType::Int64, &[]);
    g.output_any("y", DataType::Float);
    g.node("Trilu", &["x", "k"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Iota { .. })), 2);
    let mut g = G::new(9);
    g.input("x", DataType::Float, &[2, 3, 4]);
    g.node("EyeLike", &["x"], &["y"]);
    declined(&g, 0, "rank 3 is not 2");
    let mut g = G::new(9);
    g.input("x", DataType::Float, &[2, 3]);
    g.node("EyeLike", &["x"], &["y"]).attr("dtype", int(8));
    declined(&g, 0, "string");
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[2, 3]);
    g.input("l", DataType::Int64, &[2]);
    g.node("ReverseSequence", &["x", "l"], &["y"])
        .attr("time_axis", int(1))
        .attr("batch_axis", int(1));
    declined(&g, 0, "must be 0 and 1");
    let mut g = G::new(11);
    g.input("i", DataType::Int64, &[2]);
    g.init("d", TensorData::from_i64(vec![], &[3]));
    g.init_f32("v", &[2], &[0.0, 1.0]);
    g.node("OneHot", &["i", "d", "v"], &["y"])
        .attr("axis", int(2));
    declined(&g, 0, "out of range");
}

#[test]
fn windows_fold_or_run_on_the_host() {
    let mut g = G::new(17);
    g.init("n", TensorData::from_i64(vec![], &[8]));
    g.input("x", DataType::Float, &[8]);
    g.output_any("y", DataType::Float);
    g.value("w", DataType::Float, &[8]);
    g.node("HannWindow", &["n"], &["w"]);
    g.node("Mul", &["x", "w"], &["y"]);
    let p = plan_of(&g.build());
    assert!(kernel_steps(&p, "cosine_window").is_empty());
    let mut g = G::new(17);
    g.input("n", DataType::Int32, &[]);
    g.output_any("w", DataType::Float);
    g.node("BlackmanWindow", &["n"], &["w"])
        .attr("periodic", int(0));
    let p = plan_of(&g.build());
    let a = kernel_attrs(&p, "cosine_window");
    assert!(!a.get_bool("periodic").unwrap());
    assert_eq!(a.get_int("kind").unwrap(), 2);
    // The length is an integer scalar input: known on the host before the run, so the plan
    // compiles per length.
    assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
    g.node("HammingWindow", &["n"], &["w2"])
        .attr("output_datatype", int(10));
    declined(&g, 1, "float16");
}

#[test]
fn det_unique_lrn_grid_sample_claims() {
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[3]);
    g.node("Det", &["x"], &["y"]);
    declined(&g, 0, "rank 1 is below 2");
    let mut g = G::new(13);
    g.input("x", DataType::Float16, &[3, 3]);
    g.node("Det", &["x"], &["y"]);
    declined(&g, 0, "float16");
    let mut g = G::new(13);
    g.input("x", DataType::Int64, &[4, 2]);
    g.output_any("y", DataType::Int64);
    g.output_any("i", DataType::Int64);
    g.node("Unique", &["x"], &["y", "i"]).attr("axis", int(1));
    let p = plan_of(&g.build());
    let a = kernel_attrs(&p, "unique");
    assert_eq!(a.get_int("axis").unwrap(), 1);
    assert!(a.get_bool("sorted").unwrap());
    assert!(matches!(
        kernel_steps(&p, "unique")[0],
        Step::HostKernel { outputs, .. } if outputs.len() == 4
    ));
    g.node("Unique", &["x"], &["y2"]).attr("axis", int(2));
    declined(&g, 1, "out of range");
    let mut g = G::new(13);
    g.input("x", DataType::Float, &[1, 4, 3, 3]);
    g.node("LRN", &["x"], &["y"]);
    declined(&g, 0, "'size' attribute is missing");
    let mut g = G::new(16);
    g.input("x", DataType::Float, &[1, 1, 2, 2, 2]);
    g.input("grid", DataType::Float, &[1, 2, 2, 2, 3]);
    g.node("GridSample", &["x", "grid"], &["y"])
        .attr("mode", string("bicubic"));
    declined(&g, 0, "cubic mode on a 5-D input");
    g.node("GridSample", &["x", "grid"], &["y2"])
        .attr("mode", string("cubic"));
    declined(&g, 1, "mode 'cubic' is invalid at opset 16");
    g.node("GridSample", &["x", "grid"], &["y3"]);
    assert!(claim(&g, 2).is_ok());
    let mut g = G::new(20);
    g.input("x", DataType::Float, &[1, 1, 2]);
    g.input("grid", DataType::Float, &[1, 2, 1]);
    g.node("GridSample", &["x", "grid"], &["y"]);
    declined(&g, 0, "rank-3 input");
}

#[test]
fn dft_and_stft_claims() {
    let mut g = G::new(20);
    g.input("x", DataType::Float, &[2, 8]);
    g.node("DFT", &["x"], &["y"]);
    declined(&g, 0, "rank-2 input");
    let mut g = G::new(20);
    g.input("x", DataType::Float, &[2, 8, 2]);
    g.node("DFT", &["x"], &["y"]).attr("onesided", int(1));
    declined(&g, 0, "known to be real");
    g.node("DFT", &["x"], &["y2"]).attr("inverse", int(1));
    assert!(claim(&g, 1).is_ok());
    let mut g = G::new(17);
    g.input("s", DataType::Float, &[1, 64, 1]);
    g.init_i64("step", &[], &[4]);
    g.init_i64("len", &[], &[16]);
    g.output_any("y", DataType::Float);
    g.node("STFT", &["s", "step", "", "len"], &["y"]);
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Windows { .. })), 1);
    assert_eq!(count(&p, |s| matches!(s, Step::Fft { .. })), 1);
    let mut g = G::new(17);
    g.input("s", DataType::Float, &[1, 64, 2]);
    g.init_i64("step", &[], &[4]);
    g.node("STFT", &["s", "step"], &["y"]);
    declined(&g, 0, "neither a window nor frame_length");
    g.init_i64("len", &[], &[16]);
    g.node("STFT", &["s", "step", "", "len"], &["y2"]);
    declined(&g, 1, "complex signal");
}

#[test]
fn affine_grid_claims() {
    let mut g = G::new(20);
    g.input("theta", DataType::Float, &[2, 2, 3]);
    g.init_i64("size", &[4], &[2, 3, 4, 5]);
    g.output_any("grid", DataType::Float);
    g.node("AffineGrid", &["theta", "size"], &["grid"]);
    assert!(claim(&g, 0).is_ok());
    let p = plan_of(&g.build());
    assert_eq!(count(&p, |s| matches!(s, Step::Arange { .. })), 2);
    let mut g = G::new(20);
    g.input("theta", DataType::Float, &[2, 2, 3]);
    g.input("size", DataType::Int64, &[-1]);
    g.node("AffineGrid", &["theta", "size"], &["grid"]);
    declined(&g, 0, "length of size must be known");
    let mut g = G::new(20);
    g.input("theta", DataType::Float, &[2, 2, 3]);
    g.input("size", DataType::Int64, &[3]);
    g.node("AffineGrid", &["theta", "size"], &["grid"]);
    declined(&g, 0, "3 values is invalid");
}

#[test]
fn non_max_suppression_is_one_eager_host_step() {
    let mut g = G::new(11);
    g.input("b", DataType::Float, &[1, 6, 4]);
    g.input("s", DataType::Float, &[1, 2, 6]);
    g.input("m", DataType::Int64, &[1]);
    g.input("t", DataType::Float, &[]);
    g.output_any("y", DataType::Int64);
    g.node("NonMaxSuppression", &["b", "s", "m", "", "t"], &["y"])
        .attr("center_point_box", int(1));
    let p = plan_of(&g.build());
    assert_eq!(p.compile_class(), CompileClass::Eager);
    let step = kernel_steps(&p, "non_max_suppression")[0];
    assert!(matches!(
        step,
        Step::HostKernel { inputs, .. } if matches!(
            inputs.as_slice(),
            [
                HostArg::Value(_),
                HostArg::Value(_),
                HostArg::Value(_),
                HostArg::Absent,
                HostArg::Value(_)
            ]
        )
    ));
    assert!(
        kernel_attrs(&p, "non_max_suppression")
            .get_bool("center_point_box")
            .unwrap()
    );
    assert_eq!(step.host_reads().len(), 4);
    let inputs = step.inputs();
    assert!(step.host_reads().iter().all(|r| inputs.contains(r)));
    g.node("NonMaxSuppression", &["b", "s"], &["y2"])
        .attr("center_point_box", int(2));
    declined(&g, 1, "center_point_box 2");
    g.node("NonMaxSuppression", &["b", "s", "t"], &["y3"]);
    declined(&g, 2, "input 2 has element type");
}
