//! Claims, declines and lowerings of RNN, GRU and LSTM.

mod common;

use common::*;
use onnx_ir::{Attribute, DataType, TensorData};
use plan::ops::recurrent::{Act as Activation, Kind as RecurrentKind, parse};
use plan::{CompileClass, Plan, Registry, Step};

fn claim(g: &G) -> Result<(), String> {
    let graph = g.build();
    Registry::default()
        .claim(&graph, &graph.nodes[0])
        .map_err(|d| d.reason)
}

fn declined(g: &G, needle: &str) {
    match claim(g) {
        Ok(()) => panic!("claimed; expected a decline mentioning '{needle}'"),
        Err(r) => assert!(r.contains(needle), "reason '{r}' lacks '{needle}'"),
    }
}

fn strings(v: &[&str]) -> Attribute {
    Attribute::Strings(v.iter().map(|s| s.as_bytes().to_vec()).collect())
}

/// A recurrent node over X [t, 2, 3] with hidden size 4, `dirs` directions.
fn layer(op: &str, t: i64, dirs: i64) -> G {
    let gates = match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    let mut g = G::new(14);
    g.input("x", DataType::Float, &[t, 2, 3]);
    g.weight("w", &[dirs, gates * 4, 3]);
    g.weight("r", &[dirs, gates * 4, 4]);
    g.output_any("y", DataType::Float);
    g.output_any("y_h", DataType::Float);
    let dir = if dirs == 2 {
        "bidirectional"
    } else {
        "forward"
    };
    g.node(op, &["x", "w", "r"], &["y", "y_h"])
        .attr("hidden_size", int(4))
        .attr("direction", string(dir));
    g
}

/// The one inline `Step::Repeat` of a plan (the time loop).
fn time_loop(p: &Plan) -> &Step {
    let mut it = p
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Repeat { inline: true, .. }));
    let s = it.next().expect("an inline Repeat step");
    assert!(it.next().is_none(), "one inline Repeat step");
    s
}

/// The time loop's operand counts and scan directions.
struct Loop {
    carried: usize,
    scanned: usize,
    args: usize,
    outs: usize,
    scan_in: Vec<bool>,
    scan_out: Vec<bool>,
}

fn loop_of(p: &Plan) -> Loop {
    let rev = |v: &[plan::step::ScanAxis]| v.iter().map(|a| a.reverse).collect();
    match time_loop(p) {
        Step::Repeat {
            carried: c,
            scanned: x,
            args: a,
            outs: o,
            scan_in: i,
            scan_out: so,
            ..
        } => {
            let (carried, scanned, args, outs) = (c.len(), x.len(), a.len(), o.len());
            let (scan_in, scan_out) = (rev(i), rev(so));
            Loop {
                carried,
                scanned,
                args,
                outs,
                scan_in,
                scan_out,
            }
        }
        _ => unreachable!(),
    }
}

/// The body of the time loop.
fn body(p: &Plan) -> &Plan {
    &time_loop(p).sub_plans()[0].plan
}

/// The resolved attributes of the graph's one node.
fn spec_of(g: &G, kind: RecurrentKind) -> plan::ops::recurrent::Spec {
    parse(&g.build().nodes[0], kind).expect("valid attributes")
}

/// No step of `p` (nor of its sub-plans) is one the runtime would have to know the layer
/// for: every step is a generic MLX-level one.
fn only_generic_steps(p: &Plan) {
    for s in &p.steps {
        let text = format!("{s:?}");
        assert!(!text.contains("Recurrent"), "{text}");
        for b in s.sub_plans() {
            only_generic_steps(&b.plan);
        }
    }
}

#[test]
fn claims_the_three_layers() {
    for op in ["RNN", "GRU", "LSTM"] {
        for dirs in [1, 2] {
            let g = layer(op, 5, dirs);
            assert_eq!(claim(&g), Ok(()), "{op} dirs={dirs}");
            let p = plan_of(&g.build());
            only_generic_steps(&p);
            let kind = match op {
                "RNN" => RecurrentKind::Rnn,
                "GRU" => RecurrentKind::Gru,
                _ => RecurrentKind::Lstm,
            };
            let sp = spec_of(&g, kind);
            assert_eq!(sp.kind, kind);
            assert_eq!(sp.reverse.len() as i64, dirs);
            assert_eq!(sp.hidden, 4);
            assert_eq!(sp.acts.len(), kind.acts() * dirs as usize);
            let l = loop_of(&p);
            let states = if kind == RecurrentKind::Lstm { 2 } else { 1 };
            let d = dirs as usize;
            assert_eq!(l.carried, states * d, "{op}: h (and c) per direction");
            // The projections, no mask; a bidirectional layer scans its second backwards.
            assert_eq!(l.scanned, d);
            assert_eq!(l.scan_in, sp.reverse);
            // Y is wanted: one stacked output per direction, in its scan order.
            assert_eq!(l.scan_out, sp.reverse);
            assert_eq!(l.outs, states * d + d);
            // R^T per direction (GRU: its z|r and h columns); no bias, no peepholes.
            let per_dir = if kind == RecurrentKind::Gru { 2 } else { 1 };
            assert_eq!(l.args, per_dir * d, "{op}");
            let b = body(&p);
            assert_eq!(b.inputs.len(), l.carried + l.scanned + l.args);
            assert_eq!(b.outputs.len(), l.outs);
            assert_ne!(b.compile_class(), CompileClass::Eager);
            // Y and Y_h wanted, Y_c not.
            assert_eq!(p.outputs.len(), 2);
            // The loop runs over a run-time length: shape-keyed, not shapeless.
            assert_eq!(p.compile_class(), CompileClass::ShapeKeyed);
        }
    }
}

#[test]
fn claims_a_dynamic_or_long_sequence_length() {
    for op in ["RNN", "GRU", "LSTM"] {
        let mut g = layer(op, 5, 2);
        g.g.inputs[0] = onnx_ir::ValueInfo::new("x", DataType::Float, dims(&[-1, 2, 3]));
        assert_eq!(claim(&g), Ok(()), "{op}");
        let p = plan_of(&g.build());
        time_loop(&p);
        assert_eq!(p.compile_class(), CompileClass::ShapeKeyed, "{op}");
        let g = layer(op, 4096, 1);
        assert_eq!(claim(&g), Ok(()), "{op} long");
    }
    // A static empty sequence is still declined.
    declined(&layer("LSTM", 0, 1), "empty sequence");
}

#[test]
fn resolves_activation_parameters() {
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr(
        "activations",
        strings(&["HardSigmoid", "LeakyRelu", "Affine"]),
    );
    g.g.nodes[0].attr("activation_alpha", Attribute::Floats(vec![0.3, 0.05]));
    g.g.nodes[0].attr("clip", float(2.5));
    let spec = spec_of(&g, RecurrentKind::Lstm);
    // Alpha is consumed in order; HardSigmoid keeps its default beta, Affine's defaults to 0.
    assert_eq!(
        spec.acts,
        vec![
            Activation::HardSigmoid(0.3, 0.5),
            Activation::LeakyRelu(0.05),
            Activation::Affine(0.0, 0.0),
        ]
    );
    assert_eq!(spec.clip, Some(2.5));
    // RNN: alpha / beta per direction; a negative clip is no clip.
    let mut g = layer("RNN", 3, 2);
    g.g.nodes[0].attr("activations", strings(&["LeakyRelu", "Tanh"]));
    g.g.nodes[0].attr("activation_alpha", Attribute::Floats(vec![0.2, 0.7]));
    g.g.nodes[0].attr("clip", float(-1.0));
    let spec = spec_of(&g, RecurrentKind::Rnn);
    assert_eq!(spec.reverse, vec![false, true]);
    assert_eq!(
        spec.acts,
        vec![Activation::LeakyRelu(0.2), Activation::Tanh]
    );
    assert_eq!(spec.clip, None);
}

#[test]
fn batch_major_layout_transposes_around_the_step() {
    for op in ["RNN", "GRU", "LSTM"] {
        let mut g = layer(op, 5, 2);
        g.g.nodes[0].attr("layout", int(1));
        assert_eq!(claim(&g), Ok(()), "{op}");
        let p = plan_of(&g.build());
        time_loop(&p);
        // (The 2-D transposes are W^T and R^T.)
        let perms: Vec<_> = p
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Transpose { perm, .. } => perm.clone().filter(|p| p.len() > 2),
                _ => None,
            })
            .collect();
        // X in; Y and Y_h out.
        assert_eq!(
            perms,
            vec![vec![1, 0, 2], vec![2, 0, 1, 3], vec![1, 0, 2]],
            "{op}"
        );
    }
    let mut g = layer("LSTM", 5, 1);
    g.g.nodes[0].attr("layout", int(2));
    declined(&g, "layout 2 is invalid");
}

#[test]
fn declines_unknown_activations_and_bad_counts() {
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["Sigmoid", "Gelu", "Tanh"]));
    declined(&g, "activation 'Gelu' is not supported");
    let mut g = layer("GRU", 3, 2);
    g.g.nodes[0].attr("activations", strings(&["Sigmoid", "Tanh"]));
    declined(&g, "2 activations given; 4 expected");
    // ORT's RNN names are case-sensitive.
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["relu"]));
    declined(&g, "activation 'relu'");
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attr("activations", strings(&["Relu"]));
    assert_eq!(claim(&g), Ok(()));
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr(
        "activations",
        strings(&["HardSigmoid", "LeakyRelu", "Softsign"]),
    );
    assert_eq!(claim(&g), Ok(()));
}

#[test]
fn declines_missing_hidden_size_and_bad_clip() {
    let mut g = layer("RNN", 3, 1);
    g.g.nodes[0].attributes.remove("hidden_size");
    declined(&g, "hidden_size is required");
    let mut g = layer("LSTM", 3, 1);
    g.g.nodes[0].attr("clip", float(0.0));
    declined(&g, "clip 0 must be positive");
}

#[test]
fn declines_other_dtypes() {
    let mut g = layer("GRU", 3, 1);
    g.g.inputs[0] = onnx_ir::ValueInfo::new("x", DataType::Int32, dims(&[3, 2, 3]));
    declined(&g, "not claimed");
    let mut g = layer("LSTM", 3, 1);
    g.input("lens", DataType::Int64, &[2]);
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    declined(&g, "input 4 has element type");
}

#[test]
fn sequence_lens_masks_the_steps() {
    let mut g = layer("LSTM", 4, 2);
    g.input("lens", DataType::Int32, &[2]);
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    assert_eq!(claim(&g), Ok(()));
    let p = plan_of(&g.build());
    let l = loop_of(&p);
    // Per direction the projection and the mask `t < lens[b]`, in that direction's order.
    assert_eq!(l.scanned, 4);
    assert_eq!(l.scan_in, vec![false, false, true, true]);
    let mask_inputs = body(&p)
        .inputs
        .iter()
        .filter(|i| i.dtype == DataType::Bool)
        .count();
    assert_eq!(mask_inputs, 2);
    assert!(p.steps.iter().any(|s| matches!(s, Step::Iota { .. })));
    // A constant sequence_lens equal to seq_length everywhere needs no mask.
    let mut g = layer("LSTM", 4, 2);
    let bytes: Vec<u8> = [4i32, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    g.init(
        "lens",
        onnx_ir::TensorData::new(DataType::Int32, vec![2], bytes).unwrap(),
    );
    g.g.nodes[0].inputs = vec!["x".into(), "w".into(), "r".into(), "".into(), "lens".into()];
    assert_eq!(claim(&g), Ok(()));
    let p = plan_of(&g.build());
    assert_eq!(loop_of(&p).scanned, 2);
    assert!(body(&p).inputs.iter().all(|i| i.dtype != DataType::Bool));
}

#[test]
fn lstm_binds_every_input_and_output() {
    let mut g = layer("LSTM", 3, 1);
    g.weight("b", &[1, 32]);
    g.input("lens", DataType::Int32, &[2]);
    g.input("h0", DataType::Float, &[1, 2, 4]);
    g.input("c0", DataType::Float, &[1, 2, 4]);
    g.weight("p", &[1, 12]);
    g.output_any("y_c", DataType::Float);
    let n = &mut g.g.nodes[0];
    n.inputs = ["x", "w", "r", "b", "lens", "h0", "c0", "p"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    n.outputs.push("y_c".into());
    n.attr("input_forget", int(1));
    assert!(spec_of(&g, RecurrentKind::Lstm).input_forget);
    let p = plan_of(&g.build());
    only_generic_steps(&p);
    let l = loop_of(&p);
    // h and c; projection and mask; R^T and the three peepholes; h, c and Y.
    assert_eq!((l.carried, l.scanned, l.args, l.outs), (2, 2, 4, 3));
    assert_eq!(p.outputs.len(), 3);
    // input_forget: f = 1 - i, so the forget peephole is never read.
    let b = body(&p);
    let p_f = b.inputs.last().expect("p_f").slot;
    assert!(b.steps.iter().all(|s| !s.inputs().contains(&p_f)));
    // Every graph input is read by some step.
    for input in &p.inputs {
        assert!(
            p.steps.iter().any(|s| s.inputs().contains(&input.slot)),
            "{} unread",
            input.name
        );
    }
}

/// The constant of `p` whose slot is named `name`, as f32 values with its dims.
fn folded(p: &Plan, name: &str) -> (Vec<i64>, Vec<f32>) {
    let (_, t) = p
        .constants
        .iter()
        .find(|(s, _)| p.slots[s.index()].name == name)
        .unwrap_or_else(|| panic!("no constant '{name}'"));
    assert_eq!(t.dtype, DataType::Float, "{name}");
    let v = t.to_f64_vec().unwrap().into_iter().map(|v| v as f32);
    (t.dims.clone(), v.collect())
}

/// Top-level steps of `p` that rearrange weights: 2-D transposes and splits (X, Y and the
/// states use neither in layout 0).
fn weight_steps(p: &Plan) -> usize {
    p.steps
        .iter()
        .filter(|s| match s {
            Step::Transpose { perm, .. } => perm.as_ref().is_some_and(|p| p.len() == 2),
            Step::Split { .. } => true,
            _ => false,
        })
        .count()
}

/// Top-level casts of `p`.
fn casts(p: &Plan) -> usize {
    p.steps
        .iter()
        .filter(|s| matches!(s, Step::AsType { .. }))
        .count()
}

/// `layer` with a bias (and LSTM peepholes), weights constant or graph inputs.
fn layer_with_bias(op: &str, dirs: i64, constant: bool) -> G {
    let mut g = layer(op, 5, dirs);
    let gates = match op {
        "RNN" => 1,
        "GRU" => 3,
        _ => 4,
    };
    g.weight("b", &[dirs, 2 * gates * 4]);
    let mut inputs = vec!["x", "w", "r", "b"];
    if op == "LSTM" {
        g.weight("p", &[dirs, 12]);
        inputs.extend(["", "", "", "p"]);
    }
    g.g.nodes[0].inputs = inputs.iter().map(|s| s.to_string()).collect();
    if !constant {
        for name in ["w", "r", "b", "p"] {
            if let Some(t) = g.g.initializers.remove(name) {
                g.input(name, DataType::Float, &t.dims);
            }
        }
    }
    g
}

#[test]
fn constant_weights_fold_at_plan_time() {
    for op in ["RNN", "GRU", "LSTM"] {
        for dirs in [1, 2] {
            let folded_plan = plan_of(&layer_with_bias(op, dirs, true).build());
            let stepped = plan_of(&layer_with_bias(op, dirs, false).build());
            // Constant W, R, B (and P): no transpose, split or concat of them on any run.
            assert_eq!(weight_steps(&folded_plan), 0, "{op} dirs={dirs}");
            assert!(
                weight_steps(&stepped) >= 2 * dirs as usize,
                "{op} dirs={dirs}"
            );
            assert!(
                folded_plan.steps.len() < stepped.steps.len(),
                "{op} dirs={dirs}: {} vs {} steps",
                folded_plan.steps.len(),
                stepped.steps.len()
            );
            // The loop reads the same number of per-direction values either way.
            assert_eq!(loop_of(&folded_plan).args, loop_of(&stepped).args, "{op}");
            assert_eq!(body(&folded_plan).steps, body(&stepped).steps, "{op}");
        }
    }
    // LSTM forward with bias and peepholes: the squeezes of W, R, B and P, the transposes of
    // W and R, the splits of B and P and the bias sum (9 steps) are gone.
    let folded_plan = plan_of(&layer_with_bias("LSTM", 1, true).build());
    let stepped = plan_of(&layer_with_bias("LSTM", 1, false).build());
    assert_eq!((stepped.steps.len(), folded_plan.steps.len()), (18, 9));
}

#[test]
fn folded_weights_hold_the_transposed_split_and_summed_values() {
    // GRU, bidirectional, hidden 4, input 3: W [2, 12, 3], R [2, 12, 4], B [2, 24], each
    // filled with 0.01 * i.
    let p = plan_of(&layer_with_bias("GRU", 2, true).build());
    let at = |i: usize| i as f32 * 0.01;
    let (dims, wt) = folded(&p, "w[1]^T'");
    assert_eq!(dims, vec![3, 12]);
    for (k, &v) in wt.iter().enumerate() {
        let (i, g) = (k / 12, k % 12);
        assert_eq!(v, at(36 + g * 3 + i), "W[1]^T[{i}, {g}]");
    }
    let (dims, zr) = folded(&p, "r[0]^T.zr'");
    assert_eq!(dims, vec![4, 8]);
    assert_eq!(zr[8 + 3], at(3 * 4 + 1), "R[0]^T[1, 3] = R[0][3, 1]");
    let (dims, hh) = folded(&p, "r[1]^T.h'");
    assert_eq!(dims, vec![4, 4]);
    assert_eq!(
        hh[2 * 4 + 1],
        at(48 + (8 + 1) * 4 + 2),
        "R[1]^T.h[2, 1] = R[1][9, 2]"
    );
    // Bias of direction 1: Wb_zr + Rb_zr, then Wb_h; Rb_h apart.
    let (dims, bias) = folded(&p, "b[1].bias'");
    assert_eq!(dims, vec![12]);
    for (j, &v) in bias.iter().enumerate() {
        let want = if j < 8 {
            at(24 + j) + at(36 + j)
        } else {
            at(24 + j)
        };
        assert_eq!(v, want, "bias[{j}]");
    }
    assert_eq!(
        folded(&p, "b[1].Rb_h'").1,
        (44..48).map(at).collect::<Vec<_>>()
    );
    // LSTM peepholes of direction 1: i | o | f.
    let p = plan_of(&layer_with_bias("LSTM", 2, true).build());
    assert_eq!(
        folded(&p, "p[1].o'").1,
        (16..20).map(at).collect::<Vec<_>>()
    );
    let (_, bias) = folded(&p, "b[0].bias'");
    assert_eq!(bias[5], at(5) + at(21));
}

#[test]
fn half_weights_fold_to_their_float32_values() {
    for dt in [DataType::Float16, DataType::BFloat16] {
        let mut g = layer("LSTM", 3, 1);
        g.g.inputs[0] = onnx_ir::ValueInfo::new("x", dt, dims(&[3, 2, 3]));
        for o in &mut g.g.outputs {
            o.dtype = Some(dt);
        }
        for name in ["w", "r"] {
            let t = g.g.initializers.remove(name).unwrap();
            let bytes: Vec<u8> = t
                .to_f64_vec()
                .unwrap()
                .into_iter()
                .flat_map(|v| match dt {
                    DataType::Float16 => plan::f32_to_f16_bits(v as f32).to_le_bytes(),
                    _ => plan::f32_to_bf16_bits(v as f32).to_le_bytes(),
                })
                .collect();
            g.init(name, TensorData::new(dt, t.dims.clone(), bytes).unwrap());
        }
        let half_r = g.g.initializers["r"].to_f64_vec().unwrap();
        let p = plan_of(&g.build());
        assert_eq!(weight_steps(&p), 0, "{dt}");
        // X in, Y and Y_h out: W and R need no cast on a run.
        assert_eq!(casts(&p), 3, "{dt}");
        let (dims, rt) = folded(&p, "r[0]^T'");
        assert_eq!(dims, vec![4, 16]);
        // R^T[1, 5] = R[5, 1], widened exactly.
        assert_eq!(rt[16 + 5], half_r[5 * 4 + 1] as f32, "{dt}");
        assert_ne!(
            rt[16 + 5],
            (0.01f64 * 21.0) as f32,
            "{dt}: rounded to half precision"
        );
    }
}
